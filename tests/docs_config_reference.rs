//! docs/configuration.md is the rendering of `caprl config default` (the commented
//! `common/src/config/default.toml` every run starts from): one table per section, each key
//! with its default and its comment. The page cannot drift from the config: this test fails
//! when it is not the rendering, and `CAPRL_BLESS=1` writes it anew.

mod support;

use std::path::Path;

use support::{caprl, text};

const PAGE: &str = "docs/configuration.md";

/// The Markdown page of the commented default config (`config::default_keys`).
fn render() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         Every key of a caprl run config, with its default and what it does. A key left out of a \
         config file takes this default; `--set SECTION.KEY=VALUE` overrides one key on the \
         command line (strings in quotes: `--set model.kind=\\\"att\\\"`); an unknown key or a \
         value out of range is an error that names the key and what is allowed.\n\n\
         This page is generated from `caprl config default` (`common/src/config/default.toml`) \
         by `tests/docs_config_reference.rs`, which fails when it is stale; \
         `CAPRL_BLESS=1 cargo nextest run -E 'binary(docs_config_reference)'` writes it anew.\n",
    );
    let mut section = None;
    for k in caprl_common::config::default_keys() {
        if section != Some(k.section) {
            section = Some(k.section);
            match k.section {
                "" => out.push_str("\n## Top-level keys\n\n"),
                name => out.push_str(&format!("\n## `[{name}]`\n\n")),
            }
            out.push_str("| key | default | meaning |\n|---|---|---|\n");
        }
        let cell = |s: &str| s.replace('|', "\\|");
        out.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            k.key,
            cell(k.value),
            cell(k.comment)
        ));
    }
    out
}

#[test]
fn the_configuration_page_is_the_rendering_of_the_default_config() {
    // What `caprl config default` prints is this file.
    let out = caprl().args(["config", "default"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        caprl_common::config::DEFAULT_TOML
    );
    let page = render();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    if std::env::var_os("CAPRL_BLESS").is_some() {
        std::fs::write(&path, &page).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == page,
        "{PAGE} is not the rendering of `caprl config default`: run \
         CAPRL_BLESS=1 cargo nextest run -E 'binary(docs_config_reference)'"
    );
}
