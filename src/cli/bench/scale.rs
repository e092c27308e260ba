//! `caprl bench scale`: how async training's rollout throughput grows with the number of actors,
//! over a real nats-server, with the decode and the update **simulated**.
//!
//! Every part of the pipeline but the two computations runs for real: the learner's driver
//! (snapshot publishing, issue-ahead within the lag bound and the credits, collection, lag
//! checks), each actor's serve loop on its own NATS connection (snapshot watch and fetch, task
//! pull, ack, rollout publish), the reward workers (CIDEr-D scoring) and JetStream. An actor's
//! decode is replaced by a sleep of `--token-ms` per generated token (the captions are random
//! words of the decode's full length), and the learner's update by a sleep of `--update-ms`;
//! the table says so. The ideal is `min(N · one actor's rate, the learner's rate)`; the
//! coordination overhead per rollout is the wall time beyond the ideal, divided by the
//! rollouts. NATS's own message and byte rates come from the server's `/varz`.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions, Queue};
use caprl_common::config::RunConfig;
use caprl_common::shutdown::{Shutdown, ShutdownTrigger};
use caprl_data::{synth, Dataset, SynthConfig, Vocab};
use caprl_learner::driver::Driver;
use caprl_learner::objective::{CheckedConfig, Objective};
use caprl_model::model::{
    batch_tokens, inputs_for_rows, CaprlRng, Captioner, CaptionerConfig, Decoder, Device, Inputs,
    ModelError,
};
use caprl_model::optim::AdamW;

use super::model::random_captions;
use caprl_wire::{DecodeKind, PolicyVersion, Rollout, RolloutTask, Sequence};

use crate::cli::local_cmd::SnapshotTransport;
use crate::cli::{write_stdout, Global};
use crate::roles;

#[derive(Debug, clap::Args)]
pub struct ScaleArgs {
    /// Actor counts to measure, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub actors: Vec<usize>,
    /// Simulated decode cost per generated token, in ms (actors sleep instead of decoding).
    #[arg(long, default_value_t = 0.5)]
    pub token_ms: f64,
    /// Simulated learner update per step, in ms (the learner sleeps instead of training).
    #[arg(long, default_value_t = 200)]
    pub update_ms: u64,
    /// Measured RL steps per run (after 2 warm-up steps).
    #[arg(long, default_value_t = 8)]
    pub steps: u64,
    /// Images per step.
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// Images per rollout task.
    #[arg(long, default_value_t = 4)]
    pub images_per_task: u32,
    /// Reward workers (real CIDEr-D scoring).
    #[arg(long, default_value_t = 2)]
    pub reward_workers: usize,
    /// How snapshots reach the actors: `nats` through the object store, one copy per actor (as
    /// on a cluster of hosts), or `files` written once and mapped by every actor (one host, or a
    /// volume all of them mount: `runtime.snapshot_dir`).
    #[arg(long, value_enum, default_value_t = SnapshotTransport::Nats)]
    pub snapshots: SnapshotTransport,
    /// Through the object store: actors per simulated host sharing one cache of fetched
    /// versions (`runtime.snapshot_cache_dir`, a directory per host), so each host fetches a
    /// version once; 0: every actor fetches its own copy.
    #[arg(long, default_value_t = 0)]
    pub actors_per_host: usize,
    /// The nats-server binary (2.10 or later).
    #[arg(long, default_value = "nats-server")]
    pub nats_server: PathBuf,
}

/// One run's figures.
struct Measured {
    actors: usize,
    wall: f64,
    rollouts: u64,
    images: u64,
    /// Snapshots published in the measured steps; every actor fetches each.
    snapshots: u64,
    /// One policy snapshot's size.
    snapshot_bytes: u64,
    msgs: f64,
    bytes: f64,
}

const WARMUP_STEPS: u64 = 2;

/// Runs the benchmark; `global`'s `--config` and `--set` apply under the benchmark's own
/// settings (e.g. `--set runtime.snapshot_dtype="bf16"`, `--set model.hidden=1024`).
pub fn run(args: ScaleArgs, global: &Global) -> Result<()> {
    check_args(&args)?;
    let tmp = tempfile::tempdir().context("a temp dir for the synthetic data")?;
    let data_dir = tmp.path().join("synth");
    let synth_cfg = SynthConfig {
        seed: 1,
        train: 512,
        val: 8,
        test: 8,
        progress: false,
    };
    synth(&data_dir, &synth_cfg).context("generating the synthetic data")?;
    let data = Arc::new(Dataset::open(&data_dir)?);
    // The benchmark is of async mode: the mode is set last, so the config is validated as
    // the async config it runs (async-only keys such as `runtime.snapshot_every` are refused
    // in sync mode).
    let sets: Vec<String> = global
        .sets
        .iter()
        .cloned()
        .chain(std::iter::once("runtime.mode=\"async\"".to_string()))
        .collect();
    let loaded =
        caprl_learner::objective::load_checked(global.config.as_deref(), &sets)?.into_inner();
    let snapshot_dir =
        (args.snapshots == SnapshotTransport::Files).then(|| tmp.path().join("snapshots"));
    let cfg = scale_config(&args, loaded, &data_dir, snapshot_dir)?;
    let decodes = Objective::from_config(&cfg).decodes(&cfg);
    let captions_per_image = decodes.samples as u64 + decodes.greedy as u64;
    let tokens = cfg.data.max_len as u64 + 1;
    let task_ms =
        args.images_per_task as f64 * (captions_per_image * tokens) as f64 * args.token_ms;
    let actor_rate = args.images_per_task as f64 / (task_ms / 1e3);
    let learner_rate = args.batch as f64 / (args.update_ms as f64 / 1e3);

    let mut out = format!(
        "caprl bench scale: SIMULATED decode ({} ms per token: {} captions of {tokens} tokens per \
         image, {task_ms:.0} ms per task of {} images) and SIMULATED update ({} ms per step); \
         real nats-server, driver, actor and reward-worker loops, CIDEr-D scoring\n\
         async, max_policy_lag {}, tasks_in_flight {}, {} images per step, {} reward workers, \
         snapshots in {:?} through {}; one actor's rate {actor_rate:.1} images/s, the learner's \
         {learner_rate:.1} images/s\n\n\
         | actors | images/s | ideal images/s | of ideal | of linear | NATS msgs/s | NATS MB/s | \
         NATS MB per version | per reader, of a snapshot | overhead ms / rollout |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        args.token_ms,
        captions_per_image,
        args.images_per_task,
        args.update_ms,
        cfg.runtime.max_policy_lag,
        cfg.runtime.tasks_in_flight,
        args.batch,
        args.reward_workers,
        cfg.runtime.snapshot_dtype,
        match (args.snapshots, args.actors_per_host) {
            (SnapshotTransport::Files, _) => "files (written once, mapped by every actor)".into(),
            (SnapshotTransport::Nats, 0) => "NATS's object store (one copy per actor)".into(),
            (SnapshotTransport::Nats, k) => format!(
                "NATS's object store (one copy per host of {k} actors sharing a cache: \
                 runtime.snapshot_cache_dir)"
            ),
        },
    );
    let mut first_rate = None;
    let mut snapshot_mb = 0.0;
    for &n in &args.actors {
        let m = measure(&args, &cfg, &data, n)?;
        let rate = m.images as f64 / m.wall;
        let ideal = (n as f64 * actor_rate).min(learner_rate);
        let one = *first_rate.get_or_insert(rate / args.actors[0] as f64);
        let overhead_ms = (m.wall - m.images as f64 / ideal) / m.rollouts.max(1) as f64 * 1e3;
        // All the bytes through NATS (tasks, rollouts and scores too) per published version, and
        // per reader of it (the learner's put and every actor's fetch) against a whole snapshot.
        let per_version = m.bytes / m.snapshots.max(1) as f64;
        let per_reader = per_version / (n + 1) as f64 / m.snapshot_bytes.max(1) as f64;
        out.push_str(&format!(
            "| {} | {rate:.1} | {ideal:.1} | {:.0}% | {:.0}% | {:.0} | {:.2} | {:.2} | {:.1}% | \
             {overhead_ms:.1} |\n",
            m.actors,
            100.0 * rate / ideal,
            100.0 * rate / (one * n as f64),
            m.msgs / m.wall,
            m.bytes / m.wall / 1e6,
            per_version / 1e6,
            100.0 * per_reader,
        ));
        snapshot_mb = m.snapshot_bytes as f64 / 1e6;
        eprintln!("{} actors: {rate:.1} images/s", m.actors);
    }
    out.push_str(&format!(
        "\n(of linear: against N times the first row's per-actor rate; the learner's rate caps \
         the ideal, so rows past it fall below linear by design. A policy snapshot is \
         {snapshot_mb:.1} MB, published every {} step(s) (runtime.snapshot_every) and fetched by \
         every actor; through the object store a version is stored whole every {} and as a delta \
         against the one before in between when that pays (runtime.snapshot_full_every). The \
         learner takes a real AdamW step at optim.rl_lr = {:e} each step, so versions differ as \
         a trained policy's do.)\n",
        cfg.runtime.snapshot_every, cfg.runtime.snapshot_full_every, cfg.optim.rl_lr
    ));
    write_stdout(&out)
}

/// Refuses flags the benchmark cannot run with, saying which.
fn check_args(args: &ScaleArgs) -> Result<()> {
    if args.actors.is_empty() || args.actors.contains(&0) {
        bail!("--actors takes counts >= 1, e.g. --actors 1,2,4,8,16");
    }
    if args.actors_per_host > 0 && args.snapshots == SnapshotTransport::Files {
        bail!(
            "--actors-per-host shares fetches from the object store: use it with --snapshots \
             nats (files are mapped by every actor without fetching)"
        );
    }
    if !(args.token_ms > 0.0 && args.token_ms.is_finite()) {
        bail!("--token-ms must be a number > 0 (got {})", args.token_ms);
    }
    Ok(())
}

/// The run config of the benchmark: `cfg` (the defaults, or what `--config`/`--set` said, in
/// async mode) on the synthetic data, with the benchmark's batch and task sizes and its
/// snapshots in `snapshot_dir` when given (else the object store), checked again.
fn scale_config(
    args: &ScaleArgs,
    mut cfg: RunConfig,
    data_dir: &std::path::Path,
    snapshot_dir: Option<PathBuf>,
) -> Result<CheckedConfig> {
    cfg.data.dir = data_dir.display().to_string();
    if let Some(dir) = snapshot_dir {
        cfg.runtime.snapshot_dir = dir.display().to_string();
    }
    cfg.runtime.run_id = "bench-scale".into();
    cfg.runtime.images_per_task = args.images_per_task;
    cfg.train.batch_size = args.batch;
    let tasks_per_step = args.batch.div_ceil(args.images_per_task);
    cfg.runtime.tasks_in_flight = tasks_per_step * (cfg.runtime.max_policy_lag as u32 + 1);
    Ok(CheckedConfig::new(cfg)?)
}

/// One run with `n` actors: a fresh nats-server, the roles as tasks, the learner's loop here.
fn measure(
    args: &ScaleArgs,
    cfg: &CheckedConfig,
    data: &Arc<Dataset>,
    n: usize,
) -> Result<Measured> {
    let (server, monitor) = monitored_server(&args.nats_server)?;
    let url = server.url();
    let rt = roles::runtime()?;
    let (stop, shutdown) = ShutdownTrigger::new();
    let learner_bus = rt.block_on(roles::connect(cfg, Some(&url), &Queue::ALL))?;
    let model_cfg =
        CaptionerConfig::for_dataset(&cfg.model, data, cfg.data.max_len as usize, cfg.dtype)?;
    let device = caprl_model::model::Device::Cpu;
    let hosts = tempfile::tempdir().context("a temp dir for the hosts' snapshot caches")?;
    let roles_running = spawn_roles(args, cfg, data, (&rt, &url, hosts.path()), &shutdown, n)?;
    let mut driver = Driver::new(
        Arc::clone(&learner_bus),
        rt.handle().clone(),
        shutdown,
        caprl_learner::driver::DriverOptions::for_run(cfg),
    );
    driver.set_data(
        data.vocab.hash(),
        caprl_wire::DataFingerprint(data.fingerprint().to_string()),
    );
    driver.purge()?;
    driver.continue_versions(0, 0)?;
    let model = Captioner::new(&model_cfg, &device, cfg.seed)?;
    let mut update = RealUpdate::new(&model, &model_cfg, data, cfg)?;
    let items = &data.train.items;
    let batch = args.batch as usize;
    let rows_of = |step: u64| -> Vec<u32> {
        (0..batch)
            .map(|j| items[(step as usize * batch + j) % items.len()].row as u32)
            .collect()
    };
    let ahead_steps = driver.issue_ahead_steps() as u64;
    let (mut started, mut before) = (Instant::now(), varz(monitor)?);
    let (mut rollouts, mut images, mut snapshot_bytes) = (0u64, 0u64, 0u64);
    let (mut snapshots, mut latest) = (0u64, None);
    for step in 0..WARMUP_STEPS + args.steps {
        if step == WARMUP_STEPS {
            (started, before) = (Instant::now(), varz(monitor)?);
            (rollouts, images, snapshots) = (0, 0, 0);
        }
        let meta = driver.publish_with(&model, None, step)?;
        snapshot_bytes = meta.bytes;
        snapshots += u64::from(latest.replace(meta.version) != Some(meta.version));
        let ahead: Vec<Vec<u32>> = (1..=ahead_steps).map(|j| rows_of(step + j)).collect();
        let collected = driver.collect(step, step, &rows_of(step), &ahead)?;
        rollouts += collected.scored.len() as u64;
        images += collected
            .scored
            .iter()
            .map(|s| {
                let rows: BTreeSet<u32> = s.rollout.sequences.iter().map(|q| q.image_row).collect();
                rows.len() as u64
            })
            .sum::<u64>();
        // A real AdamW step at the run's RL learning rate, so each version's snapshot changes
        // as a trained policy's does; the rest of the stated update time is slept.
        let took = update.step(&model)?;
        std::thread::sleep(Duration::from_millis(args.update_ms).saturating_sub(took));
    }
    let wall = started.elapsed().as_secs_f64();
    let after = varz(monitor)?;
    stop.trigger();
    for r in roles_running {
        rt.block_on(r).context("a role task panicked")??;
    }
    drop(server);
    Ok(Measured {
        actors: n,
        wall,
        rollouts,
        images,
        snapshots,
        snapshot_bytes,
        msgs: (after.msgs - before.msgs) as f64,
        bytes: (after.bytes() - before.bytes()) as f64,
    })
}

/// The learner's update in the benchmark: AdamW (the run's `[optim]`) at `optim.rl_lr` on the
/// XE loss of random captions of the first training images: Adam's steps are about the learning
/// rate in size whatever the loss, so the weights change as a real RL step's at that rate do.
struct RealUpdate {
    opt: AdamW,
    inputs: Inputs,
    targets: caprl_model::model::Tensor,
    lr: f64,
}

impl RealUpdate {
    fn new(
        model: &Captioner,
        model_cfg: &CaptionerConfig,
        data: &Dataset,
        cfg: &RunConfig,
    ) -> Result<RealUpdate> {
        let items = &data.train.items[..data.train.items.len().min(8)];
        let rows: Vec<usize> = items.iter().map(|it| it.row).collect();
        let inputs = inputs_for_rows(data, &rows, model_cfg, &Device::Cpu)?;
        let mut rng = CaprlRng::new(cfg.seed);
        let captions = random_captions(
            &mut rng,
            rows.len(),
            model_cfg.max_len,
            model_cfg.vocab_size,
        );
        Ok(RealUpdate {
            opt: AdamW::new(model.varmap(), cfg.optim.adam())?,
            inputs,
            targets: batch_tokens(&captions, &Device::Cpu)?,
            lr: cfg.optim.rl_lr,
        })
    }

    /// One step; how long it took.
    fn step(&mut self, model: &Captioner) -> Result<Duration> {
        let started = Instant::now();
        let (logp, _) = model.token_logprobs(&self.inputs, &self.targets, None)?;
        let grads = logp.sum_all()?.neg()?.backward()?;
        self.opt.step(&grads, self.lr)?;
        Ok(started.elapsed())
    }
}

/// `n` simulated actors and `args.reward_workers` reward workers on the broker at `url`, as
/// tasks of `rt` that stop on `shutdown`; with `args.actors_per_host`, each host's actors share
/// a cache of fetched versions in a directory of its own under `hosts`.
fn spawn_roles(
    args: &ScaleArgs,
    cfg: &RunConfig,
    data: &Arc<Dataset>,
    (rt, url, hosts): (&tokio::runtime::Runtime, &str, &std::path::Path),
    shutdown: &Shutdown,
    n: usize,
) -> Result<Vec<tokio::task::JoinHandle<Result<()>>>> {
    let device = caprl_model::model::Device::Cpu;
    let mut roles_running = Vec::new();
    let (token_ms, max_len) = (args.token_ms, cfg.data.max_len as usize);
    for i in 0..n {
        let mut on_host = cfg.clone();
        if let Some(host) = i.checked_div(args.actors_per_host) {
            let cache = hosts.join(format!("host-{host}"));
            on_host.runtime.snapshot_cache_dir = cache.display().to_string();
        }
        let bus = rt.block_on(roles::connect(&on_host, Some(url), &[Queue::Tasks]))?;
        let actor = caprl_actor::ActorConfig::for_run(
            cfg,
            Arc::clone(data),
            device.clone(),
            format!("sim-actor-{i}"),
            None,
        )?;
        let shutdown = shutdown.clone();
        let simulated =
            move |_: &Decoder, v: PolicyVersion, d: &Dataset, t: &RolloutTask, id: &str| {
                simulated_rollout((v, d, t, id), max_len, token_ms)
            };
        roles_running.push(rt.spawn(async move {
            caprl_actor::run_with_rollout(actor, bus, shutdown, simulated)
                .await
                .map(|_| ())
                .map_err(anyhow::Error::from)
        }));
    }
    for i in 0..args.reward_workers {
        let bus = rt.block_on(roles::connect(cfg, Some(url), &[Queue::Rollouts]))?;
        let worker = roles::worker_config(cfg, data, format!("worker-{i}"))?;
        let shutdown = shutdown.clone();
        roles_running.push(rt.spawn(async move {
            caprl_reward_worker::run(worker, bus, shutdown)
                .await
                .map(|_| ())
                .map_err(anyhow::Error::from)
        }));
    }
    Ok(roles_running)
}

/// A stand-in for the decode: per image, the task's samples and greedy caption as random
/// words of the full decode length, after sleeping `token_ms` per token.
fn simulated_rollout(
    (version, data, task, actor_id): (PolicyVersion, &Dataset, &RolloutTask, &str),
    max_len: usize,
    token_ms: f64,
) -> Result<Rollout, ModelError> {
    let started = Instant::now();
    let len = max_len + 1;
    let words = data.vocab.len().max(3) as u64;
    let mut z = task.seed;
    let mut word = || {
        z = z
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        2 + ((z >> 33) % (words - 2)) as u32
    };
    let mut sequences = Vec::new();
    for &row in &task.image_rows {
        let kinds = std::iter::repeat_n(DecodeKind::Sample, task.samples as usize)
            .chain(task.greedy.then_some(DecodeKind::Greedy));
        for kind in kinds {
            let mut tokens: Vec<u32> = (0..len - 1).map(|_| word()).collect();
            tokens.push(Vocab::EOS);
            sequences.push(Sequence {
                image_row: row,
                kind,
                logprobs: vec![-1.0; tokens.len()],
                tokens,
            });
        }
    }
    let generated: usize = sequences.iter().map(|s| s.tokens.len()).sum();
    std::thread::sleep(Duration::from_secs_f64(generated as f64 * token_ms / 1e3));
    Ok(Rollout {
        task_id: task.task_id,
        data: task.data.clone(),
        policy_version: version,
        actor_id: actor_id.to_string(),
        sequences,
        decode_seconds: started.elapsed().as_secs_f32(),
    })
}

/// A fresh nats-server (`binary`) with its monitoring endpoint on the port returned, for
/// [`varz`].
pub(super) fn monitored_server(binary: &std::path::Path) -> Result<(LocalNatsServer, u16)> {
    let monitor = free_port()?;
    let conf = tempfile::NamedTempFile::new()?;
    std::fs::write(conf.path(), format!("http: \"127.0.0.1:{monitor}\"\n"))?;
    let server = LocalNatsServer::start(LocalNatsServerOptions {
        binary: binary.to_path_buf(),
        config_file: Some(conf.path().to_path_buf()),
        ..LocalNatsServerOptions::default()
    })
    .with_context(|| format!("starting {}", binary.display()))?;
    Ok((server, monitor))
}

/// The server's totals so far, from its monitoring endpoint.
#[derive(Debug, Clone, Copy)]
pub(super) struct Varz {
    /// Messages in and out.
    pub msgs: u64,
    /// Bytes the clients sent the server (publishes, object puts).
    pub in_bytes: u64,
    /// Bytes the server sent its clients (deliveries, object gets).
    pub out_bytes: u64,
}

impl Varz {
    /// Bytes in and out.
    fn bytes(&self) -> u64 {
        self.in_bytes + self.out_bytes
    }
}

/// The server's totals so far ([`Varz`]), from its monitoring endpoint on `port`.
pub(super) fn varz(port: u16) -> Result<Varz> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).context("nats-server's /varz")?;
    s.write_all(b"GET /varz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(body).context("nats-server's /varz JSON")?;
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    Ok(Varz {
        msgs: n("in_msgs") + n("out_msgs"),
        in_bytes: n("in_bytes"),
        out_bytes: n("out_bytes"),
    })
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}
