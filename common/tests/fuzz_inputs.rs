//! Bad input everywhere, as property tests (cargo-fuzz needs a nightly
//! toolchain CI does not have): random and mutated bytes fed to the wire
//! codec, the config parser, the data set readers (Karpathy JSON, custom CSV
//! and JSON), the features reader (safetensors) and the WAV reader give a value or an error,
//! never a panic or a runaway allocation.
//!
//! Cases, seed and saved failures: `support/fuzz.rs` (`CAPRL_FUZZ_CASES`,
//! `CAPRL_FUZZ_SEED`, `fuzz_inputs.proptest-regressions`).

#[path = "support/ci.rs"]
mod ci;
#[path = "support/fuzz.rs"]
mod fuzz;

use std::path::Path;

use caprl_common::config::RunConfig;
use caprl_data::audio::{read_wav, write_wav_i16};
use caprl_data::{write_safetensors, Dataset};
use caprl_wire::{
    DecodeKind, Heartbeat, PolicyVersion, RewardVector, Rollout, RolloutTask, ScoredRollout,
    Sequence, TaskId,
};
use fuzz::{mutate, mutations};
use proptest::prelude::*;

const LIMIT: usize = 1 << 20;
/// Cases per property in CI (fixed seed; more by hand with `CAPRL_FUZZ_CASES`).
const CASES: u32 = 256;

fn task() -> RolloutTask {
    RolloutTask {
        min_version: PolicyVersion(2),
        greedy: true,
        mc_rollouts: 3,
        ..RolloutTask::samples(
            Default::default(),
            TaskId(7),
            PolicyVersion(3),
            vec![0, 5, 9],
            5,
            42,
        )
    }
}

fn rollout() -> Rollout {
    Rollout {
        task_id: TaskId(7),
        data: Default::default(),
        policy_version: PolicyVersion(3),
        actor_id: "actor-1".into(),
        sequences: vec![
            Sequence {
                image_row: 5,
                kind: DecodeKind::Sample,
                tokens: vec![4, 8, 15, 16, 23, 42, 0],
                logprobs: vec![-0.5; 7],
            },
            Sequence {
                image_row: 5,
                kind: DecodeKind::Completion {
                    sample: 0,
                    prefix_len: 2,
                },
                tokens: vec![4, 8, 9, 2],
                logprobs: vec![-0.25; 4],
            },
        ],
        decode_seconds: 0.25,
    }
}

fn scored() -> ScoredRollout {
    ScoredRollout {
        rollout: rollout(),
        rewards: vec![
            RewardVector {
                total: 0.75,
                components: vec![("cider".into(), 0.75)],
            },
            RewardVector {
                total: 0.5,
                components: vec![("cider".into(), 0.5)],
            },
        ],
    }
}

fn heartbeat() -> Heartbeat {
    Heartbeat {
        role: "actor".into(),
        id: "a1".into(),
        policy_version: PolicyVersion(3),
        unix_ms: 1_700_000_000_000,
        data: caprl_wire::DataFingerprint("0123456789abcdef".into()),
        problem: Some("a problem".into()),
    }
}

/// Decodes `bytes` as every message type; a panic fails the property.
fn decode_all(bytes: &[u8]) {
    let _ = caprl_wire::decode::<RolloutTask>(bytes, LIMIT);
    let _ = caprl_wire::decode::<Rollout>(bytes, LIMIT);
    let _ = caprl_wire::decode::<ScoredRollout>(bytes, LIMIT);
    let _ = caprl_wire::decode::<Heartbeat>(bytes, LIMIT);
}

/// A small valid custom data set: captions in `name` (CSV or JSON), fc
/// features in safetensors.
fn write_dataset(dir: &Path, name: &str, captions: &[u8]) {
    std::fs::write(dir.join(name), captions).unwrap();
    let ids: Vec<String> = ["11", "12", "13", "14"].map(String::from).to_vec();
    let fc: Vec<f32> = (0..12).map(|i| i as f32 * 0.5).collect();
    write_safetensors(dir, &ids, &fc, 3, None).unwrap();
}

const CSV: &str = "image_id,split,caption\n11,train,A red cube.\n12,train,\"A blue ball, rolling\"\n13,val,a green cone\n14,test,a yellow star\n";
const CUSTOM_JSON: &str = r#"[{"image_id": "11", "split": "train", "caption": "A red cube."},
 {"image_id": 12, "split": "train", "caption": "a blue ball"},
 {"image_id": "13", "split": "val", "caption": "a green cone"},
 {"image_id": "14", "split": "test", "caption": "a yellow star"}]"#;
const KARPATHY_JSON: &str = r#"{"dataset": "coco", "images": [
 {"imgid": 0, "cocoid": 11, "filename": "a.jpg", "split": "train", "sentences": [{"raw": "A red cube.", "tokens": []}]},
 {"imgid": 1, "cocoid": 12, "filename": "b.jpg", "split": "restval", "sentences": [{"raw": "a blue ball", "tokens": []}]},
 {"imgid": 2, "cocoid": 13, "filename": "c.jpg", "split": "val", "sentences": [{"raw": "a green cone", "tokens": []}]},
 {"imgid": 3, "cocoid": 14, "filename": "d.jpg", "split": "test", "sentences": [{"raw": "a yellow star", "tokens": []}]}]}"#;

/// Opens the data set in `dir`; when it opens, reads every feature row too.
fn open_and_read(dir: &Path) {
    if let Ok(ds) = Dataset::open(dir) {
        for split in [&ds.train, &ds.val, &ds.test] {
            let rows: Vec<usize> = split.iter().map(|i| i.row).collect();
            let _ = ds.fc_rows(&rows);
            let _ = ds.att_rows(&rows);
        }
    }
}

#[test]
fn valid_samples_decode_and_open() {
    // The seeds the properties mutate are themselves valid.
    let t = caprl_wire::encode(&task(), LIMIT).unwrap();
    assert_eq!(
        caprl_wire::decode::<RolloutTask>(&t, LIMIT).unwrap(),
        task()
    );
    let r = caprl_wire::encode(&rollout(), LIMIT).unwrap();
    assert_eq!(caprl_wire::decode::<Rollout>(&r, LIMIT).unwrap(), rollout());
    let s = caprl_wire::encode(&scored(), LIMIT).unwrap();
    assert_eq!(
        caprl_wire::decode::<ScoredRollout>(&s, LIMIT).unwrap(),
        scored()
    );
    let h = caprl_wire::encode(&heartbeat(), LIMIT).unwrap();
    assert_eq!(
        caprl_wire::decode::<Heartbeat>(&h, LIMIT).unwrap(),
        heartbeat()
    );
    for (name, text) in [
        ("captions.csv", CSV),
        ("captions.json", CUSTOM_JSON),
        ("captions.json", KARPATHY_JSON),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), name, text.as_bytes());
        Dataset::open(dir.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    RunConfig::from_toml_str(&default_toml(), "default.toml").unwrap();
}

fn default_toml() -> String {
    RunConfig::default().to_toml_string()
}

/// A valid 16-bit mono WAV file of a short tone.
fn wav_bytes(dir: &Path) -> Vec<u8> {
    let path = dir.join("tone.wav");
    let samples: Vec<f64> = (0..400).map(|i| (i as f64 * 0.05).sin() * 0.5).collect();
    write_wav_i16(&path, &samples, 16_000).unwrap();
    std::fs::read(&path).unwrap()
}

proptest! {
    #![proptest_config(fuzz::config(CASES))]

    #[test]
    fn wav_reader_never_panics_on_mutated_or_random_files(
        muts in mutations(),
        noise in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let valid = wav_bytes(dir.path());
        for (name, bytes) in [("mutated.wav", mutate(&valid, &muts)), ("noise.wav", noise)] {
            let path = dir.path().join(name);
            std::fs::write(&path, &bytes).unwrap();
            if let Err(e) = read_wav(&path) {
                // Every refusal names the file it refused.
                prop_assert!(e.to_string().contains(name), "{e}");
            }
        }
    }

    #[test]
    fn wire_decode_never_panics_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
        // Behind a valid header too, so the payload decoder sees the bytes.
        let mut framed = caprl_wire::MAGIC.to_vec();
        framed.extend(caprl_wire::SCHEMA_VERSION.to_be_bytes());
        for kind in 1u8..=5 {
            let mut f = framed.clone();
            f.push(kind);
            f.extend((bytes.len() as u32).to_be_bytes());
            f.extend(&bytes);
            decode_all(&f);
        }
    }

    #[test]
    fn wire_decode_never_panics_on_mutated_messages(
        which in 0usize..4,
        muts in mutations(),
    ) {
        let valid = match which {
            0 => caprl_wire::encode(&task(), LIMIT).unwrap(),
            1 => caprl_wire::encode(&rollout(), LIMIT).unwrap(),
            2 => caprl_wire::encode(&scored(), LIMIT).unwrap(),
            _ => caprl_wire::encode(&heartbeat(), LIMIT).unwrap(),
        };
        decode_all(&mutate(&valid, &muts));
    }

    #[test]
    fn config_parser_never_panics_on_random_or_mutated_text(
        random in ".{0,200}",
        muts in mutations(),
    ) {
        let _ = RunConfig::from_toml_str(&random, "random.toml");
        let mutated = mutate(default_toml().as_bytes(), &muts);
        let text = String::from_utf8_lossy(&mutated);
        if let Err(e) = RunConfig::from_toml_str(&text, "mutated.toml") {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn dataset_readers_never_panic_on_mutated_captions(
        which in 0usize..3,
        muts in mutations(),
    ) {
        let (name, text) = [
            ("captions.csv", CSV),
            ("captions.json", CUSTOM_JSON),
            ("captions.json", KARPATHY_JSON),
        ][which];
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), name, &mutate(text.as_bytes(), &muts));
        open_and_read(dir.path());
    }

    #[test]
    fn features_reader_never_panics_on_mutated_safetensors(
        muts in mutations(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), "captions.csv", CSV.as_bytes());
        let path = dir.path().join("features.safetensors");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, mutate(&bytes, &muts)).unwrap();
        open_and_read(dir.path());
    }
}
