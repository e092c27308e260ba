//! A real `prometheus` server for the live monitoring test: started on a free port with a
//! config the test writes, queried through its HTTP API (`/api/v1/query`, `/api/v1/alerts`,
//! `/api/v1/rules`) with a few lines of HTTP/1.0 over a `TcpStream` (no HTTP client is in
//! the dependency tree, and these are small GETs on localhost).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `$PROMETHEUS`, else `prometheus` on PATH; None (after `ci::unavailable`) when neither runs.
/// Debian's `prometheus` package ships it (`scripts/ci/install-prometheus.sh` unpacks it).
pub fn binary() -> Option<PathBuf> {
    let candidate = match std::env::var_os("PROMETHEUS") {
        Some(path) => PathBuf::from(path),
        None => crate::ci::tool("prometheus")?,
    };
    let runs = Command::new(&candidate)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        crate::ci::unavailable(&format!(
            "`{} --version` does not run (set PROMETHEUS to a working prometheus server)",
            candidate.display()
        ));
        return None;
    }
    Some(candidate)
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free local port")
        .port()
}

/// A running prometheus server; killed on drop.
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    /// Starts `binary` with `config` (YAML) written to `dir/prometheus.yml`, its TSDB in
    /// `dir/data`, and waits (up to 60 s) until `/-/ready` answers 200.
    pub fn start(binary: &Path, dir: &Path, config: &str) -> Prometheus {
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write prometheus.yml");
        let log = dir.join("prometheus.log");
        let out = std::fs::File::create(&log).expect("prometheus log file");
        let err = out.try_clone().expect("prometheus log file");
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("prometheus starts");
        let mut prometheus = Prometheus { child, addr, log };
        let started = Instant::now();
        loop {
            if matches!(prometheus.get("/-/ready"), Ok((200, _))) {
                return prometheus;
            }
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                panic!("prometheus exited ({status}):\n{}", prometheus.log_text());
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "prometheus not ready after 60 s:\n{}",
                prometheus.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What the server has logged so far (for failure messages).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` (path and query string, already encoded): the status code and the body.
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        // HTTP/1.0: the server closes the connection after one response, unchunked.
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr)?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let response = String::from_utf8_lossy(&response);
        let bad = || std::io::Error::other(format!("not an HTTP response: {response:.200}"));
        let (head, body) = response.split_once("\r\n\r\n").ok_or_else(bad)?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(bad)?;
        Ok((status, body.to_string()))
    }

    /// `GET /api/v1/<endpoint>` and its `data` field; panics, with the body, unless the
    /// answer is HTTP 200 with `"status": "success"`.
    pub fn api(&self, endpoint: &str) -> Value {
        let (code, body) = self
            .get(&format!("/api/v1/{endpoint}"))
            .unwrap_or_else(|e| panic!("GET /api/v1/{endpoint}: {e}"));
        let json: Value = serde_json::from_str(&body).unwrap_or_else(|e| {
            panic!("/api/v1/{endpoint} answered {code}, not JSON ({e}): {body}")
        });
        assert!(
            code == 200 && json["status"] == "success",
            "/api/v1/{endpoint} answered {code}: {body}"
        );
        json["data"].clone()
    }

    /// The instant vector `expr` evaluates to now (`/api/v1/query`), one JSON object per series.
    pub fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api(&format!("query?query={}", percent_encode(expr)));
        assert_eq!(data["resultType"], "vector", "{expr}: {data}");
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The state (`pending`, `firing`) of every active alert named `name`.
    pub fn alert_states(&self, name: &str) -> Vec<String> {
        self.active_alerts()
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == name)
            .map(|a| a["state"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Every pending or firing alert (`/api/v1/alerts`).
    pub fn active_alerts(&self) -> Vec<Value> {
        self.api("alerts")["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `s` with everything but RFC 3986's unreserved characters percent-encoded (a query value).
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
