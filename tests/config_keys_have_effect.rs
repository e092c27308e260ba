//! Every documented config key has an effect. Each key of `caprl config default` is either
//! flipped here, in a tiny in-process run (`caprl train`) under the settings that make it
//! apply, and the run must come out different (other weights, log records, files, or a refusal
//! that names the problem); or, where an in-process run cannot show it (the NATS transport,
//! the cluster, the CLIP encoder, audio), the test file that exercises it is named and must
//! mention it. A key added to the config without a line here fails the first test.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use caprl_common::config::{flat_keys, RunConfig};
use sha2::{Digest, Sha256};
use support::{caprl, sets, text, TINY_TRANSFORMER};

/// How a key is shown to have an effect.
enum Proof {
    /// `caprl train` with the key set to `to`, on top of the settings `with`, differs from the
    /// same run without it. `{dir}` in either stands for the test's scratch directory.
    Flip {
        to: &'static str,
        with: &'static [&'static str],
    },
    /// Shown by the test file `file` (relative to the workspace), which mentions `mentions`.
    Elsewhere {
        file: &'static str,
        mentions: &'static str,
    },
}

use Proof::{Elsewhere, Flip};

const NONE: &[&str] = &[];
const ATT: &[&str] = &["model.kind=\"att\""];
const SLE: &[&str] = &["train.objective=\"sle\""];
const PPO: &[&str] = &["train.ppo_epochs=2"];
const KL: &[&str] = &["train.kl_coef=0.5"];
const TWO_XE_EPOCHS: &[&str] = &["train.xe_epochs=2"];
const ASYNC: &[&str] = &["runtime.mode=\"async\""];
const BEAM_4: &[&str] = &["decode.beam=4"];
const DECAY: &[&str] = &["train.xe_epochs=2", "optim.decay_every=1"];
const NOAM: &[&str] = &["optim.schedule=\"noam\"", "optim.warmup_steps=2"];
const KL_K3: &[&str] = &["train.kl_coef=0.5", "train.kl_estimator=\"k3\""];

/// Every key of the config and how its effect is shown.
fn proofs() -> Vec<(&'static str, Proof)> {
    let flip = |to, with| Flip { to, with };
    let elsewhere = |file, mentions| Elsewhere { file, mentions };
    vec![
        ("seed", flip("7", NONE)),
        ("device", elsewhere("tests/compute_flags.rs", "cuda")),
        ("dtype", flip("\"bf16\"", NONE)),
        ("run_dir", flip("\"{dir}/elsewhere\"", NONE)),
        ("data.dir", flip("\"{dir}/other-data\"", NONE)),
        ("data.format", flip("\"custom\"", NONE)),
        ("data.min_count", flip("2", NONE)),
        ("data.max_len", flip("8", NONE)),
        ("model.kind", flip("\"att\"", NONE)),
        ("model.rnn", flip("\"lstm\"", NONE)),
        ("model.layers", flip("2", NONE)),
        ("model.embed", flip("16", NONE)),
        ("model.hidden", flip("16", NONE)),
        ("model.att_hidden", flip("16", ATT)),
        (
            "model.crnn_width",
            elsewhere("common/model/tests/model_crnn.rs", "crnn_width"),
        ),
        ("model.dropout", flip("0.5", NONE)),
        ("model.enc_layers", flip("2", &TINY_TRANSFORMER)),
        ("model.dec_layers", flip("2", &TINY_TRANSFORMER)),
        ("model.d_model", flip("32", &TINY_TRANSFORMER)),
        ("model.heads", flip("4", &TINY_TRANSFORMER)),
        ("model.d_ff", flip("64", &TINY_TRANSFORMER)),
        ("model.tie_embed", flip("true", &TINY_TRANSFORMER)),
        ("model.global_region", flip("true", &TINY_TRANSFORMER)),
        ("decode.temperature", flip("0.5", NONE)),
        ("decode.top_k", flip("3", NONE)),
        ("decode.top_p", flip("0.3", NONE)),
        ("decode.beam", flip("1", NONE)),
        ("decode.beam_groups", flip("2", BEAM_4)),
        // The logged top beam comes from the first group, which the penalty between groups
        // never moves (the group and trigram flips show the beam settings reach the decoder).
        (
            "decode.diversity_lambda",
            elsewhere(
                "common/model/tests/model_decode_options.rs",
                "diversity_lambda",
            ),
        ),
        ("decode.remove_bad_endings", flip("true", NONE)),
        // An untrained model's beams all run to max_len: normalising by length ranks them alike.
        (
            "decode.length_norm",
            elsewhere("common/model/tests/model_decode_options.rs", "length_norm"),
        ),
        ("decode.block_trigrams", flip("true", NONE)),
        // Only `caprl eval` decodes with a value head's lookahead.
        (
            "decode.lookahead_lambda",
            elsewhere("tests/objectives_cli.rs", "lookahead"),
        ),
        ("train.objective", flip("\"xe\"", NONE)),
        ("train.xe_epochs", flip("2", NONE)),
        ("train.rl_epochs", flip("2", NONE)),
        ("train.batch_size", flip("8", NONE)),
        ("train.samples", flip("3", NONE)),
        ("train.baseline", flip("\"mean\"", NONE)),
        ("train.label_smoothing", flip("0.2", NONE)),
        ("train.sle_alpha", flip("0.2", SLE)),
        // WTF-RL needs a CLIP encoder for its reward.
        (
            "train.wtf_baseline",
            elsewhere("learner/tests/objective_targets.rs", "wtf_baseline"),
        ),
        (
            "train.mc_rollouts",
            flip("2", &["train.objective=\"mc-pg\"", "data.max_len=6"]),
        ),
        ("train.entropy_coef", flip("0.5", NONE)),
        ("train.kl_coef", flip("0.5", NONE)),
        ("train.kl_estimator", flip("\"k3\"", KL)),
        ("train.kl_in", flip("\"reward\"", KL_K3)),
        // BLEU-4 of an untrained model is 0 for every sample: groups with nothing to compare.
        (
            "train.dynamic_sampling",
            flip(
                "true",
                &["train.baseline=\"grpo\"", "reward.spec=\"bleu4=1\""],
            ),
        ),
        ("train.ppo_epochs", flip("2", NONE)),
        ("train.ppo_minibatches", flip("2", PPO)),
        ("train.ppo_ratio", flip("\"sequence\"", PPO)),
        ("train.ppo_proximal", flip("\"learner\"", PPO)),
        ("train.clip_low", flip("0.0001", PPO)),
        ("train.clip_high", flip("0.0001", PPO)),
        ("train.eval_every", flip("2", TWO_XE_EPOCHS)),
        ("train.eval_images", flip("4", NONE)),
        ("train.sample_images", flip("2", NONE)),
        ("train.tensorboard", flip("false", NONE)),
        ("train.max_steps", flip("3", NONE)),
        ("reward.spec", flip("\"bleu4=1\"", NONE)),
        ("reward.df", flip("\"corpus\"", NONE)),
        ("reward.distance", flip("\"cider\"", SLE)),
        ("reward.cider_eos", flip("false", NONE)),
        (
            "reward.python",
            elsewhere("tests/python_reward.rs", "reward.python"),
        ),
        ("optim.lr", flip("1e-3", NONE)),
        ("optim.rl_lr", flip("1e-3", NONE)),
        (
            "optim.value_lr",
            flip("1e-2", &["train.objective=\"actor-critic\""]),
        ),
        ("optim.weight_decay", flip("0.1", NONE)),
        ("optim.beta1", flip("0.5", NONE)),
        ("optim.beta2", flip("0.9", NONE)),
        ("optim.eps", flip("1e-3", NONE)),
        ("optim.grad_clip", flip("0.01", NONE)),
        ("optim.schedule", flip("\"cosine\"", NONE)),
        ("optim.decay_every", flip("1", TWO_XE_EPOCHS)),
        ("optim.decay_rate", flip("0.5", DECAY)),
        (
            "optim.warmup_steps",
            flip("2", &["optim.schedule=\"cosine\""]),
        ),
        ("optim.noam_factor", flip("2.0", NOAM)),
        ("runtime.mode", flip("\"async\"", NONE)),
        (
            "runtime.run_id",
            elsewhere("tests/runtime_wrong_roles.rs", "runtime.run_id"),
        ),
        ("runtime.max_policy_lag", flip("1", ASYNC)),
        (
            "runtime.stale_rollouts",
            elsewhere("tests/runtime_async.rs", "stale_rollouts"),
        ),
        (
            "runtime.off_policy_correction",
            elsewhere("tests/rl_algorithms_cli.rs", "off_policy_correction"),
        ),
        (
            "runtime.is_level",
            elsewhere("learner/tests/objectives_ppo.rs", "is_level"),
        ),
        (
            "runtime.is_clip",
            elsewhere("learner/tests/objectives_ppo.rs", "is_clip"),
        ),
        (
            "runtime.is_mask_low",
            elsewhere("tests/rl_algorithms_cli.rs", "is_mask_low"),
        ),
        (
            "runtime.is_mask_high",
            elsewhere("tests/rl_algorithms_cli.rs", "is_mask_high"),
        ),
        ("runtime.snapshot_dtype", flip("\"bf16\"", NONE)),
        ("runtime.snapshot_every", flip("2", ASYNC)),
        (
            "runtime.snapshot_full_every",
            elsewhere("common/tests/bus_snapshot_deltas.rs", "snapshot_full_every"),
        ),
        (
            "runtime.snapshot_dir",
            elsewhere("common/tests/bus_snapshot_files.rs", "snapshot_dir"),
        ),
        (
            "runtime.snapshot_file_deltas",
            elsewhere("common/tests/bus_snapshot_files.rs", "snapshot_file_deltas"),
        ),
        (
            "runtime.snapshot_cache_dir",
            elsewhere("common/tests/bus_snapshot_cache.rs", "snapshot_cache_dir"),
        ),
        // Results do not depend on it by design (sync tasks are deterministic): it bounds the
        // tasks in flight, which the driver tests count.
        (
            "runtime.tasks_in_flight",
            elsewhere("learner/tests/driver_collect.rs", "tasks_in_flight"),
        ),
        ("runtime.images_per_task", flip("8", NONE)),
        (
            "runtime.ack_wait_secs",
            elsewhere("tests/runtime_ack_progress.rs", "ack_wait"),
        ),
        (
            "nats.url",
            elsewhere("tests/runtime_wrong_roles.rs", "--nats-url"),
        ),
        (
            "nats.user",
            elsewhere("tests/runtime_auth_status.rs", "nats.user"),
        ),
        (
            "nats.password",
            elsewhere("tests/runtime_auth_status.rs", "nats.password"),
        ),
        ("nats.token", elsewhere("common/tests/bus_nats.rs", "token")),
        (
            "nats.nkey_seed",
            elsewhere("tests/runtime_security_cli.rs", "nkey_seed"),
        ),
        (
            "nats.creds_file",
            elsewhere("tests/runtime_security_cli.rs", "creds_file"),
        ),
        (
            "nats.tls_ca",
            elsewhere("tests/runtime_security_cli.rs", "tls_ca"),
        ),
        (
            "nats.tls_cert",
            elsewhere("tests/runtime_security_cli.rs", "tls_cert"),
        ),
        (
            "nats.tls_key",
            elsewhere("tests/runtime_security_cli.rs", "tls_key"),
        ),
        ("nats.max_message_bytes", flip("1024", NONE)),
        (
            "nats.connect_timeout_secs",
            elsewhere("common/tests/bus_nats.rs", "connect_timeout_secs"),
        ),
        (
            "nats.replicas",
            elsewhere("tests/runtime_cluster.rs", "replicas"),
        ),
        (
            "checkpoint.dir",
            flip("\"{dir}/checkpoints-elsewhere\"", NONE),
        ),
        ("checkpoint.keep", flip("1", &["checkpoint.every_steps=2"])),
        ("checkpoint.every_steps", flip("2", NONE)),
        ("clip.reward", elsewhere("tests/clip_cli.rs", "clip.reward")),
        ("clip.eval", elsewhere("tests/clip_cli.rs", "clip.eval")),
        (
            "clip.tau",
            elsewhere("reward-worker/tests/clip_reward.rs", "tau"),
        ),
        (
            "clip.neighbours",
            elsewhere("common/clip/tests/dual.rs", "neighbours"),
        ),
        ("clip.disc_lr", elsewhere("tests/clip_cli.rs", "disc")),
        (
            "clip.disc_pretrain_images",
            elsewhere("tests/clip_cli.rs", "disc_pretrain_images"),
        ),
        (
            "clip.disc_pretrain_epochs",
            elsewhere("tests/clip_cli.rs", "disc_pretrain_epochs"),
        ),
    ]
}

#[test]
fn every_documented_key_has_a_proof_of_its_effect() {
    let config = serde_json::to_value(RunConfig::default()).unwrap();
    let documented: BTreeSet<String> = flat_keys(&config).into_keys().collect();
    let proven: BTreeSet<String> = proofs().iter().map(|(k, _)| k.to_string()).collect();
    let unproven: Vec<_> = documented.difference(&proven).collect();
    let unknown: Vec<_> = proven.difference(&documented).collect();
    assert!(
        unproven.is_empty() && unknown.is_empty(),
        "keys without a proof here: {unproven:?}; keys here the config does not have: {unknown:?}"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (key, proof) in proofs() {
        if let Elsewhere { file, mentions } = proof {
            let source = std::fs::read_to_string(root.join(file))
                .unwrap_or_else(|e| panic!("{key}: {file}: {e}"));
            assert!(
                source.contains(mentions),
                "{key}: {file} does not mention `{mentions}`"
            );
        }
    }
}

/// What a run came to: its error, or its checkpoints' weights, its log records without
/// timings, and its files.
fn outcome(dir: &Path, data: &Path, run: &Path, with: &[String]) -> String {
    let out = caprl()
        .args(["train", "-q"])
        .args(sets(data, run, 1, &[]))
        .args(with.iter().flat_map(|k| {
            [
                "--set".to_string(),
                k.replace("{dir}", &dir.display().to_string()),
            ]
        }))
        .output()
        .unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return err
            .lines()
            .find(|l| l.starts_with("error"))
            .unwrap_or(&err)
            .to_string();
    }
    let mut digest = Sha256::new();
    let mut files = Vec::new();
    walk(run, run, &mut files);
    for f in &files {
        digest.update(f.as_bytes());
        if f.ends_with("model.safetensors") {
            digest.update(std::fs::read(run.join(f)).unwrap());
        }
    }
    let log = std::fs::read_to_string(run.join("run.jsonl")).unwrap_or_default();
    for line in log.lines() {
        let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
        if record["type"] == "header" {
            continue;
        }
        if let Some(map) = record.as_object_mut() {
            for volatile in [
                "seconds",
                "stages",
                "unix_ms",
                "tokens_per_s",
                "rollouts_per_s",
            ] {
                map.remove(volatile);
            }
        }
        digest.update(record.to_string().as_bytes());
    }
    format!("ok: {}", hex::encode(digest.finalize()))
}

/// Every file under `dir` (its path relative to `root`), but the run directory's lock; a
/// TensorBoard event file by its kind, not its name.
fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            walk(root, &p, out);
        } else if !p.ends_with("learner.lock") {
            let path = p.strip_prefix(root).unwrap().display().to_string();
            // A TensorBoard file's name holds the time and the process id.
            match path.find("events.out.tfevents") {
                Some(at) => out.push(format!("{}events.out.tfevents", &path[..at])),
                None => out.push(path),
            }
        }
    }
}

#[test]
fn flipping_each_key_changes_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let data = support::synth(dir);
    let other = support::synth_seeded(dir, "other-data", 2);
    // Opened once before the runs, which then find the vocabulary beside it (the run that flips
    // data.min_count must not be the one that writes it).
    for d in [&data, &other] {
        let out = caprl()
            .args(["data", "stats", "-q"])
            .arg(d)
            .output()
            .unwrap();
        assert!(
            out.status.success() && d.join("vocab.json").is_file(),
            "{}",
            text(&out)
        );
    }
    // Each context's baseline once, then every flip, over two threads.
    let flips: Vec<(&str, &str, Vec<String>)> = proofs()
        .into_iter()
        .filter_map(|(key, proof)| match proof {
            Flip { to, with } => Some((key, to, with.iter().map(|s| s.to_string()).collect())),
            Elsewhere { .. } => None,
        })
        .collect();
    let contexts: BTreeSet<Vec<String>> = flips.iter().map(|(_, _, with)| with.clone()).collect();
    let baselines: Mutex<BTreeMap<Vec<String>, String>> = Mutex::default();
    let results: Mutex<Vec<(String, String)>> = Mutex::default();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let contexts: Vec<Vec<String>> = contexts.into_iter().collect();
    let jobs = contexts.len() + flips.len();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= jobs {
                    break;
                }
                let run = dir.join(format!("run-{i}"));
                if i < contexts.len() {
                    let got = outcome(dir, &data, &run, &contexts[i]);
                    baselines.lock().unwrap().insert(contexts[i].clone(), got);
                } else {
                    let (key, to, with) = &flips[i - contexts.len()];
                    let mut keys = with.clone();
                    keys.push(format!("{key}={to}"));
                    let got = outcome(dir, &data, &run, &keys);
                    results
                        .lock()
                        .unwrap()
                        .push((format!("{key}={to} with {with:?}"), got));
                }
                let _ = std::fs::remove_dir_all(&run);
            });
        }
    });
    let baselines = baselines.into_inner().unwrap();
    let failing: Vec<_> = baselines
        .iter()
        .filter(|(_, b)| !b.starts_with("ok"))
        .collect();
    assert!(failing.is_empty(), "these baselines fail: {failing:#?}");
    let mut same = Vec::new();
    for (flip, got) in results.into_inner().unwrap() {
        let context = flips
            .iter()
            .find(|(k, to, _)| flip.starts_with(&format!("{k}={to} ")))
            .map(|(_, _, w)| w)
            .unwrap();
        if baselines[context] == got {
            same.push(flip);
        }
    }
    assert!(same.is_empty(), "these flips changed nothing: {same:#?}");
}
