//! `caprl report` from the committed two-run fixture
//! (`fixtures/telemetry/run_scst`, `run_sle`: 20 steps each, val evals every
//! 5 steps, a test eval only in run_scst, a NaN grad norm at run_sle step 13).

use std::path::{Path, PathBuf};

use caprl_common::telemetry::{write_report, PngFont, ReportOptions, TelemetryError};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/telemetry")
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
    write_report(&ReportOptions {
        run_dirs: fixture_runs(),
        out: out.clone(),
        ..ReportOptions::default()
    })
    .expect("report");
    let html = std::fs::read_to_string(&out).expect("html");
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
    write_report(&ReportOptions {
        run_dirs: vec![fixture("run_scst")],
        out: out.clone(),
        ..ReportOptions::default()
    })
    .expect("report");
    let html = std::fs::read_to_string(&out).expect("html");
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
