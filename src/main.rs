//! caprl: distributed reinforcement-learning trainer for captioning models.
//! All the work is in `cli`; this only parses, runs and maps errors to exit codes.

mod cli;
mod roles;
mod setup;
mod soak;
mod supervise;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc: glibc's malloc returns the step's multi-megabyte buffers to the OS and faults them
/// back in every step (see the workspace Cargo.toml); `process::set_up` stops mimalloc doing it.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    caprl_common::process::set_up();
    // A file-size limit (RLIMIT_FSIZE, a full quota) then fails the write with an error that
    // names the file, instead of killing the process.
    // SAFETY: setting a signal's disposition to SIG_IGN at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let cli = cli::Cli::parse();
    cli::logging::init(cli.global.verbose, cli.global.quiet);
    match cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => cli::report_error(&err),
    }
}
