//! The checkpoint reader under damage, as property tests: a checkpoint
//! whose files or manifest were mutated is refused by the checksum with an
//! error naming the file, and the previous good one is what
//! [`checkpoint::latest_valid`] returns; weights bytes that pass the checksum
//! but are not a valid model (a mutation written with a fresh manifest) are
//! refused by the weights reader with an error, never a panic.
//!
//! Cases, seed and saved failures: `common/tests/support/fuzz.rs` (`CAPRL_FUZZ_CASES`,
//! default 32 here; `CAPRL_FUZZ_SEED`; `fuzz_checkpoint.proptest-regressions`).

#[path = "../../common/tests/support/ci.rs"]
mod ci;
#[path = "../../common/tests/support/fuzz.rs"]
mod fuzz;

use caprl_learner::checkpoint;
use caprl_model::model::{Captioner, CaptionerConfig, Device, ModelKind, RnnKind};
use proptest::prelude::*;

fn model_cfg() -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, 20, 4, None);
    cfg.model.rnn = RnnKind::Gru;
    cfg.model.embed = 8;
    cfg.model.hidden = 8;
    cfg.model.att_hidden = 8;
    cfg.model.dropout = 0.0;
    cfg.max_len = 6;
    cfg
}

fn weights() -> Vec<u8> {
    Captioner::new(&model_cfg(), &Device::Cpu, 1)
        .unwrap()
        .to_safetensors()
        .unwrap()
}

proptest! {
    #![proptest_config(fuzz::config(32))]

    #[test]
    fn damaged_checkpoint_is_refused_and_the_previous_one_used(
        in_manifest in any::<bool>(),
        at in any::<usize>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let w = weights();
        checkpoint::write(dir.path(), 1, &[("model.safetensors", w.clone())], 3).unwrap();
        let c2 = checkpoint::write(dir.path(), 2, &[("model.safetensors", w.clone())], 3).unwrap();
        let victim = if in_manifest { c2.file("MANIFEST.json") } else { c2.file("model.safetensors") };
        let mut bytes = std::fs::read(&victim).unwrap();
        let len = bytes.len();
        let i = at % len;
        if cut {
            bytes.truncate(i);
        } else {
            prop_assume!(bytes[i] != byte);
            bytes[i] = byte;
        }
        std::fs::write(&victim, &bytes).unwrap();
        match checkpoint::open(&c2.dir) {
            // A changed manifest byte may leave valid JSON (whitespace, a digit of the step),
            // but the pretty-printed manifest ends with its closing brace: a cut one never is.
            Ok(_) => prop_assert!(
                in_manifest && !cut,
                "a {} {} at byte {} of {} was accepted",
                if in_manifest { "manifest" } else { "weights file" },
                if cut { "cut" } else { "changed" },
                i,
                len
            ),
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains(&*c2.dir.to_string_lossy()), "{}", msg);
                if !in_manifest {
                    let why = if cut { "truncated" } else { "sha256" };
                    prop_assert!(msg.contains(why), "the error does not say {}: {}", why, msg);
                }
                let good = checkpoint::latest_valid(dir.path()).unwrap().unwrap();
                prop_assert_eq!(good.step, 1);
            }
        }
    }

    #[test]
    fn weights_reader_reads_values_as_written_and_refuses_cut_or_broken_files(
        at in any::<usize>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let original = weights();
        let header_end = 8 + u64::from_le_bytes(original[..8].try_into().unwrap()) as usize;
        let mut w = original.clone();
        let i = at % w.len();
        if cut { w.truncate(i) } else { w[i] = byte }
        let dir = tempfile::tempdir().unwrap();
        let c = checkpoint::write(dir.path(), 1, &[("model.safetensors", w.clone())], 3).unwrap();
        let c = checkpoint::open(&c.dir).unwrap();
        let bytes = std::fs::read(c.file("model.safetensors")).unwrap();
        let result = Captioner::from_safetensors(&bytes, &model_cfg(), &Device::Cpu);
        match result {
            Err(e) => {
                prop_assert!(cut || i < header_end, "a changed value at byte {} was refused: {}", i, e);
                prop_assert!(e.to_string().contains("weights"), "the error does not say what it read: {}", e);
            }
            Ok(m) => {
                // A cut file is never a model: the header's offsets run past its end.
                prop_assert!(!cut, "weights cut at byte {} of {} were accepted", i, original.len());
                // A changed value is a valid (different) model, read as it is; a changed header
                // byte that still parses (whitespace) must mean the same tensors.
                let want = if i >= header_end { &w } else { &original };
                prop_assert!(
                    m.to_safetensors().unwrap() == *want,
                    "byte {} changed to {} was not read as written",
                    i,
                    byte
                );
            }
        }
    }
}
