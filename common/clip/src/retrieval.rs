//! Cross-modal retrieval with a frozen encoder: recall@k in both directions (paper 004's R@k,
//! the distinctiveness metric) and nearest-image mining for the contrastive reward's image pool.

use candle_core::{Device, Tensor};

use super::{Embeddings, Result};

/// Recall@1/5/10 (in %) of text→image and image→text retrieval.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Recall {
    pub t2i: [f64; 3],
    pub i2t: [f64; 3],
}

/// The k of [`Recall`].
pub const RECALL_KS: [usize; 3] = [1, 5, 10];

/// Recall of `captions[i]` ↔ `images[i]` pairs. Ties are broken uniformly at random, in
/// expectation: with `g` candidates scoring higher than the query's own pair and `e` others
/// scoring the same, the pair's rank is uniform on `g..=g+e`, so it counts `P(rank < k)`.
/// (Identical captions of different images tie exactly; counting ties as hits would reward a
/// model for saying the same generic caption everywhere.)
pub fn recall(captions: &Embeddings, images: &Embeddings) -> Recall {
    let n = captions.len().min(images.len());
    let sim = |t: usize, i: usize| captions.dot(t, images, i);
    let mut out = Recall::default();
    if n == 0 {
        return out;
    }
    let hit = |scores: &mut dyn Iterator<Item = f32>, own: f32, k: usize| -> f64 {
        let (mut greater, mut equal) = (0usize, 0usize);
        for s in scores {
            if s > own {
                greater += 1;
            } else if s == own {
                equal += 1;
            }
        }
        // `equal` counts the pair itself once.
        ((k as f64 - greater as f64) / equal.max(1) as f64).clamp(0.0, 1.0)
    };
    for q in 0..n {
        let own = sim(q, q);
        for (j, &k) in RECALL_KS.iter().enumerate() {
            out.t2i[j] += hit(&mut (0..n).map(|i| sim(q, i)), own, k);
            out.i2t[j] += hit(&mut (0..n).map(|t| sim(t, q)), own, k);
        }
    }
    for j in 0..3 {
        out.t2i[j] *= 100.0 / n as f64;
        out.i2t[j] *= 100.0 / n as f64;
    }
    out
}

/// For every row of `images`, the `k` other rows most similar to it (most similar first).
/// One blocked matrix product per 1024 rows; mined once before training (paper 004 §3.4).
pub fn nearest(images: &Embeddings, k: usize) -> Result<Vec<Vec<usize>>> {
    let n = images.len();
    let d = images.dim;
    let k = k.min(n.saturating_sub(1));
    if k == 0 {
        return Ok(vec![Vec::new(); n]);
    }
    let all = Tensor::from_slice(&images.data, (n, d), &Device::Cpu)?;
    let all_t = all.t()?.contiguous()?;
    let mut out = Vec::with_capacity(n);
    for start in (0..n).step_by(1024) {
        let len = (n - start).min(1024);
        let sims: Vec<Vec<f32>> = all.narrow(0, start, len)?.matmul(&all_t)?.to_vec2()?;
        for (r, row) in sims.into_iter().enumerate() {
            let me = start + r;
            let mut idx: Vec<usize> = (0..n).filter(|&j| j != me).collect();
            idx.select_nth_unstable_by(k - 1, |&a, &b| row[b].total_cmp(&row[a]));
            idx.truncate(k);
            idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            out.push(idx);
        }
    }
    Ok(out)
}
