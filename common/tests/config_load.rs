//! Loading a run config from files: defaults, round trips, and errors that
//! point at the file, line and column.

use std::io::Write;
use std::path::{Path, PathBuf};

use caprl_common::config::{
    ConfigError, DeviceSpec, Dtype, ObjectiveName, RunConfig, DEFAULT_TOML,
};

fn write_config(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    f.write_all(text.as_bytes()).expect("write temp file");
    f
}

fn load_text(text: &str) -> (Result<RunConfig, ConfigError>, tempfile::NamedTempFile) {
    let f = write_config(text);
    (RunConfig::load(Some(f.path()), &[]), f)
}

#[test]
fn default_file_parses_to_exactly_the_default_config() {
    let (loaded, _f) = load_text(DEFAULT_TOML);
    assert_eq!(loaded.expect("default file loads"), RunConfig::default());
}

#[test]
fn no_file_and_no_overrides_gives_the_default_config() {
    assert_eq!(
        RunConfig::load(None, &[]).expect("loads"),
        RunConfig::default()
    );
}

#[test]
fn empty_file_gives_the_default_config() {
    let (loaded, _f) = load_text("");
    assert_eq!(loaded.expect("loads"), RunConfig::default());
}

#[test]
fn canonical_toml_round_trips_to_an_equal_config() {
    let mut config = RunConfig {
        seed: 7,
        device: DeviceSpec::Cuda(2),
        dtype: Dtype::Bf16,
        ..RunConfig::default()
    };
    config.train.objective = ObjectiveName::WtfRl;
    config.model.dropout = 0.35;
    config.optim.lr = 3e-4;
    config.reward.spec = "clip=0.94,disc=0.06".parse().expect("spec");
    config.clip.reward = "runs/clip/reward.safetensors".to_string();
    config.nats.user = "caprl".to_string();
    config.nats.password = "secret".to_string();
    let text = config.to_toml_string();
    let back = RunConfig::from_toml_str(&text, "<round trip>").expect("parses back");
    assert_eq!(back, config);
    assert_eq!(back.to_toml_string(), text, "canonical form is stable");
}

#[test]
fn canonical_toml_writes_floats_as_written() {
    let text = RunConfig::default().to_toml_string();
    assert!(text.contains("dropout = 0.2\n"), "{text}");
    assert!(text.contains("spec = \"cider=1\"\n"), "{text}");
}

#[test]
fn hash_is_hex_sha256_and_changes_with_any_key() {
    let a = RunConfig::default();
    let mut b = a.clone();
    assert_eq!(a.hash(), b.hash());
    assert_eq!(a.hash().len(), 64);
    assert!(a.hash().bytes().all(|c| c.is_ascii_hexdigit()));
    b.checkpoint.keep = 4;
    assert_ne!(a.hash(), b.hash());
}

#[test]
fn checkpoint_dir_defaults_to_run_dir_checkpoints() {
    let mut config = RunConfig {
        run_dir: "runs/x".to_string(),
        ..RunConfig::default()
    };
    assert_eq!(
        config.checkpoint_dir(),
        Path::new("runs/x").join("checkpoints")
    );
    config.checkpoint.dir = "/ckpt".to_string();
    assert_eq!(config.checkpoint_dir(), PathBuf::from("/ckpt"));
}

#[test]
fn redacted_hides_only_non_empty_secrets() {
    let mut config = RunConfig::default();
    config.nats.password = "hunter2".to_string();
    let shown = config.redacted().to_toml_string();
    assert!(!shown.contains("hunter2"));
    assert!(shown.contains("password = \"<redacted>\""));
    assert!(shown.contains("token = \"\""));
}

#[test]
fn partial_file_keeps_defaults_for_missing_keys() {
    let (loaded, _f) = load_text("device = \"cuda:1\"\n[model]\nhidden = 1024\n");
    let config = loaded.expect("loads");
    assert_eq!(config.device, DeviceSpec::Cuda(1));
    assert_eq!(config.model.hidden, 1024);
    assert_eq!(config.model.embed, RunConfig::default().model.embed);
    assert_eq!(config.train, RunConfig::default().train);
}

#[test]
fn malformed_toml_names_file_line_and_column() {
    let (loaded, f) = load_text("seed = 1\n\n[model\nhidden = 3\n");
    let err = loaded.expect_err("malformed");
    let msg = err.to_string();
    let file = f.path().display().to_string();
    assert!(msg.contains(&format!("{file}:3:")), "{msg}");
    assert!(matches!(err, ConfigError::Parse { line: 3, .. }), "{err:?}");
}

#[test]
fn wrong_type_in_file_names_line_column_and_expected_type() {
    let (loaded, f) = load_text("[model]\nlayers = 1\nhidden = \"big\"\n");
    let err = loaded.expect_err("wrong type");
    match &err {
        ConfigError::Parse {
            file,
            line,
            column,
            message,
            ..
        } => {
            assert_eq!(file, &f.path().display().to_string());
            assert_eq!((*line, *column), (3, 10));
            assert!(message.contains("expected usize"), "{message}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn unknown_key_in_file_is_refused_with_its_line_and_the_allowed_keys() {
    let (loaded, _f) = load_text("[train]\nobjective = \"sle\"\nsampels = 5\n");
    let err = loaded.expect_err("unknown key");
    let msg = err.to_string();
    assert!(msg.contains("sampels"), "{msg}");
    assert!(msg.contains("samples"), "lists allowed keys: {msg}");
    assert!(matches!(err, ConfigError::Parse { line: 3, .. }), "{err:?}");
}

#[test]
fn unknown_section_in_file_is_refused() {
    let (loaded, _f) = load_text("[modle]\nhidden = 3\n");
    let msg = loaded.expect_err("unknown section").to_string();
    assert!(msg.contains("modle") && msg.contains("model"), "{msg}");
}

#[test]
fn unknown_enum_value_in_file_lists_the_variants() {
    let (loaded, _f) = load_text("[train]\nobjective = \"ppo\"\n");
    let msg = loaded.expect_err("unknown variant").to_string();
    assert!(
        msg.contains("ppo") && msg.contains("mc-pg") && msg.contains("wtf-rl"),
        "{msg}"
    );
}

#[test]
fn bad_device_in_file_says_what_is_expected() {
    let (loaded, _f) = load_text("device = \"gpu0\"\n");
    let msg = loaded.expect_err("bad device").to_string();
    assert!(msg.contains(":1:") && msg.contains("cuda:N"), "{msg}");
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("absent.toml");
    let err = RunConfig::load(Some(&path), &[]).expect_err("missing");
    assert!(matches!(err, ConfigError::Io { .. }));
    assert!(err.to_string().contains("absent.toml"));
}

#[test]
fn out_of_range_value_in_file_is_refused_after_parsing() {
    let (loaded, _f) = load_text("[data]\nmax_len = 65\n");
    let msg = loaded.expect_err("out of range").to_string();
    assert!(
        msg.contains("data.max_len") && msg.contains("65") && msg.contains("1..=64"),
        "{msg}"
    );
}

/// Every config the repository ships under `configs/` loads and validates as it is.
#[test]
fn every_shipped_config_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("configs/") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(e) = RunConfig::load(Some(&path), &[]) {
                panic!("{}: {e}", path.display());
            }
            n += 1;
        }
    }
    assert!(n >= 9, "only {n} configs found in {}", dir.display());
}

#[test]
fn the_model_and_sampling_keys_are_refused_by_their_owners_rules() {
    for (set, key) in [
        ("model.enc_layers=25", "model.enc_layers"),
        ("model.d_model=130", "model.d_model"),
        ("model.dropout=1.0", "model.dropout"),
        ("decode.top_p=1.5", "decode.top_p"),
        ("decode.temperature=0.0", "decode.temperature"),
    ] {
        let err = RunConfig::load(None, &[set.to_string()]).expect_err(set);
        match &err {
            ConfigError::OutOfRange { key: k, .. } => assert_eq!(k, key, "{err}"),
            other => panic!("{set}: expected OutOfRange, got {other}"),
        }
    }
    let err = RunConfig::load(None, &["model.heads=3".into(), "model.d_model=128".into()])
        .expect_err("d_model 128 is no multiple of 3 heads")
        .to_string();
    assert!(err.contains("try 126 or 129"), "{err}");
}

/// The config's `device` key and the model crate's device parser have one grammar: no sign, no
/// blank index.
#[test]
fn device_key_and_device_parser_refuse_the_same_strings() {
    for bad in ["cuda:+1", "cuda:", "cuda:-1", "gpu"] {
        assert!(caprl_model::model::parse_device(bad).is_err(), "{bad}");
        assert!(
            bad.parse::<caprl_common::config::DeviceSpec>().is_err(),
            "{bad}"
        );
    }
    for good in ["cpu", "cuda:0", "cuda:3"] {
        assert!(
            good.parse::<caprl_common::config::DeviceSpec>().is_ok(),
            "{good}"
        );
    }
}
