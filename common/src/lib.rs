//! caprl-common: what every caprl role shares. The lower layers are crates of their own,
//! re-exported here under the paths the roles use: `caprl-wire` ([`wire`], [`check`]),
//! `caprl-data` ([`data`]), `caprl-model` ([`model`], [`fastmath`], [`optim`], [`selftest`])
//! and `caprl-score` ([`score`]). What stays here joins them into a run: the config, the bus,
//! the roles' loop, telemetry, CLIP and the snapshot.
//!
//! - [`clip`]: joint text–image embeddings (own dual encoder, Hugging Face CLIP loader), the
//!   discriminator and retrieval metrics of paper 004.
//! - [`check`]: rules over a config section, written once by the section's owner.
//! - [`config`]: the one typed, validated run configuration.
//! - [`data`]: tokenizer, vocabulary, data set formats, the synthetic task.
//! - [`score`]: CIDEr-D, BLEU, ROUGE-L and diversity metrics.
//! - [`wire`]: message types and the versioned codec.
//! - [`bus`]: the message bus (NATS JetStream and in-process).
//! - [`role`]: what the roles share: heartbeats and the serve loop of actor and reward worker.
//! - [`shutdown`]: the stop signal every role loop watches.
//! - [`snapshot`]: the policy snapshot's layout (captioner and discriminator tensors, the
//!   vocabulary stamp), written by the learner, read by actors and reward workers.
//! - [`model`]: the captioning models in Candle (one seam, the recurrent captioner behind it),
//!   their CPU kernels and the decoding strategies.
//! - [`fastmath`]: a branch-free `exp` that vectorises (RNN gate sigmoids and tanhs, contrastive
//!   rewards).
//! - [`optim`]: AdamW with checkpointable state, clipping, schedules.
//! - [`progress`]: progress bars on a terminal, periodic log lines elsewhere.
//! - [`selftest`]: a device's results against the CPU's (`caprl selftest`).
//! - [`telemetry`]: Prometheus metrics, the run log, TensorBoard event files and the HTML report.
//! - [`process`]: the process-wide settings the binary and benchmarks start with.

pub mod bus;
pub mod clip;
pub mod config;
pub mod process;
pub mod progress;
pub mod role;
pub mod shutdown;
pub mod snapshot;
pub mod telemetry;

pub use caprl_data as data;
pub use caprl_model::{fastmath, model, optim, selftest};
pub use caprl_score as score;
pub use caprl_wire as wire;
pub use caprl_wire::check;
