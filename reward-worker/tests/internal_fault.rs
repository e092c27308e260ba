//! A scoring that fails for a reason not the rollout's (here: the discriminator the reward spec
//! needs is missing) loses no rollout: the worker logs it, hands the rollout back with a delay
//! and scores it on the retry. A rollout naming an image the data set does not have can never
//! be scored and is termed instead. Real reward-worker loop on the in-process bus.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_common::bus::{Bus, BusOptions, InProcBus, Queue};
use caprl_common::config::RewardSpec;
use caprl_common::shutdown::ShutdownTrigger;
use caprl_reward_worker::{RewardError, Rewarder, WorkerConfig, INTERNAL_FAULT_RETRY};
use caprl_wire::{DecodeKind, PolicyVersion, Rollout, ScoredRollout, Sequence, TaskId};
use support::dataset;

const LIMIT: usize = 8 << 20;

fn rollout(id: u64, row: u32) -> Rollout {
    Rollout {
        task_id: TaskId(id),
        data: Default::default(),
        policy_version: PolicyVersion(0),
        actor_id: "a".into(),
        sequences: vec![Sequence {
            image_row: row,
            kind: DecodeKind::Sample,
            tokens: vec![4, 5, caprl_model::model::EOS],
            logprobs: vec![-1.0; 3],
        }],
        decode_seconds: 0.0,
    }
}

#[test]
fn an_internal_fault_hands_the_rollout_back_and_bad_input_is_termed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = dataset(&tmp.path().join("synth"), 3, 16);
    let items = &data.train.items;
    let df = Rewarder::training_df(&data, items, true);
    let rewarder = Rewarder::new(&data, items, &RewardSpec::default(), df, None).unwrap();
    let cfg = WorkerConfig {
        id: "worker-test".into(),
        rewarder: Arc::new(rewarder),
        max_message_bytes: LIMIT,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(&BusOptions::for_run("rw-fault")).unwrap());
    // The first scoring fails as a missing discriminator would; later ones score.
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let score = move |r: &Rewarder, x: Rollout| {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(RewardError::NoDiscriminator);
        }
        r.score(x)
    };
    let (stop, shutdown) = ShutdownTrigger::new();
    let worker = rt.spawn(caprl_reward_worker::run_with_scorer(
        cfg,
        Arc::clone(&bus),
        shutdown,
        score,
    ));
    let good_row = items[0].row as u32;
    for mut r in [rollout(1, good_row), rollout(2, 999_999)] {
        r.data = caprl_wire::DataFingerprint(data.fingerprint().into());
        let bytes = caprl_wire::encode(&r, LIMIT).unwrap();
        rt.block_on(bus.publish(Queue::Rollouts, Bytes::from(bytes)))
            .unwrap();
    }
    let started = Instant::now();
    let mut scored: Vec<ScoredRollout> = Vec::new();
    while started.elapsed() < INTERNAL_FAULT_RETRY * 5 && scored.is_empty() {
        for d in rt
            .block_on(bus.pull(Queue::Scored, 4, Duration::from_millis(200)))
            .unwrap()
        {
            scored.push(caprl_wire::decode(d.payload(), LIMIT).unwrap());
            rt.block_on(d.ack()).unwrap();
        }
    }
    // Nothing more comes: the bad rollout was termed, not retried.
    std::thread::sleep(INTERNAL_FAULT_RETRY + Duration::from_millis(500));
    let more = rt
        .block_on(bus.pull(Queue::Scored, 4, Duration::from_millis(200)))
        .unwrap();
    stop.trigger();
    let stats = rt.block_on(worker).unwrap().unwrap();
    let ids: Vec<u64> = scored.iter().map(|s| s.rollout.task_id.0).collect();
    assert_eq!(
        ids,
        vec![1],
        "the faulted rollout was not scored on its retry"
    );
    assert!(more.is_empty(), "a second scored result arrived");
    assert!(
        started.elapsed() >= INTERNAL_FAULT_RETRY,
        "the retry came before its delay"
    );
    assert_eq!(
        (stats.scored, stats.rejected, stats.internal_faults),
        (1, 1, 1),
        "{stats:?}"
    );
}
