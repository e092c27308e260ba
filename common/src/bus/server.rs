//! A private `nats-server` child process with JetStream, for tests and one-machine runs.
//!
//! Listens on 127.0.0.1 on a port the server picks itself (never the system server's 4222)
//! and reports in a ports file, so two servers started at once can never share a port; stores
//! streams in a temporary or given directory, and is killed when dropped.
//! [`LocalNatsServer::restart`] brings it back on the same port and store, as a broker
//! restart would.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{BusError, BusResult};

/// How to start a [`LocalNatsServer`].
#[derive(Debug, Clone)]
pub struct LocalNatsServerOptions {
    /// Server binary; default `nats-server` from `PATH`.
    pub binary: PathBuf,
    /// JetStream store directory; `None` = a temporary directory removed on drop.
    pub store_dir: Option<PathBuf>,
    /// Extra server config file (auth, TLS, limits); command-line flags win over it.
    pub config_file: Option<PathBuf>,
    /// How long to wait for the server to accept connections.
    pub ready_timeout: Duration,
}

impl Default for LocalNatsServerOptions {
    fn default() -> Self {
        LocalNatsServerOptions {
            binary: PathBuf::from("nats-server"),
            store_dir: None,
            config_file: None,
            ready_timeout: Duration::from_secs(10),
        }
    }
}

/// A running `nats-server -js` child; killed on drop.
#[derive(Debug)]
pub struct LocalNatsServer {
    opts: LocalNatsServerOptions,
    // 0 until the first start has read the port the server chose.
    port: u16,
    store_dir: PathBuf,
    log_path: PathBuf,
    ports_dir: PathBuf,
    child: Option<Child>,
    // Holds the log (and, without a given store, the store); removed on drop.
    _scratch: tempfile::TempDir,
}

impl LocalNatsServer {
    /// Starts a server on a port of its choosing and waits until it accepts connections
    /// (blocking, typically well under a second).
    pub fn start(opts: LocalNatsServerOptions) -> BusResult<LocalNatsServer> {
        let scratch = tempfile::Builder::new()
            .prefix("caprl-nats-")
            .tempdir()
            .map_err(|e| BusError::ServerStart {
                binary: opts.binary.display().to_string(),
                detail: format!("cannot create a temporary directory: {e}"),
            })?;
        let store_dir = opts
            .store_dir
            .clone()
            .unwrap_or_else(|| scratch.path().join("jetstream"));
        let mut server = LocalNatsServer {
            log_path: scratch.path().join("nats-server.log"),
            ports_dir: scratch.path().join("ports"),
            opts,
            port: 0,
            store_dir,
            child: None,
            _scratch: scratch,
        };
        server.spawn()?;
        Ok(server)
    }

    /// Starts a server with default options (feature `test-support`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn start_default() -> BusResult<LocalNatsServer> {
        LocalNatsServer::start(LocalNatsServerOptions::default())
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where JetStream keeps its data.
    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    /// Whether the child process is running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Kills the server (the store stays); [`restart`](Self::restart) brings it back.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Already exited is fine; we only need it gone.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if running and starts it again on the same port and store.
    pub fn restart(&mut self) -> BusResult<()> {
        self.stop();
        self.spawn()
    }

    fn spawn(&mut self) -> BusResult<()> {
        let binary = self.opts.binary.display().to_string();
        let start_err = |detail: String| BusError::ServerStart {
            binary: binary.clone(),
            detail,
        };
        for dir in [&self.store_dir, &self.ports_dir] {
            std::fs::create_dir_all(dir)
                .map_err(|e| start_err(format!("cannot create {}: {e}", dir.display())))?;
        }
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| start_err(format!("cannot open {}: {e}", self.log_path.display())))?;
        let log_err = log
            .try_clone()
            .map_err(|e| start_err(format!("cannot open {}: {e}", self.log_path.display())))?;
        let mut cmd = Command::new(&self.opts.binary);
        if let Some(config) = &self.opts.config_file {
            cmd.arg("-c").arg(config);
        }
        // -1: the server binds a free port itself (no window in which another process can
        // take a port we picked); a restart asks for the port clients already know.
        let port = match self.port {
            0 => "-1".to_string(),
            known => known.to_string(),
        };
        cmd.arg("-js")
            .args(["-a", "127.0.0.1", "-p", &port])
            .arg("-sd")
            .arg(&self.store_dir)
            .arg("--ports_file_dir")
            .arg(&self.ports_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        let child = cmd.spawn().map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                BusError::ServerMissing {
                    binary: binary.clone(),
                }
            } else {
                start_err(e.to_string())
            }
        })?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> BusResult<()> {
        let started = Instant::now();
        loop {
            let Some(child) = self.child.as_mut() else {
                return Err(self.not_ready(started, "not running".to_string()));
            };
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(self.not_ready(started, format!("exited with {status}")));
            }
            // The ports file appears once this child listens; only then is a connection
            // known to reach this server and not another one on a recycled port.
            if let Some(port) = read_ports_file(&self.ports_dir, child.id()) {
                if self.port != 0 && port != self.port {
                    self.stop();
                    return Err(self.not_ready(
                        started,
                        format!("listening on {port} instead of {}", self.port),
                    ));
                }
                self.port = port;
                // JetStream (and stream recovery) is up before the server accepts clients.
                if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
                    return Ok(());
                }
            }
            if started.elapsed() > self.opts.ready_timeout {
                self.stop();
                return Err(self.not_ready(started, "no connection accepted".to_string()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn not_ready(&self, started: Instant, what: String) -> BusError {
        BusError::ServerNotReady {
            port: self.port,
            waited: started.elapsed(),
            detail: format!("{what}; log tail:\n{}", self.log_tail()),
        }
    }

    /// The last lines the server wrote.
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(&self.log_path) {
            let _ = file.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for LocalNatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The client port from `<name>_<pid>.ports` (`{"nats":["nats://127.0.0.1:PORT"]}`), once
/// the server with that pid has written it in full.
fn read_ports_file(dir: &Path, pid: u32) -> Option<u16> {
    let suffix = format!("_{pid}.ports");
    let entry = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(&suffix))?;
    let text = std::fs::read_to_string(entry.path()).ok()?;
    let ports: serde_json::Value = serde_json::from_str(&text).ok()?;
    let url = ports.get("nats")?.get(0)?.as_str()?;
    url.rsplit(':').next()?.parse().ok()
}
