//! Policy snapshots as files (`runtime.snapshot_dir`) over a real nats-server: written once by
//! the learner, found by readers through the `latest` record alone, checked on read, and a
//! damaged file or a directory that cannot be written is a clear error that loses nothing
//! already published.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use caprl_common::bus::{Bus, BusError, BusOptions, LocalNatsServer, NatsBus, NatsConfig};

fn options(snapshot_dir: Option<&Path>) -> BusOptions {
    BusOptions {
        request_timeout_secs: 5,
        snapshot_dir: snapshot_dir.map(Path::to_path_buf),
        ..BusOptions::for_run("files")
    }
}

async fn bus(server: &LocalNatsServer, snapshot_dir: Option<&Path>) -> NatsBus {
    NatsBus::connect(&NatsConfig::to_url(&server.url()), &options(snapshot_dir))
        .await
        .expect("connects to the local nats-server")
}

fn policy(len: u32, salt: u32) -> Bytes {
    (0..len)
        .map(|i| ((i * 7 + salt) % 251) as u8)
        .collect::<Vec<_>>()
        .into()
}

fn file_of(meta: &caprl_common::bus::SnapshotMeta) -> PathBuf {
    meta.file
        .clone()
        .expect("a snapshot written as a file names it")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_find_snapshot_files_through_latest_and_deleted_versions_are_missing() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalNatsServer::start_default().unwrap();
    let learner = bus(&server, Some(dir.path())).await;
    // A reader with no snapshot setting of its own.
    let actor = bus(&server, None).await;

    let v1 = policy(300_000, 1);
    let meta1 = learner.put_snapshot(1, v1.clone()).await.unwrap();
    let path1 = file_of(&meta1);
    assert_eq!(
        path1,
        dir.path()
            .canonicalize()
            .unwrap()
            .join("files/policy-v1.safetensors")
    );
    assert_eq!(std::fs::read(&path1).unwrap(), v1);
    let latest = actor.latest().await.unwrap().expect("latest is set");
    assert_eq!(latest, meta1);
    assert_eq!(actor.get_snapshot(&latest).await.unwrap(), v1);
    // No half-written file beside it: only the next version's, allocated ahead and still empty.
    let mut names: Vec<_> = std::fs::read_dir(path1.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, vec![".policy-next.partial", "policy-v1.safetensors"]);
    let next = path1.with_file_name(".policy-next.partial");
    assert_eq!(std::fs::metadata(&next).unwrap().len(), 0);

    // The bytes never went through NATS: the object store has no v1.
    let in_store = caprl_common::bus::SnapshotMeta {
        file: None,
        ..meta1.clone()
    };
    let err = actor.get_snapshot(&in_store).await.unwrap_err();
    assert!(
        matches!(err, BusError::SnapshotMissing { version: 1 }),
        "{err}"
    );

    // Written into that file (allocated for 300 kB, cut to its 1 kB).
    let v2 = policy(1000, 2);
    let meta2 = learner.put_snapshot(2, v2.clone()).await.unwrap();
    assert_eq!(std::fs::read(file_of(&meta2)).unwrap(), v2);
    learner.delete_snapshot(1).await.unwrap();
    learner.delete_snapshot(1).await.unwrap();
    assert!(!path1.exists());
    let err = actor.get_snapshot(&meta1).await.unwrap_err();
    assert!(
        matches!(err, BusError::SnapshotMissing { version: 1 }),
        "{err}"
    );
    assert_eq!(actor.get_snapshot(&meta2).await.unwrap(), v2);

    learner.delete_run().await.unwrap();
    assert!(
        !dir.path().join("files").exists(),
        "delete_run left the run's snapshot files"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_unreachable_snapshot_file_is_refused_with_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalNatsServer::start_default().unwrap();
    let learner = bus(&server, Some(dir.path())).await;
    let actor = bus(&server, None).await;
    let v1 = policy(200_000, 3);
    let meta = learner.put_snapshot(1, v1.clone()).await.unwrap();
    let path = file_of(&meta);

    // One byte flipped.
    let mut bytes = v1.to_vec();
    bytes[123_456] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let err = actor.get_snapshot(&meta).await.unwrap_err();
    assert!(
        matches!(err, BusError::ChecksumMismatch { version: 1, .. }),
        "{err}"
    );
    // Cut short.
    std::fs::write(&path, &v1[..1000]).unwrap();
    let err = actor.get_snapshot(&meta).await.unwrap_err();
    assert!(
        matches!(
            err,
            BusError::ChecksumMismatch {
                version: 1,
                bytes: 1000,
                ..
            }
        ),
        "{err}"
    );
    // A reader on a host without the directory.
    let elsewhere = caprl_common::bus::SnapshotMeta {
        file: Some(dir.path().join("not-mounted/files/policy-v1.safetensors")),
        ..meta.clone()
    };
    let err = actor.get_snapshot(&elsewhere).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, BusError::SnapshotFile { .. }), "{text}");
    assert!(
        text.contains("not-mounted/files/policy-v1.safetensors")
            && text.contains("runtime.snapshot_dir"),
        "{text}"
    );
    assert!(!err.is_transient(), "a missing mount is no broker outage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_cannot_be_written_keeps_the_one_published_before() {
    let dir = tempfile::tempdir().unwrap();
    let server = LocalNatsServer::start_default().unwrap();
    let learner = bus(&server, Some(dir.path())).await;
    let actor = bus(&server, None).await;
    let v1 = policy(50_000, 4);
    let meta1 = learner.put_snapshot(1, v1.clone()).await.unwrap();

    // The run's snapshot directory is no longer one: a file stands in its place (the write
    // fails as on a full or read-only disk).
    let blocked = tempfile::tempdir().unwrap();
    std::fs::write(blocked.path().join("files"), b"not a directory").unwrap();
    let stuck = bus(&server, Some(blocked.path())).await;
    let err = stuck.put_snapshot(2, policy(50_000, 5)).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, BusError::SnapshotFile { .. }) && text.contains("runtime.snapshot_dir"),
        "{text}"
    );
    assert!(!err.is_transient(), "{text}");
    assert_eq!(actor.latest().await.unwrap(), Some(meta1.clone()));
    assert_eq!(actor.get_snapshot(&meta1).await.unwrap(), v1);
}

/// With `runtime.snapshot_file_deltas`, snapshot files are chains as the object store's versions
/// are: a whole file, then delta files, each version's exact bytes for a follower and a late
/// reader alike; the files a chain needs stay after the driver lets them go, until the next
/// chain; a damaged delta file is an error, never wrong bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_deltas_give_every_reader_every_versions_exact_bytes() {
    use caprl_common::bus::SnapshotDeltas;
    use caprl_common::config::RuntimeConfig;
    let dir = tempfile::tempdir().unwrap();
    let server = LocalNatsServer::start_default().unwrap();
    let opts = BusOptions {
        snapshot_file_deltas: true,
        snapshot_deltas: SnapshotDeltas {
            full_every: 4,
            width: 4,
        },
        ..options(Some(dir.path()))
    };
    let learner = NatsBus::connect(&NatsConfig::to_url(&server.url()), &opts)
        .await
        .unwrap();
    let follower = bus(&server, None).await;
    let mut versions = vec![policy(400_000, 3).to_vec()];
    let mut metas = Vec::new();
    for v in 1..=6u64 {
        if v > 1 {
            let mut next = versions.last().unwrap().clone();
            for i in (0..next.len() / 4).step_by(50) {
                next[i * 4] = next[i * 4].wrapping_add(v as u8);
            }
            versions.push(next);
        }
        let want = &versions[v as usize - 1];
        let meta = learner
            .put_snapshot(v, Bytes::from(want.clone()))
            .await
            .unwrap();
        assert_eq!(follower.get_snapshot(&meta).await.unwrap(), *want, "v{v}");
        metas.push(meta);
        if v == 4 {
            // The driver lets go of v1-v3; the chain still needs them for a late reader.
            for old in 1..=3 {
                learner.delete_snapshot(old).await.unwrap();
            }
            let late = bus(&server, None).await;
            assert_eq!(late.get_snapshot(&metas[3]).await.unwrap(), versions[3]);
        }
    }
    let chains: Vec<Vec<u64>> = metas.iter().map(|m| m.chain.clone()).collect();
    assert_eq!(
        chains,
        [
            vec![],
            vec![1, 2],
            vec![1, 2, 3],
            vec![1, 2, 3, 4],
            vec![],
            vec![5, 6]
        ]
    );
    for meta in &metas {
        let name = file_of(meta)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let delta = !meta.chain.is_empty();
        assert_eq!(name.ends_with(".delta"), delta, "{name}");
        // v2 and v3's deltas went with their chain (below).
        if delta && meta.version > 3 {
            let len = std::fs::metadata(file_of(meta)).unwrap().len();
            assert!(
                len * 4 < meta.bytes,
                "v{}: a {len}-byte delta",
                meta.version
            );
        }
    }
    // v5 started a new chain: what the driver let go of in the old one is gone.
    let run = dir.path().canonicalize().unwrap().join("files");
    for gone in [
        "policy-v1.safetensors",
        "policy-v2.delta",
        "policy-v3.delta",
    ] {
        assert!(!run.join(gone).exists(), "{gone} outlived its chain");
    }
    // A damaged delta file: an error for a reader holding v5 and for a new one.
    let v6 = file_of(&metas[5]);
    let mut bytes = std::fs::read(&v6).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&v6, bytes).unwrap();
    let holds_v5 = bus(&server, None).await;
    assert_eq!(holds_v5.get_snapshot(&metas[4]).await.unwrap(), versions[4]);
    let fresh = bus(&server, None).await;
    for reader in [&holds_v5, &fresh] {
        let got = reader.get_snapshot(&metas[5]).await;
        assert!(got.is_err(), "a damaged delta gave bytes");
    }
    // The follower fetched v6 before the damage and holds it.
    assert_eq!(follower.get_snapshot(&metas[5]).await.unwrap(), versions[5]);
    // The run config's key is the bus's.
    let runtime = RuntimeConfig {
        snapshot_file_deltas: true,
        ..RuntimeConfig::default()
    };
    assert!(
        BusOptions::of(&runtime, &caprl_common::bus::NatsConfig::default()).snapshot_file_deltas
    );
    assert!(!RuntimeConfig::default().snapshot_file_deltas);
}
