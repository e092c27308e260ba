//! The Kubernetes manifests under k8s/: every overlay renders with `kubectl kustomize`,
//! every object validates strictly against the Kubernetes schemas
//! (`kubernetes-validate --strict`), the sources pass yamllint, every pod is locked
//! down, and every `caprl ...` command line in them is accepted by this build's CLI.
//!
//! Tools missing from the machine (`.ci/run` installs them) make a test print why and
//! return without checking, except in CI, where they fail it (`support/ci.rs`).

#[path = "../common/tests/support/ci.rs"]
mod ci;

use std::path::{Path, PathBuf};
use std::process::Command;

const CAPRL: &str = env!("CARGO_BIN_EXE_caprl");

/// Each kustomization we ship, with the run config its ConfigMap `caprl-config` carries.
const TARGETS: [(&str, &str); 3] = [
    ("k8s/base", "k8s/base/caprl.toml"),
    ("k8s/overlays/dev", "k8s/overlays/dev/caprl.toml"),
    ("k8s/overlays/gpu", "k8s/base/caprl.toml"),
];

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn render(kubectl: &Path, dir: &str) -> String {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(repo(dir))
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 manifests")
}

#[test]
fn every_overlay_renders_and_every_object_validates_strictly() {
    let (Some(kubectl), Some(validate)) = (ci::tool("kubectl"), ci::tool("kubernetes-validate"))
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = vec![repo("k8s/base/nats-credentials.template.yaml")];
    for (target, _) in TARGETS {
        let path = dir
            .path()
            .join(format!("{}.yaml", target.replace('/', "_")));
        std::fs::write(&path, render(&kubectl, target)).expect("write rendered");
        files.push(path);
    }
    // No -k: the newest Kubernetes version the installed schemas know.
    let out = Command::new(validate)
        .args(["--strict", "--quiet"])
        .args(&files)
        .output()
        .expect("run kubernetes-validate");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "kubernetes-validate failed:\n{report}"
    );
    for line in report.lines() {
        // Prometheus operator kinds have no built-in schema; everything else must have one.
        let tolerated = line.contains("monitoring.coreos.com/");
        assert!(
            !line.contains("ERROR") && (!line.contains("WARN") || tolerated),
            "kubernetes-validate: {line}"
        );
    }
}

#[test]
fn manifest_sources_pass_yamllint() {
    let Some(yamllint) = ci::tool("yamllint") else {
        return;
    };
    let out = Command::new(yamllint)
        .args(["--strict", "-c"])
        .arg(repo("k8s/.yamllint.yaml"))
        .arg(repo("k8s"))
        .current_dir(repo("k8s"))
        .output()
        .expect("run yamllint");
    assert!(
        out.status.success(),
        "yamllint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Counts lines equal to `needle` after trimming.
fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.trim() == needle).count()
}

#[test]
fn every_pod_runs_non_root_read_only_without_capabilities_and_with_limits() {
    let Some(kubectl) = ci::tool("kubectl") else {
        return;
    };
    for (target, _) in TARGETS {
        let text = render(&kubectl, target);
        let pods = count(&text, "kind: Deployment") + count(&text, "kind: StatefulSet");
        let containers = text
            .lines()
            .filter(|l| l.trim_start().starts_with("image: "))
            .count();
        assert!(
            pods >= 4 && containers >= 2 * pods - 1,
            "{target}: pods {pods}"
        );
        assert_eq!(
            count(&text, "runAsNonRoot: true"),
            pods,
            "{target}: runAsNonRoot"
        );
        assert_eq!(
            count(&text, "type: RuntimeDefault"),
            pods,
            "{target}: seccomp"
        );
        for line in [
            "readOnlyRootFilesystem: true",
            "allowPrivilegeEscalation: false",
            "limits:",
            "requests:",
        ] {
            assert!(
                count(&text, line) >= containers,
                "{target}: {line} on only {} of {containers} containers",
                count(&text, line)
            );
        }
        let drops = text
            .lines()
            .zip(text.lines().skip(1))
            .filter(|(a, b)| a.trim() == "drop:" && b.trim() == "- ALL")
            .count();
        assert_eq!(drops, containers, "{target}: capabilities drop ALL");
        assert!(!text.contains("privileged: true"), "{target}: privileged");
    }
}

#[test]
fn gpu_overlay_gives_the_learner_a_gpu_and_dev_overlay_gives_it_none() {
    let Some(kubectl) = ci::tool("kubectl") else {
        return;
    };
    let gpu = render(&kubectl, "k8s/overlays/gpu");
    assert!(gpu.contains("nvidia.com/gpu: 1"));
    assert!(gpu.contains("nvidia.com/gpu.present: \"true\""));
    assert!(gpu.contains("kind: PodMonitor"));
    let dev = render(&kubectl, "k8s/overlays/dev");
    assert!(
        !dev.contains("nvidia.com/gpu"),
        "dev overlay must fit a laptop"
    );
    assert!(
        !dev.contains("caprl-cuda"),
        "dev overlay runs the CPU image only"
    );
    assert!(
        dev.contains("kind: Secret"),
        "dev overlay brings its own NATS secret"
    );
}

/// One container's `command` + `args` from kustomize's block-style output.
#[derive(Default)]
struct Pending {
    col: usize,
    command: Vec<String>,
    args: Vec<String>,
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return s[1..s.len() - 1].to_string();
        }
    }
    s.to_string()
}

/// Every container command line in rendered manifests whose program is `caprl`, as the
/// argument list after the program.
fn caprl_command_lines(text: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut open: Vec<Pending> = Vec::new();
    let mut done: Vec<Pending> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let (col, rest) = match line.trim_start().strip_prefix("- ") {
            Some(rest) => (indent + 2, rest),
            None => (indent, line.trim_start()),
        };
        let new_item = line.trim_start().starts_with("- ");
        let (keep, close): (Vec<Pending>, Vec<Pending>) = open
            .into_iter()
            .partition(|p| p.col < col || (p.col == col && !new_item));
        open = keep;
        done.extend(close);
        let key = rest
            .strip_suffix(':')
            .filter(|k| *k == "command" || *k == "args");
        i += 1;
        if let Some(key) = key {
            let prefix = format!("{}- ", " ".repeat(col));
            let mut items = Vec::new();
            while i < lines.len() && lines[i].starts_with(&prefix) {
                items.push(unquote(&lines[i][prefix.len()..]));
                i += 1;
            }
            if open.last().map(|p| p.col) != Some(col) {
                open.push(Pending {
                    col,
                    ..Pending::default()
                });
            }
            let pending = open.last_mut().expect("just pushed");
            if key == "command" {
                pending.command = items;
            } else {
                pending.args = items;
            }
        }
    }
    done.extend(open);
    done.into_iter()
        .filter(|p| p.command.first().is_some_and(|c| c.ends_with("caprl")))
        .map(|p| p.command[1..].iter().chain(&p.args).cloned().collect())
        .collect()
}

/// Kubernetes expands `$(VAR)` from the container env; any name will do here.
fn expand(arg: &str) -> String {
    arg.replace("$(POD_NAME)", "actor-7d9f-abcde")
}

#[test]
fn extractor_finds_every_caprl_container_of_a_rendered_pod() {
    let text = "\
      containers:
      - args:
        - learner
        - --metrics-addr
        - \"0.0.0.0:9100\"
        command:
        - caprl
        image: caprl
      - command:
        - nats-server
        name: other
      initContainers:
      - args: [\"ignored\"]
      - command:
        - /usr/local/bin/caprl
        - data
        args:
        - synth
";
    let lines = caprl_command_lines(text);
    assert_eq!(
        lines,
        vec![
            vec!["learner", "--metrics-addr", "0.0.0.0:9100"],
            vec!["data", "synth"],
        ]
    );
}

#[test]
fn every_caprl_command_line_in_the_manifests_is_accepted_by_the_cli() {
    let Some(kubectl) = ci::tool("kubectl") else {
        return;
    };
    let mut checked = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for (target, _) in TARGETS {
        let lines = caprl_command_lines(&render(&kubectl, target));
        assert!(
            lines.len() >= 6,
            "{target}: expected the learner, actor and reward-worker command lines and \
             their synth initContainers, found {lines:?}"
        );
        for line in lines {
            let args: Vec<String> = line.iter().map(|a| expand(a)).collect();
            if !checked.insert(args.clone()) {
                continue;
            }
            let out = Command::new(CAPRL)
                .args(&args)
                .arg("--help")
                .output()
                .expect("run caprl");
            if !out.status.success() {
                failures.push(format!(
                    "{target}: caprl {} --help\n{}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_shipped_run_configs_and_every_set_override_in_the_manifests_resolve() {
    let Some(kubectl) = ci::tool("kubectl") else {
        return;
    };
    for (target, config) in TARGETS {
        for line in caprl_command_lines(&render(&kubectl, target)) {
            let mut cmd = Command::new(CAPRL);
            cmd.args(["config", "show", "--config"]).arg(repo(config));
            let mut args = line.iter();
            while let Some(arg) = args.next() {
                if arg == "--set" {
                    let kv = args.next().expect("--set takes KEY=VALUE");
                    cmd.args(["--set", kv]);
                } else if let Some(kv) = arg.strip_prefix("--set=") {
                    cmd.args(["--set", kv]);
                } else if arg == "--config" {
                    let path = args.next().expect("--config takes a file");
                    assert_eq!(path, "/etc/caprl/caprl.toml", "{target}: config mount");
                }
            }
            let out = cmd.output().expect("run caprl config show");
            assert!(
                out.status.success(),
                "{target}: {config} with the overrides of `caprl {}`:\n{}",
                line.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Kubernetes runs a pod's init containers again when its sandbox restarts, with its emptyDir
/// kept: the `synth` initContainer's command must succeed on its own output and leave it as it
/// is, while a directory holding anything else is still refused.
#[test]
fn the_synth_init_container_command_runs_again_on_its_own_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("synth");
    let synth = |seed: &str| {
        Command::new(CAPRL)
            .args([
                "data", "synth", "--train", "20", "--val", "5", "--test", "5",
            ])
            .args(["--seed", seed, "--quiet", "--out"])
            .arg(&out)
            .output()
            .expect("caprl runs")
    };
    let first = synth("42");
    assert!(first.status.success(), "{first:?}");
    let captions = std::fs::read(out.join("captions.json")).expect("captions");
    let again = synth("42");
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{again:?}");
    assert!(said.contains("already holds this data set"), "{said}");
    assert_eq!(
        std::fs::read(out.join("captions.json")).expect("captions"),
        captions
    );
    let other = synth("7");
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success() && err.contains("already exists and is not empty"),
        "{err}"
    );
}
