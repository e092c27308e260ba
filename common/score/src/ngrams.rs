//! N-grams of interned token ids packed into one integer key.
//!
//! An n-gram of order 1..=4 is stored as a `u128` with 32 bits per token, the
//! first token in the highest used lane and each id stored as `id + 1`, so the
//! empty lane (0) never collides with a token and the order of a key can be
//! read back from it. Ids must therefore be `< u32::MAX`; the
//! [`Interner`](super::Interner) never hands out `u32::MAX`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Highest n-gram order used by every metric here (BLEU-4, CIDEr-D n = 1..4).
pub const MAX_ORDER: usize = 4;

/// A packed n-gram key (see the module docs).
pub type NgramKey = u128;

/// Packs `tokens` (1..=4 ids) into one key.
#[inline]
pub fn pack(tokens: &[u32]) -> NgramKey {
    debug_assert!(!tokens.is_empty() && tokens.len() <= MAX_ORDER);
    let mut key: u128 = 0;
    for &t in tokens {
        debug_assert!(t != u32::MAX, "token id u32::MAX is reserved");
        key = (key << 32) | u128::from(t.wrapping_add(1));
    }
    key
}

/// Order (1..=4) of a packed key; 0 for the empty key.
#[inline]
pub fn order_of(key: NgramKey) -> usize {
    (128 - key.leading_zeros() as usize).div_ceil(32)
}

/// Appends the keys of every n-gram of order `n` in `tokens` to `out`, in
/// sentence order (duplicates kept).
#[inline]
pub fn push_ngrams(tokens: &[u32], n: usize, out: &mut Vec<NgramKey>) {
    if tokens.len() < n {
        return;
    }
    out.extend(tokens.windows(n).map(pack));
}

/// Turns a list of keys into sorted `(key, count)` pairs, reusing `out`.
/// `keys` is sorted in place.
#[inline]
pub fn count_sorted(keys: &mut [NgramKey], out: &mut Vec<(NgramKey, u32)>) {
    out.clear();
    keys.sort_unstable();
    for &k in keys.iter() {
        match out.last_mut() {
            Some((last, c)) if *last == k => *c += 1,
            _ => out.push((k, 1)),
        }
    }
}

/// Sorted `(key, count)` pairs of every order 1..=4 of `tokens`, one vector
/// per order (index 0 = unigrams).
pub fn counts_by_order(tokens: &[u32]) -> [Vec<(NgramKey, u32)>; MAX_ORDER] {
    let mut keys = Vec::with_capacity(tokens.len());
    std::array::from_fn(|i| {
        keys.clear();
        push_ngrams(tokens, i + 1, &mut keys);
        let mut out = Vec::with_capacity(keys.len());
        count_sorted(&mut keys, &mut out);
        out
    })
}

/// Multiply-fold hasher for packed keys: the keys are already well spread
/// integers, so SipHash's DoS resistance only costs time here.
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        let m = u128::from(self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
    #[inline]
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
}

/// Hash map keyed by packed n-grams.
pub type KeyMap<V> = HashMap<NgramKey, V, BuildHasherDefault<KeyHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_different_orders_never_collide() {
        assert_ne!(pack(&[0]), pack(&[0, 0]));
        assert_ne!(pack(&[5]), pack(&[0, 5]));
        assert_eq!(order_of(pack(&[7])), 1);
        assert_eq!(order_of(pack(&[0, 0, 0])), 3);
        assert_eq!(order_of(pack(&[u32::MAX - 1; 4])), 4);
    }

    #[test]
    fn counts_are_sorted_and_merged() {
        let c = counts_by_order(&[1, 2, 1, 2, 1]);
        assert_eq!(c[0], vec![(pack(&[1]), 3), (pack(&[2]), 2)]);
        assert_eq!(c[1], vec![(pack(&[1, 2]), 2), (pack(&[2, 1]), 2)]);
        assert_eq!(c[3].len(), 2);
        assert!(counts_by_order(&[]).iter().all(Vec::is_empty));
    }
}
