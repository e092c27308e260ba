//! Validation: each out-of-range value is refused with its key, its value and
//! what is allowed; reward specs parse or say why not.

#[path = "../../tests/support/refusals.rs"]
mod refusals;

use caprl_common::config::{ConfigError, RewardSpec, RunConfig};
use refusals::assert_refused_naming_key_value_and_range;

fn refused(set: &str) -> String {
    match RunConfig::load(None, &[set.to_string()]) {
        Ok(_) => panic!("{set} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn validation_errors_are_typed() {
    let err = RunConfig::load(None, &["model.layers=5".to_string()]).expect_err("refused");
    match err {
        ConfigError::OutOfRange {
            key,
            value,
            allowed,
        } => {
            assert_eq!(key, "model.layers");
            assert_eq!(value, "5");
            assert_eq!(allowed, "1 or 2");
        }
        other => panic!("expected OutOfRange, got {other:?}"),
    }
}

/// The loader's own rules (the learner's side's are held in `caprl-learner`'s `config_ranges`).
#[test]
fn the_loaders_rules_name_key_value_and_range() {
    let cases = [
        ("data.max_len=0", "0", "1..=64"),
        ("data.max_len=65", "65", "1..=64"),
        ("data.min_count=0", "0", ">= 1"),
        ("data.dir=\"\"", "\"\"", "a non-empty path"),
        ("model.layers=3", "3", "1 or 2"),
        ("model.embed=5000", "5000", "1..=4096"),
        ("model.hidden=0", "0", "1..=8192"),
        ("model.dropout=1.0", "1", "[0, 1)"),
        ("model.dropout=-0.1", "-0.1", "[0, 1)"),
        ("model.heads=0", "0", "1..=64"),
        ("model.enc_layers=25", "25", "0..=24"),
        ("model.dec_layers=25", "25", "1..=24"),
        ("model.d_ff=0", "0", "1..=16384"),
        (
            "model.d_model=130",
            "130 with heads = 4",
            "a multiple of model.heads",
        ),
        ("optim.noam_factor=0", "0", "a finite number > 0"),
        ("optim.lr=0", "0", "> 0"),
        ("optim.rl_lr=-1e-5", "-0.00001", "> 0"),
        ("optim.beta1=1", "1", "[0, 1)"),
        ("optim.beta2=1.2", "1.2", "[0, 1)"),
        ("optim.eps=0", "0", "> 0"),
        ("optim.decay_rate=0", "0", "(0, 1]"),
        ("optim.decay_every=0", "0", ">= 1"),
        ("decode.temperature=0", "0", "> 0"),
        ("decode.temperature=nan", "NaN", "> 0"),
        ("decode.beam=0", "0", ">= 1"),
        ("decode.top_p=0", "0", "(0, 1]"),
        ("decode.top_p=1.5", "1.5", "(0, 1]"),
        ("decode.beam_groups=0", "0", ">= 1"),
        (
            "decode.beam_groups=2",
            "2 with beam = 3",
            "a divisor of decode.beam",
        ),
        ("decode.diversity_lambda=-1", "-1", ">= 0"),
        ("decode.lookahead_lambda=1.5", "1.5", "[0, 1]"),
        ("runtime.run_id=Exp_1", "\"Exp_1\"", "[a-z0-9-]"),
        ("runtime.ack_wait_secs=0", "0", "1..=604800"),
        // Beyond what the bus takes: refused when loading, not when connecting.
        ("runtime.ack_wait_secs=1000000", "1000000", "1..=604800"),
        ("nats.max_message_bytes=100", "100", "1024..=67108864"),
        ("nats.replicas=6", "6", "1..=5"),
        ("nats.connect_timeout_secs=0", "0", "1..=604800"),
        ("nats.url=\"\"", "\"\"", "a non-empty server URL"),
    ];
    assert_refused_naming_key_value_and_range(&cases, refused);
}

/// `[nats]`'s credentials: one way to authenticate, and a password only with its user; the
/// same rules refuse a connect ([`caprl_common::bus::NatsConfig::CHECKS`]).
#[test]
fn nats_credentials_are_one_method_and_a_password_needs_its_user() {
    let msg = refused_with(&["nats.user=\"a\"", "nats.token=\"t\""]);
    assert!(
        msg.starts_with("nats = ") && msg.contains("at most one of"),
        "{msg}"
    );
    let msg = refused("nats.password=\"p\"");
    assert!(
        msg.starts_with("nats.user = ") && msg.contains("nats.password"),
        "{msg}"
    );
    RunConfig::load(
        None,
        &["nats.user=\"a\"".into(), "nats.password=\"p\"".into()],
    )
    .expect("user and password load");
}

#[test]
fn tls_cert_without_key_is_refused() {
    let msg = refused("nats.tls_cert=/etc/cert.pem");
    assert!(
        msg.contains("nats.tls_key") && msg.contains("tls_cert"),
        "{msg}"
    );
}

#[test]
fn reward_spec_parses_names_and_weights_in_order() {
    let spec =
        RewardSpec::parse("cider=1, bleu4=0.5,clip-i2t=0.25,clip-s=0,disc=2").expect("parses");
    let terms: Vec<(&str, f32)> = spec.terms().iter().map(|(n, w)| (n.as_str(), *w)).collect();
    assert_eq!(
        terms,
        [
            ("cider", 1.0),
            ("bleu4", 0.5),
            ("clip-i2t", 0.25),
            ("clip-s", 0.0),
            ("disc", 2.0),
        ]
    );
    assert!(spec.contains("disc"));
    assert!(!spec.contains("rouge"));
    assert_eq!(
        spec.to_string(),
        "cider=1,bleu4=0.5,clip-i2t=0.25,clip-s=0,disc=2"
    );
}

/// The spelling of a name is the config's to check; whether the reward exists is the reward
/// workers' table's (`caprl_reward_worker::rewards`, tested there).
#[test]
fn a_misspelt_reward_name_says_how_names_are_written() {
    for spec in ["Cider=1", "cider=1,bleu_4=1", "=1"] {
        let msg = RewardSpec::parse(spec).expect_err(spec).to_string();
        assert!(
            msg.contains("lower-case letters, digits and `-`"),
            "{spec}: {msg}"
        );
    }
    assert!(RewardSpec::parse("cider=1,my-reward2=0.5").is_ok());
}

#[test]
fn negative_nan_and_infinite_weights_are_refused() {
    for spec in [
        "cider=-1",
        "cider=NaN",
        "cider=nan",
        "cider=inf",
        "cider=1,bleu4=-0.5",
    ] {
        let err = RewardSpec::parse(spec).expect_err(spec);
        assert!(
            matches!(err, ConfigError::BadRewardWeight { .. }),
            "{spec}: {err:?}"
        );
        assert!(err.to_string().contains(">= 0"), "{spec}: {err}");
    }
}

#[test]
fn malformed_reward_specs_say_why() {
    let cases = [
        ("", "empty term"),
        ("cider=1,", "empty term"),
        ("cider", "no `=weight`"),
        ("cider=abc", "not a number"),
        ("cider=1,cider=2", "twice"),
        ("cider=0", "all weights are zero"),
    ];
    for (spec, why) in cases {
        let msg = RewardSpec::parse(spec).expect_err(spec).to_string();
        assert!(msg.contains(why), "{spec:?}: {msg}");
    }
}

/// The Noam schedule peaks at the end of its warmup: a warmup of 0 is refused when it is chosen.
#[test]
fn noam_needs_a_warmup() {
    let msg = match RunConfig::load(None, &["optim.schedule=\"noam\"".to_string()]) {
        Ok(_) => panic!("noam without warmup was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        msg.contains("optim.warmup_steps") && msg.contains("noam"),
        "{msg}"
    );
    let ok = RunConfig::load(
        None,
        &[
            "optim.schedule=\"noam\"".to_string(),
            "optim.warmup_steps=4000".to_string(),
            "model.kind=\"transformer\"".to_string(),
        ],
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
}

fn refused_with(sets: &[&str]) -> String {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    match RunConfig::load(None, &sets) {
        Ok(_) => panic!("{sets:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn nats_replicas_are_one_to_five() {
    for bad in ["0", "6"] {
        let msg = refused_with(&[&format!("nats.replicas={bad}")]);
        assert!(
            msg.contains("nats.replicas") && msg.contains("1..=5"),
            "{msg}"
        );
    }
    let cfg = RunConfig::load(None, &["nats.replicas=3".into()]).unwrap();
    assert_eq!(cfg.nats.replicas, 3);
}
