//! Wiring the roles from the run config: the NATS connection, the reward worker's settings
//! (which read the learner's objective), and the in-process arrangement `caprl run` and
//! `caprl train` use (learner on the calling thread, one actor and one reward
//! worker as tasks of a tokio runtime, all on an [`InProcBus`]).

use std::sync::Arc;

use anyhow::{Context, Result};
use caprl_actor::ActorConfig;
use caprl_common::bus::{Bus, BusOptions, InProcBus, NatsBus, Queue};
use caprl_common::config::RunConfig;
use caprl_common::role::Role;
use caprl_common::shutdown::{Shutdown, ShutdownTrigger};
use caprl_common::telemetry::{Readiness, ServerHandle};
use caprl_data::Dataset;
use caprl_learner::driver::{Driver, DriverOptions};
use caprl_learner::objective::{CheckedConfig, Objective};
use caprl_model::model::Device;
use caprl_reward_worker::WorkerConfig;

/// Connects to NATS and opens the run's buckets and the consumers of the
/// queues this role pulls from (`pulls`; the learner passes all of them,
/// which creates every stream of the run).
pub async fn connect(cfg: &RunConfig, url: Option<&str>, pulls: &[Queue]) -> Result<Arc<dyn Bus>> {
    let nc = cfg.nats.resolved(url);
    let bus = NatsBus::connect_pulling(&nc, &BusOptions::of(&cfg.runtime, &cfg.nats), pulls)
        .await
        .with_context(|| format!("connecting to NATS at {}", nc.url))?;
    Ok(Arc::new(bus))
}

/// The default role id: `<hostname>-<pid>`.
pub fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".to_string());
    format!("{host}-{}", std::process::id())
}

/// The reward worker's settings, with the diversity term the objective wants.
pub fn worker_config(cfg: &RunConfig, data: &Dataset, id: String) -> Result<WorkerConfig> {
    let exploration = Objective::from_config(cfg)
        .wants_exploration()
        .then_some(cfg.reward.distance);
    Ok(WorkerConfig::for_run(cfg, data, id, exploration)?)
}

/// A multi-threaded tokio runtime for the roles (the learner's compute runs
/// on the calling thread, the roles' compute on blocking threads).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("caprl-rt")
        .build()
        .context("starting the async runtime")
}

/// Runs `learn` (the learner) with one actor and one reward worker as tasks
/// on an in-process bus; stops the roles when `learn` returns, and stops
/// `learn`'s waiting (with an error) when a role fails.
pub fn with_inproc_roles<T>(
    cfg: &CheckedConfig,
    data: &Arc<Dataset>,
    device: &Device,
    learn: impl FnOnce(&mut Driver) -> Result<T>,
) -> Result<T> {
    let rt = runtime()?;
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(&BusOptions::of(&cfg.runtime, &cfg.nats))?);
    let (stop, shutdown) = ShutdownTrigger::new();
    // The in-process actor shares the learner's device, and follows the run's dtype there.
    let told = Some(cfg.dtype.into());
    let actor_cfg = ActorConfig::for_run(
        cfg,
        Arc::clone(data),
        device.clone(),
        "local-actor".into(),
        told,
    )?;
    let worker_cfg = worker_config(cfg, data, "local-reward-worker".into())?;
    let actor = {
        let (bus, shutdown, stop) = (Arc::clone(&bus), shutdown.clone(), stop.clone());
        rt.spawn(async move {
            let r = caprl_actor::run(actor_cfg, bus, shutdown).await;
            if r.is_err() {
                stop.trigger();
            }
            r
        })
    };
    let worker = {
        let (bus, shutdown, stop) = (Arc::clone(&bus), shutdown.clone(), stop.clone());
        rt.spawn(async move {
            let r = caprl_reward_worker::run(worker_cfg, bus, shutdown).await;
            if r.is_err() {
                stop.trigger();
            }
            r
        })
    };
    let mut driver = Driver::new(
        Arc::clone(&bus),
        rt.handle().clone(),
        shutdown,
        DriverOptions::for_run(cfg),
    );
    let learned = learn(&mut driver);
    stop.trigger();
    let actor = rt.block_on(actor).context("the actor task panicked")?;
    let worker = rt
        .block_on(worker)
        .context("the reward-worker task panicked")?;
    // A role's failure explains a learner stopped by it: report it first.
    actor.context("the in-process actor failed")?;
    worker.context("the in-process reward worker failed")?;
    learned
}

/// Triggers `stop` on Ctrl-C or SIGTERM (how `caprl local` and Kubernetes stop a role).
fn stop_on_signals(rt: &tokio::runtime::Runtime, stop: ShutdownTrigger) {
    rt.spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("stopping (signal)");
        stop.trigger();
    });
}

/// The flags every role command (`caprl actor`, `reward-worker`, `learner`) takes.
#[derive(Debug, clap::Args)]
pub struct RoleArgs {
    /// NATS server URL (overrides nats.url).
    #[arg(long)]
    pub nats_url: Option<String>,
    /// Serve /metrics, /healthz, /readyz on HOST:PORT.
    #[arg(long)]
    pub metrics_addr: Option<String>,
}

/// A role process, started by [`start_role`].
pub struct Started {
    pub rt: tokio::runtime::Runtime,
    pub bus: Arc<dyn Bus>,
    /// Requested on Ctrl-C or SIGTERM.
    pub shutdown: Shutdown,
    /// What `/readyz` reports.
    pub readiness: Readiness,
    /// The metrics server, stopped when this is dropped.
    _metrics: Option<ServerHandle>,
}

/// The one start-up path of `caprl actor`, `caprl reward-worker` and `caprl learner`: the async
/// runtime, the metrics server, the NATS connection (with the consumers of the queues `role`
/// pulls from; the learner opens all of them, which creates every stream of the run), and Ctrl-C or
/// SIGTERM turned into [`Started::shutdown`]. An actor or reward worker is ready once connected;
/// the learner once its first snapshot is published (its driver sets that). `None` when a
/// signal came before the connection was made (a role waiting for the learner's queues).
pub fn start_role(
    cfg: &RunConfig,
    role: Role,
    id: &str,
    args: &RoleArgs,
) -> Result<Option<Started>> {
    let pulls: &[Queue] = match role {
        Role::Actor => &[Queue::Tasks],
        Role::RewardWorker => &[Queue::Rollouts],
        Role::Learner => &Queue::ALL,
    };
    let rt = runtime()?;
    // The metrics server first: a bad --metrics-addr or a taken port stops the role before it
    // creates anything on the broker, and /healthz answers while it waits for NATS.
    let (metrics, readiness) = serve_metrics(args.metrics_addr.as_deref(), role, cfg, id)?;
    let (stop, shutdown) = ShutdownTrigger::new();
    stop_on_signals(&rt, stop);
    let mut stopped = shutdown.clone();
    let bus = rt.block_on(async {
        tokio::select! {
            bus = connect(cfg, args.nats_url.as_deref(), pulls) => bus.map(Some),
            () = stopped.recv() => Ok(None),
        }
    })?;
    let Some(bus) = bus else {
        tracing::info!("{} {id} stopped before it was connected", role.label());
        return Ok(None);
    };
    if role != Role::Learner {
        readiness.set_ready(true);
        tracing::info!("{} {id} running (run {})", role.label(), cfg.runtime.run_id);
    }
    Ok(Some(Started {
        rt,
        bus,
        shutdown,
        readiness,
        _metrics: metrics,
    }))
}

impl Started {
    /// Runs a role's loop on this process's runtime, bus and shutdown.
    pub fn run<T, F>(&self, role: impl FnOnce(Arc<dyn Bus>, Shutdown) -> F) -> T
    where
        F: std::future::Future<Output = T>,
    {
        self.rt
            .block_on(role(Arc::clone(&self.bus), self.shutdown.clone()))
    }
}

/// Serves `/metrics`, `/healthz`, `/readyz` on `addr` when given, labelled
/// with the role, the run id and this process's id.
fn serve_metrics(
    addr: Option<&str>,
    role: Role,
    cfg: &RunConfig,
    id: &str,
) -> Result<(Option<ServerHandle>, Readiness)> {
    use caprl_common::telemetry::{serve_labeled, ProcessLabels};
    let readiness = Readiness::new();
    let Some(addr) = addr else {
        return Ok((None, readiness));
    };
    let sock: std::net::SocketAddr = addr
        .parse()
        .with_context(|| format!("--metrics-addr {addr:?} is not HOST:PORT (e.g. 0.0.0.0:9090)"))?;
    let labels = ProcessLabels {
        role: role.name().to_string(),
        run: cfg.runtime.run_id.clone(),
        worker: id.to_string(),
    };
    let handle = serve_labeled(sock, readiness.clone(), &labels)?;
    tracing::info!("metrics on http://{}/metrics", handle.local_addr());
    Ok((Some(handle), readiness))
}
