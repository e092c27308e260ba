//! `caprl report` from the committed two-run fixture
//! (`fixtures/telemetry/run_scst`, `run_sle`: 20 steps each, val evals every
//! 5 steps, a test eval only in run_scst, a NaN grad norm at run_sle step 13).

use std::path::{Path, PathBuf};

use caprl_common::telemetry::TelemetryError;
use caprl_report::plot::ema;
use caprl_report::{write_report, PngFont, ReportOptions};

#[path = "../../tests/support/xe_rl_run.rs"]
mod xe_rl_run;
use xe_rl_run::{xe_then_rl_run, RL_CAPTION, XE_CAPTION};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/telemetry")
        .join(name)
}

fn fixture_runs() -> Vec<PathBuf> {
    vec![fixture("run_scst"), fixture("run_sle")]
}

/// The `<figure>` of plot `id`, or None when the report has no such plot.
fn figure<'a>(html: &'a str, id: &str) -> Option<&'a str> {
    let start = html.find(&format!("<figure id=\"plot-{id}\">"))?;
    let end = start + html[start..].find("</figure>")?;
    Some(&html[start..end])
}

/// (stroke colour, number of points) of every data polyline in `svg`
/// (the black polylines are the axes' tick marks).
fn polylines(svg: &str) -> Vec<(String, usize)> {
    svg.split("<polyline")
        .skip(1)
        .map(|rest| {
            let attr = |name: &str| -> String {
                let key = format!(" {name}=\"");
                let from = rest
                    .find(&key)
                    .map(|i| i + key.len())
                    .expect("attribute present");
                rest[from..from + rest[from..].find('"').expect("closing quote")].to_string()
            };
            let points = attr("points");
            for p in points.split_whitespace() {
                let (x, y) = p.split_once(',').expect("x,y pair");
                assert!(
                    x.parse::<i32>().is_ok() && y.parse::<i32>().is_ok(),
                    "bad point {p}"
                );
            }
            (attr("stroke"), points.split_whitespace().count())
        })
        .filter(|(stroke, _)| stroke != "#000000")
        .collect()
}

const SCST_BLUE: &str = "#1F77B4";
const SLE_ORANGE: &str = "#FF7F0E";

/// Writes the report of `run_dirs` (default options) to `out` and returns its HTML.
fn report_html(run_dirs: Vec<PathBuf>, out: &Path) -> String {
    write_report(&ReportOptions {
        run_dirs,
        out: out.to_path_buf(),
        ..ReportOptions::default()
    })
    .expect("report");
    std::fs::read_to_string(out).expect("html")
}

#[test]
fn report_overlays_runs_with_one_polyline_per_series() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.html");
    let outcome = write_report(&ReportOptions {
        run_dirs: fixture_runs(),
        out: out.clone(),
        ..ReportOptions::default()
    })
    .expect("report");
    let html = std::fs::read_to_string(&out).expect("html");

    let both = |n: usize| vec![(SCST_BLUE.to_string(), n), (SLE_ORANGE.to_string(), n)];
    let series =
        |id: &str| polylines(figure(&html, id).unwrap_or_else(|| panic!("plot {id} missing")));

    assert_eq!(series("reward-cider"), both(20));
    assert_eq!(series("reward-total"), both(20));
    assert_eq!(
        series("reward-diversity"),
        vec![(SLE_ORANGE.to_string(), 20)]
    );
    assert_eq!(series("eval-val-cider_d"), both(4));
    assert_eq!(series("eval-val-bleu4"), both(4));
    assert_eq!(
        series("eval-test-cider_d"),
        vec![(SCST_BLUE.to_string(), 1)]
    );
    assert_eq!(series("loss-total"), both(20));
    assert_eq!(series("loss-diversity"), vec![(SLE_ORANGE.to_string(), 20)]);
    assert_eq!(series("policy-lag"), both(20));
    assert_eq!(series("tokens-per-s"), both(20));
    assert_eq!(
        series("grad-norm"),
        vec![(SCST_BLUE.to_string(), 20), (SLE_ORANGE.to_string(), 19)],
        "the NaN grad norm is left out of the line"
    );
    assert_eq!(html.matches("<figure").count(), outcome.plots);

    // Val CIDEr-D comes first among the eval plots, reward plots first of all.
    let pos = |id: &str| html.find(&format!("plot-{id}\"")).expect("plot present");
    assert!(pos("reward-total") < pos("eval-val-cider_d"));
    assert!(pos("eval-val-cider_d") < pos("eval-val-bleu4"));
    assert!(pos("eval-val-cider_d") < pos("eval-test-cider_d"));

    // Legends name the runs.
    let legend = figure(&html, "reward-cider").expect("plot");
    assert!(
        legend.contains("\nrun_scst\n</text>") && legend.contains("\nrun_sle\n</text>"),
        "{legend}"
    );
}

#[test]
fn report_has_a_summary_table_of_final_eval_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("sub/report.html");
    let html = report_html(fixture_runs(), &out);
    let start = html
        .find("<table class=\"summary\">")
        .expect("summary table");
    let table = &html[start..start + html[start..].find("</table>").expect("table end")];
    assert!(table.contains("<th>val cider_d</th>"), "{table}");
    assert!(table.contains("<th>test cider_d</th>"), "{table}");
    let rows: Vec<&str> = table.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2);
    assert!(rows[0].contains("run_scst") && rows[1].contains("run_sle"));
    // Final val CIDEr-D at step 20 (fixture: 0.80 + 0.35 (1 - e^-3)), and 0.02 more for SLE.
    assert!(
        rows[0].contains("<td>1.1326<br><small>step 20</small></td>"),
        "{}",
        rows[0]
    );
    assert!(
        rows[1].contains("<td>1.1526<br><small>step 20</small></td>"),
        "{}",
        rows[1]
    );
    assert!(
        rows[1].contains("<td>–</td>"),
        "run_sle has no test eval: {}",
        rows[1]
    );
}

#[test]
fn report_is_self_contained() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.html");
    let html = report_html(vec![fixture("run_scst")], &out);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(!html.contains("<script"), "no JavaScript");
    assert!(
        !html.contains(" src=") && !html.contains("<link"),
        "no external resources"
    );
    let external = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(
        !external.contains("http://") && !external.contains("https://"),
        "no URLs"
    );
    assert!(html.contains("<svg"));
}

#[test]
fn png_plots_are_written_with_or_without_a_font() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (font, sub) in [(PngFont::Search, "search"), (PngFont::NoText, "plain")] {
        let png_dir = dir.path().join(sub);
        let outcome = write_report(&ReportOptions {
            run_dirs: fixture_runs(),
            out: dir.path().join(format!("{sub}.html")),
            png_dir: Some(png_dir.clone()),
            png_font: font.clone(),
            smoothing: 0.0,
        })
        .expect("report with PNGs");
        assert_eq!(outcome.pngs.len(), outcome.plots);
        for png in &outcome.pngs {
            let bytes = std::fs::read(png).expect("png written");
            assert!(
                bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
                "{} is a PNG",
                png.display()
            );
        }
        assert!(png_dir.join("reward-cider.png").is_file());
        if font == PngFont::NoText {
            assert!(
                outcome.notes.iter().any(|n| n.contains("without text")),
                "{:?}",
                outcome.notes
            );
            let html = std::fs::read_to_string(&outcome.html).expect("html");
            assert!(html.contains("without text"), "the note is on the page too");
        }
    }
    let err = write_report(&ReportOptions {
        run_dirs: vec![fixture("run_scst")],
        out: dir.path().join("x.html"),
        png_dir: Some(dir.path().join("badfont")),
        png_font: PngFont::File(fixture("run_scst/config.toml")),
        smoothing: 0.0,
    });
    let outcome = err.expect("a bad font file degrades, it does not fail");
    assert!(
        outcome.notes.iter().any(|n| n.contains("not a TrueType")),
        "{:?}",
        outcome.notes
    );
}

#[test]
fn a_directory_without_run_log_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = write_report(&ReportOptions {
        run_dirs: vec![fixture("run_scst"), dir.path().to_path_buf()],
        out: dir.path().join("report.html"),
        ..ReportOptions::default()
    })
    .expect_err("not a run dir");
    assert!(matches!(err, TelemetryError::NotARunDir { .. }));
    let msg = err.to_string();
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    assert!(
        msg.contains("caprl train") && msg.contains("caprl run"),
        "{msg}"
    );
    assert!(
        !dir.path().join("report.html").exists(),
        "nothing written on error"
    );
}

/// Stroke colour, opacity and pixel points of one polyline.
type Line = (String, Option<String>, Vec<(i32, i32)>);

/// Every data polyline of `svg`.
fn polyline_points(svg: &str) -> Vec<Line> {
    svg.split("<polyline")
        .skip(1)
        .map(|rest| {
            let rest = &rest[..rest.find("/>").expect("polyline end")];
            let attr = |name: &str| -> Option<String> {
                let key = format!(" {name}=\"");
                let from = rest.find(&key)? + key.len();
                Some(rest[from..from + rest[from..].find('"')?].to_string())
            };
            let points = attr("points")
                .expect("points")
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').expect("x,y");
                    (x.parse().expect("x"), y.parse().expect("y"))
                })
                .collect();
            (attr("stroke").expect("stroke"), attr("opacity"), points)
        })
        .filter(|(stroke, _, _)| stroke != "#000000")
        .collect()
}

/// Sum of |Δy| along a polyline: how jagged it is.
fn variation(points: &[(i32, i32)]) -> i32 {
    points.windows(2).map(|w| (w[1].1 - w[0].1).abs()).sum()
}

#[test]
fn smoothing_draws_the_moving_average_over_the_faint_raw_curve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.html");
    write_report(&ReportOptions {
        run_dirs: vec![xe_then_rl_run(dir.path())],
        out: out.clone(),
        smoothing: 0.6,
        ..ReportOptions::default()
    })
    .expect("report");
    let html = std::fs::read_to_string(&out).expect("html");
    let lines = polyline_points(figure(&html, "loss-total").expect("loss plot"));
    assert_eq!(lines.len(), 2, "raw and smoothed: {lines:?}");
    let (raw, smooth) = (&lines[0], &lines[1]);
    assert_eq!(raw.0, smooth.0, "one colour per run");
    let opacity: f64 = raw
        .1
        .as_deref()
        .expect("raw curve is faint")
        .parse()
        .expect("number");
    assert!(opacity < 0.5, "raw opacity {opacity}");
    assert!(
        smooth.1.as_deref().is_none_or(|o| o == "1"),
        "{:?}",
        smooth.1
    );
    assert_eq!(raw.2.len(), 20);
    assert_eq!(smooth.2.len(), 20);
    assert_eq!(
        raw.2[0], smooth.2[0],
        "the debiased average starts at the first point"
    );
    assert!(
        variation(&smooth.2) < variation(&raw.2) * 3 / 4,
        "smoothed {} vs raw {}",
        variation(&smooth.2),
        variation(&raw.2)
    );
    // Eval curves (a few points each) stay raw.
    assert_eq!(
        polyline_points(figure(&html, "eval-val-cider_d").expect("eval plot")).len(),
        1
    );

    let bad = write_report(&ReportOptions {
        run_dirs: vec![xe_then_rl_run(&dir.path().join("again"))],
        out: dir.path().join("bad.html"),
        smoothing: 1.0,
        ..ReportOptions::default()
    })
    .expect_err("smoothing 1 would flatten every curve");
    assert!(bad.to_string().contains("[0, 1)"), "{bad}");
}

#[test]
fn ema_is_tensorboards_debiased_moving_average() {
    let points = [(1.0, 1.0), (2.0, 0.0), (3.0, 0.0)];
    let got = ema(&points, 0.5);
    // last = 0.5, 0.25, 0.125; debias 1-0.5^n = 0.5, 0.75, 0.875.
    let want = [1.0, 0.25 / 0.75, 0.125 / 0.875];
    for ((x, y), (p, w)) in got.iter().zip(points.iter().zip(want)) {
        assert_eq!(*x, p.0);
        assert!((y - w).abs() < 1e-12, "{got:?}");
    }
    assert_eq!(ema(&points, 0.0), points.to_vec());
}

#[test]
fn the_xe_to_rl_boundary_is_marked_on_every_step_plot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.html");
    let html = report_html(vec![xe_then_rl_run(dir.path()), fixture("run_scst")], &out);
    for id in [
        "loss-total",
        "reward-cider",
        "grad-norm",
        "eval-val-cider_d",
    ] {
        let fig = figure(&html, id).unwrap_or_else(|| panic!("plot {id}"));
        assert_eq!(fig.matches("XE | RL").count(), 1, "{id}: one boundary");
        // The dashes: grey rectangles at one x.
        let xs: std::collections::BTreeSet<&str> = fig
            .split("<rect")
            .skip(1)
            .filter(|r| r.contains("fill=\"#5A5A5A\""))
            .filter_map(|r| r.split(" x=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(xs.len(), 1, "{id}: dashes at one x: {xs:?}");
    }
    // The boundary sits at step 11 of the x axis: between the first and the last point of
    // the XE run's loss curve, 10/19 of the way.
    let fig = figure(&html, "loss-total").expect("plot");
    let loss = polyline_points(fig);
    let line = &loss[0].2;
    let x: i32 = fig
        .split("<rect")
        .skip(1)
        .find(|r| r.contains("fill=\"#5A5A5A\""))
        .and_then(|r| r.split(" x=\"").nth(1)?.split('"').next()?.parse().ok())
        .expect("dash x");
    let (first, last) = (line[0].0, line[line.len() - 1].0);
    let want = first + (last - first) * 10 / 19;
    assert!((x - want).abs() <= 2, "boundary at {x}, step 11 at {want}");

    // A run without an XE phase gets no boundary.
    let out = dir.path().join("rl-only.html");
    assert!(!report_html(vec![fixture("run_scst")], &out).contains("XE | RL"));
}

#[test]
fn overlaid_runs_get_a_table_of_the_config_keys_they_differ_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.html");
    let html = report_html(fixture_runs(), &out);
    let start = html.find("<table class=\"diff\">").expect("diff table");
    let table = &html[start..start + html[start..].find("</table>").expect("end")];
    assert!(
        table.contains("<tr><td class=\"name\">train.objective</td><td>scst</td><td>sle</td></tr>"),
        "{table}"
    );
    assert!(
        table
            .contains("<td class=\"name\">run_dir</td><td>runs/run_scst</td><td>runs/run_sle</td>"),
        "{table}"
    );
    assert!(
        !table.contains(">seed<"),
        "equal keys are left out: {table}"
    );
    assert!(
        !table.contains(">train.mode<"),
        "equal keys are left out: {table}"
    );

    let single = dir.path().join("one.html");
    assert!(!report_html(vec![fixture("run_scst")], &single).contains("Config differences"));
}

#[test]
fn sample_captions_are_a_table_per_image_across_evaluations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.html");
    let html = report_html(vec![xe_then_rl_run(dir.path())], &out);
    let start = html
        .find("<section id=\"sample-run_xe_scst-42\">")
        .expect("image 42");
    let section = &html[start..start + html[start..].find("</section>").expect("end")];
    assert!(
        section.contains("<li>a big red cube next to a blue ball</li>"),
        "{section}"
    );
    let rows: Vec<&str> = section.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2, "{section}");
    assert!(
        rows[0].starts_with(&format!(
            "<td class=\"step\">10</td><td>xe</td><td>{XE_CAPTION}</td>"
        )),
        "{}",
        rows[0]
    );
    assert!(
        rows[1].starts_with(&format!(
            "<td class=\"step\">20</td><td>scst</td><td>{RL_CAPTION}</td>"
        )),
        "{}",
        rows[1]
    );
    // The fixture runs logged no samples: no section.
    let plain = dir.path().join("plain.html");
    assert!(!report_html(fixture_runs(), &plain).contains("Sample captions"));
}
