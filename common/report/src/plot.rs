//! Line plots of run curves, drawn with plotters to an SVG string or a PNG file.
//!
//! Every series becomes one `<polyline>` in the SVG (one point per finite
//! sample); legend swatches are rectangles and markers circles, so the
//! polylines are exactly the data. With smoothing, a series is two polylines:
//! the raw curve, faint, and its moving average on top (as TensorBoard draws
//! them). The XE→RL boundary is a dashed vertical line of small rectangles.

use std::path::Path;

use ab_glyph::FontArc;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::png_text::TextBitmap;
use caprl_common::telemetry::{Result, TelemetryError};

/// Pixel size of every plot.
pub const PLOT_SIZE: (u32, u32) = (720, 360);
/// Series with at most this many points also get a dot per point.
const MARKER_MAX_POINTS: usize = 40;

/// Tableau 10: distinguishable, and readable by most colour-blind viewers.
const PALETTE: &[(u8, u8, u8)] = &[
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// The colour of series `index` (runs keep their colour across plots).
pub fn series_color(index: usize) -> (u8, u8, u8) {
    PALETTE[index % PALETTE.len()]
}

/// One curve: a legend label, a colour index and its (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub color: usize,
    pub points: Vec<(f64, f64)>,
}

/// One plot: a title, axis descriptions and the curves drawn on it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotSpec {
    /// Stable identifier (file name of the PNG, `id` of the HTML figure).
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Weight of the moving average drawn over each series, in [0, 1); 0 = raw curves only.
    pub smoothing: f64,
    /// x positions (steps) where RL took over from XE, marked by a dashed line.
    pub boundaries: Vec<f64>,
}

/// TensorBoard's smoothing: an exponential moving average with weight `w`,
/// debiased (divided by `1 - w^n`) so the first points are not pulled to 0.
pub fn ema(points: &[(f64, f64)], w: f64) -> Vec<(f64, f64)> {
    let mut last = 0.0;
    let mut n = 0;
    points
        .iter()
        .map(|&(x, y)| {
            n += 1;
            last = last * w + (1.0 - w) * y;
            let debias = 1.0 - w.powi(n);
            (x, if debias > 0.0 { last / debias } else { y })
        })
        .collect()
}

impl PlotSpec {
    /// The series with their non-finite points removed, empty series dropped.
    fn drawable(&self) -> Vec<Series> {
        self.series
            .iter()
            .map(|s| Series {
                points: s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .collect(),
                ..s.clone()
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    }
}

/// Draws `spec` as a standalone `<svg>` element.
pub fn render_svg(spec: &PlotSpec) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, PLOT_SIZE).into_drawing_area();
        draw(&root, spec).map_err(|reason| plot_error(spec, reason))?;
        root.present()
            .map_err(|e| plot_error(spec, e.to_string()))?;
    }
    Ok(svg)
}

/// Draws `spec` into the PNG file `path`; text needs `font` (skipped without).
pub fn render_png(spec: &PlotSpec, path: &Path, font: Option<&FontArc>) -> Result<()> {
    let root = TextBitmap::new(path, PLOT_SIZE, font).into_drawing_area();
    draw(&root, spec).map_err(|reason| plot_error(spec, reason))?;
    root.present()
        .map_err(|e| plot_error(spec, format!("writing {}: {e}", path.display())))
}

fn plot_error(spec: &PlotSpec, reason: String) -> TelemetryError {
    TelemetryError::Plot {
        plot: spec.title.clone(),
        reason,
    }
}

/// Axis range covering `values` with 5% headroom; a single value gets ±1.
fn padded_range(values: impl Iterator<Item = f64>, pad: bool) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let half = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return (lo - half, hi + half);
    }
    let margin = if pad { (hi - lo) * 0.05 } else { 0.0 };
    (lo - margin, hi + margin)
}

/// Short tick labels: `2` not `2.0`, `5e-5` not `0.00005`.
fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e5).contains(&a) {
        let s = format!("{v:.1e}");
        s.replace(".0e", "e")
    } else {
        let s = format!("{v:.4}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        if s == "-0" {
            "0".into()
        } else {
            s.to_owned()
        }
    }
}

/// Where the legend goes: where the curves are not. Curves that end above `mid` (rewards,
/// scores) get it at the bottom, curves that end low (losses) at the top.
fn legend_position(series: &[Series], mid: f64) -> SeriesLabelPosition {
    let ends_high = series
        .iter()
        .filter_map(|s| s.points.last())
        .filter(|p| p.1 > mid)
        .count()
        * 2
        >= series.len();
    if ends_high {
        SeriesLabelPosition::LowerRight
    } else {
        SeriesLabelPosition::UpperRight
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    spec: &PlotSpec,
) -> std::result::Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let series = spec.drawable();
    let (x0, x1) = padded_range(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        false,
    );
    let (y0, y1) = padded_range(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        true,
    );

    let mut chart = ChartBuilder::on(root)
        .caption(&spec.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(&spec.x_label)
        .y_desc(&spec.y_label)
        .label_style(("sans-serif", 14))
        .x_label_formatter(&|x| tick_label(*x))
        .y_label_formatter(&|y| tick_label(*y))
        .axis_desc_style(("sans-serif", 15))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(e)?;

    if series.is_empty() {
        root.draw(&Text::new(
            "no data",
            (PLOT_SIZE.0 as i32 / 2 - 24, PLOT_SIZE.1 as i32 / 2),
            ("sans-serif", 16)
                .into_font()
                .color(&RGBColor(120, 120, 120)),
        ))
        .map_err(e)?;
        return Ok(());
    }

    let smooth = spec.smoothing > 0.0 && spec.smoothing < 1.0;
    for s in &series {
        let (r, g, b) = series_color(s.color);
        let color = RGBColor(r, g, b);
        let line = if smooth {
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.mix(0.25).stroke_width(1),
                ))
                .map_err(e)?;
            ema(&s.points, spec.smoothing)
        } else {
            s.points.clone()
        };
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))
            .map_err(e)?
            .label(s.label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 16, y + 4)], color.filled()));
        if s.points.len() <= MARKER_MAX_POINTS {
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(e)?;
        }
    }

    let grey = RGBColor(90, 90, 90);
    for &x in spec.boundaries.iter().filter(|x| (x0..=x1).contains(*x)) {
        let (px, top) = chart.backend_coord(&(x, y1));
        let (_, bottom) = chart.backend_coord(&(x, y0));
        for y in (top..bottom).step_by(9) {
            root.draw(&Rectangle::new(
                [(px - 1, y), (px, (y + 5).min(bottom))],
                grey.filled(),
            ))
            .map_err(e)?;
        }
        root.draw(&Text::new(
            "XE | RL",
            (px - 22, top + 2),
            ("sans-serif", 12).into_font().color(&grey),
        ))
        .map_err(e)?;
    }

    chart
        .configure_series_labels()
        .position(legend_position(&series, (y0 + y1) / 2.0))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    Ok(())
}
