//! What a captioning model reads: a batch of features ([`Inputs`]) and padded token
//! sequences ([`batch_tokens`], [`token_mask`]). The same for every architecture.

use candle_core::{DType, Device, Tensor};

use super::config::CaptionerConfig;
use super::error::{ModelError, Result};
use super::tokens::{EOS, PAD};

/// A batch of image features on the model's device.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Global features `[B, Dfc]`.
    pub fc: Tensor,
    /// Region features `[B, R, Da]` (att models; log-mel frames for crnn).
    pub att: Option<Tensor>,
    /// crnn only: `att` holds each distinct clip once, `[U, T, M]`, and row `i` of the batch
    /// is clip `expand[i]` (u32 `[B]`), so a clip repeated for its references or samples is
    /// encoded once.
    pub(crate) expand: Option<Tensor>,
    /// Set when rows were selected from another batch ([`Inputs::repeat_each`],
    /// [`Inputs::select_rows`]): that batch's features and which of its rows each row shows,
    /// so that a model can encode each image once however often it repeats.
    pub(crate) images: Option<Images>,
}

/// The features of a batch that another batch's rows were selected from.
#[derive(Debug, Clone)]
pub(crate) struct Images {
    fc: Tensor,
    att: Option<Tensor>,
    /// The image (row of `fc` / `att`) each row shows.
    of_row: Vec<u32>,
}

impl Inputs {
    /// Builds a batch of `b` images from row-major host features (as `Dataset::fc_rows` and
    /// `Dataset::att_rows` return them), checking their sizes against `cfg`.
    pub fn from_host(
        fc: &[f32],
        att: Option<&[f32]>,
        b: usize,
        cfg: &CaptionerConfig,
        device: &Device,
    ) -> Result<Self> {
        if fc.len() != b * cfg.fc_dim {
            return Err(ModelError::Input(format!(
                "fc features have {} values, expected batch {b} x fc_dim {} = {}",
                fc.len(),
                cfg.fc_dim,
                b * cfg.fc_dim
            )));
        }
        let fc = Tensor::from_slice(fc, (b, cfg.fc_dim), device)?.to_dtype(cfg.compute_dtype)?;
        let needs_att = cfg.reads_att();
        let att =
            match (needs_att, cfg.att, att) {
                (true, Some((r, d)), Some(a)) => {
                    if a.len() != b * r * d {
                        return Err(ModelError::Input(format!(
                            "region features have {} values, expected {b} x {r} x {d}",
                            a.len()
                        )));
                    }
                    Some(Tensor::from_slice(a, (b, r, d), device)?.to_dtype(cfg.compute_dtype)?)
                }
                (true, _, None) => return Err(ModelError::Input(
                    "the att and crnn models need region (log-mel frame) features; none were given"
                        .into(),
                )),
                _ => None,
            };
        Ok(Self {
            fc,
            att,
            expand: None,
            images: None,
        })
    }

    /// Makes row `i` of the batch clip `expand[i]` of these inputs (crnn: `att` stays one
    /// row per distinct clip).
    pub(crate) fn expand_rows(self, expand: &[u32]) -> Result<Self> {
        let idx = Tensor::from_slice(expand, expand.len(), self.fc.device())?;
        Ok(Self {
            fc: self.fc.index_select(&idx, 0)?,
            att: self.att,
            expand: Some(idx),
            images: None,
        })
    }

    /// Number of images in the batch.
    pub fn batch_size(&self) -> Result<usize> {
        Ok(self.fc.dim(0)?)
    }

    /// Each image repeated `n` times in place: rows `i*n .. i*n+n` are image `i`.
    pub fn repeat_each(&self, n: usize) -> Result<Self> {
        let b = self.batch_size()?;
        let idx: Vec<u32> = (0..b as u32)
            .flat_map(|i| std::iter::repeat_n(i, n))
            .collect();
        let idx = Tensor::from_vec(idx, b * n, self.fc.device())?;
        self.select(&idx)
    }

    /// The images at `rows` (repeats allowed), in that order.
    pub fn select_rows(&self, rows: &[usize]) -> Result<Self> {
        let b = self.batch_size()?;
        if let Some(bad) = rows.iter().find(|&&r| r >= b) {
            return Err(ModelError::Input(format!(
                "row {bad} is outside a batch of {b}"
            )));
        }
        let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        self.select(&Tensor::from_vec(idx, rows.len(), self.fc.device())?)
    }

    pub(crate) fn select(&self, idx: &Tensor) -> Result<Self> {
        // crnn inputs keep their clips once in `att` already.
        let images = match (&self.expand, &self.images) {
            (Some(_), _) => None,
            (None, Some(im)) => {
                let picked = idx.to_vec1::<u32>()?;
                Some(Images {
                    fc: im.fc.clone(),
                    att: im.att.clone(),
                    of_row: picked.iter().map(|&i| im.of_row[i as usize]).collect(),
                })
            }
            (None, None) => Some(Images {
                fc: self.fc.clone(),
                att: self.att.clone(),
                of_row: idx.to_vec1::<u32>()?,
            }),
        };
        Ok(Self {
            images,
            fc: self.fc.index_select(idx, 0)?,
            att: match (&self.att, &self.expand) {
                (Some(a), None) => Some(a.index_select(idx, 0)?),
                (Some(a), Some(_)) => Some(a.clone()),
                (None, _) => None,
            },
            expand: match &self.expand {
                Some(e) => Some(e.index_select(idx, 0)?),
                None => None,
            },
        })
    }

    pub(crate) fn detach(&self) -> Self {
        Self {
            fc: self.fc.detach(),
            att: self.att.as_ref().map(|a| a.detach()),
            expand: self.expand.clone(),
            images: self.images.as_ref().map(|im| Images {
                fc: im.fc.detach(),
                att: im.att.as_ref().map(|a| a.detach()),
                of_row: im.of_row.clone(),
            }),
        }
    }

    /// Each distinct image of the batch once — `fc` `[U, Dfc]`, `att` `[U, R, Da]` — and the
    /// image each row shows (`[B]`, values `< U`, in order of first appearance).
    pub(crate) fn distinct(&self) -> Result<(Tensor, Option<Tensor>, Vec<u32>)> {
        let Some(im) = &self.images else {
            let b = self.batch_size()? as u32;
            return Ok((self.fc.clone(), self.att.clone(), (0..b).collect()));
        };
        let (first, of_row) = first_appearances(&im.of_row);
        let idx = Tensor::from_slice(&first, first.len(), self.fc.device())?;
        let att = match &im.att {
            Some(a) => Some(a.index_select(&idx, 0)?),
            None => None,
        };
        Ok((im.fc.index_select(&idx, 0)?, att, of_row))
    }
}

/// The distinct values of `items` in order of first appearance, and for each item the index of
/// its value among them.
pub(crate) fn first_appearances<T: Copy + Eq + std::hash::Hash>(items: &[T]) -> (Vec<T>, Vec<u32>) {
    let mut distinct = Vec::new();
    let mut seen = std::collections::HashMap::new();
    let index = items
        .iter()
        .map(|&v| {
            *seen.entry(v).or_insert_with(|| {
                distinct.push(v);
                distinct.len() as u32 - 1
            })
        })
        .collect();
    (distinct, index)
}

/// Checks teacher-forcing tokens `seqs` `[B, T]` against the batch and the vocabulary and
/// returns them on the host.
pub(crate) fn host_tokens(x: &Inputs, seqs: &Tensor, vocab: usize) -> Result<Vec<Vec<u32>>> {
    let (b, _) = seqs.dims2().map_err(|_| {
        ModelError::Input(format!(
            "token sequences must be [B, T], got {:?}",
            seqs.shape()
        ))
    })?;
    if x.batch_size()? != b {
        return Err(ModelError::Input(format!(
            "{} images but {b} token sequences",
            x.batch_size()?
        )));
    }
    let host = seqs.to_vec2::<u32>()?;
    if let Some(bad) = host.iter().flatten().find(|&&w| w as usize >= vocab) {
        return Err(ModelError::Input(format!(
            "token id {bad} is outside the vocabulary of {vocab}"
        )));
    }
    Ok(host)
}

/// Pads token sequences (no BOS, ending at EOS) with PAD to `[B, T]`, `T` the longest length.
pub fn batch_tokens(seqs: &[Vec<u32>], device: &Device) -> Result<Tensor> {
    let t = seqs.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut flat = vec![PAD; seqs.len() * t];
    for (row, s) in flat.chunks_mut(t).zip(seqs) {
        row[..s.len()].copy_from_slice(s);
    }
    Ok(Tensor::from_vec(flat, (seqs.len(), t), device)?)
}

/// 1 for tokens up to and including the first EOS (or up to the first PAD when there is no
/// EOS), else 0; in `dtype`.
pub(crate) fn token_mask(seqs: &Tensor, dtype: DType, device: &Device) -> Result<Tensor> {
    let (b, t) = seqs.dims2()?;
    let host = seqs.to_vec2::<u32>()?;
    let mut mask = vec![0f32; b * t];
    for (r, row) in host.iter().enumerate() {
        for (s, &w) in row.iter().enumerate() {
            if w == PAD {
                break;
            }
            mask[r * t + s] = 1.0;
            if w == EOS {
                break;
            }
        }
    }
    Ok(Tensor::from_vec(mask, (b, t), device)?.to_dtype(dtype)?)
}
