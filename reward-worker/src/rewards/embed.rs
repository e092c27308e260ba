//! The embedding reward of paper 001 (Ren et al. 2017): `r = cos(f_I(I), f_T(c))`, the cosine
//! similarity of an image and a caption in a joint embedding space.
//!
//! Until a trained dual encoder is available, the joint space is the caption's bag of words:
//! `f_T(c)` is the tf-idf weighted, L2-normalised word-count vector of `c`, and
//! `f_I(I) = Wᵀ(fc(I) − μ)` is a linear projection of the image's global features, fitted once
//! by ridge regression to the mean `f_T` of the image's training references:
//! `(XᵀX + λI) W = XᵀY` (closed form, Cholesky). A caption scores high when it uses the words the
//! image's features predict, which rewards naming what distinguishes the image.

use caprl_data::{DataError, Dataset, Item};
use caprl_model::model::EOS;

use super::{Batch, Needs, Reward, RewardDef, Setup};
use crate::RewardError;

pub const DEF: RewardDef = RewardDef {
    name: "embed",
    about: "cosine of caption and image in a joint embedding (paper 001)",
    needs: Needs::NOTHING,
    build,
};

fn build(setup: &Setup<'_>) -> Result<Box<dyn Reward>, RewardError> {
    Ok(Box::new(EmbedReward::fit(setup.data, setup.items)?))
}

impl Reward for EmbedReward {
    fn score(&self, batch: &Batch<'_>) -> Result<Vec<f64>, RewardError> {
        batch
            .captions
            .iter()
            .map(|c| {
                let value = self.cosine(c.row, c.tokens);
                value.map(f64::from).ok_or(RewardError::UnknownRow(c.row))
            })
            .collect()
    }
}

/// Ridge penalty relative to the mean diagonal of `XᵀX`.
const RIDGE: f64 = 1e-2;

/// The fitted projection and the cached image embeddings of the training split.
pub struct EmbedReward {
    idf: Vec<f64>,
    /// Normalised `f_I` of each feature row (`None` outside the split).
    images: Vec<Option<Vec<f64>>>,
}

impl EmbedReward {
    /// Fits the projection on `items` (training references and features) of `data`.
    pub fn fit(data: &Dataset, items: &[Item]) -> Result<Self, DataError> {
        let v = data.vocab.len();
        let d = data.fc_dim();
        let n = items.len();
        // idf over images: a word in every image's references carries no information.
        let mut df = vec![0usize; v];
        let mut counts: Vec<Vec<f64>> = Vec::with_capacity(n);
        for it in items {
            let mut c = vec![0f64; v];
            for r in &it.refs {
                for w in r {
                    c[data.vocab.id(w) as usize] += 1.0;
                }
            }
            for (k, &x) in c.iter().enumerate() {
                if x > 0.0 {
                    df[k] += 1;
                }
            }
            counts.push(c);
        }
        let idf: Vec<f64> = df
            .iter()
            .map(|&f| ((1.0 + n as f64) / (1.0 + f as f64)).ln())
            .collect();
        let rows: Vec<usize> = items.iter().map(|it| it.row).collect();
        let fc = data.fc_rows(&rows)?;
        let mean: Vec<f64> = (0..d)
            .map(|j| (0..n).map(|i| fc[i * d + j] as f64).sum::<f64>() / n.max(1) as f64)
            .collect();
        let x = |i: usize, j: usize| fc[i * d + j] as f64 - mean[j];
        // XᵀX (upper triangle mirrored) and XᵀY.
        let mut xtx = vec![0f64; d * d];
        let mut xty = vec![0f64; d * v];
        let mut xi = vec![0f64; d];
        for (i, c) in counts.iter().enumerate() {
            for (j, slot) in xi.iter_mut().enumerate() {
                *slot = x(i, j);
            }
            let y = normalise(c.iter().zip(&idf).map(|(a, b)| a * b).collect());
            for a in 0..d {
                let xa = xi[a];
                for b in a..d {
                    xtx[a * d + b] += xa * xi[b];
                }
                for (k, &yk) in y.iter().enumerate() {
                    if yk != 0.0 {
                        xty[a * v + k] += xa * yk;
                    }
                }
            }
        }
        for a in 0..d {
            for b in 0..a {
                xtx[a * d + b] = xtx[b * d + a];
            }
        }
        let trace = (0..d).map(|a| xtx[a * d + a]).sum::<f64>() / d.max(1) as f64;
        for a in 0..d {
            xtx[a * d + a] += RIDGE * trace.max(1e-12);
        }
        let w = cholesky_solve(&mut xtx, &xty, d, v);
        let max_row = items.iter().map(|it| it.row).max().unwrap_or(0);
        let mut images = vec![None; max_row + 1];
        for (i, it) in items.iter().enumerate() {
            let mut e = vec![0f64; v];
            for j in 0..d {
                let xj = x(i, j);
                for (k, ek) in e.iter_mut().enumerate() {
                    *ek += xj * w[j * v + k];
                }
            }
            images[it.row] = Some(normalise(e));
        }
        Ok(Self { idf, images })
    }

    /// `cos(f_I(row), f_T(tokens))` in [-1, 1]; 0 for an empty caption. Tokens are vocabulary
    /// ids (EOS ends the caption). `None` when `row` is not a training image.
    pub fn cosine(&self, row: u32, tokens: &[u32]) -> Option<f32> {
        let img = self.images.get(row as usize)?.as_ref()?;
        let mut t = vec![0f64; self.idf.len()];
        for &w in tokens.iter().take_while(|&&w| w != EOS) {
            if let Some(slot) = t.get_mut(w as usize) {
                *slot += self.idf[w as usize];
            }
        }
        let t = normalise(t);
        Some(img.iter().zip(&t).map(|(a, b)| a * b).sum::<f64>() as f32)
    }
}

fn normalise(mut x: Vec<f64>) -> Vec<f64> {
    let norm = x.iter().map(|a| a * a).sum::<f64>().sqrt();
    if norm > 0.0 {
        x.iter_mut().for_each(|a| *a /= norm);
    }
    x
}

/// Solves `A W = B` for symmetric positive definite `A` (`d×d`, overwritten by its Cholesky
/// factor) and `B` (`d×v`), row-major.
fn cholesky_solve(a: &mut [f64], b: &[f64], d: usize, v: usize) -> Vec<f64> {
    for j in 0..d {
        let mut s = a[j * d + j];
        for k in 0..j {
            s -= a[j * d + k] * a[j * d + k];
        }
        let l = s.max(1e-12).sqrt();
        a[j * d + j] = l;
        for i in j + 1..d {
            let mut s = a[i * d + j];
            for k in 0..j {
                s -= a[i * d + k] * a[j * d + k];
            }
            a[i * d + j] = s / l;
        }
    }
    let mut w = b.to_vec();
    for c in 0..v {
        // Forward: L z = b.
        for i in 0..d {
            let mut s = w[i * v + c];
            for k in 0..i {
                s -= a[i * d + k] * w[k * v + c];
            }
            w[i * v + c] = s / a[i * d + i];
        }
        // Backward: Lᵀ w = z.
        for i in (0..d).rev() {
            let mut s = w[i * v + c];
            for k in i + 1..d {
                s -= a[k * d + i] * w[k * v + c];
            }
            w[i * v + c] = s / a[i * d + i];
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cholesky_solves_a_small_system() {
        // A = [[4, 2], [2, 3]], B = A·[[1, 0], [2, 1]] = [[8, 2], [8, 3]].
        let mut a = vec![4.0, 2.0, 2.0, 3.0];
        let w = cholesky_solve(&mut a, &[8.0, 2.0, 8.0, 3.0], 2, 2);
        for (x, y) in w.iter().zip([1.0, 0.0, 2.0, 1.0]) {
            assert!((x - y).abs() < 1e-9, "{w:?}");
        }
    }
}
