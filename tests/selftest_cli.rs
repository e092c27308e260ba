//! `caprl selftest` on the CPU compares the generic ops (the ones CUDA runs) with the CPU's own
//! kernels, and the kernels at every SIMD level the CPU has with the baseline build: it passes
//! at the default tolerance, names every check, reports failures with the largest differences
//! and a failing exit status, and refuses bad settings clearly.

mod support;

use caprl_kernels::fastmath::Simd;
use support::{caprl, text};

/// Every quantity the self-test compares, for each tiny model.
const CHECKS: [&str; 7] = [
    "token log-probs",
    "gradients",
    "gradient norm",
    "adamw step",
    "greedy tokens",
    "snapshot device -> cpu",
    "repeated training",
];
const MODELS: [&str; 4] = ["fc-gru", "att-lstm2", "crnn-gru", "transformer"];

#[test]
fn selftest_on_the_cpu_passes_every_check_of_every_model() {
    let out = caprl().args(["selftest", "-q"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout.contains("cpu (generic ops)"), "{stdout}");
    for model in MODELS {
        for check in CHECKS {
            let line = stdout
                .lines()
                .find(|l| l.contains(&format!("{model} {check}")))
                .unwrap_or_else(|| panic!("no `{model} {check}` line:\n{stdout}"));
            assert!(line.starts_with("pass"), "{line}");
        }
    }
    // Every level above the baseline, compared with it check by check.
    let levels: Vec<Simd> = Simd::available()
        .into_iter()
        .filter(|&l| l != Simd::Baseline)
        .collect();
    for level in &levels {
        for model in MODELS {
            for check in CHECKS {
                let name = format!("{level}: {model} {check}");
                let line = stdout
                    .lines()
                    .find(|l| l.contains(&name))
                    .unwrap_or_else(|| panic!("no `{name}` line:\n{stdout}"));
                assert!(line.starts_with("pass"), "{line}");
            }
        }
    }
    assert!(!stdout.contains("FAIL"), "{stdout}");
    let total = 28 * (1 + levels.len());
    assert!(
        stdout.contains(&format!("selftest: pass ({total} checks")),
        "{stdout}"
    );
}

/// `CAPRL_SIMD` names a level; a misspelt one, or one this CPU lacks, stops any command with
/// exit code 2 and a message listing what the CPU runs; a supported one is used.
#[test]
fn a_bad_or_unsupported_simd_level_is_refused_naming_what_the_cpu_runs() {
    let runs: Vec<&str> = Simd::available().iter().map(|l| l.name()).collect();
    let out = caprl()
        .args(["config", "default"])
        .env("CAPRL_SIMD", "sse9")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let msg = text(&out);
    assert!(msg.contains("CAPRL_SIMD=`sse9`"), "{msg}");
    assert!(msg.contains(&runs.join(", ")), "{msg}");
    if let Some(missing) = Simd::ALL.into_iter().find(|l| !l.supported()) {
        let out = caprl()
            .args(["config", "default"])
            .env("CAPRL_SIMD", missing.name())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let msg = text(&out);
        assert!(msg.contains("this CPU lacks it"), "{msg}");
        assert!(msg.contains(&runs.join(", ")), "{msg}");
    }
    for level in Simd::available() {
        let out = caprl()
            .args([
                "bench",
                "transformer",
                "--shape",
                "synth",
                "--tasks",
                "greedy",
            ])
            .args(["--reps", "1", "--warmup", "0", "--json", "-q"])
            .env("CAPRL_SIMD", level.name())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("\"simd\":\"{level}\"")),
            "{stdout}"
        );
    }
}

/// With no tolerance, the rounding differences between the kernels and the generic ops (which
/// exist because the two really are different code) must be reported as failures, with their
/// size; the exact checks still pass.
#[test]
fn selftest_with_zero_tolerance_reports_the_differences_and_fails() {
    let out = caprl()
        .args(["selftest", "--tolerance", "0", "-q"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(stderr.contains("checks failed"), "{}", text(&out));
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        failed.iter().any(|l| l.contains("token log-probs")),
        "{stdout}"
    );
    for line in &failed {
        let largest: f64 = line
            .split("largest ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no largest difference in `{line}`"));
        assert!(largest > 0.0 && largest < 1e-3, "{line}");
    }
    for model in MODELS {
        for check in [
            "greedy tokens",
            "snapshot device -> cpu",
            "repeated training",
        ] {
            let line = stdout
                .lines()
                .find(|l| l.contains(&format!("{model} {check}")))
                .unwrap_or_else(|| panic!("no `{model} {check}` line:\n{stdout}"));
            assert!(line.starts_with("pass"), "{line}");
        }
    }
}

#[test]
fn selftest_refuses_a_negative_tolerance_and_a_misspelt_generic_ops_switch() {
    let out = caprl()
        .args(["selftest", "--tolerance=-1", "-q"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("finite number >= 0"), "{}", text(&out));

    let out = caprl()
        .args(["selftest", "-q"])
        .env("CAPRL_GENERIC_OPS", "yes please")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("CAPRL_GENERIC_OPS") && msg.contains("set it to 1"),
        "{msg}"
    );
}

#[test]
#[cfg(not(feature = "cuda"))]
fn selftest_on_cuda_in_a_cpu_build_says_to_rebuild() {
    let out = caprl()
        .args(["selftest", "--device", "cuda:0", "-q"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("--features cuda"), "{}", text(&out));
}
