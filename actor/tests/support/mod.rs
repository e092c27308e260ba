//! A tiny synthetic data set and a matching small captioner config for the actor's tests, and
//! an actor's setup on the in-process bus.

#![allow(dead_code)] // each test binary uses part of it

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_actor::{ActorConfig, ActorError, ActorStats, RolloutFn};
use caprl_common::bus::{Bus, BusOptions, InProcBus, Queue};
use caprl_common::shutdown::ShutdownTrigger;
use caprl_data::{synth_dataset, Dataset, SynthConfig};
use caprl_model::model::{Captioner, CaptionerConfig, Decoder, Device, ModelKind};
use caprl_wire::{PolicyVersion, Rollout, RolloutTask, TaskId};

/// Writes an 8-image synthetic data set under `dir` and opens it, with an FC captioner config
/// small enough to decode in milliseconds.
pub fn tiny(dir: &Path) -> (Dataset, CaptionerConfig) {
    let config = SynthConfig {
        seed: 2,
        train: 8,
        val: 2,
        test: 2,
        progress: false,
    };
    let data = synth_dataset(&dir.join("synth"), &config).unwrap();
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, data.vocab.len(), data.fc_dim(), None);
    cfg.model.embed = 8;
    cfg.model.hidden = 16;
    cfg.max_len = 6;
    (data, cfg)
}

/// [`tiny`]'s data set and a policy of it drawn from `seed`, prepared for decoding, with the
/// rows of its first three training images.
pub fn tiny_policy(dir: &Path, seed: u64) -> (Dataset, Decoder, Vec<u32>) {
    let (data, cfg) = tiny(dir);
    let policy = Captioner::new(&cfg, &Device::Cpu, seed).unwrap();
    let rows = data.train.items[..3]
        .iter()
        .map(|it| it.row as u32)
        .collect();
    (data, policy.decoder().unwrap(), rows)
}

/// Task `id` for policy v0: two samples of each of `rows`, nothing else; for a direct call of
/// `rollout` (it carries no data set: an actor would refuse it).
pub fn task(id: u64, rows: Vec<u32>) -> RolloutTask {
    RolloutTask::samples(
        Default::default(),
        TaskId(id),
        PolicyVersion(0),
        rows,
        2,
        99,
    )
}

/// [`task`] for the actor of `s`: on its data set.
pub fn task_on(s: &Setup, id: u64, rows: Vec<u32>) -> RolloutTask {
    RolloutTask {
        data: caprl_wire::DataFingerprint(s.cfg.data.fingerprint().to_string()),
        ..task(id, rows)
    }
}

pub const LIMIT: usize = 8 << 20;

/// An actor's config over a tiny data set, and an in-process bus holding policy v0.
pub struct Setup {
    _dir: tempfile::TempDir,
    pub rt: tokio::runtime::Runtime,
    pub bus: Arc<dyn Bus>,
    pub cfg: ActorConfig,
}

/// A [`Setup`] on a bus named `run`, for a `sync` or async actor.
pub fn setup(run: &str, sync: bool) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (data, model) = tiny(dir.path());
    let data = Arc::new(data);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(&BusOptions::for_run(run)).unwrap());
    let weights = Captioner::new(&model, &Device::Cpu, 1)
        .unwrap()
        .to_safetensors()
        .unwrap();
    rt.block_on(bus.put_snapshot(0, Bytes::from(weights)))
        .unwrap();
    let cfg = ActorConfig {
        id: "actor-test".into(),
        data,
        model,
        device: Device::Cpu,
        max_message_bytes: LIMIT,
        sync,
        delay: Duration::ZERO,
    };
    Setup {
        _dir: dir,
        rt,
        bus,
        cfg,
    }
}

/// Queues task `t`.
/// An actor running [`caprl_actor::run`] on a [`Setup`]'s config and bus until [`RunningActor::stop`].
pub struct RunningActor {
    stop: ShutdownTrigger,
    task: tokio::task::JoinHandle<Result<ActorStats, ActorError>>,
}

impl RunningActor {
    /// Stops the actor and returns its stats.
    pub fn stop(self, s: &Setup) -> ActorStats {
        self.stop.trigger();
        s.rt.block_on(self.task).unwrap().unwrap()
    }
}

impl Setup {
    /// Starts the real actor loop on this setup's config and bus.
    pub fn start_actor(&self) -> RunningActor {
        self.start_actor_with(caprl_actor::rollout)
    }

    /// [`Setup::start_actor`], turning tasks into rollouts with `rollout`.
    pub fn start_actor_with(&self, rollout: impl RolloutFn) -> RunningActor {
        let (stop, shutdown) = ShutdownTrigger::new();
        let task = self.rt.spawn(caprl_actor::run_with_rollout(
            self.cfg.clone(),
            Arc::clone(&self.bus),
            shutdown,
            rollout,
        ));
        RunningActor { stop, task }
    }

    /// The rows of the first two training images.
    pub fn first_rows(&self) -> Vec<u32> {
        self.cfg.data.train.items[..2]
            .iter()
            .map(|it| it.row as u32)
            .collect()
    }
}

/// Publishes policy `version`, with weights drawn from the version (other than v0's).
pub fn publish_policy(s: &Setup, version: u64) {
    let weights = Captioner::new(&s.cfg.model, &Device::Cpu, 1 + version)
        .unwrap()
        .to_safetensors()
        .unwrap();
    s.rt.block_on(s.bus.put_snapshot(version, Bytes::from(weights)))
        .unwrap();
}

/// Publishes task `t` on the task queue.
pub fn publish(s: &Setup, t: &RolloutTask) {
    let bytes = caprl_wire::encode(t, LIMIT).unwrap();
    s.rt.block_on(s.bus.publish(Queue::Tasks, Bytes::from(bytes)))
        .unwrap();
}

/// Waits up to `within` for one rollout and acks it.
pub fn next_rollout(s: &Setup, within: Duration) -> Option<Rollout> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        let got =
            s.rt.block_on(s.bus.pull(Queue::Rollouts, 1, Duration::from_millis(200)))
                .unwrap();
        if let Some(d) = got.into_iter().next() {
            let r: Rollout = caprl_wire::decode(d.payload(), LIMIT).unwrap();
            s.rt.block_on(d.ack()).unwrap();
            return Some(r);
        }
    }
    None
}
