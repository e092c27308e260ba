//! The metrics endpoint every caprl process serves on `--metrics-addr`:
//! `/metrics` (Prometheus text format), `/healthz` and `/readyz`.
//!
//! The responder is a few dozen lines of HTTP/1.1 on a `std::net::TcpListener`
//! in one thread, written by hand on purpose: three fixed GET routes with
//! tiny bodies do not justify a web framework (hyper, axum) in every role's
//! dependency tree, and a plain thread keeps the endpoint alive even when the
//! role's async runtime is saturated or blocked, which is when you scrape it.
//! Connections are answered one at a time with short socket timeouts;
//! Prometheus and the kubelet probes are its only clients.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::error::{Result, TelemetryError};
use super::metrics::{describe_all, set_info, LAG_BUCKETS, REWARD_BUCKETS, SECONDS_BUCKETS};
use super::names::{LABEL_ROLE, LABEL_RUN, LABEL_WORKER, POLICY_LAG, REWARD};

const IO_TIMEOUT: Duration = Duration::from_secs(2);
const UPKEEP_EVERY: Duration = Duration::from_secs(5);
const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// Whether the process is ready for work; `/readyz` answers 200 only when set.
///
/// Cheap to clone; all clones share one flag. A role sets it once it is
/// connected to the bus and (actors) holds a policy snapshot.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// A flag that starts not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the process ready (`true`) or not ready (`false`, e.g. bus lost).
    pub fn set_ready(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    /// Whether `/readyz` currently answers 200.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Labels put on every series this process exports (Prometheus global labels).
#[derive(Debug, Clone, Default)]
pub struct ProcessLabels {
    /// `learner`, `actor`, `reward-worker`, or `all` when one process runs every role.
    pub role: String,
    /// The run id.
    pub run: String,
    /// This process among its role (pod name, `--worker-id`); empty to omit.
    pub worker: String,
}

/// The running endpoint; stops when dropped or on [`ServerHandle::shutdown`].
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl ServerHandle {
    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops serving and waits for the threads to end.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the thread sees the flag.
        let mut wake = self.local_addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, IO_TIMEOUT);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();
static INSTALLING: Mutex<()> = Mutex::new(());

/// Installs the process-wide Prometheus recorder (once; later calls return
/// the first handle and ignore their labels) and registers every metric's
/// description. `serve` calls it; call it directly to record without serving.
pub fn install_recorder(labels: &ProcessLabels) -> Result<&'static PrometheusHandle> {
    if let Some(handle) = RECORDER.get() {
        return Ok(handle);
    }
    // Two roles of one process may start their endpoints concurrently.
    let _installing = INSTALLING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(handle) = RECORDER.get() {
        return Ok(handle);
    }
    let recorder_err =
        |e: metrics_exporter_prometheus::BuildError| TelemetryError::Recorder(e.to_string());
    let mut builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .map_err(recorder_err)?
        .set_buckets_for_metric(Matcher::Full(POLICY_LAG.into()), LAG_BUCKETS)
        .map_err(recorder_err)?
        .set_buckets_for_metric(Matcher::Full(REWARD.into()), REWARD_BUCKETS)
        .map_err(recorder_err)?;
    for (key, value) in [
        (LABEL_ROLE, &labels.role),
        (LABEL_RUN, &labels.run),
        (LABEL_WORKER, &labels.worker),
    ] {
        if !value.is_empty() {
            builder = builder.add_global_label(key, value.clone());
        }
    }
    let handle = builder.install_recorder().map_err(recorder_err)?;
    let handle = RECORDER.get_or_init(|| handle);
    describe_all();
    set_info();
    Ok(handle)
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` with no global labels.
pub fn serve(addr: SocketAddr, readiness: Readiness) -> Result<ServerHandle> {
    serve_labeled(addr, readiness, &ProcessLabels::default())
}

/// Installs the recorder (see [`install_recorder`]) and serves on `addr`:
///
/// - `GET /metrics`: the Prometheus text exposition of every recorded metric;
/// - `GET /healthz`: 200 while the process runs (liveness);
/// - `GET /readyz`: 200 once `readiness.set_ready(true)`, else 503.
pub fn serve_labeled(
    addr: SocketAddr,
    readiness: Readiness,
    labels: &ProcessLabels,
) -> Result<ServerHandle> {
    let handle = install_recorder(labels)?;
    let listener =
        TcpListener::bind(addr).map_err(|source| TelemetryError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| TelemetryError::Bind { addr, source })?;
    let stop = Arc::new(AtomicBool::new(false));

    let accept_stop = Arc::clone(&stop);
    let accept = std::thread::Builder::new()
        .name("caprl-metrics-http".into())
        .spawn(move || {
            for stream in listener.incoming() {
                if accept_stop.load(Ordering::SeqCst) {
                    break;
                }
                match stream {
                    Ok(stream) => {
                        if let Err(e) = answer(stream, handle, &readiness) {
                            tracing::debug!(error = %e, "metrics endpoint: dropped a connection");
                        }
                    }
                    // Out of file descriptors and the like: back off instead of spinning.
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics endpoint: accept failed");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })
        .map_err(|e| TelemetryError::io("start the metrics thread for", addr.to_string(), e))?;

    // Histograms are drained into their buckets by upkeep; rendering also does
    // it, but without scrapes the pending samples would grow without bound.
    let upkeep_stop = Arc::clone(&stop);
    let upkeep = std::thread::Builder::new()
        .name("caprl-metrics-upkeep".into())
        .spawn(move || {
            let tick = Duration::from_millis(100);
            let mut waited = Duration::ZERO;
            while !upkeep_stop.load(Ordering::SeqCst) {
                std::thread::sleep(tick);
                waited += tick;
                if waited >= UPKEEP_EVERY {
                    handle.run_upkeep();
                    waited = Duration::ZERO;
                }
            }
        })
        .map_err(|e| {
            TelemetryError::io("start the metrics upkeep thread for", addr.to_string(), e)
        })?;

    tracing::info!(%local_addr, "serving /metrics, /healthz, /readyz");
    Ok(ServerHandle {
        local_addr,
        stop,
        threads: vec![accept, upkeep],
    })
}

/// Reads one request head and writes one response, then closes.
fn answer(
    stream: TcpStream,
    handle: &PrometheusHandle,
    readiness: &Readiness,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Drain the headers so the client is not reset before it reads the reply.
    let mut head = request_line.len();
    loop {
        let mut header = String::new();
        let n = reader.read_line(&mut header)?;
        head += n;
        if n == 0 || header == "\r\n" || header == "\n" || head > MAX_REQUEST_HEAD {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let path = target.split('?').next().unwrap_or("");

    let (status, content_type, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            handle.render(),
        ),
        ("GET" | "HEAD", "/healthz") => ("200 OK", "text/plain; charset=utf-8", "ok\n".to_owned()),
        ("GET" | "HEAD", "/readyz") if readiness.is_ready() => {
            ("200 OK", "text/plain; charset=utf-8", "ready\n".to_owned())
        }
        ("GET" | "HEAD", "/readyz") => (
            "503 Service Unavailable",
            "text/plain; charset=utf-8",
            "not ready\n".to_owned(),
        ),
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found; try /metrics, /healthz or /readyz\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET and HEAD are served\n".to_owned(),
        ),
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if method != "HEAD" {
        out.write_all(body.as_bytes())?;
    }
    out.flush()
}
