//! The rules every command's config is checked by ([`load_checked`]: the loader's and the
//! learner's side's): each refusal names its key, its value and what is allowed, and the ranges
//! `default.toml`'s comments state are the rules' own ([`allowed_for`]), so the file cannot
//! drift from what is checked.

#[path = "../../tests/support/refusals.rs"]
mod refusals;

use caprl_learner::objective::{allowed_for, load_checked};
use refusals::assert_refused_naming_key_value_and_range;

/// The message of the refusal of `sets`.
fn refused_with(sets: &[&str]) -> String {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    match load_checked(None, &sets) {
        Ok(_) => panic!("{sets:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

fn refused(set: &str) -> String {
    refused_with(&[set])
}

/// The ranges the default file's comments state, e.g. `1..=4096`, `[0, 1)`, `>= 1` or `> 0`.
fn stated_ranges(comment: &str) -> Vec<String> {
    let b = comment.as_bytes();
    let is_num = |c: u8| c.is_ascii_digit() || c == b'.' || c == b'-';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let rest = &comment[i..];
        let token = if rest.starts_with('[') || rest.starts_with('(') {
            let close = rest.find([']', ')']);
            close
                .map(|end| &rest[..=end])
                .filter(|t| t.contains(',') && t.as_bytes().get(1).is_some_and(|&c| is_num(c)))
        } else if rest.starts_with(">= ") || rest.starts_with("> ") {
            let start = rest.find(' ').map_or(0, |s| s + 1);
            let digits = rest[start..].bytes().take_while(|&c| is_num(c)).count();
            (digits > 0).then(|| &rest[..start + digits])
        } else if b[i].is_ascii_digit() && (i == 0 || !is_num(b[i - 1])) {
            let digits = rest.bytes().take_while(|&c| c.is_ascii_digit()).count();
            let upper = rest[digits..].strip_prefix("..=");
            let upper_digits =
                upper.map_or(0, |u| u.bytes().take_while(|c| c.is_ascii_digit()).count());
            (upper_digits > 0).then(|| &rest[..digits + 3 + upper_digits])
        } else {
            None
        };
        match token {
            Some(t) => {
                out.push(t.to_string());
                i += t.len();
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

#[test]
fn every_range_the_default_file_states_is_its_keys_rule() {
    let mut checked = 0;
    let mut drifted: Vec<String> = Vec::new();
    for line in caprl_common::config::default_keys() {
        let ranges = stated_ranges(line.comment);
        if ranges.is_empty() {
            continue;
        }
        let key = match line.section {
            "" => line.key.to_string(),
            section => format!("{section}.{}", line.key),
        };
        let Some(allowed) = allowed_for(&key) else {
            drifted.push(format!(
                "`{key}`'s comment states {ranges:?}, but no rule checks it"
            ));
            continue;
        };
        // `>= N` states an upper bound no one reaches: the rule's `N..=<i64::MAX>`.
        let states = |r: &String| {
            allowed.contains(r.as_str())
                || r.strip_prefix(">= ")
                    .is_some_and(|n| allowed.starts_with(&format!("{n}..=")))
        };
        if !ranges.iter().any(states) {
            drifted.push(format!(
                "`{key}`: the file states {ranges:?}, the rule allows `{allowed}`"
            ));
        }
        checked += 1;
    }
    assert!(
        drifted.is_empty(),
        "default.toml drifted from the rules:\n{}",
        drifted.join("\n")
    );
    assert!(
        checked >= 40,
        "only {checked} stated ranges found: is the parser right?"
    );
}

/// The learner's side's rules (the loader's are held in `caprl-common`'s `config_validate`).
#[test]
fn the_learners_rules_name_key_value_and_range() {
    let cases = [
        ("train.batch_size=0", "0", ">= 1"),
        ("train.samples=0", "0", ">= 1"),
        ("train.label_smoothing=1", "1", "[0, 1)"),
        ("train.eval_every=0", "0", ">= 1"),
        ("train.sample_images=101", "101", "0..=100"),
        ("train.sle_alpha=1.5", "1.5", "[0, 1]"),
        ("clip.tau=0", "0", "a finite number > 0"),
        ("clip.disc_lr=-1", "-1", "a finite number > 0"),
        ("runtime.is_clip=0", "0", "> 0"),
        ("runtime.is_mask_low=-1", "-1", ">= 0"),
        ("runtime.is_mask_high=0.4", "0.4", "> is_mask_low"),
        (
            "runtime.snapshot_every=2",
            "2 in sync mode",
            "1 in sync mode",
        ),
        ("runtime.tasks_in_flight=0", "0", ">= 1"),
        ("runtime.images_per_task=0", "0", ">= 1"),
        ("checkpoint.keep=0", "0", ">= 1"),
        ("checkpoint.every_steps=0", "0", "1..="),
    ];
    assert_refused_naming_key_value_and_range(&cases, refused);
}

/// A `--set` of the wrong type names what the key allows, whichever side owns its rule.
#[test]
fn a_value_of_the_wrong_type_names_the_range_whoever_owns_it() {
    for (set, allowed) in [
        (
            "train.batch_size=\"many\"",
            "(train.batch_size allows >= 1)",
        ),
        (
            "train.sle_alpha=\"half\"",
            "(train.sle_alpha allows [0, 1])",
        ),
        (
            "runtime.tasks_in_flight=-1",
            "(runtime.tasks_in_flight allows >= 1)",
        ),
        ("model.hidden=\"big\"", "(model.hidden allows 1..=8192)"),
    ] {
        let msg = refused(set);
        assert!(msg.contains(allowed), "{set}: {msg}");
    }
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
        load_checked(None, &sets).unwrap_or_else(|e| panic!("{sets:?}: {e}"));
    }
}

/// Async snapshots every N versions: N ≤ max_policy_lag + 1 (the oldest published policy
/// must stay within the lag bound); inside it the config loads.
#[test]
fn snapshot_every_is_bounded_by_the_policy_lag_in_async_mode() {
    let load = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        load_checked(None, &sets)
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
