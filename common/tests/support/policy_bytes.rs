//! Policy-like bytes for the snapshot tests: a pseudo-random policy, and the same after a small
//! update (what a delta between two versions of a trained policy sees).

/// A policy of `len` bytes from `seed`.
pub fn policy(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `p` after a small update: the low byte of one value in fifty changes.
pub fn updated(p: &[u8], version: u64) -> Vec<u8> {
    let mut next = p.to_vec();
    for i in (0..next.len() / 4).step_by(50) {
        next[i * 4] = next[i * 4].wrapping_add(1 + version as u8);
    }
    next
}
