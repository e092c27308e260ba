//! Captioning models in Candle and their decoders.
//!
//! - [`Captioner`]: the one model type callers hold. It wraps one architecture behind the
//!   seam in `seam` (`CaptionModel` and its prepared
//!   `StepDecoder`): the recurrent captioner of `rnn/` — `fc` (global
//!   feature) or `att` (additive attention over regions) with a hand-written GRU/LSTM decoder of
//!   one or two layers, or `crnn` (the audio encoder of paper 000) — and the Transformer of
//!   `transformer/` (self-critical.pytorch's, with key/value-cached decoding); weights live in
//!   a candle `VarMap`.
//! - Teacher forcing: [`Captioner::token_logprobs`] (per-token `log p` with gradients plus mask) and
//!   [`Captioner::teacher_forced`] (full log-softmax and per-step decoder states for value heads).
//! - `decoding/`: strategies that do not depend on the architecture, on weights prepared once in a
//!   [`Decoder`] ([`Captioner::decoder`]; the same methods on [`Captioner`] prepare them per call):
//!   greedy, sample (Gumbel-max on the seeded [`CaprlRng`]), complete_from_prefix, beam (trigram
//!   blocking, length normalisation) and beam_lookahead (value-guided, paper 001).
//! - `dropout`: inverted dropout from the seeded [`CaprlRng`], a CPU kernel beside
//!   [`caprl_kernels`]' (linear, bias, transpose, token log-softmax, host matrix products, the
//!   switch to Candle's generic ops).
//! - [`Inputs`], [`batch_tokens`], [`inputs_for_rows`]: what the models read.
//! - [`ValueHead`]: the MLP critic / learned baseline on detached decoder states.
//! - [`crnn_param_count`]: the CRNN audio encoder's size (paper 000 reports 679k).
//! - [`DeviceSpec`], [`parse_device`], [`open_device`]: `cpu` or `cuda:N`, one grammar for the
//!   config key and the flags.
//!
//! # Adding an architecture
//!
//! A new model kind lives in its own folder next to `rnn/` and `transformer/`: a type that holds
//! a `ModelBase` (configuration, device, weights) and implements
//! `CaptionModel` (the taken tokens' log-probs on the fused path, full
//! teacher forcing, a step decoder for a snapshot, share; the accessors, the compute dtype and
//! the rule for when the fused path applies are the seam's defaults), and a
//! `StepDecoder` whose `DecodeState` selects rows,
//! advances one token, returns the logits and the state a value head reads. Its config keys are
//! fields of [`ModelConfig`], the `[model]` section, each with its rule in
//! [`ModelConfig::CHECKS`] and its default in `ModelConfig::default` (`config/default.toml`
//! states it, checked by a test). Then one registration: its [`ModelKind`] variant mapped to its
//! constructor in `captioner.rs`'s `architecture` (and in `config.rs`, `reads_att`,
//! `ModelConfig::state_dim` and `CaptionerConfig::validate` say which features it needs and
//! what a value head reads). Greedy, sampling, prefix completion, beam search, save/load and
//! every caller work unchanged.

mod captioner;
mod config;
mod decode_config;
mod decoding;
mod device;
mod device_spec;
mod dropout;
mod error;
mod inputs;
mod io;

pub mod params;
mod rng;
mod rnn;
mod rows;
mod seam;
mod tokens;
mod transformer;
mod value_head;

pub use candle_core::{DType, Device, Tensor};
pub use captioner::Captioner;
pub use config::{
    CaptionerConfig, Dtype, ModelConfig, ModelKind, RnnKind, FREQ_DIVISOR, MAX_CAPTION_WORDS,
    MAX_CAPTION_WORDS_ALLOWED,
};
pub use decode_config::DecodeConfig;
pub use decoding::{
    BadEndings, BeamOptions, BeamRule, Decoded, Decoder, Hypothesis, Lookahead, SampleOptions,
    BAD_ENDING_WORDS,
};
pub use device::keep_elementwise_ops_on_one_thread;
pub use device::{on_rayon, open_device, parse_device};
pub use device_spec::{BadDevice, DeviceSpec};
pub use error::ModelError;
pub use inputs::{batch_tokens, Inputs};
pub use rng::{CaprlRng, RngState};
pub use rnn::crnn::{conv_channels, crnn_param_count};
pub use rows::inputs_for_rows;
pub use seam::TeacherForced;
pub use value_head::{ValueHead, VALUE_WIDTH};

pub use tokens::{BOS, EOS, PAD};
