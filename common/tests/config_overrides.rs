//! `--set` overrides: every key can be set, values are read as TOML literals
//! or strings, and mistakes name the key.

use std::io::Write;

use caprl_common::config::{ConfigError, DeviceSpec, ModelKind, ObjectiveName, RunConfig};

fn sets(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn load(items: &[&str]) -> Result<RunConfig, ConfigError> {
    RunConfig::load(None, &sets(items))
}

/// `key=value` for every key of the default config, value written as TOML.
fn every_default_assignment() -> Vec<String> {
    let tree = toml::Table::try_from(RunConfig::default()).expect("default serializes");
    let mut out = Vec::new();
    for (key, value) in &tree {
        match value {
            toml::Value::Table(section) => {
                for (name, v) in section {
                    out.push(format!("{key}.{name}={v}"));
                }
            }
            v => out.push(format!("{key}={v}")),
        }
    }
    out
}

#[test]
fn every_key_can_be_overridden_with_its_default_value() {
    let all = every_default_assignment();
    assert!(all.len() > 70, "expected every key, got {}", all.len());
    for assignment in &all {
        let config = RunConfig::load(None, std::slice::from_ref(assignment))
            .unwrap_or_else(|e| panic!("{assignment}: {e}"));
        assert_eq!(config, RunConfig::default(), "{assignment}");
    }
    assert_eq!(
        RunConfig::load(None, &all).expect("all at once"),
        RunConfig::default()
    );
}

#[test]
fn top_level_keys_are_overridden() {
    let config = load(&[
        "seed=9",
        "device=cuda:1",
        "dtype=bf16",
        "run_dir=runs/exp-1",
    ])
    .expect("loads");
    assert_eq!(config.seed, 9);
    assert_eq!(config.device, DeviceSpec::Cuda(1));
    assert_eq!(config.dtype, caprl_common::config::Dtype::Bf16);
    assert_eq!(config.run_dir, "runs/exp-1");
}

#[test]
fn section_keys_of_each_type_are_overridden() {
    let config = load(&[
        "model.hidden=1024",
        "model.kind=att",
        "model.dropout=0.5",
        "decode.length_norm=true",
        "train.objective=mc-pg",
        "optim.lr=1e-3",
        "optim.grad_clip=0",
        "nats.url=nats://10.0.0.1:4222",
        "checkpoint.dir=/tmp/ck",
    ])
    .expect("loads");
    assert_eq!(config.model.hidden, 1024);
    assert_eq!(config.model.kind, ModelKind::Att);
    assert_eq!(config.model.dropout, 0.5);
    assert!(config.decode.length_norm);
    assert_eq!(config.train.objective, ObjectiveName::McPg);
    assert_eq!(config.optim.lr, 1e-3);
    assert_eq!(config.optim.grad_clip, 0.0);
    assert_eq!(config.nats.url, "nats://10.0.0.1:4222");
    assert_eq!(config.checkpoint.dir, "/tmp/ck");
}

#[test]
fn reward_spec_with_equals_signs_needs_no_quoting() {
    let config = load(&["reward.spec=cider=1,bleu4=0.5"]).expect("loads");
    assert_eq!(config.reward.spec.to_string(), "cider=1,bleu4=0.5");
    assert_eq!(config.reward.spec.terms().len(), 2);
}

#[test]
fn string_keys_take_numeric_looking_values_as_strings() {
    let config = load(&[
        "nats.user=7",
        "nats.password=12345",
        "runtime.run_id=\"exp-2\"",
    ])
    .expect("loads");
    assert_eq!(config.nats.user, "7");
    assert_eq!(config.nats.password, "12345");
    assert_eq!(config.runtime.run_id, "exp-2");
}

#[test]
fn later_overrides_win() {
    let config = load(&["model.hidden=100", "model.hidden=200"]).expect("loads");
    assert_eq!(config.model.hidden, 200);
}

#[test]
fn overrides_apply_on_top_of_the_file() {
    let mut f = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp");
    f.write_all(b"[model]\nhidden = 128\nembed = 64\n")
        .expect("write");
    let config = RunConfig::load(
        Some(f.path()),
        &sets(&["model.hidden=256", "train.samples=7"]),
    )
    .expect("loads");
    assert_eq!(config.model.hidden, 256);
    assert_eq!(config.model.embed, 64);
    assert_eq!(config.train.samples, 7);
}

#[test]
fn unknown_key_in_section_names_it_and_lists_the_section_keys() {
    let err = load(&["model.hiden=3"]).expect_err("unknown key");
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::UnknownKey { .. }));
    assert!(msg.contains("model.hiden"), "{msg}");
    for allowed in ["hidden", "embed", "att_hidden", "dropout"] {
        assert!(msg.contains(allowed), "{msg} lacks {allowed}");
    }
}

#[test]
fn unknown_section_names_it_and_lists_the_sections() {
    let msg = load(&["modle.hidden=3"])
        .expect_err("unknown section")
        .to_string();
    assert!(msg.contains("modle.hidden"), "{msg}");
    for section in ["data", "model", "train", "nats", "checkpoint"] {
        assert!(msg.contains(section), "{msg} lacks {section}");
    }
}

#[test]
fn unknown_top_level_key_lists_top_level_keys_and_sections() {
    let msg = load(&["hidden=3"]).expect_err("unknown").to_string();
    assert!(
        msg.contains("`hidden`") && msg.contains("seed") && msg.contains("model"),
        "{msg}"
    );
}

#[test]
fn a_section_cannot_be_set_as_a_value() {
    let msg = load(&["model=3"])
        .expect_err("section as value")
        .to_string();
    assert!(msg.contains("`model`"), "{msg}");
}

#[test]
fn too_deep_key_is_unknown() {
    let err = load(&["model.hidden.x=3"]).expect_err("too deep");
    assert!(matches!(err, ConfigError::UnknownKey { .. }), "{err:?}");
}

#[test]
fn override_without_equals_sign_is_refused() {
    for arg in ["model.hidden", "=3", ""] {
        let err = load(&[arg]).expect_err("no equals");
        assert!(
            matches!(err, ConfigError::BadSetArg { .. }),
            "{arg}: {err:?}"
        );
        assert!(err.to_string().contains("KEY=VALUE"));
    }
}

#[test]
fn wrong_type_names_the_key_the_value_and_the_range() {
    let err = load(&["model.hidden=-3"]).expect_err("negative");
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::BadOverride { .. }), "{err:?}");
    assert!(
        msg.contains("model.hidden") && msg.contains("-3") && msg.contains("1..=8192"),
        "{msg}"
    );

    let msg = load(&["train.batch_size=many"])
        .expect_err("text")
        .to_string();
    assert!(
        msg.contains("train.batch_size") && msg.contains("many"),
        "{msg}"
    );

    let msg = load(&["train.objective=ppo"])
        .expect_err("variant")
        .to_string();
    assert!(
        msg.contains("train.objective") && msg.contains("scst"),
        "{msg}"
    );

    let msg = load(&["device=tpu"]).expect_err("device").to_string();
    assert!(msg.contains("device") && msg.contains("cuda:N"), "{msg}");
}

#[test]
fn overrides_apply_on_top_of_a_loaded_config_and_are_validated() {
    let base = load(&["model.hidden=1024", "decode.beam=4"]).expect("loads");
    let changed = base
        .with_sets(&[
            "decode.top_p=0.9".to_string(),
            "decode.beam_groups=2".to_string(),
        ])
        .expect("applies");
    assert_eq!(changed.model.hidden, 1024, "keys not set keep their value");
    assert_eq!(changed.decode.top_p, 0.9);
    assert_eq!(changed.decode.beam_groups, 2);
    let err = base
        .with_sets(&["decode.beam_groups=3".to_string()])
        .expect_err("3 does not divide beam = 4");
    assert!(err.to_string().contains("decode.beam_groups"), "{err}");
}
