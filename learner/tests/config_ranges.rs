//! The ranges `default.toml`'s comments state are the rules' own: the loader's
//! ([`caprl_common::config::allowed_for`]) and the objectives' settings' ([`params::CHECKS`]),
//! so the file cannot drift from what is checked.

use caprl_learner::objective::params;
use caprl_wire::check;

/// What every rule about `key` allows, the loader's and the objectives', joined by "; ".
fn allowed_for(key: &str) -> Option<String> {
    let mut rules: Vec<String> = caprl_common::config::allowed_for(key).into_iter().collect();
    rules.extend(check::allowed_for(params::CHECKS, key).map(str::to_string));
    (!rules.is_empty()).then(|| rules.join("; "))
}

/// The ranges the default file's comments state, e.g. `1..=4096`, `[0, 1)`, `>= 1` or `> 0`.
fn stated_ranges(comment: &str) -> Vec<String> {
    let b = comment.as_bytes();
    let is_num = |c: u8| c.is_ascii_digit() || c == b'.' || c == b'-';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let rest = &comment[i..];
        let token = if rest.starts_with('[') || rest.starts_with('(') {
            let close = rest.find([']', ')']);
            close
                .map(|end| &rest[..=end])
                .filter(|t| t.contains(',') && t.as_bytes().get(1).is_some_and(|&c| is_num(c)))
        } else if rest.starts_with(">= ") || rest.starts_with("> ") {
            let start = rest.find(' ').map_or(0, |s| s + 1);
            let digits = rest[start..].bytes().take_while(|&c| is_num(c)).count();
            (digits > 0).then(|| &rest[..start + digits])
        } else if b[i].is_ascii_digit() && (i == 0 || !is_num(b[i - 1])) {
            let digits = rest.bytes().take_while(|&c| c.is_ascii_digit()).count();
            let upper = rest[digits..].strip_prefix("..=");
            let upper_digits =
                upper.map_or(0, |u| u.bytes().take_while(|c| c.is_ascii_digit()).count());
            (upper_digits > 0).then(|| &rest[..digits + 3 + upper_digits])
        } else {
            None
        };
        match token {
            Some(t) => {
                out.push(t.to_string());
                i += t.len();
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

#[test]
fn every_range_the_default_file_states_is_its_keys_rule() {
    let mut checked = 0;
    let mut drifted: Vec<String> = Vec::new();
    for line in caprl_common::config::default_keys() {
        let ranges = stated_ranges(line.comment);
        if ranges.is_empty() {
            continue;
        }
        let key = match line.section {
            "" => line.key.to_string(),
            section => format!("{section}.{}", line.key),
        };
        let Some(allowed) = allowed_for(&key) else {
            drifted.push(format!(
                "`{key}`'s comment states {ranges:?}, but no rule checks it"
            ));
            continue;
        };
        // `>= N` states an upper bound no one reaches: the rule's `N..=<i64::MAX>`.
        let states = |r: &String| {
            allowed.contains(r.as_str())
                || r.strip_prefix(">= ")
                    .is_some_and(|n| allowed.starts_with(&format!("{n}..=")))
        };
        if !ranges.iter().any(states) {
            drifted.push(format!(
                "`{key}`: the file states {ranges:?}, the rule allows `{allowed}`"
            ));
        }
        checked += 1;
    }
    assert!(
        drifted.is_empty(),
        "default.toml drifted from the rules:\n{}",
        drifted.join("\n")
    );
    assert!(
        checked >= 40,
        "only {checked} stated ranges found: is the parser right?"
    );
}
