//! caprl-report: `caprl report`, one self-contained HTML page with SVG plots drawn from the run
//! logs (`caprl_common::telemetry::runlog`) of one or more runs, and the PNG plots beside it.
//! Only the command that draws it pulls the plotting crates; the roles do not.
//!
//! - [`report`]: the page, its plots and its tables (config differences, sample captions in
//!   `tables`).
//! - [`plot`]: the plots, as SVG for the page and PNG files (text drawn by `png_text`).

pub mod plot;
mod png_text;
pub mod report;
mod tables;

pub use png_text::PngFont;
pub use report::{write_report, ReportOptions, ReportOutcome};
