//! caprl-model: the captioning models in Candle and what trains and checks them.
//!
//! - [`model`]: the captioners (one seam, the recurrent and Transformer architectures behind
//!   it), their CPU kernels and the decoding strategies.
//! - [`fastmath`]: a branch-free `exp` that vectorises, and the SIMD level dispatch.
//! - [`optim`]: AdamW with checkpointable state, clipping, schedules.
//! - [`selftest`]: a device's results against the CPU's (`caprl selftest`).
//!
//! It reads [`caprl_data`]'s data sets and [`caprl_wire`]'s sampling parameters; nothing here
//! knows the bus, the run config or the roles.

pub mod fastmath;
pub mod model;
pub mod optim;
pub mod selftest;
