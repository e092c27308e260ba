//! Decoding strategies that do not depend on the architecture. Each drives a model's
//! [`DecodeState`](super::seam::DecodeState) one token per row at a time and decides on the
//! host, from the logits:
//! - `decoder`: [`Decoder`], a snapshot of the weights prepared once, and the per-call
//!   shortcuts on [`Captioner`](super::Captioner);
//! - `rollout`: the step loop (row compaction at EOS, forced prefixes) under a token `Policy`;
//! - `greedy`: argmax; `sample`: Gumbel-max sampling with temperature, top-k and top-p (the
//!   truncation in `nucleus`), and prefix completion; `beam`: beam search with trigram
//!   blocking, length normalisation, lookahead and diverse groups (the penalty in `diversity`);
//! - `bad_endings`: EOS forbidden after function words, for all of them;
//! - `softmax`: the host log-softmax they all read.

mod bad_endings;
mod beam;
mod decoder;
mod diversity;
mod greedy;
mod log_softmax;
mod nucleus;
mod rollout;
mod sample;

pub use bad_endings::{BadEndings, BAD_ENDING_WORDS};
pub use beam::{BeamOptions, BeamRule, Hypothesis, Lookahead};
pub use decoder::Decoder;
pub use rollout::Decoded;
pub use sample::SampleOptions;
