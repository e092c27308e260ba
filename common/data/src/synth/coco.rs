//! The COCO-shaped profile of `caprl data synth` (`--profile coco`): COCO's sizes and word
//! statistics with no download, so that end-to-end runs, the CIDEr-D reward and the
//! benchmarks exercise real shapes (a vocabulary of about 10,000 words, 8–15-word captions,
//! five per image, 2,048-d fc and 36 × 2,048-d region features).
//!
//! Words are ranked by frequency: the [`FUNCTION_WORDS`] first, then pseudo-words made of
//! syllables ("bake", "mirulo"), [`WORD_TYPES`] in all. Each image has 2–4 topic words, drawn
//! from a Zipf(1) law over the pseudo-words. Each of its five captions has 8–15 words, each a
//! topic word with probability [`TOPIC_SHARE`], else a draw from the background Zipf(1) law
//! over all words, so word frequencies fall off as in real captions and a caption is
//! predictable from its image only through the topic words.
//!
//! Features: every word has a pattern, a sparse non-negative 2,048-d vector (about a tenth of
//! its entries in [0.5, 1.5), like pooled CNN activations) drawn from its own ChaCha8 stream.
//! `fc` is the mean of the image's topic patterns plus uniform noise; region `r` holds topic
//! `r`'s pattern (regions past the topics hold a background word's pattern, at half strength),
//! plus noise. The regions are written to the memory-mapped store as they are made.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::stream;
use crate::error::DataError;

pub(crate) const FC_DIM: usize = 2048;
pub(crate) const REGIONS: usize = 36;
pub(crate) const ATT_DIM: usize = 2048;
/// Word types the captions draw from; about 10,000 of them occur in the default training split.
pub(crate) const WORD_TYPES: usize = 11_000;
/// Probability that a caption word is one of the image's topic words.
pub(crate) const TOPIC_SHARE: f64 = 0.4;
/// Caption lengths, in words.
const MIN_WORDS: usize = 8;
const MAX_WORDS: usize = 15;
/// Share of a pattern's entries that are non-zero.
const PATTERN_DENSITY: f64 = 0.1;
/// Width of the uniform noise added to every feature.
const NOISE: f32 = 0.2;

/// The most frequent words, in rank order (COCO's commonest words lead its frequency list).
pub(crate) const FUNCTION_WORDS: [&str; 40] = [
    "a", "on", "of", "the", "in", "with", "and", "is", "man", "to", "sitting", "an", "two", "at",
    "standing", "people", "are", "next", "white", "woman", "street", "table", "holding", "large",
    "down", "top", "some", "group", "near", "small", "front", "tennis", "his", "bus", "plate",
    "dog", "red", "field", "train", "while",
];

const SYLLABLES: [&str; 20] = [
    "ba", "ke", "mi", "do", "lu", "ra", "ti", "no", "pe", "su", "go", "fa", "ve", "zo", "ha", "ji",
    "wu", "ce", "ly", "xo",
];

/// The word of rank `rank`: a function word, else a pseudo-word of 2, 3 or 4 syllables (each
/// length its own block of ranks, so no two ranks share a spelling).
pub(crate) fn word(rank: usize) -> String {
    if rank < FUNCTION_WORDS.len() {
        return FUNCTION_WORDS[rank].to_string();
    }
    let s = SYLLABLES.len();
    let mut j = rank - FUNCTION_WORDS.len();
    let mut syllables = 2;
    while j >= s.pow(syllables) {
        j -= s.pow(syllables);
        syllables += 1;
    }
    let mut out = String::new();
    for k in (0..syllables).rev() {
        out.push_str(SYLLABLES[(j / s.pow(k)) % s]);
    }
    out
}

/// A Zipf(1) law over ranks `0..n`: `P(r) ∝ 1 / (r + 1)`, drawn by inverting its table.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (0..n)
            .map(|r| {
                acc += 1.0 / (r + 1) as f64;
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    fn draw(&self, rng: &mut ChaCha8Rng) -> usize {
        let u: f64 = rng.random();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// What one image is about, and its references.
pub(crate) struct CocoImage {
    pub topics: Vec<usize>,
    pub captions: Vec<String>,
}

/// Draws images' topics and captions from one stream.
pub(crate) struct Captions {
    rng: ChaCha8Rng,
    background: Zipf,
    topics: Zipf,
}

impl Captions {
    pub fn new(seed: u64) -> Self {
        Captions {
            rng: stream(seed, 2),
            background: Zipf::new(WORD_TYPES),
            topics: Zipf::new(WORD_TYPES - FUNCTION_WORDS.len()),
        }
    }

    pub fn image(&mut self, refs: usize) -> CocoImage {
        let k = self.rng.random_range(2..=4);
        let mut topics: Vec<usize> = Vec::with_capacity(k);
        while topics.len() < k {
            let t = FUNCTION_WORDS.len() + self.topics.draw(&mut self.rng);
            if !topics.contains(&t) {
                topics.push(t);
            }
        }
        let captions = (0..refs)
            .map(|_| {
                let len = self.rng.random_range(MIN_WORDS..=MAX_WORDS);
                let words: Vec<String> = (0..len)
                    .map(|_| {
                        let rank = if self.rng.random_bool(TOPIC_SHARE) {
                            topics[self.rng.random_range(0..topics.len())]
                        } else {
                            self.background.draw(&mut self.rng)
                        };
                        word(rank)
                    })
                    .collect();
                words.join(" ")
            })
            .collect();
        CocoImage { topics, captions }
    }
}

/// Word patterns (made on first use, from each word's own stream) and the noise stream.
pub(crate) struct Features {
    seed: u64,
    patterns: Vec<Option<Vec<(u16, f32)>>>,
    noise: ChaCha8Rng,
}

impl Features {
    pub fn new(seed: u64) -> Self {
        Features {
            seed,
            patterns: vec![None; WORD_TYPES],
            noise: stream(seed, 3),
        }
    }

    /// Word `rank`'s non-zero pattern entries `(dimension, value)`.
    fn pattern(&mut self, rank: usize) -> &[(u16, f32)] {
        let seed = self.seed;
        self.patterns[rank].get_or_insert_with(|| {
            let mut rng = stream(seed, 1_000 + rank as u64);
            (0..FC_DIM as u16)
                .filter_map(|d| {
                    let on = rng.random_bool(PATTERN_DENSITY);
                    let v: f32 = rng.random_range(0.5..1.5);
                    on.then_some((d, v))
                })
                .collect()
        })
    }

    fn noise(&mut self, out: &mut [f32]) {
        for x in out {
            *x = NOISE * self.noise.random::<f32>();
        }
    }

    /// Writes `image`'s fc row and its `REGIONS × ATT_DIM` regions.
    pub fn render(
        &mut self,
        image: &CocoImage,
        fc: &mut [f32],
        att: &mut [f32],
    ) -> Result<(), DataError> {
        self.noise(fc);
        let share = 1.0 / image.topics.len() as f32;
        for &t in &image.topics {
            for &(d, v) in self.pattern(t) {
                fc[d as usize] += share * v;
            }
        }
        self.noise(att);
        for (r, region) in att.chunks_exact_mut(ATT_DIM).enumerate() {
            let (rank, strength) = match image.topics.get(r) {
                Some(&t) => (t, 1.0),
                None => (
                    FUNCTION_WORDS.len()
                        + self
                            .noise
                            .random_range(0..WORD_TYPES - FUNCTION_WORDS.len()),
                    0.5,
                ),
            };
            for &(d, v) in self.pattern(rank) {
                region[d as usize] += strength * v;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_has_its_own_word() {
        let words: std::collections::HashSet<String> = (0..WORD_TYPES).map(word).collect();
        assert_eq!(words.len(), WORD_TYPES);
        assert_eq!(word(40), "baba");
        assert_eq!(word(41), "bake");
        assert_eq!(word(40 + 400), "bababa");
        assert!(words
            .iter()
            .all(|w| w.chars().all(|c| c.is_ascii_lowercase())));
    }

    #[test]
    fn zipf_draws_follow_one_over_rank() {
        let z = Zipf::new(1000);
        let mut rng = stream(7, 0);
        let mut counts = vec![0usize; 1000];
        for _ in 0..200_000 {
            counts[z.draw(&mut rng)] += 1;
        }
        // P(0) / P(1) = 2 and P(0) / P(9) = 10, within sampling error.
        let r1 = counts[0] as f64 / counts[1] as f64;
        let r9 = counts[0] as f64 / counts[9] as f64;
        assert!((r1 - 2.0).abs() < 0.1, "{r1}");
        assert!((r9 - 10.0).abs() < 1.0, "{r9}");
    }
}
