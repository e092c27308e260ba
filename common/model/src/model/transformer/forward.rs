//! One pass of the Transformer as graph ops: the encoder (each distinct image once) and the
//! decoder layers, over a whole sequence (teacher forcing) or one new token against a
//! key/value cache (the graph path of decoding).

use candle_core::{Tensor, D};

use super::layers::{attention, layer_norm, merge_heads, positions, split_heads};
use super::{source_dim, DecoderLayer, EncoderLayer, SelfAttention, TransformerCaptioner, Weights};
use crate::model::dropout::dropout;
use crate::model::error::{ModelError, Result};
use crate::model::inputs::Inputs;
use crate::model::rng::CaprlRng;
use caprl_kernels::relu::relu;

/// The encoded images as the decoder reads them.
pub(crate) struct Memory {
    /// Each decoder layer's cross-attention keys and values of every distinct image,
    /// `[U, h, R, dk]` each.
    pub kv: Vec<(Tensor, Tensor)>,
    /// The distinct image each row reads (`U` of them).
    pub row_image: Vec<u32>,
}

impl Memory {
    /// Every layer's keys and values for rows showing the images `rows` (indices of the
    /// distinct images), `[rows, h, R, dk]` each; no copy when the rows are the images in order.
    pub(crate) fn for_rows(&self, rows: &[u32]) -> Result<Vec<(Tensor, Tensor)>> {
        let Some((k0, _)) = self.kv.first() else {
            return Ok(Vec::new());
        };
        let images = k0.dim(0)?;
        if rows.len() == images && rows.iter().enumerate().all(|(i, &r)| i as u32 == r) {
            return Ok(self.kv.clone());
        }
        let idx = Tensor::from_slice(rows, rows.len(), k0.device())?;
        self.kv
            .iter()
            .map(|(k, v)| Ok((k.index_select(&idx, 0)?, v.index_select(&idx, 0)?)))
            .collect()
    }
}

/// A decoder layer's self-attention keys and values of the tokens fed so far, `[rows, h, t, dk]`.
#[derive(Clone, Default)]
pub(crate) struct KvCache {
    pub k: Option<Tensor>,
    pub v: Option<Tensor>,
}

impl TransformerCaptioner {
    /// Encodes each distinct image of `x` once: regions (or the `fc` feature as one region) →
    /// projection → encoder layers → final norm, then every decoder layer's cross-attention
    /// keys and values of that memory.
    pub(crate) fn encode(
        &self,
        w: &Weights,
        x: &Inputs,
        detach: bool,
        mut drop: Option<&mut CaprlRng>,
    ) -> Result<Memory> {
        let (fc, att, row_image) = x.distinct()?;
        let global = fc.unsqueeze(1)?;
        let regions = match att {
            Some(a) => a,
            None => global.clone(),
        };
        let dim = regions.dim(D::Minus1)?;
        if dim != source_dim(&self.base.cfg) {
            return Err(ModelError::Input(format!(
                "region features have dim {dim}, the model expects {}",
                source_dim(&self.base.cfg)
            )));
        }
        let prepare = |t: Tensor| -> Result<Tensor> {
            let t = if detach { t.detach() } else { t };
            Ok(t.to_dtype(self.base.cfg.compute_dtype)?)
        };
        let mut h = relu(&w.src.forward(&prepare(regions)?)?)?;
        if let Some(src_fc) = &w.src_fc {
            let g = relu(&src_fc.forward(&prepare(global)?)?)?;
            h = Tensor::cat(&[&h, &g], 1)?;
        }
        let p = self.base.cfg.dropout();
        let mut h = dropout(&h, p, drop.as_deref_mut())?;
        for layer in &w.encoder {
            h = self.encoder_layer(layer, &h, drop.as_deref_mut())?;
        }
        let memory = layer_norm(&h, &w.enc_norm)?;
        let d = self.shape().d_model;
        let heads = self.shape().heads;
        let kv = w
            .decoder
            .iter()
            .map(|l| {
                let kv = l.cross.kv.forward(&memory)?;
                Ok((
                    split_heads(&kv.narrow(2, 0, d)?, heads)?,
                    split_heads(&kv.narrow(2, d, d)?, heads)?,
                ))
            })
            .collect::<Result<_>>()?;
        Ok(Memory { kv, row_image })
    }

    /// `x + dropout(attn(LN x))`, then `x + dropout(ff(LN x))`.
    fn encoder_layer(
        &self,
        l: &EncoderLayer,
        x: &Tensor,
        mut drop: Option<&mut CaprlRng>,
    ) -> Result<Tensor> {
        let p = self.base.cfg.dropout();
        let y = layer_norm(x, &l.norm1)?;
        let a = self.self_attention(&l.attn, &y, false, None, drop.as_deref_mut())?;
        let x = (x + dropout(&a, p, drop.as_deref_mut())?)?;
        let y = layer_norm(&x, &l.norm2)?;
        let f = l.ff.forward(&y, p, drop.as_deref_mut())?;
        Ok((x + dropout(&f, p, drop)?)?)
    }

    /// The word inputs `√d · E[ids] + PE(first_pos..)`, `ids` `[B, T]`, with dropout.
    pub(crate) fn embed_words(
        &self,
        w: &Weights,
        ids: &Tensor,
        first_pos: usize,
        drop: Option<&mut CaprlRng>,
    ) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let d = self.shape().d_model;
        let e = w
            .embed
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, t, d))?;
        let pe = Tensor::from_vec(positions(first_pos, t, d), (1, t, d), &self.base.device)?
            .to_dtype(e.dtype())?;
        let x = (e * (d as f64).sqrt())?.broadcast_add(&pe)?;
        dropout(&x, self.base.cfg.dropout(), drop)
    }

    /// The decoder over the word inputs `x` `[B, T, d]`, `cross` each layer's memory keys and
    /// values for these rows ([`Memory::for_rows`]): every layer, then the final norm;
    /// `[B, T, d]`. Teacher forcing passes no caches (the causal attention keeps each position to
    /// its prefix); a decoding step passes each layer's cache, which the step's keys and values are
    /// appended to.
    pub(crate) fn decoder(
        &self,
        w: &Weights,
        cross: &[(Tensor, Tensor)],
        mut x: Tensor,
        mut caches: Option<&mut [KvCache]>,
        mut drop: Option<&mut CaprlRng>,
    ) -> Result<Tensor> {
        let causal = caches.is_none();
        for (l, layer) in w.decoder.iter().enumerate() {
            let cache = caches.as_deref_mut().map(|c| &mut c[l]);
            x = self.decoder_layer(layer, &x, &cross[l], causal, cache, drop.as_deref_mut())?;
        }
        layer_norm(&x, &w.dec_norm)
    }

    /// Masked self-attention, cross-attention over the memory (`cross`: keys and values of
    /// this layer for the rows), feed-forward; each `x + dropout(sublayer(LN x))`.
    fn decoder_layer(
        &self,
        l: &DecoderLayer,
        x: &Tensor,
        cross: &(Tensor, Tensor),
        causal: bool,
        cache: Option<&mut KvCache>,
        mut drop: Option<&mut CaprlRng>,
    ) -> Result<Tensor> {
        let (p, heads) = (self.base.cfg.dropout(), self.shape().heads);
        let y = layer_norm(x, &l.norm1)?;
        let a = self.self_attention(&l.attn, &y, causal, cache, drop.as_deref_mut())?;
        let x = (x + dropout(&a, p, drop.as_deref_mut())?)?;
        let y = layer_norm(&x, &l.norm2)?;
        let q = split_heads(&l.cross.q.forward(&y)?, heads)?;
        let a = attention(&q, &cross.0, &cross.1, false, p, drop.as_deref_mut())?;
        let a = l.cross.out.forward(&merge_heads(&a)?)?;
        let x = (x + dropout(&a, p, drop.as_deref_mut())?)?;
        let y = layer_norm(&x, &l.norm3)?;
        let f = l.ff.forward(&y, p, drop.as_deref_mut())?;
        Ok((x + dropout(&f, p, drop)?)?)
    }

    /// Multi-head self-attention of the normed inputs `y` `[B, T, d]`, `causal` in teacher
    /// forcing or, for a decoding step, the keys and values of the tokens before appended from `cache`
    /// (which then holds these too).
    fn self_attention(
        &self,
        attn: &SelfAttention,
        y: &Tensor,
        causal: bool,
        cache: Option<&mut KvCache>,
        drop: Option<&mut CaprlRng>,
    ) -> Result<Tensor> {
        let (heads, d) = (self.shape().heads, self.shape().d_model);
        let qkv = attn.qkv.forward(y)?;
        let q = split_heads(&qkv.narrow(2, 0, d)?, heads)?;
        let mut k = split_heads(&qkv.narrow(2, d, d)?, heads)?;
        let mut v = split_heads(&qkv.narrow(2, 2 * d, d)?, heads)?;
        if let Some(c) = cache {
            if let (Some(ck), Some(cv)) = (&c.k, &c.v) {
                k = Tensor::cat(&[ck, &k], 2)?;
                v = Tensor::cat(&[cv, &v], 2)?;
            }
            c.k = Some(k.clone());
            c.v = Some(v.clone());
        }
        let a = attention(&q, &k, &v, causal, self.base.cfg.dropout(), drop)?;
        attn.out.forward(&merge_heads(&a)?)
    }
}
