//! Rules over a typed config section: the key each one is about, what is allowed (for the
//! message) and a function returning the offending value when the rule fails. The section's
//! owner writes its rules once; loading a run config and building a model both run them.

use std::fmt::Display;
use std::ops::RangeBounds;

/// One rule about one key of a `T`.
pub struct Check<T> {
    /// The key as the config file names it (`model.d_model`).
    pub key: &'static str,
    /// What is allowed, for the message (`8..=4096`).
    pub allowed: &'static str,
    /// The offending value, written for the message, when the rule fails.
    pub violation: fn(&T) -> Option<String>,
}

/// What [`toml_int`] allows: TOML integers are signed 64-bit, so larger `u64` values cannot be
/// written back to a config file.
pub const TOML_INT: &str = "0..=9223372036854775807 (TOML integers are signed 64-bit)";

/// `value`, written, when a TOML file cannot hold it ([`TOML_INT`]).
pub fn toml_int(value: u64) -> Option<String> {
    outside(value, 0..=i64::MAX as u64)
}

/// The first rule `value` fails: its key, the offending value and what is allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub key: &'static str,
    pub value: String,
    pub allowed: &'static str,
}

/// The first of `checks` that `value` fails.
pub fn first_violation<T>(checks: &[Check<T>], value: &T) -> Option<Violation> {
    checks.iter().find_map(|check| {
        (check.violation)(value).map(|offending| Violation {
            key: check.key,
            value: offending,
            allowed: check.allowed,
        })
    })
}

/// What each of `checks` about `key` allows.
pub fn allowed_for<'a, T>(
    checks: &'a [Check<T>],
    key: &'a str,
) -> impl Iterator<Item = &'static str> + 'a {
    checks
        .iter()
        .filter(move |c| c.key == key)
        .map(|c| c.allowed)
}

/// `value`, written, when it is outside `range`.
pub fn outside<T: PartialOrd + Display>(value: T, range: impl RangeBounds<T>) -> Option<String> {
    (!range.contains(&value)).then(|| value.to_string())
}

/// `value`, written, when `ok` refuses it.
pub fn fails<T: Copy + Display>(value: T, ok: impl Fn(T) -> bool) -> Option<String> {
    (!ok(value)).then(|| value.to_string())
}

/// One section's rules with the value they are about, so that sections of different types are
/// listed, checked and described together ([`ruled`]).
pub trait Rules {
    /// The first rule the value breaks.
    fn first_violation(&self) -> Option<Violation>;
    /// What each rule about `key` allows.
    fn allowed_for(&self, key: &str) -> Vec<&'static str>;
}

struct Ruled<T: 'static, V> {
    checks: &'static [Check<T>],
    value: V,
}

impl<T, V: std::borrow::Borrow<T>> Rules for Ruled<T, V> {
    fn first_violation(&self) -> Option<Violation> {
        first_violation(self.checks, self.value.borrow())
    }

    fn allowed_for(&self, key: &str) -> Vec<&'static str> {
        allowed_for(self.checks, key).collect()
    }
}

/// `checks` over `value` (a reference, or a value built from the config for them).
pub fn ruled<'a, T: 'static, V: std::borrow::Borrow<T> + 'a>(
    checks: &'static [Check<T>],
    value: V,
) -> Box<dyn Rules + 'a> {
    Box::new(Ruled { checks, value })
}

/// The first rule of `sections` (in order) broken.
pub fn first_violation_of(sections: &[Box<dyn Rules + '_>]) -> Option<Violation> {
    sections.iter().find_map(|s| s.first_violation())
}

/// What every rule of `sections` about `key` allows, joined by "; "; `None` when none is.
pub fn allowed_by(sections: &[Box<dyn Rules + '_>], key: &str) -> Option<String> {
    let rules: Vec<&str> = sections.iter().flat_map(|s| s.allowed_for(key)).collect();
    (!rules.is_empty()).then(|| rules.join("; "))
}
