//! Value parsers for flags with a range: clap refuses a value outside it as a usage error
//! (exit code 2, the flag named), as a `--set` key out of its range is refused. A flag that
//! stands for a config key is held to that key's own rule ([`config_key`]).

use std::str::FromStr;

use caprl_common::config::RunConfig;

/// A count of at least 1 (`--limit`).
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a whole number")),
    }
}

/// The parser of a flag that stands for config `key` (`--beam` for `decode.beam`): a value of
/// `T` that `key`'s own rule allows, refused with that rule's message, as `--set key=VALUE`
/// would be.
pub fn config_key<T: FromStr>(
    key: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let value = s
            .trim()
            .parse::<T>()
            .map_err(|_| format!("`{s}` is not a value of {key}"))?;
        match RunConfig::load(None, &[format!("{key}={}", s.trim())]) {
            Ok(_) => Ok(value),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_refuse_zero_and_words() {
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").unwrap_err().contains("at least 1"));
        assert!(at_least_one("x").is_err());
    }

    /// A flag that stands for a config key refuses what the key's rule refuses, with its message.
    #[test]
    fn config_key_flags_are_held_to_their_keys_rules() {
        let top_p = config_key::<f32>("decode.top_p");
        assert_eq!(top_p("1"), Ok(1.0));
        let msg = top_p("0").unwrap_err();
        assert!(
            msg.contains("decode.top_p") && msg.contains("(0, 1]"),
            "{msg}"
        );
        assert!(top_p("2").is_err());
        assert!(top_p("half")
            .unwrap_err()
            .contains("not a value of decode.top_p"));
        let beam = config_key::<usize>("decode.beam");
        assert_eq!(beam("5"), Ok(5));
        assert!(beam("0").unwrap_err().contains(">= 1"));
        let lookahead = config_key::<f32>("decode.lookahead_lambda");
        assert_eq!(lookahead("0"), Ok(0.0));
        assert!(lookahead("1.5").unwrap_err().contains("[0, 1]"));
    }
}
