//! The captioner in Candle and its decoders.
//!
//! - [`Captioner`]: `fc` (global feature) or `att` (additive attention over regions) model with a
//!   hand-written GRU/LSTM decoder of one or two layers; weights live in a candle `VarMap`.
//! - Teacher forcing: [`Captioner::token_logprobs`] (per-token `log p` with gradients plus mask) and
//!   [`Captioner::teacher_forced`] (full log-softmax and per-step hidden states for value heads).
//! - Decoding on detached weights, prepared once in a [`Decoder`] ([`Captioner::decoder`]; the
//!   same methods on [`Captioner`] prepare them per call): greedy, sample (Gumbel-max on the
//!   seeded [`CaprlRng`]), complete_from_prefix, beam and beam_lookahead (value-guided, seed 001).
//! - [`ValueHead`]: the MLP critic / learned baseline on detached decoder states.
//! - [`crnn_param_count`]: the CRNN audio encoder's size (seed 000 reports 679k).
//! - [`parse_device`]: `cpu` or `cuda:N`.

mod attention;
mod beam;
mod bias;
mod captioner;
mod config;
mod crnn;
mod decode;
mod decoder;
mod device;
mod dropout;
mod error;
mod fused_rnn;
mod greedy;
mod host_step;
mod io;
mod kernels;
mod linear;
#[cfg(test)]
mod op_check;
mod rng;
mod rnn;
mod rows;
mod sample;
mod teacher;
mod token_logp;
mod transpose;
mod value_head;

pub use beam::{BeamOptions, Hypothesis, Lookahead};
pub use candle_core::{DType, Device, Tensor};
pub use captioner::{batch_tokens, Captioner, Inputs};
pub use config::{CaptionerConfig, ModelKind, RnnKind};
pub use crnn::{conv_channels, crnn_param_count, FREQ_DIVISOR};
pub use decode::{on_rayon, Decoded};
pub use decoder::Decoder;
pub use device::{keep_elementwise_ops_on_one_thread, parse_device};
pub use error::ModelError;
pub use kernels::{
    generic_ops, generic_ops_from_env, kernels_enabled, set_generic_ops, GENERIC_OPS_ENV,
};
pub use rng::{CaprlRng, RngState};
pub use rows::inputs_for_rows;
pub use sample::SampleOptions;
pub use teacher::TeacherForced;
pub use value_head::{ValueHead, VALUE_WIDTH};

/// Vocabulary ids the decoder relies on (see `data::Vocab`).
pub const PAD: u32 = 0;
/// Beginning of sentence, the decoder's first input.
pub const BOS: u32 = 1;
/// End of sentence; decoding stops after it.
pub const EOS: u32 = 2;
