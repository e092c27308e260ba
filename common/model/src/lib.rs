//! caprl-model: the captioning models in Candle and what trains and checks them.
//!
//! - [`model`]: the captioners (one seam, the recurrent and Transformer architectures behind
//!   it) and the decoding strategies, on [`caprl_kernels`]' CPU kernels.
//! - [`optim`]: AdamW with checkpointable state, clipping, schedules.
//! - [`selftest`]: a device's results against the CPU's (`caprl selftest`).
//!
//! It reads [`caprl_data`]'s data sets and [`caprl_wire`]'s sampling parameters and runs
//! [`caprl_kernels`]; nothing here
//! knows the bus, the run config or the roles.

pub mod model;
pub mod optim;
pub mod selftest;
