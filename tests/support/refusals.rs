//! One check of config refusals for the crates whose rules they are: each case
//! `(key=value, the value as the message shows it, what it says is allowed)` is refused with a
//! message that starts with the key and names the value and the range.
//!
//! Included with `#[path]` by the config tests of `caprl-common` (the loader's rules) and
//! `caprl-learner` (the learner's side's); it uses nothing else of `support`.

/// Asserts every case of `cases` is refused by `refuse` (which returns the message) as above.
pub fn assert_refused_naming_key_value_and_range(
    cases: &[(&str, &str, &str)],
    refuse: impl Fn(&str) -> String,
) {
    for &(set, value, allowed) in cases {
        let key = set.split('=').next().unwrap();
        let msg = refuse(set);
        assert!(msg.starts_with(&format!("{key} = ")), "{set}: {msg}");
        assert!(msg.contains(value), "{set}: {msg} lacks value {value}");
        assert!(msg.contains(allowed), "{set}: {msg} lacks range {allowed}");
    }
}
