//! `--set KEY=VALUE` overrides, applied to the TOML tree before it is
//! deserialized, so an override behaves exactly like the same line in the file.
//!
//! The value is read as a TOML literal (`512`, `0.5`, `true`, `"text"`); if it
//! is not one, or the key holds a string, the raw text is taken as a string,
//! so `--set device=cuda:1` and `--set reward.spec=cider=1,bleu4=0.5` need no
//! quoting.

use serde::Deserialize;
use toml::{Table, Value};

use super::error::ConfigError;
use super::schema::RunConfig;

/// The default config as a TOML tree: the set of known keys and their types.
fn known_keys() -> Table {
    // Serializing the default config cannot fail (every value is representable);
    // an empty tree would only make every key "unknown", never panic.
    Table::try_from(RunConfig::default()).unwrap_or_default()
}

fn sections(known: &Table) -> Vec<&str> {
    known
        .iter()
        .filter(|(_, v)| v.is_table())
        .map(|(k, _)| k.as_str())
        .collect()
}

fn top_level_keys(known: &Table) -> Vec<&str> {
    known
        .iter()
        .filter(|(_, v)| !v.is_table())
        .map(|(k, _)| k.as_str())
        .collect()
}

fn unknown_top_level(key: &str, known: &Table) -> ConfigError {
    ConfigError::UnknownKey {
        key: key.to_string(),
        allowed: format!(
            "top-level keys {}, or SECTION.KEY with SECTION one of {}",
            top_level_keys(known).join(", "),
            sections(known).join(", ")
        ),
    }
}

/// Reads the override value, using the type of the key's default as a hint.
fn parse_value(raw: &str, default: &Value) -> Value {
    let quoted = raw.starts_with('"') || raw.starts_with('\'');
    if default.is_str() && !quoted {
        return Value::String(raw.to_string());
    }
    toml::from_str::<Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(raw.to_string()))
}

/// Applies each `--set` to `tree` in order (later ones win).
///
/// Every override is checked as it is applied: an unknown key names the key
/// and lists the allowed ones; a value of the wrong type names the key and
/// what it accepts.
pub(crate) fn apply(tree: &mut Table, sets: &[String]) -> Result<(), ConfigError> {
    let known = known_keys();
    for arg in sets {
        let (key, raw) = arg
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| ConfigError::BadSetArg { arg: arg.clone() })?;
        let parts: Vec<&str> = key.split('.').collect();
        match parts.as_slice() {
            [name] => {
                let default = match known.get(*name) {
                    Some(v) if !v.is_table() => v,
                    _ => return Err(unknown_top_level(key, &known)),
                };
                tree.insert(name.to_string(), parse_value(raw, default));
            }
            [section, name] => {
                let Some(Value::Table(known_section)) = known.get(*section) else {
                    return Err(ConfigError::UnknownKey {
                        key: key.to_string(),
                        allowed: format!("sections {}", sections(&known).join(", ")),
                    });
                };
                let Some(default) = known_section.get(*name) else {
                    let names: Vec<&str> = known_section.keys().map(String::as_str).collect();
                    return Err(ConfigError::UnknownKey {
                        key: key.to_string(),
                        allowed: format!("[{section}] keys {}", names.join(", ")),
                    });
                };
                let value = parse_value(raw, default);
                let entry = tree
                    .entry(section.to_string())
                    .or_insert_with(|| Value::Table(Table::new()));
                if !entry.is_table() {
                    *entry = Value::Table(Table::new());
                }
                if let Value::Table(t) = entry {
                    t.insert(name.to_string(), value);
                }
            }
            _ => return Err(unknown_top_level(key, &known)),
        }
        check_types(tree, key, raw)?;
    }
    Ok(())
}

/// Deserializes the tree so that a type error is blamed on the override that
/// caused it.
fn check_types(tree: &Table, key: &str, raw: &str) -> Result<(), ConfigError> {
    RunConfig::deserialize(Value::Table(tree.clone()))
        .map(|_| ())
        .map_err(|e| {
            let mut message = e.message().trim_end().to_string();
            if let Some(allowed) = super::allowed_for(key) {
                message.push_str(&format!(" ({key} allows {allowed})"));
            }
            ConfigError::BadOverride {
                key: key.to_string(),
                value: raw.to_string(),
                message,
            }
        })
}
