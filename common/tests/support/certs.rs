//! Certificates for the TLS tests, made with `openssl`: a CA, a server certificate for
//! 127.0.0.1 and a client certificate signed by it. Callers check first that `openssl` is
//! there (`ci::tool("openssl")`). Also a nats-server started with a config of the test's
//! (TLS, auth).
//!
//! Included with `#[path]` by the test files that run TLS servers.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};

/// A nats-server configured by `config` (written to `dir/server.conf`).
pub fn server_with_config(dir: &Path, config: &str) -> LocalNatsServer {
    let path = dir.join("server.conf");
    std::fs::write(&path, config).unwrap();
    LocalNatsServer::start(LocalNatsServerOptions {
        config_file: Some(path),
        ..LocalNatsServerOptions::default()
    })
    .expect("nats-server starts with the config")
}

fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(status.success(), "openssl {args:?} failed");
}

/// In `dir`: `ca.pem` (`ca.key`), `server.pem` (`server.key`) for 127.0.0.1 and `client.pem`
/// (`client.key`), both signed by the CA. Two calls on two directories give two unrelated CAs.
pub fn make_certs(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=caprl-test-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    for (name, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        (
            "client",
            "subjectAltName=DNS:caprl-client\nextendedKeyUsage=clientAuth\n",
        ),
    ] {
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        let (key, csr, pem, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        let subj = format!("/CN={name}");
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(dir, &req);
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "1",
                "-extfile",
                &extfile,
            ],
        );
    }
}

/// The nats-server `tls { }` block that serves `dir`'s server certificate (from [`make_certs`]);
/// with `verify`, clients must present a certificate signed by `dir`'s CA (mutual TLS).
pub fn server_tls_block(dir: &Path, verify: bool) -> String {
    let p = |f: &str| dir.join(f).display().to_string();
    format!(
        "tls {{ cert_file: {:?}, key_file: {:?}, ca_file: {:?}, verify: {verify} }}\n",
        p("server.pem"),
        p("server.key"),
        p("ca.pem")
    )
}
