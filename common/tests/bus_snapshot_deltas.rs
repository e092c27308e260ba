//! Policy versions through the object store as chains of deltas, over a real nats-server: every
//! reader gets each version's exact bytes, whether it holds the version before, an older one of
//! the chain, one of another chain or none; the chain's objects stay while it needs them; a
//! delta that does not pay is stored whole; a damaged delta is an error, never wrong bytes.

#[path = "support/policy_bytes.rs"]
mod policy_bytes;

use bytes::Bytes;
use caprl_common::bus::{
    Bus, BusError, BusOptions, LocalNatsServer, NatsBus, NatsConfig, SnapshotDeltas, SnapshotMeta,
};
use caprl_common::config::{Dtype, RuntimeConfig};
use policy_bytes::{policy, updated};

const RUN: &str = "deltas";

fn options(full_every: u64) -> BusOptions {
    BusOptions {
        request_timeout_secs: 5,
        snapshot_deltas: SnapshotDeltas {
            full_every,
            width: 4,
        },
        ..BusOptions::for_run(RUN)
    }
}

async fn bus(server: &LocalNatsServer, full_every: u64) -> NatsBus {
    NatsBus::connect(&NatsConfig::to_url(&server.url()), &options(full_every))
        .await
        .expect("connects to the local nats-server")
}

/// The chains of `metas`, as lists.
fn chains(metas: &[SnapshotMeta]) -> Vec<Vec<u64>> {
    metas.iter().map(|m| m.chain.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reader_gets_every_versions_exact_bytes_through_chains_of_deltas() {
    let server = LocalNatsServer::start_default().unwrap();
    let learner = bus(&server, 4).await;
    let follower = bus(&server, 1).await;
    let mut versions = vec![Vec::new(), policy(400_000, 1)];
    let mut metas = Vec::new();
    for v in 1..=9u64 {
        if v > 1 {
            let next = updated(&versions[v as usize - 1], v);
            versions.push(next);
        }
        let meta = learner
            .put_snapshot(v, Bytes::from(versions[v as usize].clone()))
            .await
            .unwrap();
        // A follower holding the version before fetches the delta.
        let latest = follower.latest().await.unwrap().expect("latest is set");
        assert_eq!(latest, meta);
        assert_eq!(
            follower.get_snapshot(&latest).await.unwrap(),
            versions[v as usize]
        );
        metas.push(meta);
    }
    // Whole, then three deltas, then a new chain: four versions a chain.
    let want: Vec<Vec<u64>> = vec![
        vec![],
        vec![1, 2],
        vec![1, 2, 3],
        vec![1, 2, 3, 4],
        vec![],
        vec![5, 6],
        vec![5, 6, 7],
        vec![5, 6, 7, 8],
        vec![],
    ];
    assert_eq!(chains(&metas), want);

    // A reader that joins late (holds nothing) and one that holds an older version of the
    // chain get v8 exact; one that holds a version of another chain too.
    let late = bus(&server, 1).await;
    assert_eq!(late.get_snapshot(&metas[7]).await.unwrap(), versions[8]);
    let behind = bus(&server, 1).await;
    assert_eq!(behind.get_snapshot(&metas[5]).await.unwrap(), versions[6]);
    assert_eq!(behind.get_snapshot(&metas[7]).await.unwrap(), versions[8]);
    let other_chain = bus(&server, 1).await;
    assert_eq!(
        other_chain.get_snapshot(&metas[2]).await.unwrap(),
        versions[3]
    );
    assert_eq!(
        other_chain.get_snapshot(&metas[7]).await.unwrap(),
        versions[8]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chains_objects_stay_while_it_needs_them_and_go_with_the_next_chain() {
    let server = LocalNatsServer::start_default().unwrap();
    let learner = bus(&server, 3).await;
    let reader = bus(&server, 1).await;
    let mut p = policy(200_000, 2);
    let mut metas = Vec::new();
    for v in 1..=3u64 {
        if v > 1 {
            p = updated(&p, v);
        }
        metas.push(
            learner
                .put_snapshot(v, Bytes::from(p.clone()))
                .await
                .unwrap(),
        );
        // The driver lets the version before go as soon as the next is out.
        if v > 1 {
            learner.delete_snapshot(v - 1).await.unwrap();
        }
    }
    assert_eq!(metas[2].chain, vec![1, 2, 3]);
    // v1 and v2 were let go, but v3 is rebuilt from them: they stay.
    assert_eq!(reader.get_snapshot(&metas[2]).await.unwrap(), p);
    // The next chain starts whole at v4: the old chain's objects go.
    let v4 = updated(&p, 4);
    let meta4 = learner
        .put_snapshot(4, Bytes::from(v4.clone()))
        .await
        .unwrap();
    assert!(meta4.chain.is_empty());
    let gone = bus(&server, 1)
        .await
        .get_snapshot(&metas[1])
        .await
        .unwrap_err();
    assert!(
        matches!(gone, BusError::SnapshotMissing { version: 1 }),
        "{gone}"
    );
    assert_eq!(reader.get_snapshot(&meta4).await.unwrap(), v4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_that_does_not_pay_is_stored_whole_and_a_damaged_one_is_an_error() {
    let server = LocalNatsServer::start_default().unwrap();
    let learner = bus(&server, 3).await;
    let reader = bus(&server, 1).await;
    // Every byte changes: the delta would be as large as the snapshot, so v2 is stored whole,
    // and so are the next full_every - 1 versions without trying (v3, v4); v5 tries again.
    let (v1, v2) = (policy(100_000, 3), policy(100_000, 4));
    let v3 = updated(&v2, 3);
    let v4 = updated(&v3, 4);
    let v5 = updated(&v4, 5);
    let mut metas = Vec::new();
    for (v, bytes) in [(1, &v1), (2, &v2), (3, &v3), (4, &v4), (5, &v5)] {
        metas.push(
            learner
                .put_snapshot(v, Bytes::from(bytes.clone()))
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        chains(&metas),
        vec![vec![], vec![], vec![], vec![], vec![4, 5]]
    );
    assert_eq!(reader.get_snapshot(&metas[4]).await.unwrap(), v5);

    // v6's delta, damaged in the store: the reader says so and hands out no bytes.
    let v6 = updated(&v5, 6);
    let meta6 = learner.put_snapshot(6, Bytes::from(v6)).await.unwrap();
    assert_eq!(meta6.chain, vec![4, 5, 6]);
    let client = async_nats::connect(server.url()).await.unwrap();
    let store = async_nats::jetstream::new(client)
        .get_object_store(format!("caprl-{RUN}-snapshots"))
        .await
        .unwrap();
    let mut junk: &[u8] = b"CAPRLDT1 but not a delta";
    store.put("policy-v6-delta", &mut junk).await.unwrap();
    let err = reader.get_snapshot(&meta6).await.unwrap_err();
    assert!(matches!(err, BusError::Delta { version: 6, .. }), "{err}");
    assert!(err.to_string().contains("fetch the full snapshot"), "{err}");
}

/// A run's bus keeps versions as `runtime.snapshot_full_every` says, in deltas as wide as the
/// values of `runtime.snapshot_dtype`.
#[test]
fn the_run_config_sets_the_chains_length_and_the_deltas_value_width() {
    let runtime = |full_every, dtype| RuntimeConfig {
        snapshot_full_every: full_every,
        snapshot_dtype: dtype,
        ..RuntimeConfig::default()
    };
    let deltas = |r: &RuntimeConfig| BusOptions::of(r, &NatsConfig::default()).snapshot_deltas;
    assert_eq!(RuntimeConfig::default().snapshot_full_every, 10);
    let bf16 = deltas(&runtime(4, Dtype::Bf16));
    assert_eq!(
        bf16,
        SnapshotDeltas {
            full_every: 4,
            width: 2
        }
    );
    assert_eq!(deltas(&runtime(10, Dtype::F32)).width, 4);
    let off = BusOptions::of(&runtime(1, Dtype::F32), &NatsConfig::default());
    assert_eq!(off.snapshot_deltas.full_every, 1);
    let refused = BusOptions::of(&runtime(0, Dtype::F32), &NatsConfig::default()).validate();
    assert!(refused
        .unwrap_err()
        .to_string()
        .contains("runtime.snapshot_full_every"));
}
