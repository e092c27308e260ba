//! The tiny synthetic data set the reward-worker tests score against.
#![allow(dead_code)]

use std::path::Path;

use caprl_data::{synth, Dataset, SynthConfig};

/// Generates a synthetic set of `train` training images (4 val, 4 test) from `seed` in `dir`
/// and opens it.
pub fn dataset(dir: &Path, seed: u64, train: usize) -> Dataset {
    synth(
        dir,
        &SynthConfig {
            seed,
            train,
            val: 4,
            test: 4,
            progress: false,
        },
    )
    .unwrap();
    Dataset::open(dir).unwrap()
}
