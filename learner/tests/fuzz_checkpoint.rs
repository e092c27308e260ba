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

use caprl_common::model::{Captioner, CaptionerConfig, Device, ModelKind, RnnKind};
use caprl_learner::checkpoint;
use proptest::prelude::*;

fn model_cfg() -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, 20, 4, None);
    cfg.rnn = RnnKind::Gru;
    cfg.embed = 8;
    cfg.hidden = 8;
    cfg.att_hidden = 8;
    cfg.dropout = 0.0;
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
        let i = at % bytes.len();
        if cut {
            bytes.truncate(i);
        } else {
            prop_assume!(bytes[i] != byte);
            bytes[i] = byte;
        }
        std::fs::write(&victim, &bytes).unwrap();
        match checkpoint::open(&c2.dir) {
            // A mutation of the manifest's whitespace may leave it valid.
            Ok(_) => prop_assert!(in_manifest),
            Err(e) => {
                prop_assert!(e.to_string().contains(&*c2.dir.to_string_lossy()), "{}", e);
                let good = checkpoint::latest_valid(dir.path()).unwrap().unwrap();
                prop_assert_eq!(good.step, 1);
            }
        }
    }

    #[test]
    fn weights_reader_refuses_mutated_weights_without_panicking(
        at in any::<usize>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let mut w = weights();
        let i = at % w.len();
        if cut { w.truncate(i) } else { w[i] = byte }
        let dir = tempfile::tempdir().unwrap();
        let c = checkpoint::write(dir.path(), 1, &[("model.safetensors", w)], 3).unwrap();
        let c = checkpoint::open(&c.dir).unwrap();
        let bytes = std::fs::read(c.file("model.safetensors")).unwrap();
        let _ = Captioner::from_safetensors(&bytes, &model_cfg(), &Device::Cpu);
    }
}
