//! The captions the scoring benchmarks measure (`benches/score.rs`, `caprl bench all`): the same
//! set wherever it is timed, so their figures compare.

/// Deterministic id captions of 7..14 words over a 2,000-word vocabulary skewed towards low ids:
/// `refs` references per image for `images` images, and one candidate per image (a small LCG
/// keeps it free of extra dependencies).
pub fn synthetic_captions(images: usize, refs: usize) -> (Vec<Vec<Vec<u32>>>, Vec<Vec<u32>>) {
    let mut state: u64 = 7;
    let mut next = move |m: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % m
    };
    let mut sentence = move || -> Vec<u32> {
        let len = 7 + next(7);
        (0..len)
            .map(|_| next(2_000).min(next(2_000)) as u32)
            .collect()
    };
    let r = (0..images)
        .map(|_| (0..refs).map(|_| sentence()).collect())
        .collect();
    let c = (0..images).map(|_| sentence()).collect();
    (r, c)
}
