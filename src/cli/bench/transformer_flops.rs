//! The floating-point work of `caprl bench transformer`'s tasks, counted from the model's
//! shapes: 2 FLOPs per multiply-add of the matrix products (projections, attention scores and
//! weighted sums, feed-forward layers, output logits). Element-wise work (layer norms,
//! softmaxes, the optimizer's update) is left out: it is memory traffic, not multiply-adds.
//!
//! What the task must do, not what an implementation may repeat: each image is encoded, and
//! its regions projected to every decoder layer's cross-attention keys and values, once per
//! image, however many captions of it are trained or decoded. A backward pass costs twice the
//! forward's products (the gradients of both operands).

use caprl_model::model::ModelConfig;

/// The sizes the count reads.
pub(super) struct Dims {
    /// `d_model`, `d_ff`, layers.
    d: f64,
    ff: f64,
    enc_layers: f64,
    dec_layers: f64,
    /// Regions per image (the `fc` vector counted as one more with `global_region`), and their
    /// feature size.
    regions: f64,
    features: f64,
    vocab: f64,
}

impl Dims {
    pub(super) fn new(model: &ModelConfig, regions: usize, features: usize, vocab: usize) -> Dims {
        Dims {
            d: model.d_model as f64,
            ff: model.d_ff as f64,
            enc_layers: model.enc_layers as f64,
            dec_layers: model.dec_layers as f64,
            regions: (regions + usize::from(model.global_region)) as f64,
            features: features as f64,
            vocab: vocab as f64,
        }
    }

    /// Multiply-adds of one image's encoding and its cross-attention keys and values.
    fn image_macs(&self) -> f64 {
        let (d, r) = (self.d, self.regions);
        let projection = r * self.features * d;
        let layer = 4.0 * r * d * d + 2.0 * r * r * d + 2.0 * r * d * self.ff;
        let cross_kv = 2.0 * r * d * d * self.dec_layers;
        projection + self.enc_layers * layer + cross_kv
    }

    /// Multiply-adds of one decoder position that attends to `prefix` positions (itself
    /// included), logits included.
    fn position_macs(&self, prefix: f64) -> f64 {
        let (d, r) = (self.d, self.regions);
        let layer = 4.0 * d * d + 2.0 * prefix * d + 2.0 * d * d + 2.0 * r * d + 2.0 * d * self.ff;
        self.dec_layers * layer + d * self.vocab
    }

    /// FLOPs of an XE step: teacher forcing of `captions` captions of `positions` positions over
    /// `images` images, forward and backward.
    pub(super) fn xe_step(&self, images: usize, captions: usize, positions: usize) -> f64 {
        let caption: f64 = (1..=positions).map(|p| self.position_macs(p as f64)).sum();
        let forward = images as f64 * self.image_macs() + captions as f64 * caption;
        2.0 * 3.0 * forward
    }

    /// FLOPs of a cached decode of `per_image` sequences (samples or beams) of `steps` tokens
    /// for each of `images` images.
    pub(super) fn decode(&self, images: usize, per_image: usize, steps: usize) -> f64 {
        let sequence: f64 = (1..=steps).map(|p| self.position_macs(p as f64)).sum();
        let images = images as f64;
        2.0 * (images * self.image_macs() + images * per_image as f64 * sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::Dims;
    use caprl_model::model::{ModelConfig, ModelKind};

    /// A model small enough to count by hand: d_model 2, d_ff 3, 1 + 1 layers, 2 regions of 4
    /// features, 5 words.
    #[test]
    fn the_count_is_the_shapes_multiply_adds() {
        let model = ModelConfig {
            kind: ModelKind::Transformer,
            enc_layers: 1,
            dec_layers: 1,
            d_model: 2,
            heads: 1,
            d_ff: 3,
            ..ModelConfig::default()
        };
        let dims = Dims::new(&model, 2, 4, 5);
        // Image: projection 2·4·2 = 16; encoder layer 4·2·2·2 + 2·2·2·2 + 2·2·2·3 = 72; cross
        // keys and values 2·2·2·2 = 16.
        assert_eq!(dims.image_macs(), 104.0);
        // Position p: 4·2·2 + 2·p·2 + 2·2·2 + 2·2·2 + 2·2·3 = 44 + 4p, and logits 2·5.
        assert_eq!(dims.position_macs(1.0), 58.0);
        assert_eq!(dims.position_macs(3.0), 66.0);
        // XE over 1 image, 2 captions of 3 positions: (104 + 2·(58 + 62 + 66)) · 3 passes · 2.
        assert_eq!(dims.xe_step(1, 2, 3), 2.0 * 3.0 * (104.0 + 2.0 * 186.0));
        // 2 sequences of 2 tokens for 1 image: (104 + 2·(58 + 62)) · 2.
        assert_eq!(dims.decode(1, 2, 2), 2.0 * (104.0 + 2.0 * 120.0));
        // With the fc vector as one more region, every region term grows.
        let global = ModelConfig {
            global_region: true,
            ..model
        };
        assert!(Dims::new(&global, 2, 4, 5).image_macs() > 104.0);
    }
}
