//! A private `nats-server` child process with JetStream, for tests and one-machine runs.
//!
//! Listens on 127.0.0.1 on a free port (never the system server's 4222), stores streams
//! in a temporary or given directory, and is killed when dropped. [`LocalNatsServer::restart`]
//! brings it back on the same port and store, as a broker restart would.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
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
    port: u16,
    store_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    // Holds the log (and, without a given store, the store); removed on drop.
    _scratch: tempfile::TempDir,
}

impl LocalNatsServer {
    /// Starts a server on a free port and waits until it accepts connections
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
        let port = free_port().map_err(|e| BusError::ServerStart {
            binary: opts.binary.display().to_string(),
            detail: format!("cannot find a free port on 127.0.0.1: {e}"),
        })?;
        let mut server = LocalNatsServer {
            log_path: scratch.path().join("nats-server.log"),
            opts,
            port,
            store_dir,
            child: None,
            _scratch: scratch,
        };
        server.spawn()?;
        Ok(server)
    }

    /// Starts a server with default options.
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
        std::fs::create_dir_all(&self.store_dir)
            .map_err(|e| start_err(format!("cannot create {}: {e}", self.store_dir.display())))?;
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
        cmd.arg("-js")
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .arg("-sd")
            .arg(&self.store_dir)
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
        let addr = (Ipv4Addr::LOCALHOST, self.port);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(self.not_ready(started, format!("exited with {status}")));
                }
            }
            // JetStream (and stream recovery) is up before the server accepts clients.
            if TcpStream::connect(addr).is_ok() {
                return Ok(());
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

fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}
