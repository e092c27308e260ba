//! What every fuzz property shares: how many cases, which seed, where failures are kept, and
//! the byte mutations applied to valid files.
//!
//! - `CAPRL_FUZZ_CASES` cases per property (default: the caller's CI smoke count); a hunt by
//!   hand is e.g. `CAPRL_FUZZ_CASES=10000`.
//! - The seed is fixed in CI ([`CI_SEED`]) so a red run is red again on a rerun, and random on
//!   a developer's machine so each local run tries new cases. Either way it is printed;
//!   `CAPRL_FUZZ_SEED=<seed>` replays that run.
//! - A failing case, once shrunk, is appended to `<test file>.proptest-regressions` next to the
//!   test file (proptest's own persistence). Commit that file: every later run, CI included,
//!   replays the saved cases before any new one.
//!
//! Included with `#[path]`; the including test crate must also include `support/ci.rs` as
//! `mod ci` (for the CI rule).
#![allow(dead_code)]

use std::hash::BuildHasher;

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, RngSeed};

/// The seed of every property in CI.
pub const CI_SEED: u64 = 0x00ca_9721_f022;

/// `CAPRL_FUZZ_SEED`, else [`CI_SEED`] in CI, else a fresh random seed.
pub fn seed() -> u64 {
    match std::env::var("CAPRL_FUZZ_SEED") {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| {
            panic!("CAPRL_FUZZ_SEED={s:?} is not a u64; pass the seed a fuzz run printed")
        }),
        Err(_) if crate::ci::in_ci() => CI_SEED,
        Err(_) => {
            std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
        }
    }
}

/// The config of a fuzz property: `default_cases` unless `CAPRL_FUZZ_CASES` says otherwise,
/// the seed of [`seed`] (printed), failures persisted next to the test file.
pub fn config(default_cases: u32) -> ProptestConfig {
    let cases = match std::env::var("CAPRL_FUZZ_CASES") {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| {
            panic!("CAPRL_FUZZ_CASES={s:?} is not a number of cases (e.g. 10000)")
        }),
        Err(_) => default_cases,
    };
    let seed = seed();
    eprintln!("fuzz: {cases} cases, seed {seed} (replay: CAPRL_FUZZ_SEED={seed})");
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

/// One way of damaging bytes.
#[derive(Debug, Clone)]
pub enum Mutation {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Truncate { at: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Remove { at: usize, len: usize },
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..32).prop_map(|(at, len)| Mutation::Remove { at, len }),
    ]
}

/// One to five mutations.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..6)
}

/// `bytes` with `muts` applied in order (positions wrap around the current length).
pub fn mutate(bytes: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for m in muts {
        let n = b.len();
        match m {
            Mutation::Flip { at, bit } if n > 0 => b[at % n] ^= 1 << bit,
            Mutation::Set { at, byte } if n > 0 => b[at % n] = *byte,
            Mutation::Truncate { at } => b.truncate(at % (n + 1)),
            Mutation::Insert { at, bytes } => {
                let at = at % (n + 1);
                b.splice(at..at, bytes.iter().copied());
            }
            Mutation::Remove { at, len } if n > 0 => {
                let at = at % n;
                b.drain(at..(at + len).min(n));
            }
            _ => {}
        }
    }
    b
}
