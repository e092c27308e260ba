//! The per-role NATS permissions in k8s/base/nats.conf, checked against a real
//! nats-server: the learner can do everything a run needs, an actor can pull tasks, read
//! snapshots and publish rollouts, and is refused when it tries to write a snapshot,
//! `latest` or a task.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use caprl_common::bus::{
    Bus, BusOptions, LocalNatsServer, LocalNatsServerOptions, NatsBus, NatsConfig, Queue,
};
use futures::StreamExt;
use tokio::io::AsyncReadExt;

const PASSWORDS: [(&str, &str, &str); 3] = [
    ("$CAPRL_NATS_LEARNER_PASSWORD", "learner", "learner-pw"),
    ("$CAPRL_NATS_ACTOR_PASSWORD", "actor", "actor-pw"),
    (
        "$CAPRL_NATS_REWARD_WORKER_PASSWORD",
        "reward-worker",
        "reward-pw",
    ),
];

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The shipped config with literal passwords (the pod gets them from env) and without
/// the fixed monitor port and store dir (the test server picks its own).
fn test_config(dir: &Path) -> PathBuf {
    let mut text = std::fs::read_to_string(repo_file("k8s/base/nats.conf")).expect("nats.conf");
    for (var, _, password) in PASSWORDS {
        assert!(text.contains(var), "nats.conf should read {var}");
        text = text.replace(var, &format!("\"{password}\""));
    }
    let text: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("http_port") && !l.contains("store_dir"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.join("nats.conf");
    std::fs::write(&path, text).expect("write test config");
    path
}

fn password(user: &str) -> &'static str {
    PASSWORDS
        .iter()
        .find(|(_, u, _)| *u == user)
        .map(|(_, _, p)| *p)
        .expect("known user")
}

/// A nats-server on the shipped config (see [`test_config`], written into `dir`).
fn start_with_shipped_config(dir: &Path) -> LocalNatsServer {
    LocalNatsServer::start(LocalNatsServerOptions {
        config_file: Some(test_config(dir)),
        ..LocalNatsServerOptions::default()
    })
    .expect("nats-server starts with k8s/base/nats.conf")
}

/// The connection settings of `user` (a role, with its password) to the server at `url`.
fn role_config(url: &str, user: &str) -> NatsConfig {
    NatsConfig {
        user: user.into(),
        password: password(user).into(),
        connect_timeout_secs: 2,
        ..NatsConfig::to_url(url)
    }
}

/// A raw client as `user` that records every error the server sends back.
async fn raw_client(url: &str, user: &str) -> (async_nats::Client, Arc<Mutex<Vec<String>>>) {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let sink = errors.clone();
    let client = async_nats::ConnectOptions::with_user_and_password(
        user.to_string(),
        password(user).to_string(),
    )
    .event_callback(move |event| {
        let sink = sink.clone();
        async move {
            if let async_nats::Event::ServerError(e) = event {
                sink.lock().expect("error log").push(e.to_string());
            }
        }
    })
    .connect(url)
    .await
    .expect("role connects with its password");
    (client, errors)
}

/// [`assert_publish_denied`] for each of `subjects`, in turn.
async fn assert_publishes_denied(
    client: &async_nats::Client,
    errors: &Arc<Mutex<Vec<String>>>,
    subjects: &[&str],
) {
    for subject in subjects {
        assert_publish_denied(client, errors, subject).await;
    }
}

/// Publishes to `subject` and waits until the server has answered with a permissions
/// violation for it.
async fn assert_publish_denied(
    client: &async_nats::Client,
    errors: &Arc<Mutex<Vec<String>>>,
    subject: &str,
) {
    client
        .publish(subject.to_string(), Bytes::from_static(b"forged"))
        .await
        .expect("publish is queued");
    client.flush().await.expect("flush");
    for _ in 0..40 {
        let seen = errors
            .lock()
            .expect("error log")
            .iter()
            .any(|e| e.to_lowercase().contains("permissions violation") && e.contains(subject));
        if seen {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no permissions violation for a publish to {subject}; server errors: {:?}",
        errors.lock().expect("error log")
    );
}

#[tokio::test]
async fn actor_may_pull_tasks_read_snapshots_publish_rollouts_but_not_write_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_with_shipped_config(dir.path());
    let url = server.url();
    let opts = BusOptions::for_run("default");

    // The learner creates the run and publishes a snapshot and a task.
    let learner = NatsBus::connect(&role_config(&url, "learner"), &opts)
        .await
        .expect("learner opens the run with its permissions");
    let weights = Bytes::from(vec![7u8; 300_000]);
    let meta = learner
        .put_snapshot(1, weights.clone())
        .await
        .expect("learner writes a snapshot");
    learner
        .publish(Queue::Tasks, Bytes::from_static(b"task-1"))
        .await
        .expect("learner publishes a task");

    // The actor's own connect path opens the existing run without create rights.
    let actor_bus = NatsBus::connect_pulling(&role_config(&url, "actor"), &opts, &[Queue::Tasks])
        .await
        .expect("actor opens the run the learner created, with its permissions");
    let latest = actor_bus.latest().await.expect("actor reads latest");
    assert_eq!(latest.map(|m| m.version), Some(1));
    drop(actor_bus);

    // The actor does what its loop does.
    let (actor, errors) = raw_client(&url, "actor").await;
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(actor.clone());
    let tasks = js
        .get_stream("caprl-default-tasks")
        .await
        .expect("actor reads the tasks stream info");
    let consumer: jetstream::consumer::PullConsumer = tasks
        .get_consumer("workers")
        .await
        .expect("actor opens the workers consumer");
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .messages()
        .await
        .expect("actor pulls");
    let task = batch.next().await.expect("one task").expect("task message");
    assert_eq!(task.payload.as_ref(), b"task-1");
    task.double_ack().await.expect("actor acks the task");
    js.publish("caprl.default.rollouts", Bytes::from_static(b"rollout-1"))
        .await
        .expect("actor publishes a rollout")
        .await
        .expect("rollout stored");

    let control = js
        .get_key_value("caprl-default-control")
        .await
        .expect("actor opens the control bucket");
    let latest = control.get("latest").await.expect("actor reads latest");
    assert!(latest.is_some(), "latest is set");
    let mut watch = control
        .watch_with_history("latest")
        .await
        .expect("actor watches latest");
    let first = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("watch delivers")
        .expect("an entry")
        .expect("entry ok");
    assert_eq!(first.key, "latest");
    let store = js
        .get_object_store("caprl-default-snapshots")
        .await
        .expect("actor opens the snapshot store");
    let mut object = store
        .get("policy-v1")
        .await
        .expect("actor reads a snapshot");
    let mut data = Vec::new();
    object.read_to_end(&mut data).await.expect("snapshot bytes");
    meta.verify(&data).expect("the snapshot the learner wrote");

    // ...and nothing a learner does.
    assert_publishes_denied(
        &actor,
        &errors,
        &[
            "$O.caprl-default-snapshots.C.forged",
            "$O.caprl-default-snapshots.M.cG9saWN5LXYy",
            "$KV.caprl-default-control.latest",
            "caprl.default.tasks",
            "caprl.default.scored",
            "$JS.API.STREAM.PURGE.caprl-default-tasks",
            "$JS.API.STREAM.DELETE.OBJ_caprl-default-snapshots",
        ],
    )
    .await;

    // The run is unchanged: still snapshot v1 as latest, no forged chunk stored.
    let still = learner.latest().await.expect("latest").expect("set");
    assert_eq!(still, meta);
    let learner_js = jetstream::new(
        async_nats::ConnectOptions::with_user_and_password(
            "learner".into(),
            password("learner").into(),
        )
        .connect(&url)
        .await
        .expect("learner raw client"),
    );
    let mut objects = learner_js
        .get_stream("OBJ_caprl-default-snapshots")
        .await
        .expect("object stream");
    let before = objects.info().await.expect("info").state.messages;
    assert!(
        learner_js
            .get_stream("OBJ_caprl-default-snapshots")
            .await
            .expect("object stream")
            .get_last_raw_message_by_subject("$O.caprl-default-snapshots.C.forged")
            .await
            .is_err(),
        "no forged chunk was stored"
    );
    assert!(before > 0);
}

#[tokio::test]
async fn reward_worker_may_pull_rollouts_and_publish_scored_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_with_shipped_config(dir.path());
    let url = server.url();
    let learner = NatsBus::connect(
        &role_config(&url, "learner"),
        &BusOptions::for_run("default"),
    )
    .await
    .expect("learner opens the run");

    let (actor, _) = raw_client(&url, "actor").await;
    jetstream::new(actor)
        .publish("caprl.default.rollouts", Bytes::from_static(b"rollout-1"))
        .await
        .expect("publish")
        .await
        .expect("stored");

    let (worker, errors) = raw_client(&url, "reward-worker").await;
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(worker.clone());
    let consumer: jetstream::consumer::PullConsumer = js
        .get_stream("caprl-default-rollouts")
        .await
        .expect("worker reads the rollouts stream info")
        .get_consumer("workers")
        .await
        .expect("worker opens the workers consumer");
    let rollout = consumer
        .fetch()
        .max_messages(1)
        .messages()
        .await
        .expect("pull")
        .next()
        .await
        .expect("one rollout")
        .expect("message");
    js.publish("caprl.default.scored", Bytes::from_static(b"scored-1"))
        .await
        .expect("worker publishes a scored rollout")
        .await
        .expect("stored");
    rollout.double_ack().await.expect("worker acks the rollout");
    let scored = learner
        .pull(Queue::Scored, 1, Duration::from_secs(2))
        .await
        .expect("learner pulls scored");
    assert_eq!(scored.len(), 1);

    assert_publishes_denied(
        &worker,
        &errors,
        &[
            "caprl.default.rollouts",
            "caprl.default.tasks",
            "$KV.caprl-default-control.latest",
            "$O.caprl-default-snapshots.C.forged",
            "$JS.API.CONSUMER.MSG.NEXT.caprl-default-tasks.workers",
        ],
    )
    .await;
}

/// The StatefulSet's `nats-cluster.conf` (nats.conf plus a 3-route cluster) as nats-server
/// reads it in the pod, with the env the pod gets: it parses, and without `POD_NAME` (the
/// server name JetStream places replicas by) it is refused.
#[test]
fn the_statefulset_cluster_config_parses_with_the_pods_env() {
    let dir = tempfile::tempdir().expect("tempdir");
    for file in ["nats.conf", "nats-cluster.conf"] {
        std::fs::copy(
            repo_file(&format!("k8s/base/{file}")),
            dir.path().join(file),
        )
        .expect("copy the shipped config");
    }
    let check = |pod_name: Option<&str>| {
        let mut cmd = std::process::Command::new("nats-server");
        cmd.arg("-t")
            .arg("-c")
            .arg(dir.path().join("nats-cluster.conf"))
            .env_remove("POD_NAME");
        for (var, _, password) in PASSWORDS {
            cmd.env(var.trim_start_matches('$'), password);
        }
        if let Some(name) = pod_name {
            cmd.env("POD_NAME", name);
        }
        let out = cmd.output().expect("nats-server runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = check(Some("nats-1"));
    assert!(ok, "nats-cluster.conf does not parse:\n{text}");
    let (ok, text) = check(None);
    assert!(!ok && text.contains("POD_NAME"), "{text}");
}
