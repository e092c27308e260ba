//! [`Decoder`]: a captioner's weights prepared once for decoding; the shortcuts on
//! [`Captioner`] (`greedy`, `sample`, `beam`, beside each strategy) prepare them anew at every
//! call.
//!
//! Preparing is the architecture's (its [`StepDecoder`]); for the recurrent captioner it
//! detaches the weights, copies the transposed ones the steps read, computes the word table
//! `W_ih E + b_ih` `[V, G]` and lays the weights out for the host step: about as long as
//! greedy decoding of 8 images at hidden 512. A holder of weights that do not change
//! (an actor's policy snapshot, a model under evaluation) prepares them once and decodes every
//! batch with the same [`Decoder`].

use crate::model::captioner::Captioner;
use crate::model::config::CaptionerConfig;
use crate::model::device::on_rayon;
use crate::model::error::Result;
use crate::model::seam::StepDecoder;

/// Decoders over a snapshot of a captioner's weights: [`Decoder::greedy`], [`Decoder::sample`],
/// [`Decoder::complete_from_prefix`], [`Decoder::beam`], [`Decoder::beam_lookahead`].
///
/// It decodes with the weights as they were when [`Captioner::decoder`] made it; after they
/// change (an optimizer step, a load) make a new one.
pub struct Decoder {
    /// The configuration of the captioner this decoder was made from.
    pub(crate) cfg: CaptionerConfig,
    /// The device its weights live on.
    pub(crate) device: candle_core::Device,
    /// The architecture's prepared weights.
    pub(crate) steps: Box<dyn StepDecoder>,
}

impl Decoder {
    /// The configuration of the captioner this decoder was made from.
    pub fn config(&self) -> &CaptionerConfig {
        &self.cfg
    }

    /// The device the prepared weights live on.
    pub fn device(&self) -> &candle_core::Device {
        &self.device
    }
}

impl Captioner {
    /// The weights as they are now, prepared for decoding (see [`Decoder`]).
    pub fn decoder(&self) -> Result<Decoder> {
        // The block layout of the host step follows the thread count of the pool it runs in.
        on_rayon(self.device(), || {
            Ok(Decoder {
                cfg: self.config().clone(),
                device: self.device().clone(),
                steps: self.model.step_decoder()?,
            })
        })
    }
}
