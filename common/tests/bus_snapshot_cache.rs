//! One fetch per host (`runtime.snapshot_cache_dir`), over a real nats-server: the readers of
//! one host that need a version at once pull it through NATS once (the server's own byte count
//! says so) and all get its exact bytes, through chains of deltas too; a damaged, cut or foreign
//! file in the cache is fetched again and replaced, never handed out; a reader waits for the
//! host's fetch in progress and fetches itself when that one gives up; a cache that cannot be
//! written costs only the sharing; old versions leave the cache.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[path = "support/policy_bytes.rs"]
mod policy_bytes;

use bytes::Bytes;
use caprl_common::bus::{
    Bus, BusOptions, LocalNatsServer, LocalNatsServerOptions, NatsBus, NatsConfig, SnapshotDeltas,
    SnapshotMeta,
};
use policy_bytes::{policy, updated};

const RUN: &str = "host-cache";
const SNAPSHOT: usize = 2_000_000;

/// A nats-server with its monitoring port (for `/varz`'s byte counts).
fn server() -> (LocalNatsServer, u16, tempfile::NamedTempFile) {
    let monitor = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(conf.path(), format!("http: \"127.0.0.1:{monitor}\"\n")).unwrap();
    let server = LocalNatsServer::start(LocalNatsServerOptions {
        config_file: Some(conf.path().to_path_buf()),
        ..LocalNatsServerOptions::default()
    })
    .expect("nats-server starts");
    (server, monitor, conf)
}

/// Bytes the server has sent to its clients.
fn out_bytes(monitor: u16) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", monitor)).unwrap();
    s.write_all(b"GET /varz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["out_bytes"].as_u64().unwrap()
}

async fn bus(server: &LocalNatsServer, cache: Option<&Path>) -> NatsBus {
    let opts = BusOptions {
        request_timeout_secs: 5,
        snapshot_deltas: SnapshotDeltas {
            full_every: 4,
            width: 4,
        },
        snapshot_cache_dir: cache.map(Path::to_path_buf),
        ..BusOptions::for_run(RUN)
    };
    NatsBus::connect(&NatsConfig::to_url(&server.url()), &opts)
        .await
        .expect("connects to the local nats-server")
}

/// The cache's version files (`policy-v<N>-<checksum>.snapshot`) of the run.
fn cached_files(cache: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cache.join(RUN))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "snapshot"));
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readers_of_a_host_fetch_each_version_once_and_all_get_its_exact_bytes() {
    let (server, monitor, _conf) = server();
    let host = tempfile::tempdir().unwrap();
    let other_host = tempfile::tempdir().unwrap();
    let learner = bus(&server, None).await;
    let mut readers = Vec::new();
    for _ in 0..4 {
        readers.push(bus(&server, Some(host.path())).await);
    }
    let elsewhere = bus(&server, Some(other_host.path())).await;
    let mut p = policy(SNAPSHOT, 1);
    for v in 1..=6u64 {
        if v > 1 {
            p = updated(&p, v);
        }
        let meta = learner
            .put_snapshot(v, Bytes::from(p.clone()))
            .await
            .unwrap();
        let before = out_bytes(monitor);
        let got = futures::future::join_all(readers.iter().map(|r| r.get_snapshot(&meta))).await;
        let sent = out_bytes(monitor) - before;
        for bytes in got {
            assert_eq!(bytes.unwrap(), p, "v{v}");
        }
        if v == 1 {
            // Stored whole: one copy went to the host, not four.
            assert!(
                sent < SNAPSHOT as u64 * 3 / 2,
                "v1: {sent} bytes sent for a {SNAPSHOT}-byte snapshot and 4 readers of one host"
            );
        }
        // Another host fetches its own copy, and holds the chain for the next delta.
        assert_eq!(elsewhere.get_snapshot(&meta).await.unwrap(), p, "v{v}");
        // Chains of four: v1 and v5 whole, the others deltas.
        let expect_delta = v != 1 && v != 5;
        assert_eq!(!meta.chain.is_empty(), expect_delta, "{:?}", meta.chain);
    }
    // The cache keeps the newest version and the one before; older ones are gone.
    let files = cached_files(host.path());
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names[0].starts_with("policy-v5-") && names[1].starts_with("policy-v6-"),
        "{names:?}"
    );
}

/// A way to damage a cached file's bytes.
type Damage = fn(&mut Vec<u8>);

/// Puts version 1 and has one reader of `cache` fetch it; the meta, the bytes and the file.
async fn cached_v1(server: &LocalNatsServer, cache: &Path) -> (SnapshotMeta, Vec<u8>, PathBuf) {
    let learner = bus(server, None).await;
    let p = policy(SNAPSHOT, 7);
    let meta = learner
        .put_snapshot(1, Bytes::from(p.clone()))
        .await
        .unwrap();
    let first = bus(server, Some(cache)).await;
    assert_eq!(first.get_snapshot(&meta).await.unwrap(), p);
    let files = cached_files(cache);
    assert_eq!(files.len(), 1, "{files:?}");
    (meta, p, files[0].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_cut_or_foreign_cached_version_is_fetched_again_and_replaced() {
    let (server, _monitor, _conf) = server();
    let host = tempfile::tempdir().unwrap();
    let (meta, p, file) = cached_v1(&server, host.path()).await;
    let whole = std::fs::read(&file).unwrap();
    let damages: [(&str, Damage); 4] = [
        ("a flipped bit", |b| b[40_000] ^= 1),
        ("cut short", |b| b.truncate(b.len() / 2)),
        ("a byte too many", |b| b.push(0)),
        ("another format", |b| b[..8].copy_from_slice(b"notcache")),
    ];
    for (what, damage) in damages {
        let mut bad = whole.clone();
        damage(&mut bad);
        std::fs::write(&file, &bad).unwrap();
        let reader = bus(&server, Some(host.path())).await;
        assert_eq!(reader.get_snapshot(&meta).await.unwrap(), p, "{what}");
        assert_eq!(std::fs::read(&file).unwrap(), whole, "{what}: not replaced");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_waits_for_the_hosts_fetch_and_fetches_itself_when_that_one_gives_up() {
    let (server, _monitor, _conf) = server();
    let host = tempfile::tempdir().unwrap();
    let learner = bus(&server, None).await;
    let p = policy(SNAPSHOT, 3);
    let meta = learner
        .put_snapshot(1, Bytes::from(p.clone()))
        .await
        .unwrap();
    // Another process of this host is fetching v1: it holds the version's lock.
    std::fs::create_dir_all(host.path().join(RUN)).unwrap();
    let lock = std::fs::File::create(host.path().join(RUN).join("policy-v1.lock")).unwrap();
    lock.lock().unwrap();
    let reader = bus(&server, Some(host.path())).await;
    let mut waiting = tokio::spawn(async move { reader.get_snapshot(&meta).await });
    let early = tokio::time::timeout(Duration::from_millis(500), &mut waiting).await;
    assert!(
        early.is_err(),
        "the reader fetched beside the host's fetch in progress"
    );
    // That process dies without leaving the version: the kernel lets its lock go.
    drop(lock);
    let got = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the reader fetches once the lock is free")
        .unwrap()
        .unwrap();
    assert_eq!(got, p);
    assert_eq!(cached_files(host.path()).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_that_cannot_be_written_costs_only_the_sharing() {
    let (server, _monitor, _conf) = server();
    let dir = tempfile::tempdir().unwrap();
    // The cache's path is a file: nothing can be created under it.
    let not_a_dir = dir.path().join("cache");
    std::fs::write(&not_a_dir, b"a file").unwrap();
    let learner = bus(&server, None).await;
    let p = policy(SNAPSHOT, 5);
    let meta = learner
        .put_snapshot(1, Bytes::from(p.clone()))
        .await
        .unwrap();
    let reader = bus(&server, Some(&not_a_dir)).await;
    assert_eq!(reader.get_snapshot(&meta).await.unwrap(), p);
    assert_eq!(std::fs::read(&not_a_dir).unwrap(), b"a file");
}

/// A run's bus shares fetched versions in `runtime.snapshot_cache_dir`; "" shares none.
#[test]
fn the_run_configs_snapshot_cache_dir_is_the_buses() {
    use caprl_common::bus::NatsConfig as Nats;
    use caprl_common::config::RuntimeConfig;
    let runtime = RuntimeConfig {
        snapshot_cache_dir: "/var/cache/caprl".into(),
        ..RuntimeConfig::default()
    };
    let opts = BusOptions::of(&runtime, &Nats::default());
    assert_eq!(
        opts.snapshot_cache_dir,
        Some(PathBuf::from("/var/cache/caprl"))
    );
    assert_eq!(RuntimeConfig::default().snapshot_cache_dir, "");
    let none = BusOptions::of(&RuntimeConfig::default(), &Nats::default());
    assert_eq!(none.snapshot_cache_dir, None);
}
