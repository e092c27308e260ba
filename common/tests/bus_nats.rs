//! NATS-only behaviour: authentication, TLS, the local server, and a broker that goes
//! away and comes back.

#[path = "support/certs.rs"]
mod certs;
#[path = "support/ci.rs"]
mod ci;

use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_common::bus::{
    Bus, BusError, BusOptions, LocalNatsServer, LocalNatsServerOptions, NatsBus, NatsConfig, Queue,
};

fn connect_cfg(server: &LocalNatsServer) -> NatsConfig {
    NatsConfig {
        connect_timeout_secs: 2,
        ..NatsConfig::to_url(&server.url())
    }
}

async fn round_trip(bus: &NatsBus) {
    bus.publish(Queue::Tasks, Bytes::from("hello"))
        .await
        .unwrap();
    let got = bus
        .pull(Queue::Tasks, 1, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload(), "hello");
}

#[tokio::test]
async fn user_password_right_credentials_connect_wrong_ones_fail_fast() {
    let dir = tempfile::tempdir().unwrap();
    let server = certs::server_with_config(
        dir.path(),
        "authorization { user: alice, password: \"s3cret\" }\n",
    );
    let opts = BusOptions::for_run("auth");

    let good = NatsConfig {
        user: "alice".into(),
        password: "s3cret".into(),
        ..connect_cfg(&server)
    };
    let bus = NatsBus::connect(&good, &opts)
        .await
        .expect("right credentials connect");
    round_trip(&bus).await;

    for (user, password) in [("alice", "wrong"), ("mallory", "s3cret"), ("", "")] {
        let bad = NatsConfig {
            user: user.into(),
            password: password.into(),
            ..connect_cfg(&server)
        };
        let err = refused_within(3, &bad, &opts).await;
        assert!(
            matches!(err, BusError::AuthRejected { .. }),
            "{user}/{password}: {err}"
        );
        assert!(
            err.to_string().contains("rejected the credentials"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn token_auth_accepts_the_token_and_rejects_others() {
    let dir = tempfile::tempdir().unwrap();
    let server = certs::server_with_config(dir.path(), "authorization { token: \"t0ken-42\" }\n");
    let opts = BusOptions::for_run("token");
    let good = NatsConfig {
        token: "t0ken-42".into(),
        ..connect_cfg(&server)
    };
    round_trip(
        &NatsBus::connect(&good, &opts)
            .await
            .expect("token connects"),
    )
    .await;

    let bad = NatsConfig {
        token: "guess".into(),
        ..connect_cfg(&server)
    };
    let err = refused_within(3, &bad, &opts).await;
    assert!(matches!(err, BusError::AuthRejected { .. }), "{err}");
}

#[tokio::test]
async fn conflicting_or_incomplete_settings_are_config_errors() {
    let opts = BusOptions::for_run("cfg");
    let both = NatsConfig {
        user: "a".into(),
        password: "b".into(),
        token: "c".into(),
        ..NatsConfig::default()
    };
    let err = NatsBus::connect(&both, &opts).await.err().unwrap();
    assert!(matches!(err, BusError::Config { key: "nats", .. }), "{err}");

    let half_tls = NatsConfig {
        tls_cert: "/tmp/cert.pem".into(),
        ..NatsConfig::default()
    };
    let err = NatsBus::connect(&half_tls, &opts).await.err().unwrap();
    assert!(
        matches!(
            err,
            BusError::Config {
                key: "nats.tls_key",
                ..
            }
        ),
        "{err}"
    );

    let missing_creds = NatsConfig {
        creds_file: "/nonexistent/caprl.creds".into(),
        ..NatsConfig::default()
    };
    let err = NatsBus::connect(&missing_creds, &opts).await.err().unwrap();
    assert!(matches!(err, BusError::CredsFile { .. }), "{err}");

    let bad_run = BusOptions::for_run("Bad_Run");
    let err = NatsBus::connect(&NatsConfig::default(), &bad_run)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            BusError::Config {
                key: "runtime.run_id",
                ..
            }
        ),
        "{err}"
    );
}

/// The error of a connection with `cfg` that must fail, within `secs` seconds.
async fn refused_within(secs: u64, cfg: &NatsConfig, opts: &BusOptions) -> BusError {
    let started = Instant::now();
    let err = NatsBus::connect(cfg, opts)
        .await
        .err()
        .expect("the connection must be refused");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(secs), "refused after {took:?}");
    err
}

/// A port where nothing listens: a local server's, after it is gone.
fn url_where_nothing_listens() -> String {
    LocalNatsServer::start_default().unwrap().url()
}

#[tokio::test]
async fn unreachable_server_fails_quickly() {
    let url = url_where_nothing_listens();
    let cfg = NatsConfig {
        connect_timeout_secs: 2,
        ..NatsConfig::to_url(&url)
    };
    let err = refused_within(4, &cfg, &BusOptions::default()).await;
    assert!(
        matches!(
            err,
            BusError::Connect { .. } | BusError::ConnectTimeout { .. }
        ),
        "{err}"
    );
}

/// `nats.url` may list several servers, as NATS clients accept: the first is down, the
/// client goes on to the next.
#[tokio::test]
async fn a_server_list_connects_past_a_server_that_is_down() {
    let down = url_where_nothing_listens();
    let up = LocalNatsServer::start_default().unwrap();
    let cfg = NatsConfig {
        connect_timeout_secs: 3,
        ..NatsConfig::to_url(&format!("{down}, {}", up.url()))
    };
    let bus = NatsBus::connect(&cfg, &BusOptions::default())
        .await
        .expect("connects to the second server of the list");
    round_trip(&bus).await;
}

/// `nats.replicas = 3` needs a JetStream cluster: against one server the bus refuses to set up
/// and says why, instead of running unreplicated.
#[tokio::test]
async fn replicated_streams_on_a_single_server_are_a_clear_error() {
    let server = LocalNatsServer::start_default().unwrap();
    let opts = BusOptions {
        replicas: 3,
        ..BusOptions::default()
    };
    let err = NatsBus::connect(&connect_cfg(&server), &opts)
        .await
        .err()
        .expect("3 replicas on one server");
    let msg = err.to_string();
    assert!(
        msg.contains("nats.replicas") && msg.contains("set nats.replicas = 1"),
        "{msg}"
    );
}

#[test]
fn missing_server_binary_says_how_to_install_it() {
    let err = LocalNatsServer::start(LocalNatsServerOptions {
        binary: "/nonexistent/nats-server".into(),
        ..LocalNatsServerOptions::default()
    })
    .unwrap_err();
    assert!(matches!(err, BusError::ServerMissing { .. }), "{err}");
    assert!(
        err.to_string().contains("apt-get install -y nats-server"),
        "{err}"
    );
}

#[test]
fn bad_server_config_reports_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.conf");
    std::fs::write(&path, "this is { not valid").unwrap();
    let err = LocalNatsServer::start(LocalNatsServerOptions {
        config_file: Some(path),
        ready_timeout: Duration::from_secs(5),
        ..LocalNatsServerOptions::default()
    })
    .unwrap_err();
    assert!(matches!(err, BusError::ServerNotReady { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_surfaces_errors_and_restart_keeps_messages() {
    let mut server = LocalNatsServer::start_default().unwrap();
    let opts = BusOptions {
        request_timeout_secs: 1,
        ..BusOptions::for_run("restart")
    };
    let bus = NatsBus::connect(&connect_cfg(&server), &opts)
        .await
        .unwrap();
    bus.publish(Queue::Rollouts, Bytes::from("kept"))
        .await
        .unwrap();
    let port = server.port();

    server.stop();
    let started = Instant::now();
    let err = bus
        .publish(Queue::Rollouts, Bytes::from("lost"))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(err, BusError::Timeout { .. } | BusError::JetStream { .. }),
        "{err}"
    );
    assert!(
        err.is_transient(),
        "a broker that is down is waited out: {err}"
    );
    let started = Instant::now();
    assert!(bus.depth(Queue::Rollouts).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(3));

    server.restart().unwrap();
    assert_eq!(server.port(), port);
    // The same bus reconnects by itself; the stored message survived the restart.
    let give_up = Instant::now() + Duration::from_secs(15);
    let got = loop {
        match bus
            .pull(Queue::Rollouts, 10, Duration::from_millis(500))
            .await
        {
            Ok(got) if !got.is_empty() => break got,
            _ if Instant::now() < give_up => tokio::time::sleep(Duration::from_millis(200)).await,
            other => panic!("no message after restart: {other:?}"),
        }
    };
    assert_eq!(got[0].payload(), "kept");
}

/// Seals `queue`'s stream the way an operator would (`nats stream seal`): the server then
/// refuses every publish to it on the request's merits.
async fn seal(server: &LocalNatsServer, opts: &BusOptions, queue: Queue) {
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream(opts.stream_name(queue)).await.unwrap();
    let mut config = stream.info().await.unwrap().config.clone();
    config.sealed = true;
    js.update_stream(config).await.unwrap();
}

#[tokio::test]
async fn a_request_the_server_refuses_is_reported_as_one_a_retry_cannot_help() {
    let server = LocalNatsServer::start_default().unwrap();
    let opts = BusOptions::for_run("sealed");
    let bus = NatsBus::connect(&connect_cfg(&server), &opts)
        .await
        .unwrap();
    round_trip(&bus).await;
    seal(&server, &opts, Queue::Tasks).await;

    let err = bus
        .publish(Queue::Tasks, Bytes::from("refused"))
        .await
        .unwrap_err();
    assert!(matches!(err, BusError::JetStream { .. }), "{err:?}");
    assert!(
        !err.is_transient(),
        "a sealed stream refuses every try: {err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("sealed") && message.contains("for good"),
        "{message}"
    );
    // The other queues still take messages: the refusal is the request's, not the broker's.
    bus.publish(Queue::Scored, Bytes::from("kept"))
        .await
        .unwrap();
}

#[tokio::test]
async fn mutual_tls_connects_with_ca_and_client_cert_only() {
    if ci::tool("openssl").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    certs::make_certs(dir.path());
    let p = |f: &str| dir.path().join(f).display().to_string();
    let server = certs::server_with_config(dir.path(), &certs::server_tls_block(dir.path(), true));
    let opts = BusOptions::for_run("tls");
    let mtls = NatsConfig {
        tls_ca: p("ca.pem"),
        tls_cert: p("client.pem"),
        tls_key: p("client.key"),
        ..connect_cfg(&server)
    };
    round_trip(&NatsBus::connect(&mtls, &opts).await.expect("mTLS connects")).await;

    let no_client_cert = NatsConfig {
        tls_ca: p("ca.pem"),
        ..connect_cfg(&server)
    };
    let err = refused_within(4, &no_client_cert, &opts).await;
    assert!(matches!(err, BusError::Tls { .. }), "{err}");

    let no_ca = connect_cfg(&server);
    let err = NatsBus::connect(&no_ca, &opts)
        .await
        .err()
        .expect("untrusted server");
    assert!(matches!(err, BusError::Tls { .. }), "{err}");
}

#[test]
fn a_restart_whose_port_was_taken_fails_instead_of_reaching_the_other_listener() {
    let mut server = LocalNatsServer::start(LocalNatsServerOptions {
        ready_timeout: Duration::from_secs(5),
        ..LocalNatsServerOptions::default()
    })
    .unwrap();
    let port = server.port();
    server.stop();
    // Another process takes the port while the broker is down; it accepts connections, so
    // only the server's own ports file can tell the two apart.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let err = server.restart().unwrap_err();
    assert!(matches!(err, BusError::ServerNotReady { .. }), "{err}");
    assert!(!server.is_running());
    drop(squatter);
}

#[test]
fn servers_started_at_once_listen_on_different_ports() {
    let servers: Vec<LocalNatsServer> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..6)
            .map(|_| s.spawn(|| LocalNatsServer::start_default().unwrap()))
            .collect();
        starts.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ports: Vec<u16> = servers.iter().map(|s| s.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), servers.len(), "{ports:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_pulling_from_some_queues_waits_for_the_learner_to_create_them() {
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let cfg = connect_cfg(&server);
    let opts = BusOptions::for_run("order");

    // An actor that starts first neither fails nor creates the queue itself.
    let actor = tokio::spawn({
        let (cfg, opts) = (cfg.clone(), opts.clone());
        async move { NatsBus::connect_pulling(&cfg, &opts, &[Queue::Tasks]).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !actor.is_finished(),
        "the actor opened a queue nobody created"
    );
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    assert!(
        js.get_stream(opts.stream_name(Queue::Tasks)).await.is_err(),
        "the actor created the tasks stream"
    );

    // The learner creates every queue; the waiting actor then opens the tasks queue and pulls.
    let learner = NatsBus::connect(&cfg, &opts)
        .await
        .expect("learner creates");
    learner
        .publish(Queue::Tasks, Bytes::from("task"))
        .await
        .unwrap();
    let actor = tokio::time::timeout(Duration::from_secs(10), actor)
        .await
        .expect("the actor opens the queue once it exists")
        .unwrap()
        .expect("actor connects");
    let got = actor
        .pull(Queue::Tasks, 1, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload(), "task");
}
