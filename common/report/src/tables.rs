//! The report's tables besides the plots: the config keys in which overlaid
//! runs differ, and the sample captions of each evaluation, one table per
//! image, so a reader follows the same image's caption across training.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::plot::series_color;
use crate::report::{escape, slug, LoadedRun};

/// A table of the config keys whose values are not the same in every run
/// (a key missing from a run's config counts as different, shown as `–`).
pub(crate) fn config_diff_table(runs: &[LoadedRun]) -> String {
    let configs: Vec<BTreeMap<String, String>> = runs
        .iter()
        .map(|run| {
            run.log
                .config()
                .map(caprl_common::config::flat_keys)
                .unwrap_or_default()
        })
        .collect();
    let keys: BTreeSet<&String> = configs.iter().flat_map(|c| c.keys()).collect();
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|k| {
            let first = configs[0].get(*k);
            configs.iter().any(|c| c.get(*k) != first)
        })
        .collect();
    let mut t = String::from("<h2 id=\"config-diff\">Config differences</h2>\n");
    if differing.is_empty() {
        t.push_str("<p>The runs' configs are identical.</p>\n");
        return t;
    }
    t.push_str("<table class=\"diff\">\n<thead><tr><th class=\"name\">key</th>");
    for (i, run) in runs.iter().enumerate() {
        let (r, g, b) = series_color(i);
        let _ = write!(
            t,
            "<th><span class=\"swatch\" style=\"background:rgb({r},{g},{b})\"></span>{}</th>",
            escape(&run.name)
        );
    }
    t.push_str("</tr></thead>\n<tbody>\n");
    for key in differing {
        let _ = write!(t, "<tr><td class=\"name\">{}</td>", escape(key));
        for config in &configs {
            let value = config.get(key).map_or("–", String::as_str);
            let _ = write!(t, "<td>{}</td>", escape(value));
        }
        t.push_str("</tr>\n");
    }
    t.push_str("</tbody>\n</table>\n");
    t
}

/// One table per (run, sample image): the greedy and beam caption at every
/// evaluation, under the image's references. Empty when no run logged samples.
pub(crate) fn samples_section(runs: &[LoadedRun]) -> String {
    if runs.iter().all(|r| r.log.samples.is_empty()) {
        return String::new();
    }
    let mut html = String::from(
        "<h2 id=\"samples\">Sample captions over training</h2>\n\
         <p><small>Greedy and beam captions of the same validation images at every evaluation.</small></p>\n",
    );
    for run in runs.iter().filter(|r| !r.log.samples.is_empty()) {
        if runs.len() > 1 {
            let _ = writeln!(html, "<h3>{}</h3>", escape(&run.name));
        }
        // Images in the order of their first appearance.
        let mut images: Vec<&str> = Vec::new();
        for record in &run.log.samples {
            for img in &record.images {
                if !images.contains(&img.image.as_str()) {
                    images.push(&img.image);
                }
            }
        }
        html.push_str("<div class=\"captions\">\n");
        for image in images {
            let _ = write!(
                html,
                "<section id=\"sample-{}-{}\">\n<h3>image {}</h3>\n",
                slug(&run.name),
                slug(image),
                escape(image)
            );
            let refs = run
                .log
                .samples
                .iter()
                .rev()
                .flat_map(|r| r.images.iter())
                .find(|i| i.image == image)
                .map(|i| i.refs.as_slice())
                .unwrap_or_default();
            if !refs.is_empty() {
                html.push_str("<ul class=\"refs\">");
                for r in refs {
                    let _ = write!(html, "<li>{}</li>", escape(r));
                }
                html.push_str("</ul>\n");
            }
            html.push_str(
                "<table class=\"samples\">\n<thead><tr><th>step</th><th>phase</th><th>greedy</th><th>beam</th></tr></thead>\n<tbody>\n",
            );
            for record in &run.log.samples {
                if let Some(img) = record.images.iter().find(|i| i.image == image) {
                    let _ = writeln!(
                        html,
                        "<tr><td class=\"step\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        record.step,
                        escape(&record.phase),
                        escape(&img.greedy),
                        escape(&img.beam)
                    );
                }
            }
            html.push_str("</tbody>\n</table>\n</section>\n");
        }
        html.push_str("</div>\n");
    }
    html
}
