//! Validation: each out-of-range value is refused with its key, its value and
//! what is allowed; reward specs parse or say why not.

use caprl_common::config::{ConfigError, RewardSpec, RunConfig};

fn refused(set: &str) -> String {
    match RunConfig::load(None, &[set.to_string()]) {
        Ok(_) => panic!("{set} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn out_of_range_values_name_key_value_and_range() {
    // `key=value`, the value as the message shows it, and what it says is allowed.
    let cases = [
        ("data.max_len=0", "0", "1..=64"),
        ("data.max_len=65", "65", "1..=64"),
        ("data.min_count=0", "0", ">= 1"),
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
        ("train.batch_size=0", "0", ">= 1"),
        ("train.label_smoothing=1", "1", "[0, 1)"),
        ("clip.tau=0", "0", "a finite number > 0"),
        ("train.eval_every=0", "0", ">= 1"),
        ("train.sample_images=101", "101", "0..=100"),
        ("optim.lr=0", "0", "> 0"),
        ("optim.rl_lr=-1e-5", "-0.00001", "> 0"),
        ("optim.beta1=1", "1", "[0, 1)"),
        ("optim.beta2=1.2", "1.2", "[0, 1)"),
        ("optim.eps=0", "0", "> 0"),
        ("optim.decay_rate=0", "0", "(0, 1]"),
        ("optim.decay_every=0", "0", ">= 1"),
        ("runtime.run_id=Exp_1", "Exp_1", "[a-z0-9-]"),
        ("runtime.is_clip=0", "0", "> 0"),
        ("runtime.is_mask_low=-1", "-1", ">= 0"),
        ("runtime.is_mask_high=0.4", "0.4", "> is_mask_low"),
        (
            "runtime.snapshot_every=2",
            "2 in sync mode",
            "1 in sync mode",
        ),
        ("runtime.tasks_in_flight=0", "0", ">= 1"),
        ("runtime.ack_wait_secs=0", "0", "1..="),
        ("nats.max_message_bytes=100", "100", "1024..=67108864"),
        ("checkpoint.keep=0", "0", ">= 1"),
        ("checkpoint.every_steps=0", "0", "1..="),
    ];
    for (set, value, allowed) in cases {
        let key = set.split('=').next().unwrap();
        let msg = refused(set);
        assert!(msg.starts_with(&format!("{key} = ")), "{set}: {msg}");
        assert!(msg.contains(value), "{set}: {msg} lacks value {value}");
        assert!(msg.contains(allowed), "{set}: {msg} lacks range {allowed}");
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

/// GSPO and decoupled PPO with PPO passes, and dynamic sampling with a group baseline, are
/// accepted (the refusals above are only for the combinations that mean nothing).
#[test]
fn gspo_decoupled_ppo_and_dynamic_sampling_are_accepted_where_they_apply() {
    for sets in [
        &[
            "train.ppo_epochs=2",
            "train.ppo_ratio=\"sequence\"",
            "train.ppo_proximal=\"learner\"",
        ][..],
        &["train.baseline=\"grpo\"", "train.dynamic_sampling=true"][..],
        &[
            "runtime.off_policy_correction=\"masked-is\"",
            "runtime.is_level=\"token\"",
        ][..],
    ] {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        RunConfig::load(None, &sets).unwrap_or_else(|e| panic!("{sets:?}: {e}"));
    }
}

/// Async snapshots every N versions: N ≤ max_policy_lag + 1 (the oldest published policy
/// must stay within the lag bound); inside it the config loads.
#[test]
fn snapshot_every_is_bounded_by_the_policy_lag_in_async_mode() {
    let load = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        RunConfig::load(None, &sets)
    };
    let base = ["runtime.mode=\"async\"", "runtime.max_policy_lag=2"];
    let err = load(&[&base[..], &["runtime.snapshot_every=4"]].concat())
        .expect_err("snapshot_every 4 with max_policy_lag 2 was accepted")
        .to_string();
    assert!(err.contains("runtime.snapshot_every"), "{err}");
    assert!(err.contains("4 with max_policy_lag = 2"), "{err}");
    assert!(err.contains("1..=max_policy_lag + 1"), "{err}");
    let ok = load(&[&base[..], &["runtime.snapshot_every=3"]].concat()).unwrap();
    assert_eq!(ok.runtime.snapshot_every, 3);
    assert!(load(&[&base[..], &["runtime.snapshot_every=0"]].concat()).is_err());
}
