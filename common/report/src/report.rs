//! `caprl report`: one self-contained HTML page (inline SVG, no script, no
//! external resource) with the curves of one or more runs, plus optional PNGs.
//!
//! The page reads like a dashboard: plots in a responsive grid (as many per
//! row as the window holds), step curves optionally smoothed with the raw
//! curve faint behind, the XE→RL boundary marked on every step plot. Runs are
//! overlaid in every plot, one colour per run (legend: the run directory's
//! name); with several runs a table names the config keys they differ in. It
//! starts with each run's final evaluation scores and ends with the sample
//! captions of each evaluation.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::plot::{render_png, render_svg, series_color, PlotSpec, Series};
use crate::png_text::{load_font, PngFont};
use crate::tables::{config_diff_table, samples_section};
use caprl_common::telemetry::runlog::{read_run_log, RunLogContents, StepRecord, RUN_LOG_FILE};
use caprl_common::telemetry::{Result, TelemetryError};

/// What `caprl report` was asked for.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// Run directories (or `run.jsonl` files) to overlay.
    pub run_dirs: Vec<PathBuf>,
    /// The HTML file to write.
    pub out: PathBuf,
    /// Also write one PNG per plot into this directory.
    pub png_dir: Option<PathBuf>,
    /// Font for the PNGs' text.
    pub png_font: PngFont,
    /// Moving-average weight of the step curves in [0, 1) (TensorBoard's
    /// smoothing slider); 0 = raw curves only.
    pub smoothing: f64,
}

/// What `write_report` produced.
#[derive(Debug, Clone)]
pub struct ReportOutcome {
    pub html: PathBuf,
    /// Number of plots on the page.
    pub plots: usize,
    /// PNG files written (empty without `png_dir`).
    pub pngs: Vec<PathBuf>,
    /// Things the user should know (truncated logs, PNGs without text, ...).
    pub notes: Vec<String>,
}

/// One run as shown in the report.
#[derive(Debug, Clone)]
pub struct LoadedRun {
    /// Legend label: the run directory's name (its path when names collide).
    pub name: String,
    pub dir: PathBuf,
    pub log: RunLogContents,
}

/// Reads the run logs, draws the plots and writes the report.
pub fn write_report(options: &ReportOptions) -> Result<ReportOutcome> {
    if !(0.0..1.0).contains(&options.smoothing) {
        return Err(TelemetryError::BadSmoothing {
            got: options.smoothing,
        });
    }
    let runs = load_runs(&options.run_dirs)?;
    let plots = report_plots(&runs, options.smoothing);
    let mut notes: Vec<String> = runs
        .iter()
        .flat_map(|r| r.log.warnings.iter().cloned())
        .collect();

    let mut pngs = Vec::new();
    if let Some(dir) = &options.png_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| TelemetryError::io("create the PNG directory", dir, e))?;
        let (font, note) = load_font(&options.png_font);
        notes.extend(note);
        for plot in &plots {
            let path = dir.join(format!("{}.png", plot.id));
            render_png(plot, &path, font.as_ref())?;
            pngs.push(path);
        }
    }

    let html = render_html(&runs, &plots, &notes)?;
    if let Some(parent) = options.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| TelemetryError::io("create the directory of", &options.out, e))?;
    }
    std::fs::write(&options.out, html).map_err(|e| TelemetryError::io("write", &options.out, e))?;
    Ok(ReportOutcome {
        html: options.out.clone(),
        plots: plots.len(),
        pngs,
        notes,
    })
}

/// Reads the run log of every directory (a `run.jsonl` path is accepted too).
pub fn load_runs(dirs: &[PathBuf]) -> Result<Vec<LoadedRun>> {
    if dirs.is_empty() {
        return Err(TelemetryError::NoRuns);
    }
    let mut runs = Vec::with_capacity(dirs.len());
    for given in dirs {
        let (dir, log_path) = if given.is_file() {
            let dir = given.parent().map(Path::to_path_buf).unwrap_or_default();
            (dir, given.clone())
        } else {
            (given.clone(), given.join(RUN_LOG_FILE))
        };
        if !log_path.is_file() {
            return Err(TelemetryError::NotARunDir { dir: given.clone() });
        }
        let log = read_run_log(&log_path)?;
        runs.push(LoadedRun {
            name: dir_name(&dir),
            dir,
            log,
        });
    }
    let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
    for run in &mut runs {
        if names.iter().filter(|n| **n == run.name).count() > 1 {
            run.name = run.dir.display().to_string();
        }
    }
    Ok(runs)
}

fn dir_name(dir: &Path) -> String {
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    absolute
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

/// The first step of each run's RL phase, where the run had an XE phase before it.
fn rl_boundaries(runs: &[LoadedRun]) -> Vec<f64> {
    let mut out: Vec<f64> = Vec::new();
    for run in runs {
        let steps = &run.log.steps;
        let start = steps
            .windows(2)
            .find(|w| w[0].phase == "xe" && w[1].phase != "xe")
            .map(|w| w[1].step as f64);
        if let Some(x) = start.filter(|x| !out.contains(x)) {
            out.push(x);
        }
    }
    out
}

/// Every plot of the report, in page order; plots without data are left out.
/// Step curves get the moving average `smoothing` (0 = none).
pub fn report_plots(runs: &[LoadedRun], smoothing: f64) -> Vec<PlotSpec> {
    let mut plots = Vec::new();
    let boundaries = rl_boundaries(runs);
    let union = |pick: &dyn Fn(&StepRecord) -> Vec<String>| -> BTreeSet<String> {
        runs.iter()
            .flat_map(|r| r.log.steps.iter().flat_map(pick))
            .collect()
    };

    let components = union(&|s| s.rewards.keys().cloned().collect());
    for c in ordered(components, &["total"]) {
        plots.push(step_plot(
            runs,
            format!("reward-{c}"),
            format!("Reward: {c} (batch mean)"),
            "reward",
            |s| s.rewards.get(&c).copied(),
        ));
    }

    let mut eval_keys: BTreeSet<(String, String)> = BTreeSet::new();
    for run in runs {
        for e in &run.log.evals {
            eval_keys.extend(e.metrics.keys().map(|m| (e.split.clone(), m.clone())));
        }
    }
    let mut eval_keys: Vec<(String, String)> = eval_keys.into_iter().collect();
    eval_keys.sort_by_key(|(split, metric)| {
        (
            split != "val",
            !metric.contains("cider"),
            split.clone(),
            metric.clone(),
        )
    });
    for (split, metric) in eval_keys {
        let series = series_per_run(runs, |run| {
            run.log
                .evals
                .iter()
                .filter(|e| e.split == split)
                .filter_map(|e| e.metrics.get(&metric).map(|v| (e.step as f64, *v)))
                .collect()
        });
        plots.push(PlotSpec {
            id: slug(&format!("eval-{split}-{metric}")),
            title: format!("Eval ({split}): {metric}"),
            x_label: "step".into(),
            y_label: metric.clone(),
            series,
            smoothing: 0.0,
            boundaries: boundaries.clone(),
        });
    }

    let terms = union(&|s| s.losses.keys().cloned().collect());
    for t in ordered(terms, &["total"]) {
        plots.push(step_plot(
            runs,
            format!("loss-{t}"),
            format!("Loss: {t}"),
            "loss",
            |s| s.losses.get(&t).copied(),
        ));
    }
    let gauges: [(&str, &str, &str, Gauge); 5] = [
        ("policy-lag", "Policy lag (batch mean)", "versions", |s| {
            s.lag
        }),
        ("tokens-per-s", "Throughput: tokens/s", "tokens/s", |s| {
            s.tokens_per_s
        }),
        (
            "rollouts-per-s",
            "Throughput: rollouts/s",
            "rollouts/s",
            |s| s.rollouts_per_s,
        ),
        (
            "grad-norm",
            "Gradient norm (before clipping)",
            "L2 norm",
            |s| s.grad_norm,
        ),
        ("learning-rate", "Learning rate", "lr", |s| s.lr),
    ];
    for (id, title, y_label, value) in gauges {
        plots.push(step_plot(runs, id.into(), title.into(), y_label, |s| {
            Some(value(s))
        }));
    }

    for plot in plots.iter_mut().filter(|p| !p.id.starts_with("eval-")) {
        plot.smoothing = smoothing;
        plot.boundaries = boundaries.clone();
    }
    plots.retain(|p| {
        p.series
            .iter()
            .any(|s| s.points.iter().any(|(x, y)| x.is_finite() && y.is_finite()))
    });
    plots
}

/// One value of a step record, plotted over the steps.
type Gauge = fn(&StepRecord) -> f64;

/// `first` names (when present) in that order, then the rest sorted.
fn ordered(set: BTreeSet<String>, first: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = first
        .iter()
        .filter(|f| set.contains(**f))
        .map(|f| f.to_string())
        .collect();
    out.extend(set.into_iter().filter(|k| !first.contains(&k.as_str())));
    out
}

fn step_plot(
    runs: &[LoadedRun],
    id: String,
    title: String,
    y_label: &str,
    value: impl Fn(&StepRecord) -> Option<f64>,
) -> PlotSpec {
    let series = series_per_run(runs, |run| {
        run.log
            .steps
            .iter()
            .filter_map(|s| value(s).map(|v| (s.step as f64, v)))
            .filter(|(_, v)| v.is_finite())
            .collect()
    });
    PlotSpec {
        id: slug(&id),
        title,
        x_label: "step".into(),
        y_label: y_label.into(),
        series,
        smoothing: 0.0,
        boundaries: Vec::new(),
    }
}

/// One series per run, in the run's colour, of the points `points` picks from its log.
fn series_per_run(
    runs: &[LoadedRun],
    points: impl Fn(&LoadedRun) -> Vec<(f64, f64)>,
) -> Vec<Series> {
    runs.iter()
        .enumerate()
        .map(|(i, run)| Series {
            label: run.name.clone(),
            color: i,
            points: points(run),
        })
        .collect()
}

pub(crate) fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        "NaN".into()
    } else if v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:2400px;color:#222;padding:0 1em}\
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}\
th{background:#f4f4f4}td.name,th.name{text-align:left}.swatch{display:inline-block;width:.9em;height:.9em;margin-right:.4em;vertical-align:middle}\
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:12px}figure{margin:0;min-width:0}\
figure svg{display:block;width:100%;height:auto;border:1px solid #eee}small{color:#777}.notes li{color:#8a5300}\
table.diff td,table.diff th,table.samples td,table.samples th{text-align:left}table.samples td.step{text-align:right;white-space:nowrap}\
.captions{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:12px}\
.captions section{border:1px solid #eee;padding:.3em .8em;overflow-x:auto}.scroll{overflow-x:auto}.captions h3{font-size:1em;margin:.3em 0}\
.refs{color:#555;font-size:.85em;margin:.2em 0 .4em 1em;padding:0}";

/// The report page for `runs` with `plots` (from [`report_plots`]).
pub fn render_html(runs: &[LoadedRun], plots: &[PlotSpec], notes: &[String]) -> Result<String> {
    let mut html = String::new();
    let names: Vec<String> = runs.iter().map(|r| escape(&r.name)).collect();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>caprl report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>caprl report</h1>\n",
        names.join(", ")
    );

    html.push_str("<h2 id=\"summary\">Final evaluation</h2>\n");
    // Wide tables scroll inside their box instead of widening the page.
    let _ = writeln!(html, "<div class=\"scroll\">{}</div>", summary_table(runs));
    if runs.len() > 1 {
        let _ = writeln!(
            html,
            "<div class=\"scroll\">{}</div>",
            config_diff_table(runs)
        );
    }

    let mut section = "";
    for plot in plots {
        let this = plot.id.split('-').next().unwrap_or("");
        let heading = match this {
            "reward" => "Rewards",
            "eval" => "Evaluation",
            "loss" => "Losses",
            "policy" => "Policy lag",
            "tokens" | "rollouts" => "Throughput",
            _ => "Optimizer",
        };
        if heading != section {
            if !section.is_empty() {
                html.push_str("</div>\n");
            }
            let _ = write!(html, "<h2>{heading}</h2>\n<div class=\"plots\">\n");
            section = heading;
        }
        let svg = render_svg(plot)?;
        let _ = write!(
            html,
            "<figure id=\"plot-{}\">\n{}\n</figure>\n",
            plot.id,
            svg.trim()
        );
    }
    if !section.is_empty() {
        html.push_str("</div>\n");
    }

    html.push_str(&samples_section(runs));

    if !notes.is_empty() {
        html.push_str("<h2>Notes</h2>\n<ul class=\"notes\">\n");
        for note in notes {
            let _ = writeln!(html, "<li>{}</li>", escape(note));
        }
        html.push_str("</ul>\n");
    }
    html.push_str("</body>\n</html>\n");
    Ok(html)
}

/// One row per run: its last step and the last score of every (split, metric).
fn summary_table(runs: &[LoadedRun]) -> String {
    let mut columns: BTreeSet<(String, String)> = BTreeSet::new();
    let mut finals: Vec<BTreeMap<(String, String), (f64, u64)>> = Vec::new();
    for run in runs {
        let mut last: BTreeMap<(String, String), (f64, u64)> = BTreeMap::new();
        for e in &run.log.evals {
            for (metric, value) in &e.metrics {
                let key = (e.split.clone(), metric.clone());
                if last.get(&key).is_none_or(|(_, step)| *step <= e.step) {
                    last.insert(key.clone(), (*value, e.step));
                }
                columns.insert(key);
            }
        }
        finals.push(last);
    }
    let mut columns: Vec<(String, String)> = columns.into_iter().collect();
    columns.sort_by_key(|(split, metric)| {
        (
            split != "val",
            !metric.contains("cider"),
            split.clone(),
            metric.clone(),
        )
    });

    let mut t = String::from("<table class=\"summary\">\n<thead><tr><th class=\"name\">run</th><th>steps</th><th>policy version</th>");
    for (split, metric) in &columns {
        let _ = write!(t, "<th>{} {}</th>", escape(split), escape(metric));
    }
    t.push_str("</tr></thead>\n<tbody>\n");
    for (i, (run, last)) in runs.iter().zip(&finals).enumerate() {
        let (r, g, b) = series_color(i);
        let step = run.log.steps.last();
        let _ = write!(
            t,
            "<tr><td class=\"name\"><span class=\"swatch\" style=\"background:rgb({r},{g},{b})\"></span>{}<br><small>{}</small></td><td>{}</td><td>{}</td>",
            escape(&run.name),
            escape(&run.dir.display().to_string()),
            step.map_or("–".into(), |s| s.step.to_string()),
            step.map_or("–".into(), |s| s.policy_version.to_string()),
        );
        for key in &columns {
            match last.get(key) {
                Some((value, at)) => {
                    let _ = write!(
                        t,
                        "<td>{}<br><small>step {at}</small></td>",
                        fmt_value(*value)
                    );
                }
                None => t.push_str("<td>–</td>"),
            }
        }
        t.push_str("</tr>\n");
    }
    t.push_str("</tbody>\n</table>\n");
    t
}
