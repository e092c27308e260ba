//! Log setup: tracing to stderr, level from -v/-q (or `RUST_LOG` when neither
//! is given).

use tracing_subscriber::EnvFilter;

const OUR_CRATES: [&str; 5] = [
    "caprl",
    "caprl_common",
    "caprl_actor",
    "caprl_learner",
    "caprl_reward_worker",
];

/// Directive string for a verbosity: our crates get the finer level, the
/// dependencies (NATS client, HTTP) stay one level coarser.
fn directives(verbose: u8, quiet: bool) -> String {
    let (ours, deps) = match (quiet, verbose) {
        (true, _) => ("error", "error"),
        (false, 0) => ("info", "warn"),
        (false, 1) => ("debug", "info"),
        (false, 2) => ("trace", "debug"),
        (false, _) => ("trace", "trace"),
    };
    let mut s = deps.to_string();
    for krate in OUR_CRATES {
        s.push_str(&format!(",{krate}={ours}"));
    }
    s
}

/// Installs the global subscriber and the progress quiet switch.
pub fn init(verbose: u8, quiet: bool) {
    caprl_common::progress::set_quiet(quiet);
    let from_env = (verbose == 0 && !quiet)
        .then(|| EnvFilter::try_from_default_env().ok())
        .flatten();
    let filter = from_env.unwrap_or_else(|| EnvFilter::new(directives(verbose, quiet)));
    // Fails only if a subscriber is already installed, which then stays.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(verbose > 0)
        .try_init();
}
