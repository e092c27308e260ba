//! `caprl bench transport`: what the NATS transport costs.
//!
//! 1. RL iterations/s of the same SCST workload with the in-process bus
//!    (`caprl train`) and over NATS (`caprl local --actors 1 --reward-workers 1`),
//!    both from the step timestamps of their `run.jsonl` (target: NATS ≥ 90%).
//! 2. Broadcast latency of a snapshot (default 10 MB) to 4 actors — publish,
//!    then each actor sees `latest`, fetches and verifies it — against one raw
//!    object-store put + get of the same bytes (target: ≤ 3×); best of 3 each.
//! 3. Rollouts/s and bytes/s through the rollouts queue (publish, pull, ack).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use caprl_common::bus::{Bus, LocalNatsServer, LocalNatsServerOptions, NatsBus, NatsConfig, Queue};
use caprl_wire::{DecodeKind, PolicyVersion, Rollout, Sequence, TaskId};
use futures::StreamExt;

use crate::cli::{write_stdout, Global};
use crate::roles;

#[derive(Debug, clap::Args)]
pub struct TransportArgs {
    /// Snapshot size for the broadcast measurement, in MB.
    #[arg(long, default_value_t = 10)]
    pub snapshot_mb: usize,
    /// Actors receiving the broadcast snapshot.
    #[arg(long, default_value_t = 4)]
    pub actors: usize,
    /// Rollout messages for the throughput measurement.
    #[arg(long, default_value_t = 2000)]
    pub rollouts: usize,
    /// Skip the training comparison (only the transport micro-benchmarks).
    #[arg(long)]
    pub no_training: bool,
}

pub fn run(args: TransportArgs, global: &Global) -> Result<()> {
    let mut out = format!(
        "caprl bench transport\n{}\n",
        caprl_kernels::fastmath::describe()
    );
    if !args.no_training {
        let (inproc, nats) = training(global)?;
        out.push_str(&format!(
            "SCST iterations/s: in-process {inproc:.2}, NATS (1 actor + 1 reward worker) {nats:.2} = {:.0}% (target >= 90%)\n",
            100.0 * nats / inproc
        ));
    }
    let nats = measure_nats(args.snapshot_mb, args.actors, args.rollouts)?;
    out.push_str(&format!(
        "snapshot {} MB to {} actors: {:.1} ms; raw object-store put+get {:.1} ms = {:.2}x (target <= 3x)\n",
        args.snapshot_mb,
        args.actors,
        nats.broadcast.as_secs_f64() * 1e3,
        nats.raw_put_get.as_secs_f64() * 1e3,
        nats.broadcast.as_secs_f64() / nats.raw_put_get.as_secs_f64().max(1e-9)
    ));
    out.push_str(&format!(
        "rollouts through NATS: {:.0}/s, {:.1} MB/s ({} bytes each)\n",
        nats.rollouts_per_s,
        nats.rollout_bytes_per_s / 1e6,
        nats.rollout_bytes
    ));
    write_stdout(&out)
}

/// The transport figures of one fresh nats-server: a snapshot's broadcast against a raw
/// object-store put + get, and the rollouts queue's throughput.
pub(super) struct NatsFigures {
    pub broadcast: Duration,
    pub raw_put_get: Duration,
    pub rollouts_per_s: f64,
    pub rollout_bytes_per_s: f64,
    pub rollout_bytes: usize,
}

/// Starts a nats-server of its own and measures [`NatsFigures`]: `snapshot_mb` MB to `actors`
/// actors, `rollouts` rollouts.
pub(super) fn measure_nats(
    snapshot_mb: usize,
    actors: usize,
    rollouts: usize,
) -> Result<NatsFigures> {
    let server = LocalNatsServer::start(LocalNatsServerOptions::default())
        .context("starting nats-server for the transport benchmark")?;
    let rt = roles::runtime()?;
    let (broadcast, raw_put_get) =
        rt.block_on(snapshot_broadcast(&server.url(), snapshot_mb, actors))?;
    let (rollouts_per_s, rollout_bytes_per_s, rollout_bytes) =
        rt.block_on(rollout_throughput(&server.url(), rollouts))?;
    Ok(NatsFigures {
        broadcast,
        raw_put_get,
        rollouts_per_s,
        rollout_bytes_per_s,
        rollout_bytes,
    })
}

/// RL iterations/s of `caprl train` and `caprl local` with the global config.
fn training(global: &Global) -> Result<(f64, f64)> {
    let dir = tempfile::tempdir()?;
    let exe = std::env::current_exe()?;
    let mut rates = Vec::new();
    for (name, sub) in [
        ("inproc", vec!["train"]),
        (
            "nats",
            vec!["local", "--actors", "1", "--reward-workers", "1"],
        ),
    ] {
        let run_dir = dir.path().join(name);
        let mut cmd = Command::new(&exe);
        if let Some(c) = &global.config {
            cmd.arg("--config").arg(c);
        }
        for s in &global.sets {
            cmd.arg("--set").arg(s);
        }
        cmd.arg("--set")
            .arg(format!("run_dir={:?}", run_dir.display().to_string()));
        cmd.args(&sub).arg("-q");
        let status = cmd
            .status()
            .with_context(|| format!("running caprl {}", sub.join(" ")))?;
        if !status.success() {
            bail!("caprl {} failed ({status})", sub.join(" "));
        }
        rates.push(rl_rate(&run_dir, "rl")?);
    }
    Ok((rates[0], rates[1]))
}

/// Steps per second of `phase` between its first and last step in a run log.
pub(super) fn rl_rate(run_dir: &Path, phase: &str) -> Result<f64> {
    let log = caprl_common::telemetry::read_run_log(&run_dir.join("run.jsonl"))?;
    let times: Vec<u64> = log
        .steps
        .iter()
        .filter(|s| s.phase == phase)
        .map(|s| s.unix_ms)
        .collect();
    if times.len() < 3 {
        bail!(
            "too few {phase} steps in {} to time (raise train.{phase}_epochs)",
            run_dir.display()
        );
    }
    let span = (times[times.len() - 1] - times[0]) as f64 / 1e3;
    Ok((times.len() - 1) as f64 / span.max(1e-3))
}

/// Repetitions of each snapshot measurement.
const TRIALS: u64 = 3;

async fn snapshot_broadcast(url: &str, mb: usize, actors: usize) -> Result<(Duration, Duration)> {
    let opts = caprl_common::bus::BusOptions::for_run("bench-snapshot");
    let nc = NatsConfig::to_url(url);
    let data = Bytes::from(
        (0..mb * 1_000_000)
            .map(|i| (i * 31 % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let publisher: Arc<dyn Bus> = Arc::new(NatsBus::connect(&nc, &opts).await?);
    // Warm up the bucket so both measurements start from an existing store.
    publisher
        .put_snapshot(0, Bytes::from_static(b"warm"))
        .await?;
    let mut actor_buses: Vec<Arc<dyn Bus>> = Vec::new();
    for _ in 0..actors {
        actor_buses.push(Arc::new(NatsBus::connect(&nc, &opts).await?));
    }
    // Best of TRIALS for both sides: the machine is shared, the minimum is the cost.
    let mut broadcast = Duration::MAX;
    for version in 1..=TRIALS {
        let mut handles = Vec::new();
        for bus in &actor_buses {
            let bus = Arc::clone(bus);
            let mut watch = bus.watch_latest().await?;
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
            let h = tokio::spawn(async move {
                let mut ready = Some(ready_tx);
                while let Some(meta) = watch.next().await {
                    let meta = meta?;
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                    if meta.version == version {
                        // Fetches and checks length + sha256, as an actor does.
                        bus.get_snapshot(&meta).await?;
                        return Ok::<Instant, anyhow::Error>(Instant::now());
                    }
                }
                bail!("watch ended")
            });
            let _ = ready_rx.await;
            handles.push(h);
        }
        let started = Instant::now();
        publisher.put_snapshot(version, data.clone()).await?;
        let mut last = started;
        for h in handles {
            last = last.max(h.await??);
        }
        broadcast = broadcast.min(last - started);
        publisher.delete_snapshot(version - 1).await?;
    }

    let client = async_nats::connect(url).await?;
    let js = async_nats::jetstream::new(client);
    let store = js
        .create_object_store(async_nats::jetstream::object_store::Config {
            bucket: "bench-raw".into(),
            ..Default::default()
        })
        .await?;
    store.put("warm", &mut &b"warm"[..]).await?;
    let mut raw = Duration::MAX;
    for trial in 0..TRIALS {
        let name = format!("raw-{trial}");
        let started = Instant::now();
        store.put(name.as_str(), &mut data.as_ref()).await?;
        let mut obj = store.get(name.as_str()).await?;
        let mut back = Vec::with_capacity(data.len());
        tokio::io::AsyncReadExt::read_to_end(&mut obj, &mut back).await?;
        raw = raw.min(started.elapsed());
        if back.len() != data.len() {
            bail!(
                "raw object store returned {} of {} bytes",
                back.len(),
                data.len()
            );
        }
        store.delete(name.as_str()).await?;
    }
    js.delete_object_store("bench-raw").await?;
    publisher.delete_run().await?;
    Ok((broadcast, raw))
}

async fn rollout_throughput(url: &str, n: usize) -> Result<(f64, f64, usize)> {
    let opts = caprl_common::bus::BusOptions::for_run("bench-rollouts");
    let nc = NatsConfig::to_url(url);
    let producer = NatsBus::connect(&nc, &opts).await?;
    let consumer = NatsBus::connect(&nc, &opts).await?;
    // A typical SCST rollout: 8 images × (5 samples + greedy) × 16 tokens.
    let sequences: Vec<Sequence> = (0..48)
        .map(|i| Sequence {
            image_row: i / 6,
            kind: if i % 6 == 5 {
                DecodeKind::Greedy
            } else {
                DecodeKind::Sample
            },
            tokens: (0..16).map(|t| (t * 7 + i) % 1000).collect(),
            logprobs: (0..16).map(|t| -(t as f32) * 0.1).collect(),
        })
        .collect();
    let rollout = Rollout {
        task_id: TaskId(0),
        data: Default::default(),
        policy_version: PolicyVersion(1),
        actor_id: "bench".into(),
        sequences,
        decode_seconds: 0.0,
    };
    let bytes = Bytes::from(caprl_wire::encode(
        &rollout,
        caprl_wire::DEFAULT_MAX_MESSAGE_BYTES,
    )?);
    let size = bytes.len();
    let started = Instant::now();
    let pull = async {
        let mut got = 0usize;
        while got < n {
            let batch = consumer
                .pull(Queue::Rollouts, 256, Duration::from_secs(5))
                .await?;
            if batch.is_empty() {
                bail!("rollouts stopped arriving after {got}");
            }
            for d in batch {
                let _: Rollout =
                    caprl_wire::decode(d.payload(), caprl_wire::DEFAULT_MAX_MESSAGE_BYTES)?;
                d.ack().await?;
                got += 1;
            }
        }
        Ok::<(), anyhow::Error>(())
    };
    let push = async {
        for _ in 0..n {
            producer.publish(Queue::Rollouts, bytes.clone()).await?;
        }
        Ok::<(), anyhow::Error>(())
    };
    let (a, b) = tokio::join!(push, pull);
    a?;
    b?;
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    producer.delete_run().await?;
    Ok((n as f64 / secs, (n * size) as f64 / secs, size))
}
