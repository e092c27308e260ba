//! caprl-common: what joins caprl's layers into a run. The layers below are crates of their
//! own, which the roles name directly: `caprl-wire` (messages, codec, the config rule type),
//! `caprl-data` (data sets), `caprl-model` (models, kernels, decoding, AdamW) and `caprl-score`
//! (CIDEr-D and the other metrics); `caprl-clip`, the joint text–image embeddings, sits above
//! it.
//!
//! - [`config`]: the one typed, validated run configuration.
//! - [`bus`]: the message bus (NATS JetStream and in-process).
//! - [`role`]: what the roles share: heartbeats and the serve loop of actor and reward worker.
//! - [`shutdown`]: the stop signal every role loop watches.
//! - [`snapshot`]: the policy snapshot's layout (captioner and discriminator tensors, the
//!   vocabulary stamp), written by the learner, read by actors and reward workers.
//! - [`snapshot_delta`]: one snapshot as a checked change against an earlier one.
//! - [`progress`]: progress bars on a terminal, periodic log lines elsewhere.
//! - [`telemetry`]: Prometheus metrics, the run log, TensorBoard event files and the HTML report.
//! - [`process`]: the process-wide settings the binary and benchmarks start with.

pub mod bus;
pub mod config;
pub mod process;
pub mod progress;
pub mod role;
pub mod shutdown;
pub mod snapshot;
pub mod snapshot_delta;
pub mod telemetry;
