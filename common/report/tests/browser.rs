//! The report opened in a real browser (headless Chromium, Debian's `chromium`):
//! it loads without console messages, lays its plots out several per row on a
//! wide window and one per row on a narrow one, and a screenshot shows plots
//! in both halves of the page. A missing browser fails the test in CI and
//! skips it elsewhere (`support/ci.rs`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use caprl_report::{write_report, ReportOptions};

#[path = "../../tests/support/ci.rs"]
mod ci;
#[path = "../../tests/support/xe_rl_run.rs"]
mod xe_rl_run;
use xe_rl_run::xe_then_rl_run;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/telemetry")
        .join(name)
}

/// The browser binary, or None (test skipped) when it is missing outside CI.
fn chromium() -> Option<String> {
    let bin = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let found = Command::new(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(bin);
    }
    ci::unavailable(&format!(
        "`{bin} --version` failed: install Debian's chromium (apt-get install -y chromium) or set CHROMIUM"
    ));
    None
}

/// Runs headless Chromium on `page` with `extra` flags; returns (stdout, stderr).
fn browse(bin: &str, page: &Path, width: u32, extra: &[String]) -> (String, String) {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={width},2000"))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("chromium did not finish within 120 s on {}", page.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = out_thread.join().expect("stdout thread");
    let err = err_thread.join().expect("stderr thread");
    (out, err)
}

/// The page's console messages (Chromium logs them as `INFO:CONSOLE...] "msg"`).
fn console_messages(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

fn report(dir: &Path) -> PathBuf {
    let out = dir.join("report.html");
    write_report(&ReportOptions {
        run_dirs: vec![fixture("run_scst"), fixture("run_sle"), xe_then_rl_run(dir)],
        out: out.clone(),
        smoothing: 0.6,
        ..ReportOptions::default()
    })
    .expect("report");
    out
}

/// Writes each figure's box (`left top width height`, CSS px) and the page's
/// scroll width into the DOM, where `--dump-dom` shows them.
const GEOMETRY_PROBE: &str = "<script>(function(){var r=[];\
document.querySelectorAll('.plots figure').forEach(function(f){var b=f.getBoundingClientRect();\
r.push([Math.round(b.left),Math.round(b.top+window.scrollY),Math.round(b.width),Math.round(b.height)].join(' '));});\
var p=document.createElement('pre');p.id='caprl-geometry';\
p.textContent='scroll '+document.documentElement.scrollWidth+'\\n'+r.join('\\n');document.body.appendChild(p);})();</script>";

struct Geometry {
    scroll_width: i64,
    /// left, top, width, height of every plot.
    figures: Vec<[i64; 4]>,
}

fn geometry(bin: &str, report: &Path, width: u32) -> Geometry {
    let html = std::fs::read_to_string(report).expect("report");
    let probe = report.with_file_name(format!("probe-{width}.html"));
    std::fs::write(
        &probe,
        html.replace("</body>", &format!("{GEOMETRY_PROBE}</body>")),
    )
    .expect("probe page");
    let (dom, err) = browse(bin, &probe, width, &["--dump-dom".into()]);
    let open = "<pre id=\"caprl-geometry\">";
    let start = dom
        .find(open)
        .unwrap_or_else(|| panic!("the probe did not run; stderr:\n{err}"))
        + open.len();
    let text = &dom[start..start + dom[start..].find("</pre>").expect("pre end")];
    let mut lines = text.lines();
    let scroll_width = lines
        .next()
        .and_then(|l| l.strip_prefix("scroll "))
        .and_then(|w| w.parse().ok())
        .expect("scroll width");
    let figures = lines
        .map(|l| {
            let v: Vec<i64> = l.split(' ').map(|x| x.parse().expect("number")).collect();
            [v[0], v[1], v[2], v[3]]
        })
        .collect();
    Geometry {
        scroll_width,
        figures,
    }
}

/// Number of plots in each row (plots sharing a top edge), top to bottom.
fn per_row(figures: &[[i64; 4]]) -> Vec<usize> {
    let mut rows: BTreeMap<i64, usize> = BTreeMap::new();
    for f in figures {
        *rows.entry(f[1]).or_default() += 1;
    }
    rows.into_values().collect()
}

#[test]
fn report_loads_in_chromium_without_console_messages() {
    let Some(bin) = chromium() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let page = report(dir.path());
    let (dom, err) = browse(&bin, &page, 1400, &["--dump-dom".into()]);
    assert!(
        dom.contains("id=\"plot-reward-cider\""),
        "the page loaded: {dom:.200}"
    );
    assert!(
        console_messages(&err).is_empty(),
        "console messages: {:?}",
        console_messages(&err)
    );

    // The check itself works: a polyline with a NaN point is reported by the browser.
    let html = std::fs::read_to_string(&page).expect("report");
    let broken = dir.path().join("broken.html");
    std::fs::write(&broken, html.replacen("points=\"", "points=\"NaN,", 1)).expect("write");
    let (_, err) = browse(&bin, &broken, 1400, &["--dump-dom".into()]);
    assert!(
        console_messages(&err)
            .iter()
            .any(|m| m.contains("attribute points")),
        "a broken SVG must show up in the console log:\n{err}"
    );
}

#[test]
fn plots_fill_the_width_several_per_row_and_one_per_row_on_a_phone() {
    let Some(bin) = chromium() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let page = report(dir.path());

    let wide = geometry(&bin, &page, 1400);
    assert!(wide.figures.len() >= 10, "{} plots", wide.figures.len());
    let rows = per_row(&wide.figures);
    assert!(
        rows[0] >= 2 && rows.iter().filter(|&&n| n >= 2).count() * 2 >= rows.len(),
        "at 1400 px most rows hold several plots: {rows:?}"
    );
    assert!(
        wide.scroll_width <= 1400,
        "no horizontal scrolling: {}",
        wide.scroll_width
    );
    for f in &wide.figures {
        assert!(
            f[0] >= 0 && f[0] + f[2] <= 1400,
            "plot inside the window: {f:?}"
        );
        assert!(f[2] >= 400, "plots stay readable: {f:?}");
    }
    // The row is used, not half of it: the rightmost plot ends near the right edge.
    let right = wide.figures.iter().map(|f| f[0] + f[2]).max().unwrap_or(0);
    assert!(right > 1300, "the plots reach the right side: {right}");

    let narrow = geometry(&bin, &page, 600);
    assert!(
        per_row(&narrow.figures).iter().all(|&n| n == 1),
        "one plot per row at 600 px"
    );
    assert!(
        narrow.scroll_width <= 600,
        "no horizontal scrolling: {}",
        narrow.scroll_width
    );

    // The screenshot shows drawn plots in the right half of the first plot row too.
    let shot = dir.path().join("shot.png");
    browse(
        &bin,
        &page,
        1400,
        &[format!("--screenshot={}", shot.display())],
    );
    let img = image::open(&shot).expect("a PNG screenshot").to_rgb8();
    assert_eq!(img.dimensions(), (1400, 2000));
    let first = wide.figures[0];
    let band = (first[1] + 40)..(first[1] + first[3] - 40);
    assert!(
        band.end < 2000,
        "the first plot row is on the screenshot: {first:?}"
    );
    let inked = |xs: std::ops::Range<u32>| -> usize {
        let mut n = 0;
        for y in band.clone().step_by(2) {
            for x in xs.clone().step_by(2) {
                let p = img.get_pixel(x, y as u32);
                if p.0.iter().any(|&c| c < 200) {
                    n += 1;
                }
            }
        }
        n
    };
    let left = inked(0..700);
    let right = inked(700..1400);
    assert!(left > 500, "plots drawn on the left: {left} dark pixels");
    assert!(right > 500, "plots drawn on the right: {right} dark pixels");
}
