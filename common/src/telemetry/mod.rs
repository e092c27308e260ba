//! Observability: Prometheus metrics, the learner's JSONL run log, TensorBoard event files and
//! where each role's time goes.
//!
//! - [`names`]: every metric name and label key (the dashboard and alerts use these).
//! - [`metrics`]: metric descriptions and the recording helpers the roles call.
//! - [`server`]: `/metrics`, `/healthz`, `/readyz` on `--metrics-addr`.
//! - [`runlog`]: `RUN_DIR/config.toml` + `RUN_DIR/run.jsonl`, written and read back.
//! - [`stages`]: where each role's time goes, as histograms, totals and a per-process report.
//! - [`tensorboard`]: the same records as TensorBoard event files (`RUN_DIR/tb/`).
//!
//! `caprl report`'s page and plots are the `caprl-report` crate's: the roles do not pull the
//! plotting crates.

mod error;
pub mod metrics;
pub mod names;
mod records;
pub mod runlog;
pub mod server;
pub mod stages;
pub mod tensorboard;

pub use error::{Result, TelemetryError};
pub use names::all_metric_names;
pub use runlog::{
    read_run_log, EvalRecord, ResumeRecord, RunLog, RunLogContents, SampleCaption, SamplesRecord,
    StepRecord,
};
pub use server::{install_recorder, serve, serve_labeled, ProcessLabels, Readiness, ServerHandle};
