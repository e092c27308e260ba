//! Progress reporting for long loops (data generation, epochs, evaluation).
//!
//! On a terminal this is an indicatif bar with rate and ETA on stderr.
//! Elsewhere (logs, CI, pods) a bar would only spam escape codes, so it emits
//! a plain `tracing::info!` line at most every [`LOG_EVERY`]. [`set_quiet`]
//! silences both.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Minimum interval between two plain progress lines.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

static QUIET: AtomicBool = AtomicBool::new(false);

/// Turns all progress output off (`-q`) or back on.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether progress output is off.
pub fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A line the user must see even with `-q`, because it says where their files went or that a
/// run did not do what its flags suggest (an earlier run moved aside, `--resume` that found
/// nothing to resume): a warning in the log, or `note: ...` on stderr when the log is quiet.
pub fn notice(msg: &str) {
    match is_quiet() {
        true => eprintln!("note: {msg}"),
        false => tracing::warn!("{msg}"),
    }
}

/// A progress counter for `total` units of work (`total = 0`: unknown).
///
/// Cheap to share between threads by reference: every method takes `&self`.
pub struct Progress {
    label: String,
    total: u64,
    done: AtomicU64,
    started: Instant,
    output: Output,
}

enum Output {
    Bar(ProgressBar),
    Log {
        last: Mutex<Instant>,
        msg: Mutex<String>,
    },
    Silent,
}

impl Progress {
    pub fn new(total: u64, label: &str) -> Progress {
        let started = Instant::now();
        let output = if is_quiet() {
            Output::Silent
        } else if std::io::stderr().is_terminal() {
            Output::Bar(make_bar(total, label))
        } else {
            Output::Log {
                last: Mutex::new(started),
                msg: Mutex::new(String::new()),
            }
        };
        Progress {
            label: label.to_string(),
            total,
            done: AtomicU64::new(0),
            started,
            output,
        }
    }

    /// Records `n` more units done.
    pub fn inc(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        match &self.output {
            Output::Bar(bar) => bar.inc(n),
            Output::Log { last, msg } => {
                let now = Instant::now();
                // Busy (another thread is logging) or poisoned: skipping one
                // progress line is harmless.
                if let Ok(mut last) = last.try_lock() {
                    if now.duration_since(*last) >= LOG_EVERY {
                        *last = now;
                        let suffix = msg
                            .lock()
                            .map(|m| {
                                if m.is_empty() {
                                    String::new()
                                } else {
                                    format!(" · {m}")
                                }
                            })
                            .unwrap_or_default();
                        tracing::info!("{}", self.line(done, &suffix));
                    }
                }
            }
            Output::Silent => {}
        }
    }

    /// Shows `msg` next to the bar (and in the next plain line).
    pub fn set_message(&self, msg: &str) {
        match &self.output {
            Output::Bar(bar) => bar.set_message(msg.to_string()),
            Output::Log { msg: slot, .. } => {
                if let Ok(mut slot) = slot.lock() {
                    slot.clear();
                    slot.push_str(msg);
                }
            }
            Output::Silent => {}
        }
    }

    /// Units done so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Ends the bar, or writes a final plain line.
    pub fn finish(&self) {
        match &self.output {
            Output::Bar(bar) => bar.finish(),
            Output::Log { .. } => tracing::info!("{}", self.line(self.done(), " (done)")),
            Output::Silent => {}
        }
    }

    /// `label: done/total, rate/s, ETA`.
    fn line(&self, done: u64, suffix: &str) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        if self.total == 0 {
            return format!("{}: {done}, {rate:.1}/s{suffix}", self.label);
        }
        let remaining = self.total.saturating_sub(done) as f64;
        let eta = if rate > 0.0 {
            format_secs(remaining / rate)
        } else {
            "?".to_string()
        };
        format!(
            "{}: {done}/{}, {rate:.1}/s, ETA {eta}{suffix}",
            self.label, self.total
        )
    }
}

fn make_bar(total: u64, label: &str) -> ProgressBar {
    let (bar, template) = if total == 0 {
        (
            ProgressBar::new_spinner(),
            "{prefix} {spinner} {pos} ({per_sec}) {msg}",
        )
    } else {
        (
            ProgressBar::new(total),
            "{prefix} [{bar:30}] {pos}/{len} ({per_sec}, ETA {eta}) {msg}",
        )
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(label.to_string());
    bar
}

fn format_secs(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_line_reports_count_rate_and_eta() {
        let p = Progress {
            label: "gen".to_string(),
            total: 100,
            done: AtomicU64::new(0),
            started: Instant::now() - Duration::from_secs(10),
            output: Output::Silent,
        };
        p.inc(50);
        let line = p.line(p.done(), "");
        assert!(line.starts_with("gen: 50/100, 5.0/s, ETA 10s"), "{line}");
    }

    #[test]
    fn eta_formats_minutes_and_hours() {
        assert_eq!(format_secs(59.4), "59s");
        assert_eq!(format_secs(125.0), "2m05s");
        assert_eq!(format_secs(7260.0), "2h01m");
    }
}
