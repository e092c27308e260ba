//! `caprl config default`, `caprl config show` and `caprl config rewards`.

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
    /// List the rewards `reward.spec` can name, with what each reads.
    Rewards,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<()> {
    match args.command {
        ConfigCommand::Default => write_stdout(DEFAULT_TOML),
        ConfigCommand::Rewards => write_stdout(&rewards_table()),
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

/// The table of rewards (`caprl_reward_worker::rewards::BUILTIN`), one line each.
fn rewards_table() -> String {
    use caprl_reward_worker::rewards::{python, BUILTIN};
    let width = BUILTIN
        .iter()
        .map(|d| d.name.len())
        .max()
        .unwrap_or(0)
        .max(13);
    let mut out = String::new();
    for d in BUILTIN {
        let reads = match (d.needs.encoder, d.needs.discriminator) {
            (_, true) => " [reads clip.reward and the learner's discriminator]",
            (true, false) => " [reads clip.reward]",
            (false, false) => "",
        };
        out.push_str(&format!("{:width$}  {}{reads}\n", d.name, d.about));
    }
    out.push_str(&format!(
        "{:width$}  a function of the Python module reward.python (docs/rewards.md)\n",
        format!("{}<function>", python::PREFIX)
    ));
    out
}
