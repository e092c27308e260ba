//! Observability: Prometheus metrics, the learner's JSONL run log, and the
//! HTML report drawn from run logs.
//!
//! - [`names`]: every metric name and label key (the dashboard and alerts use these).
//! - [`metrics`]: metric descriptions and the recording helpers the roles call.
//! - [`server`]: `/metrics`, `/healthz`, `/readyz` on `--metrics-addr`.
//! - [`runlog`]: `RUN_DIR/config.toml` + `RUN_DIR/run.jsonl`, written and read back.
//! - [`stages`]: where each role's time goes, as histograms, totals and a per-process report.
//! - [`tensorboard`]: the same records as TensorBoard event files (`RUN_DIR/tb/`).
//! - [`report`] / [`plot`]: `caprl report`, one self-contained HTML page with SVG plots
//!   (its config-difference and sample-caption tables in `report_tables`).

mod error;
pub mod metrics;
pub mod names;
pub mod plot;
mod png_text;
mod records;
pub mod report;
mod report_tables;
pub mod runlog;
pub mod server;
pub mod stages;
pub mod tensorboard;

pub use error::{Result, TelemetryError};
pub use names::all_metric_names;
pub use png_text::PngFont;
pub use report::{write_report, ReportOptions, ReportOutcome};
pub use runlog::{
    read_run_log, EvalRecord, ResumeRecord, RunLog, RunLogContents, SampleCaption, SamplesRecord,
    StepRecord,
};
pub use server::{install_recorder, serve, serve_labeled, ProcessLabels, Readiness, ServerHandle};
