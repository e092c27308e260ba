//! Answers that name the real cause, for the inputs a new user trips on: features of another
//! width, empty inputs, flags out of range (exit code 2, as a config key out of range), a
//! caption longer than `data.max_len`, an empty config file, a data set that does not open
//! (with a suggestion that works as written), `{}` as captions, `-q`, no colour codes or
//! backtraces where a person reads the error, and a damaged data set refused by `caprl local`
//! before it starts anything.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use support::{caprl, checkpoint_dirs, sets, synth, text, train_tiny_xe};

/// A copy of data set `data` at `to` whose `fc` features are `width` wide.
fn with_fc_width(data: &Path, to: &Path, width: usize) -> PathBuf {
    copy_data_set(data, to);
    let file = to.join("features.safetensors");
    let mut tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    let fc = tensors["fc"]
        .narrow(1, 0, width)
        .unwrap()
        .contiguous()
        .unwrap();
    tensors.insert("fc".into(), fc);
    candle_core::safetensors::save(&tensors, &file).unwrap();
    file
}

fn fails_with(out: &std::process::Output, code: i32, wanted: &[&str]) {
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
    let msg = text(out);
    for w in wanted {
        assert!(msg.contains(w), "no `{w}` in:\n{msg}");
    }
}

#[test]
fn features_of_another_width_are_named_as_the_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train_tiny_xe(tmp.path());
    let narrow = tmp.path().join("narrow");
    let file = with_fc_width(&tmp.path().join("data"), &narrow, 128);

    let out = caprl()
        .args(["eval", "--limit", "2", "--checkpoint"])
        .arg(run.join("best-xe"))
        .arg("--data")
        .arg(&narrow)
        .output()
        .unwrap();
    fails_with(
        &out,
        1,
        &[
            &file.display().to_string(),
            "fc 128 values",
            "trained on fc 256",
        ],
    );

    let out = caprl()
        .args(["train", "--objective", "scst", "-q", "--start-from"])
        .arg(run.join("best-xe"))
        .args(sets(&narrow, &tmp.path().join("rl"), 1, &[]))
        .output()
        .unwrap();
    fails_with(&out, 1, &[&file.display().to_string(), "trained on fc 256"]);
}

#[test]
fn empty_inputs_and_out_of_range_flags_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train_tiny_xe(tmp.path());
    let ck = run.join("best-xe");

    // Scoring nothing is an error, not a table of zeros.
    let refs = tmp.path().join("refs.json");
    std::fs::write(&refs, r#"{"1": ["a red cube"]}"#).unwrap();
    let cands = tmp.path().join("cands.json");
    std::fs::write(&cands, "[]").unwrap();
    let out = caprl()
        .args(["score", "--refs"])
        .arg(&refs)
        .arg("--cands")
        .arg(&cands)
        .output()
        .unwrap();
    fails_with(&out, 1, &["cands.json", "holds no captions"]);

    // Flags out of range: usage errors (2), as `--set decode.top_p=2` is a config error (2); a
    // flag that stands for a config key says that key's rule.
    for (flag, value, says) in [
        (
            "--beam",
            "0",
            "decode.beam = 0 is not allowed; expected >= 1",
        ),
        ("--limit", "0", "at least 1"),
        ("--top-p", "2", "(0, 1]"),
        ("--lookahead", "1.5", "[0, 1]"),
    ] {
        let out = caprl()
            .args(["eval", "--checkpoint"])
            .arg(&ck)
            .args([flag, value])
            .output()
            .unwrap();
        fails_with(&out, 2, &[flag, says]);
    }
    let out = caprl()
        .args(["eval", "--checkpoint"])
        .arg(&ck)
        .args(["--set", "decode.top_p=2"])
        .output()
        .unwrap();
    fails_with(&out, 2, &["decode.top_p"]);
    let features = tmp.path().join("data/features.safetensors");
    let out = caprl()
        .args(["caption", "--beam", "0", "--checkpoint"])
        .arg(&ck)
        .arg("--features")
        .arg(&features)
        .output()
        .unwrap();
    fails_with(&out, 2, &["--beam", "expected >= 1"]);

    // Features with no rows, and 1-d features: clear errors, no backtrace even when asked for.
    for (name, shape) in [("empty", vec![0usize, 256]), ("flat", vec![256])] {
        let file = tmp.path().join(format!("{name}.safetensors"));
        let fc = Tensor::zeros(shape.as_slice(), candle_core::DType::F32, &Device::Cpu).unwrap();
        candle_core::safetensors::save(&HashMap::from([("fc".to_string(), fc)]), &file).unwrap();
        let out = caprl()
            .args(["caption", "--checkpoint"])
            .arg(&ck)
            .arg("--features")
            .arg(&file)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        let says = match name {
            "empty" => "no rows",
            _ => "must be 2-D",
        };
        fails_with(&out, 1, &[&file.display().to_string(), says]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("backtrace") && !stderr.contains("   0: "),
            "{stderr}"
        );
    }
}

#[test]
fn legal_but_surprising_inputs_get_a_warning_and_logs_have_no_colour_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    // One training caption of 500 words: cut to data.max_len, with a word about it.
    let captions = data.join("captions.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&captions).unwrap()).unwrap();
    let image = json["images"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|i| i["split"] == "train")
        .unwrap();
    let word = image["sentences"][0]["raw"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    image["sentences"][0]["raw"] = vec![word.as_str(); 500].join(" ").into();
    image["sentences"][0]["tokens"] = serde_json::Value::Array(Vec::new());
    std::fs::write(&captions, json.to_string()).unwrap();
    let empty = tmp.path().join("empty.toml");
    std::fs::write(&empty, "# nothing set yet\n").unwrap();
    let out = caprl()
        .args(["train", "--objective", "xe", "--config"])
        .arg(&empty)
        .args(sets(&data, &tmp.path().join("run"), 0, &[]))
        .args(["--set", "train.xe_epochs=1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("longer than data.max_len") && stderr.contains("500 words"),
        "{stderr}"
    );
    assert!(
        stderr.contains("empty.toml") && stderr.contains("sets no key"),
        "{stderr}"
    );
    // stderr is a pipe here: plain text.
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a piped log:\n{stderr}"
    );

    // `--resume` with nothing to resume says so under -q.
    let out = caprl()
        .args(["train", "--objective", "xe", "-q", "--resume"])
        .args(sets(&data, &tmp.path().join("fresh"), 0, &[]))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("note:") && stderr.contains("--resume found no checkpoint"),
        "{stderr}"
    );
}

#[test]
fn data_set_errors_say_what_is_wrong_and_suggest_what_works() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());

    // `data synth -q` writes the data set and prints nothing.
    let quiet = tmp.path().join("quiet");
    let out = caprl()
        .args([
            "data", "synth", "--train", "8", "--val", "4", "--test", "4", "-q", "--out",
        ])
        .arg(&quiet)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));

    // `{}` as captions: well-formed JSON of the wrong shape.
    let broken = tmp.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::copy(
        data.join("features.safetensors"),
        broken.join("features.safetensors"),
    )
    .unwrap();
    std::fs::copy(
        data.join("features.ids.json"),
        broken.join("features.ids.json"),
    )
    .unwrap();
    std::fs::write(broken.join("captions.json"), "{}").unwrap();
    let out = caprl()
        .args(["train", "--objective", "xe", "-q"])
        .args(sets(&broken, &tmp.path().join("run"), 0, &[]))
        .output()
        .unwrap();
    fails_with(&out, 1, &["captions.json", "without `images`"]);
    assert!(!text(&out).contains("malformed JSON"), "{}", text(&out));

    // The suggestion works as written: it names a directory `data synth` accepts.
    let msg = text(&out);
    let command = msg
        .split('`')
        .find(|s| s.starts_with("caprl data synth --out "))
        .unwrap_or_else(|| panic!("no `caprl data synth --out` suggestion:\n{msg}"))
        .to_string();
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let out = caprl()
        .args(&args)
        .args(["--train", "8", "--val", "4", "--test", "4", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "`{command}`: {}", text(&out));
}

/// A copy of data set `data` at `to`, every file as it is.
fn copy_data_set(data: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(data).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// `caprl local` checks the data set (`caprl data check`, in a child) before it starts a server
/// or a role: a features file cut short, or feature ids that do not match the captions, is one
/// error naming the file, with no role started and the data set left as it was.
#[test]
fn local_refuses_a_truncated_features_file_or_mismatched_ids_before_any_role_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let check = |dir: &Path| {
        caprl()
            .args(["data", "check"])
            .args(sets(dir, &tmp.path().join("run"), 1, &[]))
            .output()
            .unwrap()
    };
    let good = check(&data);
    assert!(good.status.success(), "{}", text(&good));
    assert!(
        String::from_utf8_lossy(&good.stdout).contains("train,"),
        "{}",
        text(&good)
    );

    let truncated = tmp.path().join("truncated");
    copy_data_set(&data, &truncated);
    let features = truncated.join("features.safetensors");
    let len = std::fs::metadata(&features).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&features)
        .unwrap()
        .set_len(len / 2)
        .unwrap();

    let mismatched = tmp.path().join("mismatched");
    copy_data_set(&data, &mismatched);
    let ids_file = mismatched.join("features.ids.json");
    let mut ids: Vec<String> = serde_json::from_slice(&std::fs::read(&ids_file).unwrap()).unwrap();
    ids[3] = "no-such-image".into();
    std::fs::write(&ids_file, serde_json::to_vec(&ids).unwrap()).unwrap();

    for (dir, wanted) in [
        (&truncated, ["features.safetensors", "truncated"]),
        (&mismatched, ["features.safetensors", "no feature row"]),
    ] {
        let before: Vec<Vec<u8>> = ["captions.json", "features.safetensors", "features.ids.json"]
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap())
            .collect();
        let out = caprl()
            .args(["local", "--actors", "1", "--reward-workers", "1"])
            .args(sets(dir, &tmp.path().join("run"), 1, &[]))
            .output()
            .unwrap();
        fails_with(&out, 1, &wanted);
        fails_with(&check(dir), 1, &wanted);
        let msg = text(&out);
        assert!(
            !msg.contains("started") && !msg.contains("nats-server on"),
            "a role or a server started:\n{msg}"
        );
        let after: Vec<Vec<u8>> = ["captions.json", "features.safetensors", "features.ids.json"]
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap())
            .collect();
        assert!(
            before == after,
            "{}: the data set was changed",
            dir.display()
        );
    }
}

/// Every file under `dir` with its bytes, to show that a refused command changed nothing.
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn config_and_set_are_refused_where_the_command_would_not_read_them() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train_tiny_xe(tmp.path());
    let data = tmp.path().join("data");
    let before = contents(tmp.path());
    let new_set = tmp.path().join("new-set");
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (
            vec![
                "data".into(),
                "stats".into(),
                data.clone().into(),
                "--set".into(),
                "bogus.key=1".into(),
            ],
            "--set",
        ),
        (
            vec![
                "data".into(),
                "synth".into(),
                "--out".into(),
                new_set.clone().into(),
                "--config".into(),
                "missing.toml".into(),
            ],
            "--config",
        ),
        (
            vec![
                "data".into(),
                "df".into(),
                data.clone().into(),
                "--set".into(),
                "data.max_len=0".into(),
            ],
            "--set",
        ),
        (
            vec![
                "report".into(),
                run.clone().into(),
                "--config".into(),
                "missing.toml".into(),
            ],
            "--config",
        ),
    ];
    for (args, option) in cases {
        let out = caprl().args(&args).output().unwrap();
        fails_with(
            &out,
            2,
            &["reads no run config", option, "would change nothing"],
        );
    }
    // eval and caption read the checkpoint's config; only decode keys change there.
    let out = caprl()
        .args(["eval", "--config", "decode.toml", "--checkpoint"])
        .arg(run.join("best-xe"))
        .output()
        .unwrap();
    fails_with(
        &out,
        2,
        &["reads the checkpoint's config", "--set decode.KEY=VALUE"],
    );
    assert!(!new_set.exists(), "data synth ran");
    assert_eq!(
        contents(tmp.path()),
        before,
        "a refused command changed a file"
    );
}

#[test]
fn eval_refuses_beam_groups_that_do_not_divide_the_beam() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train_tiny_xe(tmp.path());
    let out = caprl()
        .args(["eval", "--beam", "5", "--beam-groups", "7", "--checkpoint"])
        .arg(run.join("best-xe"))
        .output()
        .unwrap();
    fails_with(
        &out,
        1,
        &["--beam 5 is not a multiple of the beam groups 7"],
    );
}

#[test]
fn outputs_never_overwrite_or_enter_the_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train_tiny_xe(tmp.path());
    let data = tmp.path().join("data");
    let checkpoint = checkpoint_dirs(&run.join("best-xe")).remove(0);
    let before = contents(tmp.path());
    let cases: Vec<(Vec<std::ffi::OsString>, PathBuf, &str)> = vec![
        (
            vec!["report".into(), run.clone().into()],
            run.join("run.jsonl"),
            "run directory",
        ),
        (
            vec!["data".into(), "df".into(), data.clone().into()],
            data.join("captions.json"),
            "data set",
        ),
        (
            vec![
                "eval".into(),
                "--limit".into(),
                "2".into(),
                "--checkpoint".into(),
                run.join("best-xe").into(),
            ],
            checkpoint.join("model.safetensors"),
            "checkpoint",
        ),
    ];
    for (args, target, what) in cases {
        let out = caprl()
            .args(&args)
            .arg("--out")
            .arg(&target)
            .output()
            .unwrap();
        fails_with(
            &out,
            1,
            &[&format!("inside the {what}"), "write the output elsewhere"],
        );
    }
    assert_eq!(contents(tmp.path()), before, "an input changed");
    // The files a command owns beside its input stay allowed.
    let out = caprl()
        .args(["data", "df"])
        .arg(&data)
        .arg("--out")
        .arg(data.join("train-df.bin"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn a_closed_stdout_ends_printing_commands_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let run = train_tiny_xe(&tmp.path().join("t"));
    for args in [
        vec!["data".into(), "stats".into(), data.clone().into_os_string()],
        vec![
            "report".into(),
            run.clone().into_os_string(),
            "--out".into(),
            tmp.path().join("r.html").into_os_string(),
        ],
    ] {
        let mut child = caprl()
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader went away, as `| head -1` does
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {}\n{stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn an_ack_wait_the_broker_refuses_is_refused_at_load() {
    let out = caprl()
        .args(["config", "show", "--set", "runtime.ack_wait_secs=1000000"])
        .output()
        .unwrap();
    fails_with(&out, 2, &["runtime.ack_wait_secs = 1000000", "1..=604800"]);
}

/// A message limit a task's results cannot fit: refused before training starts (the actor would
/// drop each rollout, and the learner wait for them), with the size to raise it to; nothing is
/// written to the run directory.
#[test]
fn a_message_limit_the_rollouts_cannot_fit_is_refused_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let out = caprl()
        .args(["train", "--objective", "scst", "-q"])
        .args(sets(&data, &run, 1, &["nats.max_message_bytes=1024"]))
        .output()
        .unwrap();
    fails_with(
        &out,
        1,
        &[
            "nats.max_message_bytes = 1024",
            "raise nats.max_message_bytes to at least",
            "runtime.images_per_task",
        ],
    );
    assert!(
        !run.join("run.jsonl").exists(),
        "it trained: {}",
        text(&out)
    );
}

#[test]
fn weights_with_nan_are_refused_even_under_a_valid_manifest() {
    use sha2::Digest;
    let tmp = tempfile::tempdir().unwrap();
    let run = train_tiny_xe(tmp.path());
    let checkpoint = checkpoint_dirs(&run.join("best-xe")).remove(0);
    let weights = checkpoint.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    let name = tensors.keys().min().unwrap().clone();
    let nan = (tensors[&name].ones_like().unwrap() * f64::NAN).unwrap();
    tensors.insert(name.clone(), nan);
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    // Sign the edited file, as a hand edit that knows the manifest would.
    let bytes = std::fs::read(&weights).unwrap();
    let manifest_path = checkpoint.join("MANIFEST.json");
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    for file in manifest["files"].as_array_mut().unwrap() {
        if file["name"] == "model.safetensors" {
            file["bytes"] = bytes.len().into();
            file["sha256"] = hex::encode(sha2::Sha256::digest(&bytes)).into();
        }
    }
    std::fs::write(
        &manifest_path,
        serde_json::to_string_pretty(&manifest).unwrap(),
    )
    .unwrap();

    let out = caprl()
        .args(["eval", "--limit", "2", "--checkpoint"])
        .arg(&checkpoint)
        .output()
        .unwrap();
    fails_with(
        &out,
        1,
        &[
            "model.safetensors",
            &format!("parameter `{name}`"),
            "NaN or infinite",
        ],
    );
}

#[test]
fn data_format_and_min_count_are_honoured_or_refused_with_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let dir = format!("data.dir={:?}", data.display().to_string());
    let check = |keys: &[&str]| {
        let mut cmd = caprl();
        cmd.args(["data", "check", "--set", &dir]);
        for k in keys {
            cmd.args(["--set", k]);
        }
        cmd.output().unwrap()
    };
    let vocab = std::fs::read(data.join("vocab.json")).unwrap();
    let out = check(&["data.format=\"custom\""]);
    fails_with(
        &out,
        1,
        &[
            "format is custom but the file is a Karpathy file",
            "format = \"karpathy\"",
        ],
    );
    let out = check(&["data.min_count=5"]);
    fails_with(
        &out,
        1,
        &[
            "built with min_count 1 but 5 was asked for",
            "delete it to rebuild",
        ],
    );
    assert_eq!(
        std::fs::read(data.join("vocab.json")).unwrap(),
        vocab,
        "vocab.json changed"
    );

    // With the old vocabulary removed, the min count builds the new one.
    std::fs::remove_file(data.join("vocab.json")).unwrap();
    let out = check(&["data.min_count=5"]);
    assert!(out.status.success(), "{}", text(&out));
    let words = |bytes: &[u8]| {
        let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        v["words"].as_array().unwrap().len()
    };
    let rebuilt = std::fs::read(data.join("vocab.json")).unwrap();
    assert!(
        words(&rebuilt) < words(&vocab),
        "{} words at min count 5, {} at 1",
        words(&rebuilt),
        words(&vocab)
    );
}

#[test]
fn misleading_words_are_replaced_by_the_real_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train_tiny_xe(tmp.path());
    let best = run.join("best-xe");
    // The data set goes with --data, not --set data.dir.
    let out = caprl()
        .args(["eval", "--set", "data.dir=\"elsewhere\"", "--checkpoint"])
        .arg(&best)
        .output()
        .unwrap();
    fails_with(&out, 1, &["--data DIR"]);
    // A data set given with --data is named as that, not as the one trained on.
    let missing = tmp.path().join("no-such-set");
    let out = caprl()
        .args(["eval", "--checkpoint"])
        .arg(&best)
        .arg("--data")
        .arg(&missing)
        .output()
        .unwrap();
    fails_with(&out, 1, &["given with --data"]);
    // --out naming a file.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = caprl()
        .args(["data", "synth", "--out"])
        .arg(&file)
        .output()
        .unwrap();
    fails_with(&out, 1, &["is a file", "--out names the directory"]);
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
    // A weights file that grew is not called truncated.
    let checkpoint = checkpoint_dirs(&best).remove(0);
    let mut weights = std::fs::OpenOptions::new()
        .append(true)
        .open(checkpoint.join("model.safetensors"))
        .unwrap();
    std::io::Write::write_all(&mut weights, b"extra").unwrap();
    let out = caprl()
        .args(["eval", "--checkpoint"])
        .arg(&checkpoint)
        .output()
        .unwrap();
    fails_with(&out, 1, &["model.safetensors", "it grew"]);
    assert!(!text(&out).contains("truncated"), "{}", text(&out));
}

/// Runs `caprl` with `args`; kills it after `secs` (then the output says so).
fn run_within(args: &[&str], secs: u64) -> (Option<i32>, String) {
    let mut child = caprl()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let timed_out = child.try_wait().unwrap().is_none();
    if timed_out {
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let code = if timed_out { None } else { out.status.code() };
    (code, text(&out))
}

#[test]
fn a_bad_metrics_address_stops_a_role_before_it_waits_for_nats() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let dir = format!("data.dir={:?}", data.display().to_string());
    // No server listens on the NATS port: a role that got as far as connecting would wait.
    let role = |name: &str, addr: &str| {
        let args = [
            name,
            "--set",
            &dir,
            "--nats-url",
            "nats://127.0.0.1:9",
            "--metrics-addr",
            addr,
        ];
        run_within(&args, 20)
    };
    let (code, out) = role("actor", "notanaddress");
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--metrics-addr \"notanaddress\" is not HOST:PORT"),
        "{out}"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, out) = role("reward-worker", &addr);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&addr), "{out}");
}
