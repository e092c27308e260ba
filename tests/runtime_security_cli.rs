//! NATS security through the CLI: each test runs its own nats-server with TLS, mutual TLS, nkey
//! or operator-mode (JWT / `.creds`) auth, and a tiny `caprl local --nats-url ...` run with the
//! `[nats]` settings in a `caprl.toml` (`--config`) finishes and writes its final weights. A
//! wrong certificate, key, seed or creds file makes `caprl local` and a role command exit
//! non-zero within seconds, naming the problem, with nothing started and no run directory made.

#[path = "../common/tests/support/certs.rs"]
mod certs;
#[path = "../common/tests/support/ci.rs"]
mod ci;
#[path = "support/nats_jwt.rs"]
mod nats_jwt;
mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use caprl_common::bus::LocalNatsServer;
use support::{caprl, final_weights, sets, synth, text};

/// How long a refused connection may take to fail through the CLI (the client's connect
/// timeout is 5 s; a refusal is much quicker).
const FAILS_WITHIN: Duration = Duration::from_secs(15);

/// `dir/<name>`: a `caprl.toml` whose `[nats]` table has these keys (string values).
fn caprl_toml(dir: &Path, name: &str, nats: &[(&str, &str)]) -> PathBuf {
    let mut toml = String::from("[nats]\n");
    for (key, value) in nats {
        toml.push_str(&format!("{key} = {value:?}\n"));
    }
    let path = dir.join(name);
    std::fs::write(&path, toml).unwrap();
    path
}

/// `caprl local --nats-url url --config toml` with one actor and one reward worker on the tiny
/// run of [`sets`] (one XE and one RL epoch) into `run`; its output and how long it took.
fn local(url: &str, toml: &Path, data: &Path, run: &Path) -> (Output, Duration) {
    let started = Instant::now();
    let out = caprl()
        .args(["local", "--actors", "1", "--reward-workers", "1"])
        .args(["--nats-url", url, "--config"])
        .arg(toml)
        .args(sets(data, run, 1, &[]))
        .output()
        .expect("caprl runs");
    (out, started.elapsed())
}

/// A tiny run through `caprl local` finishes with the settings of `toml` and writes weights.
fn runs_to_the_end(url: &str, toml: &Path, data: &Path, run: &Path) {
    let (out, _) = local(url, toml, data, run);
    assert!(out.status.success(), "caprl local: {}", text(&out));
    assert!(
        !final_weights(run).is_empty(),
        "no final weights: {}",
        text(&out)
    );
}

/// `caprl local` with the settings of `toml` fails within [`FAILS_WITHIN`], before any role
/// starts (no run directory), with an error containing every one of `says`.
fn local_fails_fast(url: &str, toml: &Path, data: &Path, says: &[&str]) {
    let run = toml.with_extension("run");
    let (out, took) = local(url, toml, data, &run);
    assert!(
        !out.status.success(),
        "caprl local succeeded: {}",
        text(&out)
    );
    assert!(took < FAILS_WITHIN, "took {took:?}: {}", text(&out));
    expect_error(&out, says);
    let all = text(&out);
    assert!(
        !all.contains("[learner]") && !all.contains("started (pid"),
        "roles were started: {all}"
    );
    assert!(!run.exists(), "the run directory was made: {}", text(&out));
}

/// `caprl actor` with the settings of `toml` fails within [`FAILS_WITHIN`], saying `says`.
fn actor_fails_fast(url: &str, toml: &Path, data: &Path, says: &[&str]) {
    let started = Instant::now();
    let out = caprl()
        .args(["actor", "--id", "a1", "--nats-url", url, "--config"])
        .arg(toml)
        .args(sets(data, &toml.with_extension("run"), 1, &[]))
        .output()
        .expect("caprl runs");
    let took = started.elapsed();
    assert!(
        !out.status.success(),
        "caprl actor succeeded: {}",
        text(&out)
    );
    assert!(took < FAILS_WITHIN, "took {took:?}: {}", text(&out));
    expect_error(&out, says);
}

fn expect_error(out: &Output, says: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    for s in says {
        assert!(
            err.contains(s),
            "the error does not say {s:?}: {}",
            text(out)
        );
    }
}

/// The server's port, as a `tls://` URL (the scheme that asks for TLS).
fn tls_url(server: &LocalNatsServer) -> String {
    format!("tls://127.0.0.1:{}", server.port())
}

#[test]
fn server_tls_verified_with_the_ca_from_caprl_toml() {
    if ci::tool("openssl").is_none() {
        return;
    }
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = d.join("pki");
    std::fs::create_dir(&pki).unwrap();
    certs::make_certs(&pki);
    let server = certs::server_with_config(d, &certs::server_tls_block(&pki, false));
    let data = synth(d);
    let ca = pki.join("ca.pem").display().to_string();
    let toml = caprl_toml(d, "caprl.toml", &[("tls_ca", &ca)]);

    runs_to_the_end(&tls_url(&server), &toml, &data, &d.join("run"));

    // `nats://` with TLS settings: the client upgrades, since the server requires TLS.
    let out = caprl()
        .args(["status", "--nats-url", &server.url(), "--config"])
        .arg(&toml)
        .output()
        .unwrap();
    assert!(out.status.success(), "nats:// with tls_ca: {}", text(&out));

    // Without the CA the server's certificate is not trusted: a TLS error naming the keys.
    let no_ca = caprl_toml(d, "no-ca.toml", &[]);
    for url in [server.url(), tls_url(&server)] {
        local_fails_fast(&url, &no_ca, &data, &["TLS", "tls_ca"]);
    }
}

#[test]
fn mutual_tls_from_caprl_toml_and_what_a_wrong_certificate_or_key_says() {
    if ci::tool("openssl").is_none() {
        return;
    }
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (pki, other) = (d.join("pki"), d.join("other-ca"));
    for p in [&pki, &other] {
        std::fs::create_dir(p).unwrap();
        certs::make_certs(p);
    }
    let server = certs::server_with_config(d, &certs::server_tls_block(&pki, true));
    let data = synth(d);
    let file = |dir: &Path, f: &str| dir.join(f).display().to_string();
    let ca = file(&pki, "ca.pem");
    let toml = caprl_toml(
        d,
        "caprl.toml",
        &[
            ("tls_ca", &ca),
            ("tls_cert", &file(&pki, "client.pem")),
            ("tls_key", &file(&pki, "client.key")),
        ],
    );
    let url = tls_url(&server);
    runs_to_the_end(&url, &toml, &data, &d.join("run"));

    // A client certificate signed by another CA: the server refuses the handshake.
    let foreign = caprl_toml(
        d,
        "foreign.toml",
        &[
            ("tls_ca", &ca),
            ("tls_cert", &file(&other, "client.pem")),
            ("tls_key", &file(&other, "client.key")),
        ],
    );
    local_fails_fast(&url, &foreign, &data, &["TLS", "tls_cert"]);
    actor_fails_fast(&url, &foreign, &data, &["TLS", "tls_cert"]);

    // No client certificate at all.
    let ca_only = caprl_toml(d, "ca-only.toml", &[("tls_ca", &ca)]);
    local_fails_fast(&url, &ca_only, &data, &["TLS", "tls_cert"]);

    // The key of another certificate, and a key file that is no key.
    let garbage = d.join("garbage.key");
    std::fs::write(&garbage, "this is not a private key\n").unwrap();
    for (name, key) in [
        ("other-key.toml", file(&other, "client.key")),
        ("garbage-key.toml", garbage.display().to_string()),
    ] {
        let wrong_key = caprl_toml(
            d,
            name,
            &[
                ("tls_ca", &ca),
                ("tls_cert", &file(&pki, "client.pem")),
                ("tls_key", &key),
            ],
        );
        local_fails_fast(&url, &wrong_key, &data, &["tls_key"]);
    }

    // A certificate file that does not exist.
    let missing = d.join("nowhere.pem").display().to_string();
    let missing_cert = caprl_toml(
        d,
        "missing-cert.toml",
        &[
            ("tls_ca", &ca),
            ("tls_cert", &missing),
            ("tls_key", &file(&pki, "client.key")),
        ],
    );
    local_fails_fast(&url, &missing_cert, &data, &["nats.tls_cert", &missing]);
    actor_fails_fast(&url, &missing_cert, &data, &["nats.tls_cert", &missing]);
}

#[test]
fn nkey_seed_from_caprl_toml_and_a_wrong_seed() {
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let user = nkeys::KeyPair::new_user();
    let server = certs::server_with_config(
        d,
        &format!(
            "authorization {{ users = [ {{ nkey: {:?} }} ] }}\n",
            user.public_key()
        ),
    );
    let data = synth(d);
    let seed = user.seed().unwrap();
    let toml = caprl_toml(d, "caprl.toml", &[("nkey_seed", &seed)]);
    runs_to_the_end(&server.url(), &toml, &data, &d.join("run"));

    // Another user's seed: the server rejects it.
    let stranger = nkeys::KeyPair::new_user().seed().unwrap();
    let wrong = caprl_toml(d, "wrong.toml", &[("nkey_seed", &stranger)]);
    let says = ["rejected the credentials", "nkey_seed"];
    local_fails_fast(&server.url(), &wrong, &data, &says);
    actor_fails_fast(&server.url(), &wrong, &data, &says);
    // Not a seed at all.
    let garbage = caprl_toml(d, "garbage.toml", &[("nkey_seed", "SUnot-a-seed")]);
    local_fails_fast(&server.url(), &garbage, &data, &["nkey_seed"]);
}

#[test]
fn creds_file_from_caprl_toml_in_operator_mode() {
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let operator = nats_jwt::Operator::new();
    let server = certs::server_with_config(d, &operator.server_config());
    let data = synth(d);
    let creds = d.join("user.creds");
    std::fs::write(&creds, operator.user_creds()).unwrap();
    let toml = caprl_toml(
        d,
        "caprl.toml",
        &[("creds_file", &creds.display().to_string())],
    );
    runs_to_the_end(&server.url(), &toml, &data, &d.join("run"));

    // A user of an account another operator signed: not trusted by this server.
    let foreign = d.join("foreign.creds");
    std::fs::write(&foreign, nats_jwt::Operator::new().user_creds()).unwrap();
    let wrong = caprl_toml(
        d,
        "foreign.toml",
        &[("creds_file", &foreign.display().to_string())],
    );
    let says = ["rejected the credentials", "creds_file"];
    local_fails_fast(&server.url(), &wrong, &data, &says);
    actor_fails_fast(&server.url(), &wrong, &data, &says);
    // A creds file that is not there.
    let missing = d.join("missing.creds").display().to_string();
    let absent = caprl_toml(d, "absent.toml", &[("creds_file", &missing)]);
    local_fails_fast(&server.url(), &absent, &data, &["creds_file", &missing]);
}
