//! caprl's hand-written CPU kernels, and the one decision between them and Candle's generic ops.
//!
//! On the CPU in f32/f64 the project runs its own kernels (the fused recurrent layer, the
//! linear and token log-softmax nodes, the host decoding step, the fused AdamW update, the host
//! gradient norm). Every other device and dtype — CUDA above all — runs the same maths as
//! Candle ops. That op path is what a GPU executes, so it must be tested where the tests run:
//! `CAPRL_GENERIC_OPS=1` makes the CPU take it at f32/f64 too, and CI runs the gradient checks,
//! the optimizer, decoding and the trainers a second time so.
//!
//! The kernels themselves know nothing of captioning or of any one architecture:
//! - `linear`: `y = x Wᵀ + b` as one node; `bias`: adding a row bias; `transpose`: blocked
//!   transposed copies; `additive_attention`: additive attention over regions with its backward;
//!   `token_logp`: the log-softmax of the taken tokens only; `layer_norm`: the Transformer's
//!   layer norm with its backward; `attention_softmax`: scaled, optionally causal attention weights;
//!   `relu`: the rectifier with a one-pass backward.
//! - `real`: the element types (f32, f64) and the helpers they share; `host_gemm`: host
//!   matrix products and row-parallel loops.
//! - [`fastmath`]: a branch-free `exp` that vectorises, the SIMD level dispatch (`vectorised!`)
//!   and the machine's multiply-add peak.
//! - `mode`: the generic-ops switch ([`kernels_enabled`]).
//!
//! Its own crate, below `caprl-model`: it knows Candle and the CPU, not the models.

pub mod additive_attention;
pub mod attention_softmax;
pub mod bias;
pub mod fastmath;
pub mod host_gemm;
pub mod layer_norm;
pub mod linear;
mod mode;
#[cfg(any(test, feature = "test-support"))]
pub mod op_check;
pub mod panel_tiles;
pub mod panels;
pub mod real;
pub mod relu;
pub mod token_logp;
pub mod transpose;

pub use mode::{
    generic_ops, generic_ops_from_env, kernels_enabled, set_generic_ops, BadGenericOps,
    GENERIC_OPS_ENV,
};
