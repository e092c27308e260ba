//! Command-line interface: one file per command group, each exporting an
//! `Args` struct and `run(args, &Global) -> anyhow::Result<()>`.
//!
//! To add a command group: write `src/cli/<group>.rs`, add `mod <group>;`
//! below, a variant to [`Command`] and an arm to [`run`]. Commands that need
//! async code build their own tokio runtime.

mod actor_cmd;
mod audio_data_cmd;
mod beam_args;
mod bench;
mod caption_cmd;
mod clip_cmd;
mod compute_args;
mod config_cmd;
mod data_cmd;
mod eval_cmd;
mod features_cmd;
mod learner_cmd;
pub mod local_cmd;
mod local_snapshots;
pub mod logging;
mod machine_cmd;
mod output_paths;
mod ranges;
mod report_cmd;
mod reward_worker_cmd;
mod run_cmd;
mod score_cmd;
mod selftest_cmd;
mod soak_cmd;
mod status_cmd;
mod train_cmd;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use caprl_common::config::ConfigError;
use caprl_learner::objective::{load_checked, CheckedConfig};
use caprl_learner::LearnerError;
use clap::{ArgAction, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "caprl",
    version,
    about = "Train captioning models with reinforcement learning (actors, reward workers, learner)"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command accepts, before or after the subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct Global {
    /// Run config file (TOML); keys it omits take their defaults.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Override one config key, e.g. --set model.hidden=1024 (repeatable; later wins).
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    pub sets: Vec<String>,

    /// More log output (-v debug, -vv trace).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,

    /// Only errors; no progress bars.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

impl Global {
    /// The run config: `--config` file (or defaults), then `--set` overrides, validated and
    /// checked by its objective.
    pub fn load_config(&self) -> Result<CheckedConfig, ConfigError> {
        load_checked(self.config.as_deref(), &self.sets)
    }

    /// These options with `extra` `--set`s after the user's (so they win).
    pub fn with_sets(&self, extra: &[String]) -> Global {
        let mut g = self.clone();
        g.sets.extend(extra.iter().cloned());
        g
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate the synthetic data set (when missing), train XE then RL, evaluate both: the whole job.
    Run(run_cmd::Args),
    /// Train in one process: XE warm start, then the configured RL objective.
    Train(train_cmd::Args),
    /// Evaluate a checkpoint on a split (BLEU, ROUGE-L, CIDEr-D, diversity).
    Eval(eval_cmd::Args),
    /// Caption new inputs from a features file.
    Caption(caption_cmd::Args),
    /// Text–image dual encoder of the CLIP rewards and retrieval metrics: `clip train`.
    Clip(clip_cmd::Args),
    /// Score candidate captions against references (BLEU-1..4, ROUGE-L, CIDEr-D).
    Score(score_cmd::ScoreArgs),
    /// Data set tools: generate the synthetic task, print statistics.
    Data(data_cmd::Args),
    /// Embed a folder of images with a Hugging Face CLIP checkpoint, as a data set's features.
    Features(features_cmd::Args),
    /// Draw the curves of one or more run directories into an HTML report.
    Report(report_cmd::ReportArgs),
    /// Print the default config or the resolved one.
    Config(config_cmd::Args),
    /// The learner role over NATS: XE warm start, then RL with remote actors and reward workers.
    Learner(learner_cmd::Args),
    /// The actor role over NATS: decode rollout tasks with the newest policy snapshot.
    Actor(actor_cmd::Args),
    /// The reward-worker role over NATS: score rollouts with the reward spec.
    RewardWorker(reward_worker_cmd::Args),
    /// Learner, actors and reward workers as local processes on a local (or given) NATS server.
    Local(local_cmd::Args),
    /// Chaos soak: rounds of a small run under random kills, pauses, broker restarts, duplicate
    /// roles and full disks, each checked against an undisturbed run (`--minutes`, `--seed`).
    Soak(soak_cmd::Args),
    /// Show a run on NATS: policy version, queue depths, live roles, actor lag.
    Status(status_cmd::Args),
    /// Benchmarks: `bench all` (every benchmark, one table; `--json`), `bench transport`
    /// (in-process vs NATS, snapshot broadcast, rollout throughput), `bench model` (XE/SCST
    /// steps and decoding per device and dtype).
    Bench(bench::Args),
    /// Compare a device's results with the CPU's on tiny models (log-probs, gradients, AdamW,
    /// greedy tokens, snapshots, repeatability): `selftest --device cuda:0`.
    Selftest(selftest_cmd::Args),
    /// The machine figures are made on: CPU, cores, SIMD level, CUDA build, date (`--json`).
    Machine(machine_cmd::Args),
}

impl Command {
    /// How the process names itself in its stage report (`actor actor-0`, `local`, ...).
    fn process_label(&self) -> String {
        let with_id = |role: &str, id: &Option<String>| match id {
            Some(id) => format!("{role} {id}"),
            None => role.to_string(),
        };
        match self {
            Command::Actor(a) => with_id("actor", &a.id),
            Command::RewardWorker(a) => with_id("reward-worker", &a.id),
            Command::Learner(_) => "learner".into(),
            Command::Local(_) => "local".into(),
            Command::Train(_) => "train".into(),
            Command::Run(_) => "run".into(),
            _ => "caprl".into(),
        }
    }

    /// Whether the command runs the model kernels (its start-up log names their SIMD level).
    fn computes(&self) -> bool {
        matches!(
            self,
            Command::Run(_)
                | Command::Train(_)
                | Command::Eval(_)
                | Command::Caption(_)
                | Command::Clip(_)
                | Command::Learner(_)
                | Command::Actor(_)
                | Command::RewardWorker(_)
                | Command::Bench(_)
                | Command::Selftest(_)
        )
    }
}

/// Which of the global `--config` and `--set` a command reads.
enum ConfigUse {
    /// The run config: `--config` then `--set`, checked as training checks them.
    Whole,
    /// The checkpoint's config, with `--set decode.KEY=VALUE` over it (eval, caption).
    DecodeSets,
    /// None: the command takes everything from its own flags and files.
    Nothing,
}

impl Command {
    fn config_use(&self) -> ConfigUse {
        match self {
            Command::Eval(_) | Command::Caption(_) => ConfigUse::DecodeSets,
            Command::Score(_)
            | Command::Features(_)
            | Command::Report(_)
            | Command::Selftest(_)
            | Command::Machine(_) => ConfigUse::Nothing,
            Command::Data(a) if !matches!(a.command, data_cmd::Command::Check) => {
                ConfigUse::Nothing
            }
            _ => ConfigUse::Whole,
        }
    }

    /// The subcommand's words as a user types them (`data stats`, `eval`).
    fn words(&self) -> String {
        match self {
            Command::Data(a) => format!("data {}", kebab_variant(&a.command)),
            other => kebab_variant(other),
        }
    }
}

/// The name clap gives an enum variant (`SynthAudio` is `synth-audio`), read from its `Debug`
/// form, which starts with the variant's name.
fn kebab_variant(value: &impl std::fmt::Debug) -> String {
    let debug = format!("{value:?}");
    let variant = debug.split(['(', ' ', '{']).next().unwrap_or_default();
    let mut out = String::new();
    for (i, ch) in variant.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(ch.to_ascii_lowercase());
    }
    out
}

/// Refuses `--config` and `--set` where the command would not read them (a typo or a setting a
/// user believes in would otherwise pass without a word).
fn check_config_use(command: &Command, global: &Global) -> Result<(), ConfigError> {
    let not_read = |reads, option, hint| ConfigError::NotRead {
        command: command.words(),
        reads,
        option,
        hint,
    };
    match command.config_use() {
        ConfigUse::Whole => Ok(()),
        ConfigUse::DecodeSets if global.config.is_some() => Err(not_read(
            "reads the checkpoint's config",
            "--config",
            "change decoding with --set decode.KEY=VALUE or the command's flags",
        )),
        ConfigUse::DecodeSets => Ok(()),
        ConfigUse::Nothing if global.config.is_some() || !global.sets.is_empty() => Err(not_read(
            "reads no run config",
            if global.config.is_some() {
                "--config"
            } else {
                "--set"
            },
            "its own flags are its settings (see --help)",
        )),
        ConfigUse::Nothing => Ok(()),
    }
}

/// Runs the chosen command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let global = &cli.global;
    check_config_use(&cli.command, global)?;
    // A misspelt CAPRL_GENERIC_OPS or CAPRL_SIMD stops here instead of being read as off.
    caprl_kernels::generic_ops_from_env()?;
    let level = caprl_kernels::fastmath::simd_from_env()?;
    caprl_kernels::fastmath::set_simd(Some(level))?;
    if cli.command.computes() {
        tracing::info!("{}", caprl_kernels::fastmath::describe());
    }
    let process = cli.command.process_label();
    let started = std::time::Instant::now();
    let result = match cli.command {
        Command::Run(args) => run_cmd::run(args, global),
        Command::Train(args) => train_cmd::run(args, global),
        Command::Eval(args) => eval_cmd::run(args, global),
        Command::Caption(args) => caption_cmd::run(args, global),
        Command::Clip(args) => clip_cmd::run(args, global),
        Command::Score(args) => score_cmd::run(args),
        Command::Data(args) => data_cmd::run(args, global),
        Command::Features(args) => features_cmd::run(args),
        Command::Report(args) => report_cmd::run(args),
        Command::Config(args) => config_cmd::run(args, global),
        Command::Learner(args) => learner_cmd::run(args, global),
        Command::Actor(args) => actor_cmd::run(args, global),
        Command::RewardWorker(args) => reward_worker_cmd::run(args, global),
        Command::Local(args) => local_cmd::run(args, global),
        Command::Soak(args) => soak_cmd::run(args, global),
        Command::Status(args) => status_cmd::run(args, global),
        Command::Bench(args) => bench::run(args, global),
        Command::Selftest(args) => selftest_cmd::run(args),
        Command::Machine(args) => machine_cmd::run(args),
    };
    caprl_common::telemetry::stages::write_report(&process, started);
    result
}

/// Prints `error: ...` with the cause chain; exit code 2 for config errors
/// (like clap's usage errors), [`crate::supervise::EXIT_CANNOT_GO_ON`] for a run that cannot go
/// on (no role can do its work, or a reward is broken for every rollout; under `caprl local`, a
/// role that stopped so), 1 for everything else.
pub fn report_error(err: &anyhow::Error) -> ExitCode {
    eprintln!("error: {}", without_backtrace(&err.to_string()));
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {}", without_backtrace(&cause.to_string()));
    }
    let is_config = |cause: &(dyn std::error::Error + 'static)| {
        cause.is::<ConfigError>()
            || cause.is::<caprl_kernels::fastmath::SimdError>()
            || matches!(cause.downcast_ref(), Some(LearnerError::Config(_)))
    };
    let stalled = |cause: &(dyn std::error::Error + 'static)| {
        matches!(cause.downcast_ref(), Some(LearnerError::Stalled(_)))
            || cause.is::<crate::supervise::RunCannotGoOn>()
            || cause
                .downcast_ref::<caprl_reward_worker::WorkerError>()
                .is_some_and(|e| e.is_fatal())
            || cause
                .downcast_ref::<caprl_reward_worker::RewardError>()
                .is_some_and(|e| e.is_fatal())
    };
    if err.chain().any(is_config) {
        ExitCode::from(2)
    } else if err.chain().any(stalled) {
        ExitCode::from(crate::supervise::EXIT_CANNOT_GO_ON)
    } else {
        ExitCode::FAILURE
    }
}

/// An error message without the stack trace a library appended to it (Candle does under
/// `RUST_BACKTRACE=1`): a user gets what went wrong, not the frames of the code it went wrong in.
fn without_backtrace(msg: &str) -> String {
    let frame = |line: &str| {
        let t = line.trim_start();
        let digits = t.chars().take_while(char::is_ascii_digit).count();
        digits > 0 && t[digits..].starts_with(": ")
    };
    let lines: Vec<&str> = msg.lines().take_while(|l| !frame(l)).collect();
    lines.join("\n").trim_end().to_string()
}

/// Writes `text` to stdout; a closed pipe (`caprl ... | head`) is not an error.
/// `print!` through [`write_stdout`]: a closed stdout (`| head -1`) ends the output quietly
/// instead of panicking. Evaluates to its `Result`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(&format!($($arg)*))
    };
}
/// `println!` through [`write_stdout`], as [`out!`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use {out, outln};

pub fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::without_backtrace;

    #[test]
    fn error_messages_lose_an_appended_backtrace_and_keep_their_lines() {
        let msg = "unexpected rank, expected: 2, got: 1 ([256])\n   0: candle_core::error::Error::bt\n             at /src/error.rs:260:25\n   1: main";
        assert_eq!(
            without_backtrace(msg),
            "unexpected rank, expected: 2, got: 1 ([256])"
        );
        assert_eq!(without_backtrace("a\nb: 2 lines"), "a\nb: 2 lines");
    }
}
