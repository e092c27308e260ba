//! The learner's collection of scored rollouts on the in-process bus, with the
//! roles played by hand: sync steps take exactly their task ids from exactly
//! the current policy, sorted; duplicates and stale versions are not used;
//! results for a later step wait for it; async drops beyond `max_policy_lag` and issues the
//! next steps' tasks ahead, within the lag bound and the credits.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use caprl_common::bus::{Bus, BusOptions, Delivery, InProcBus, Queue};
use caprl_common::shutdown::ShutdownTrigger;
use caprl_learner::driver::{Driver, DriverOptions};
use caprl_wire::{
    DecodeKind, PolicyVersion, RewardVector, Rollout, RolloutTask, ScoredRollout, Sequence, TaskId,
};

#[path = "../../tests/support/driver_options.rs"]
mod driver_options;

use driver_options::plain_driver_options;

const LIMIT: usize = 1 << 20;

/// Eight tasks of two images in flight, four images a step, one sample each, seed 3.
fn options(sync: bool) -> DriverOptions {
    DriverOptions {
        sync,
        tasks_in_flight: 8,
        images_per_task: 2,
        batch_size: 4,
        seed: 3,
        max_message_bytes: LIMIT,
        ..plain_driver_options()
    }
}

fn scored(id: u64, version: u64) -> Bytes {
    let s = ScoredRollout {
        rollout: Rollout {
            task_id: TaskId(id),
            data: Default::default(),
            policy_version: PolicyVersion(version),
            actor_id: "hand".into(),
            sequences: vec![Sequence {
                image_row: 0,
                kind: DecodeKind::Sample,
                tokens: vec![3, 2],
                logprobs: vec![-0.5, -0.1],
            }],
            decode_seconds: 0.0,
        },
        rewards: vec![RewardVector {
            total: id as f32,
            components: Vec::new(),
        }],
    };
    Bytes::from(caprl_wire::encode(&s, LIMIT).unwrap())
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    bus: Arc<dyn Bus>,
    stop: ShutdownTrigger,
    driver: Driver,
}

fn fixture(sync: bool) -> Fixture {
    fixture_with(options(sync))
}

fn fixture_with(options: DriverOptions) -> Fixture {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(&BusOptions::for_run("driver")).unwrap());
    let (stop, stop_rx) = ShutdownTrigger::new();
    let driver = Driver::new(Arc::clone(&bus), rt.handle().clone(), stop_rx, options);
    Fixture {
        rt,
        bus,
        stop,
        driver,
    }
}

/// The tasks of one pull (at most 8, waiting up to 50 ms), with their deliveries.
async fn pull_tasks(bus: &Arc<dyn Bus>) -> Vec<(Delivery, RolloutTask)> {
    let got = bus
        .pull(Queue::Tasks, 8, Duration::from_millis(50))
        .await
        .unwrap();
    got.into_iter()
        .map(|d| {
            let task = caprl_wire::decode(d.payload(), LIMIT).unwrap();
            (d, task)
        })
        .collect()
}

/// Plays actor + reward worker: answers each task pulled with `answer(task)`.
fn answer_tasks(
    f: &Fixture,
    answer: impl Fn(&RolloutTask) -> Vec<Bytes> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let bus = Arc::clone(&f.bus);
    f.rt.spawn(async move {
        loop {
            for (d, task) in pull_tasks(&bus).await {
                for msg in answer(&task) {
                    bus.publish(Queue::Scored, msg).await.unwrap();
                }
                d.ack().await.unwrap();
            }
        }
    })
}

#[test]
fn sync_step_uses_each_of_its_task_ids_once_in_order_and_keeps_later_ones() {
    let mut f = fixture(true);
    // Already in the queue before the step: garbage, a stale version, a later step's result.
    f.rt.block_on(async {
        f.bus
            .publish(Queue::Scored, Bytes::from_static(b"garbage"))
            .await
            .unwrap();
        f.bus.publish(Queue::Scored, scored(1, 6)).await.unwrap();
        f.bus.publish(Queue::Scored, scored(3, 7)).await.unwrap();
    });
    // Answer every task twice (a redelivered duplicate), in reverse order.
    let roles = answer_tasks(&f, |t| vec![scored(t.task_id.0, t.policy_version.0); 2]);
    let step0 = f.driver.collect(0, 7, &[0, 1, 2, 3], &[]).unwrap();
    let ids: Vec<u64> = step0.scored.iter().map(|s| s.rollout.task_id.0).collect();
    assert_eq!(ids, vec![0, 1]);
    assert!(step0
        .scored
        .iter()
        .all(|s| s.rollout.policy_version == PolicyVersion(7)));
    assert_eq!(step0.rejected, 1);
    assert_eq!(step0.dropped_stale, 1, "task 1 from v6");

    let step1 = f.driver.collect(1, 7, &[0, 1, 2, 3], &[]).unwrap();
    let ids: Vec<u64> = step1.scored.iter().map(|s| s.rollout.task_id.0).collect();
    assert_eq!(
        ids,
        vec![2, 3],
        "task 3 came from the buffer, task 2 from a fresh task"
    );
    roles.abort();
    let used: Vec<u64> = f.driver.totals.used.iter().map(|t| t.0).collect();
    assert_eq!(used, vec![0, 1, 2, 3]);
}

#[test]
fn async_step_drops_rollouts_beyond_the_lag_bound() {
    let mut f = fixture(false);
    // The "actor" answers even ids the first time with a policy 3 versions old, then (the
    // task issued again) with the current one; odd ids at once with the current one.
    let first_time: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    let roles = answer_tasks(&f, move |t| {
        let fresh = first_time.lock().unwrap().insert(t.task_id.0);
        let v = if t.task_id.0 % 2 == 0 && fresh {
            t.policy_version.0.saturating_sub(3)
        } else {
            t.policy_version.0
        };
        vec![scored(t.task_id.0, v)]
    });
    let mut dropped = 0;
    for step in 0..3u64 {
        let c = f
            .driver
            .collect(step, 10 + step, &[0, 1, 2, 3], &[])
            .unwrap();
        let ids: Vec<u64> = c.scored.iter().map(|s| s.rollout.task_id.0).collect();
        assert_eq!(ids, vec![2 * step, 2 * step + 1], "the round's own ids");
        assert_eq!(c.max_lag, 0, "a stale rollout was used");
        dropped += c.dropped_stale;
    }
    roles.abort();
    assert_eq!(
        dropped, 3,
        "one stale answer per step, its task issued again"
    );
}

/// A learner resumed in async mode finds, before it issues anything, the results its
/// predecessor's tasks left in JetStream: those of the round it resumes at and of the rounds
/// issued ahead. It uses each once, at its round, and issues only the tasks nobody answered.
#[test]
fn async_first_round_takes_the_waiting_results_of_this_and_the_rounds_issued_ahead() {
    let mut opts = options(false);
    opts.max_policy_lag = 2;
    let mut f = fixture_with(opts);
    // The predecessor trained rounds 0 and 1 and had issued rounds 2..3 ahead (ids 4..7) at
    // policy 7; ids 4, 5 and 7 came back scored after it died; id 2 is round 1's, used.
    f.rt.block_on(async {
        for id in [2, 4, 5, 7] {
            f.bus.publish(Queue::Scored, scored(id, 7)).await.unwrap();
        }
    });
    let issued: Arc<Mutex<Vec<u64>>> = Arc::default();
    let by_role = Arc::clone(&issued);
    let roles = answer_tasks(&f, move |t| {
        by_role.lock().unwrap().push(t.task_id.0);
        vec![scored(t.task_id.0, t.policy_version.0)]
    });
    let ahead: Vec<Vec<u32>> = (3..5).map(step_rows).collect();
    let round2 = f.driver.collect(2, 8, &step_rows(2), &ahead).unwrap();
    let ids: Vec<u64> = round2.scored.iter().map(|s| s.rollout.task_id.0).collect();
    assert_eq!(ids, vec![4, 5]);
    assert_eq!((round2.tasks_issued, round2.results_found), (0, 2));
    assert_eq!(
        round2.duplicates, 1,
        "id 2 was trained on before the restart"
    );
    let round3 = f.driver.collect(3, 9, &step_rows(3), &ahead[1..]).unwrap();
    let ids: Vec<u64> = round3.scored.iter().map(|s| s.rollout.task_id.0).collect();
    assert_eq!(ids, vec![6, 7]);
    assert_eq!(round3.results_found, 1, "id 7's result was waiting");
    assert_eq!(round3.max_lag, 2, "id 7 was decoded by policy 7");
    roles.abort();
    let issued = issued.lock().unwrap();
    assert!(
        !issued.iter().any(|id| [2, 4, 5, 7].contains(id)),
        "a task whose result was waiting was issued again: {issued:?}"
    );
    let used: Vec<u64> = f.driver.totals.used.iter().map(|t| t.0).collect();
    assert_eq!(used, vec![4, 5, 6, 7]);
}

#[test]
fn a_flood_of_results_for_far_off_steps_is_not_buffered_without_bound() {
    let mut f = fixture(true);
    // 10,000 well-formed results for later steps arrive before step 0.
    f.rt.block_on(async {
        for id in 2..10_002 {
            f.bus.publish(Queue::Scored, scored(id, 7)).await.unwrap();
        }
    });
    let roles = answer_tasks(&f, |t| vec![scored(t.task_id.0, t.policy_version.0)]);
    let step0 = f.driver.collect(0, 7, &[0, 1, 2, 3], &[]).unwrap();
    // The buffer keeps 4 · max(tasks_in_flight 8, K 2) = 32, the nearest ones.
    assert_eq!(step0.rejected, 10_000 - 32);
    for step in 1..20 {
        let got = f.driver.collect(step, 7, &[0, 1, 2, 3], &[]).unwrap();
        let ids: Vec<u64> = got.scored.iter().map(|s| s.rollout.task_id.0).collect();
        assert_eq!(ids, vec![2 * step, 2 * step + 1]);
    }
    roles.abort();
}

#[test]
fn sync_first_step_takes_the_results_already_waiting_instead_of_issuing_their_tasks() {
    let mut f = fixture(true);
    // A killed predecessor's last tasks, scored after it died: step 1's ids 2 and 3.
    f.rt.block_on(async {
        f.bus.publish(Queue::Scored, scored(2, 7)).await.unwrap();
        f.bus.publish(Queue::Scored, scored(3, 7)).await.unwrap();
    });
    let roles = answer_tasks(&f, |t| vec![scored(t.task_id.0, t.policy_version.0)]);
    let step1 = f.driver.collect(1, 7, &[0, 1, 2, 3], &[]).unwrap();
    let ids: Vec<u64> = step1.scored.iter().map(|s| s.rollout.task_id.0).collect();
    assert_eq!(ids, vec![2, 3]);
    assert_eq!(
        (step1.tasks_issued, step1.results_found),
        (0, 2),
        "both results came from the queue, no task was issued again"
    );
    let step2 = f.driver.collect(2, 8, &[0, 1, 2, 3], &[]).unwrap();
    assert_eq!((step2.tasks_issued, step2.results_found), (2, 0));
    roles.abort();
}

/// Images of step `s` in the issue-ahead test: `10·s .. 10·s + 3`, so a task names its step.
fn step_rows(s: u64) -> Vec<u32> {
    (0..4).map(|i| 10 * s as u32 + i).collect()
}

#[test]
fn async_issues_the_next_steps_ahead_within_the_lag_bound_and_the_credits() {
    let mut opts = options(false);
    opts.tasks_in_flight = 3;
    opts.max_policy_lag = 1;
    let mut f = fixture_with(opts);
    // Plays the roles slowly: holds the tasks it is given until none has come for 300 ms,
    // then answers them all with the policy each names, noting how many it held at once.
    let seen: Arc<Mutex<Vec<RolloutTask>>> = Arc::default();
    let most_held = Arc::new(Mutex::new(0usize));
    let (bus, seen_by_role, held_by_role) = (
        Arc::clone(&f.bus),
        Arc::clone(&seen),
        Arc::clone(&most_held),
    );
    let roles = f.rt.spawn(async move {
        let mut held = Vec::new();
        let mut quiet = 0;
        loop {
            let got = pull_tasks(&bus).await;
            quiet = if got.is_empty() { quiet + 1 } else { 0 };
            for (d, task) in got {
                d.ack().await.unwrap();
                seen_by_role.lock().unwrap().push(task.clone());
                held.push(task);
            }
            if quiet >= 6 && !held.is_empty() {
                {
                    let mut most = held_by_role.lock().unwrap();
                    *most = (*most).max(held.len());
                }
                for t in held.drain(..) {
                    bus.publish(Queue::Scored, scored(t.task_id.0, t.policy_version.0))
                        .await
                        .unwrap();
                }
            }
        }
    });
    // The caller knows three later steps; the lag bound allows issuing one of them.
    let ahead: Vec<Vec<u32>> = (1..4).map(step_rows).collect();
    let step0 = f.driver.collect(0, 7, &step_rows(0), &ahead).unwrap();
    assert_eq!(step0.max_lag, 0);
    let step1 = f.driver.collect(1, 8, &step_rows(1), &ahead[1..]).unwrap();
    roles.abort();
    let seen = seen.lock().unwrap();
    let steps_issued: BTreeSet<u32> = seen
        .iter()
        .flat_map(|t| t.image_rows.iter().map(|r| r / 10))
        .collect();
    assert!(
        seen.iter().take(3).any(|t| t.image_rows[0] / 10 == 1),
        "step 1's images were not issued while step 0 ran: {seen:?}"
    );
    assert!(
        !steps_issued.contains(&3),
        "tasks for step 3 were issued at step 1 with max_policy_lag 1: {seen:?}"
    );
    assert_eq!(*most_held.lock().unwrap(), 3, "tasks_in_flight = 3 credits");
    // A task j rounds ahead may be decoded by a policy at most max_policy_lag − j older than
    // the one it was made at, so that it is within the bound when its round comes.
    for t in seen.iter().filter(|t| t.policy_version.0 == 7) {
        let lead = (t.image_rows[0] / 10) as u64;
        assert_eq!(t.min_version.0, 7 + lead - 1, "{t:?}");
    }
    assert_eq!(
        step1.max_lag, 1,
        "step 1 trained on rollouts decoded by policy 7 while step 0 trained"
    );
}

#[test]
fn sync_mode_issues_nothing_ahead() {
    let mut f = fixture(true);
    let seen: Arc<Mutex<Vec<Vec<u32>>>> = Arc::default();
    let by_role = Arc::clone(&seen);
    let roles = answer_tasks(&f, move |t| {
        by_role.lock().unwrap().push(t.image_rows.clone());
        vec![scored(t.task_id.0, t.policy_version.0)]
    });
    let ahead: Vec<Vec<u32>> = (1..4).map(step_rows).collect();
    f.driver.collect(0, 7, &step_rows(0), &ahead).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    roles.abort();
    let rows: Vec<u32> = seen.lock().unwrap().iter().flatten().copied().collect();
    assert!(
        rows.iter().all(|r| r / 10 == 0),
        "sync issued later steps' images: {rows:?}"
    );
    assert_eq!(f.driver.issue_ahead_steps(), 0);
}

#[test]
fn async_issuing_ahead_uses_every_result_once_and_the_last_steps_still_get_theirs() {
    let mut opts = options(false);
    opts.max_policy_lag = 2;
    let mut f = fixture_with(opts);
    // Answers at once: a pull often brings more results than the step needs (those of tasks
    // issued ahead); they must wait for the next step, not be used up early so that the
    // last step waits for results that never come.
    let roles = answer_tasks(&f, |t| vec![scored(t.task_id.0, t.policy_version.0)]);
    let steps = 6u64;
    for s in 0..steps {
        let ahead: Vec<Vec<u32>> = (s + 1..steps).map(step_rows).collect();
        let c = f.driver.collect(s, 10 + s, &step_rows(s), &ahead).unwrap();
        assert_eq!(c.scored.len(), 2, "step {s}");
        assert!(c.max_lag <= 2, "step {s}: lag {}", c.max_lag);
    }
    roles.abort();
    let used: Vec<u64> = f.driver.totals.used.iter().map(|t| t.0).collect();
    let distinct: BTreeSet<u64> = used.iter().copied().collect();
    assert_eq!(used.len(), 12, "{used:?}");
    assert_eq!(distinct, (0..12).collect(), "each task's result used once");
}

/// `runtime.snapshot_dtype = "bf16"`: the policy travels in half the bytes and loads into an
/// f32 actor as the learner's weights rounded to bf16; f32 snapshots are the weights exactly.
#[test]
fn bf16_snapshots_halve_the_bytes_and_load_into_an_f32_actor() {
    use caprl_model::model::{Captioner, CaptionerConfig, DType, Device, ModelKind};
    let cfg = CaptionerConfig::new(ModelKind::Fc, 20, 8, None);
    let model = Captioner::new(&cfg, &Device::Cpu, 1).unwrap();
    // Every weight, in name order, after a round trip through `via`.
    let weights = |m: &Captioner, via: DType| -> Vec<f32> {
        let vars = m.varmap().data().lock().unwrap();
        let mut names: Vec<&String> = vars.keys().collect();
        names.sort();
        names
            .iter()
            .flat_map(|n| {
                let t = vars[*n].as_tensor().to_dtype(via).unwrap();
                t.to_dtype(DType::F32)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
            })
            .collect()
    };
    let mut sizes = Vec::new();
    for dtype in [DType::F32, DType::BF16] {
        let mut f = fixture_with(DriverOptions {
            snapshot_dtype: dtype,
            ..options(false)
        });
        let meta = f.driver.publish(&model, 1).unwrap();
        let bytes = f.rt.block_on(f.bus.get_snapshot(&meta)).unwrap();
        let loaded = Captioner::from_safetensors(&bytes, &cfg, &Device::Cpu).unwrap();
        assert_eq!(weights(&loaded, DType::F32), weights(&model, dtype));
        if dtype == DType::BF16 {
            assert_ne!(weights(&loaded, DType::F32), weights(&model, DType::F32));
        }
        sizes.push(meta.bytes as f64);
    }
    let ratio = sizes[1] / sizes[0];
    assert!(
        ratio > 0.45 && ratio < 0.55,
        "bf16 / f32 snapshot bytes = {ratio}"
    );
}

/// Plays an async actor + reward worker: decodes a task with the newest published policy once
/// that is at least the task's `min_version`, and hands it back for later until then.
fn answer_like_an_actor(f: &Fixture) -> tokio::task::JoinHandle<()> {
    let bus = Arc::clone(&f.bus);
    f.rt.spawn(async move {
        loop {
            for (d, task) in pull_tasks(&bus).await {
                let held = bus.latest().await.unwrap().map_or(0, |m| m.version);
                if held < task.min_version.0 {
                    d.nak(Some(Duration::from_millis(20))).await.unwrap();
                    continue;
                }
                bus.publish(Queue::Scored, scored(task.task_id.0, held))
                    .await
                    .unwrap();
                d.ack().await.unwrap();
            }
        }
    })
}

/// A tiny policy to publish.
fn tiny_model() -> caprl_model::model::Captioner {
    use caprl_model::model::{Captioner, CaptionerConfig, Device, ModelKind};
    let cfg = CaptionerConfig::new(ModelKind::Fc, 20, 8, None);
    Captioner::new(&cfg, &Device::Cpu, 1).unwrap()
}

/// Stops `f`'s driver after `secs`, so that a collection that waits for ever fails instead.
fn stop_after(f: &Fixture, secs: u64) {
    let stop = f.stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(secs));
        stop.trigger();
    });
}

/// `runtime.snapshot_every = 3` with `max_policy_lag = 2`: versions 0, 3, 6 are published
/// (and only the newest `keep_snapshots + 1` stay stored); every step still trains within the
/// lag bound, on rollouts of the newest published policy at the latest.
#[test]
fn async_snapshots_every_third_version_keep_every_step_within_the_lag_bound() {
    let mut f = fixture_with(DriverOptions {
        max_policy_lag: 2,
        snapshot_every: 3,
        keep_snapshots: 1,
        ..options(false)
    });
    stop_after(&f, 60);
    let model = tiny_model();
    let roles = answer_like_an_actor(&f);
    let steps = 8u64;
    let mut latest = Vec::new();
    let mut metas = Vec::new();
    for s in 0..steps {
        let meta = f.driver.publish(&model, s).unwrap();
        latest.push(meta.version);
        metas.push(meta);
        let ahead: Vec<Vec<u32>> = (s + 1..steps).map(step_rows).collect();
        let c = f.driver.collect(s, s, &step_rows(s), &ahead).unwrap();
        assert_eq!(c.scored.len(), 2, "step {s}");
        assert!(c.max_lag <= 2, "step {s}: lag {}", c.max_lag);
        assert_eq!(c.dropped_stale, 0, "step {s}");
    }
    roles.abort();
    assert_eq!(latest, [0, 0, 0, 3, 3, 3, 6, 6]);
    let stored = |v: u64| {
        f.rt.block_on(f.bus.get_snapshot(&metas[v as usize]))
            .is_ok()
    };
    assert!(!stored(0), "version 0 is past keep_snapshots = 1");
    assert!(stored(3) && stored(6));
}

/// A round that comes before its version does (a dynamic-sampling refill, or a skipped step,
/// in the same version): its tasks were issued ahead needing that version, which is not due by
/// `snapshot_every`; publishing before the round publishes it, so actors can answer.
#[test]
fn a_round_that_comes_early_gets_the_snapshot_its_tasks_wait_for() {
    let mut f = fixture_with(DriverOptions {
        max_policy_lag: 1,
        snapshot_every: 2,
        ..options(false)
    });
    stop_after(&f, 60);
    let model = tiny_model();
    let roles = answer_like_an_actor(&f);
    let rows: Vec<Vec<u32>> = (0..5).map(step_rows).collect();
    assert_eq!(f.driver.publish(&model, 0).unwrap().version, 0);
    f.driver.collect(0, 0, &rows[0], &rows[1..2]).unwrap();
    // Version 1 is not due (every 2nd) and round 1's tasks take version 0.
    assert_eq!(f.driver.publish(&model, 1).unwrap().version, 0);
    f.driver.collect(1, 1, &rows[1], &rows[2..3]).unwrap();
    // Round 2 was issued at version 1, one round ahead: it needs version 1, and comes at once.
    assert_eq!(f.driver.publish(&model, 1).unwrap().version, 1);
    let c = f.driver.collect(2, 1, &rows[2], &rows[3..4]).unwrap();
    roles.abort();
    assert_eq!(c.scored.len(), 2);
    assert!(c.scored.iter().all(|s| s.rollout.policy_version.0 == 1));
}

/// Snapshots carry the vocabulary the learner set, so actors of another data set refuse them.
#[test]
fn published_snapshots_are_stamped_with_the_learners_vocabulary() {
    let mut f = fixture(true);
    let model = tiny_model();
    let unstamped = f.driver.publish(&model, 0).unwrap();
    let bytes = f.rt.block_on(f.bus.get_snapshot(&unstamped)).unwrap();
    assert_eq!(caprl_common::snapshot::stamp(&bytes).unwrap(), None);
    f.driver.set_data(
        "vocab-of-this-run",
        caprl_wire::DataFingerprint("0123456789abcdef".into()),
    );
    let meta = f.driver.publish(&model, 1).unwrap();
    let bytes = f.rt.block_on(f.bus.get_snapshot(&meta)).unwrap();
    let stamp = caprl_common::snapshot::stamp(&bytes)
        .unwrap()
        .expect("a stamp");
    assert_eq!(stamp.vocab_hash, "vocab-of-this-run");
}
