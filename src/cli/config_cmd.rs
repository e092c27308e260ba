//! `caprl config default` and `caprl config show`.

use caprl_common::config::DEFAULT_TOML;
use clap::Subcommand;

use super::{write_stdout, Global};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the commented default config file (a starting point for --config).
    Default,
    /// Print the config in effect after --config and --set, secrets redacted.
    Show,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<()> {
    match args.command {
        ConfigCommand::Default => write_stdout(DEFAULT_TOML),
        ConfigCommand::Show => {
            let config = global.load_config()?;
            let text = format!(
                "# config hash {}\n{}",
                config.hash(),
                config.redacted().to_toml_string()
            );
            write_stdout(&text)
        }
    }
}
