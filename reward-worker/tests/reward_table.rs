//! The table of rewards (`rewards::BUILTIN`) is the one list: spec checks, error messages and
//! the default config's comment read it, and every entry builds and scores a rollout.

use caprl_common::config::{default_keys, ConfigError, RewardSpec, RunConfig};
use caprl_reward_worker::rewards::{self, Named, BUILTIN};

fn load(sets: &[&str]) -> RunConfig {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    RunConfig::load(None, &sets).expect("loads")
}

#[test]
fn names_in_the_table_are_distinct_and_found_by_name() {
    for (i, def) in BUILTIN.iter().enumerate() {
        assert!(!def.about.is_empty(), "{} has no help line", def.name);
        assert_eq!(rewards::find(def.name).map(|d| d.name), Some(def.name));
        assert!(
            BUILTIN[..i].iter().all(|d| d.name != def.name),
            "{} twice",
            def.name
        );
        let spec: RewardSpec = format!("{}=1", def.name).parse().expect("spells");
        let named = rewards::resolve(&spec).expect("resolves");
        assert!(matches!(named[..], [Named::Builtin(d)] if d.name == def.name));
    }
}

#[test]
fn an_unknown_reward_is_refused_listing_every_one_there_is() {
    let spec: RewardSpec = "cider=1,meteor=1".parse().expect("spells");
    let err = rewards::resolve(&spec).expect_err("unknown");
    assert!(matches!(err, ConfigError::UnknownReward { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("`meteor`") && msg.contains("reward.spec"),
        "{msg}"
    );
    for def in BUILTIN {
        assert!(msg.contains(def.name), "{msg} lacks {}", def.name);
    }
    // The same check runs on a whole run config.
    let err = rewards::check(&load(&["reward.spec=cider=1,ciderd=1"])).expect_err("unknown");
    assert!(err.to_string().contains("ciderd"), "{err}");
}

#[test]
fn a_reward_that_reads_the_encoder_needs_an_encoder_path() {
    for def in BUILTIN.iter().filter(|d| d.needs.encoder) {
        let spec = format!("reward.spec=cider=1,{}=0.5", def.name);
        let err = rewards::check(&load(&[&spec])).expect_err(def.name);
        let msg = err.to_string();
        assert!(
            msg.contains("clip.reward") && msg.contains("caprl clip train"),
            "{msg}"
        );
        let with_path = [spec.as_str(), "clip.reward=\"enc.safetensors\""];
        rewards::check(&load(&with_path)).expect("an encoder path is all it needs");
    }
    let plain = load(&["reward.spec=cider=1,bleu4=0.5,rouge=0.1,embed=0.2"]);
    rewards::check(&plain).expect("no encoder needed");
    assert_eq!(rewards::needs(&plain.reward.spec), Default::default());
    let disc = load(&["reward.spec=clip=0.94,disc=0.06"]);
    let needs = rewards::needs(&disc.reward.spec);
    assert!(needs.encoder && needs.discriminator);
}

/// `default.toml`'s comment on `reward.spec` points at `caprl config rewards` (the table) and
/// its examples are rewards there are.
#[test]
fn the_default_files_reward_examples_are_the_tables() {
    let line = default_keys()
        .into_iter()
        .find(|k| k.section == "reward" && k.key == "spec")
        .expect("the reward spec line")
        .comment;
    assert!(line.contains("`caprl config rewards`"), "{line}");
    let examples = line
        .split_once("lists them (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .expect("examples in parentheses")
        .0;
    for name in examples
        .split(", ")
        .filter(|n| *n != "..." && *n != "py:<function>")
    {
        assert!(rewards::find(name).is_some(), "{name} in {line}");
    }
}

/// docs/rewards.md's table of rewards is the table's: every name with its help line, in order.
#[test]
fn the_docs_table_of_rewards_is_the_tables() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/rewards.md");
    let docs = std::fs::read_to_string(path).expect("docs/rewards.md");
    let rows: Vec<(String, String)> = docs
        .split_once("<!-- rewards table")
        .expect("the table's marker")
        .1
        .lines()
        .skip(3)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (cells[0].trim_matches('`').to_string(), cells[1].to_string())
        })
        .collect();
    let mut want: Vec<(String, String)> = BUILTIN
        .iter()
        .map(|d| (d.name.to_string(), d.about.to_string()))
        .collect();
    want.push((
        "py:<function>".to_string(),
        "a function of the Python module `reward.python` (below)".to_string(),
    ));
    assert_eq!(rows, want);
}

#[test]
fn every_entry_builds_for_a_data_set_and_scores_a_rollout() {
    use caprl_data::{synth, Dataset, SynthConfig};
    use caprl_reward_worker::rewards::{Batch, Caption, CiderSettings, Setup};
    use caprl_reward_worker::{ClipParts, Rewarder};

    let dir = tempfile::tempdir().unwrap();
    let config = SynthConfig {
        seed: 3,
        train: 12,
        val: 4,
        test: 4,
        progress: false,
    };
    synth(dir.path(), &config).unwrap();
    let data = Dataset::open(dir.path()).unwrap();
    let items = &data.train.items;
    let setup = Setup { data: &data, items };
    let cider = CiderSettings {
        training: caprl_score::CiderD::new(Rewarder::training_df(&data, items, true)),
        eos: true,
        corpus_df: false,
    };
    // The encoder's values as the worker computes them once per rollout.
    let parts = ClipParts {
        bicont: 0.25,
        i2t: 0.5,
        clip_s: 0.75,
        disc: Some(0.125),
    };
    // Each image's first reference as a finished caption, then a caption of one word.
    let refs: Vec<Vec<Vec<u32>>> = items
        .iter()
        .map(|it| it.refs.iter().map(|r| data.vocab.encode(r)).collect())
        .collect();
    let eos = caprl_model::model::EOS;
    let tokens: Vec<Vec<u32>> = refs
        .iter()
        .flat_map(|r| [[&r[0][..], &[eos]].concat(), vec![r[0][0]]])
        .collect();
    let captions = || -> Vec<Caption<'_>> {
        tokens
            .iter()
            .enumerate()
            .map(|(i, t)| Caption {
                row: items[i / 2].row as u32,
                kind: caprl_wire::DecodeKind::Sample,
                tokens: t,
                refs: &refs[i / 2],
                clip: Some(&parts),
            })
            .collect()
    };
    for def in BUILTIN {
        let reward = (def.build)(&setup).unwrap_or_else(|e| panic!("{}: {e}", def.name));
        let batch = Batch {
            task: "task-1".into(),
            captions: captions(),
            cider: &cider,
        };
        let values = reward
            .score(&batch)
            .unwrap_or_else(|e| panic!("{}: {e}", def.name));
        assert_eq!(values.len(), tokens.len(), "{}", def.name);
        assert!(
            values.iter().all(|v| v.is_finite()),
            "{}: {values:?}",
            def.name
        );
        if !def.needs.encoder {
            // A reference scores above a one-word caption of the same image.
            for pair in values.chunks(2) {
                assert!(pair[0] > pair[1], "{}: {values:?}", def.name);
            }
        }
    }
}
