//! Caption tokenizer matching the preprocessing of pycocoevalcap's `PTBTokenizer`
//! (Stanford CoreNLP `PTBTokenizer -preserveLines -lowerCase`, then removal of the
//! punctuation tokens listed in [`PUNCTUATION`]). CIDEr-D, BLEU and ROUGE-L are computed on
//! these tokens, so training references and scored captions must go through the same function.
//!
//! What this pure-Rust version does like the Java tokenizer (checked against the Java output
//! for every `ptb_examples` entry of `common/score/tests/fixtures/coco_reference.json`):
//! - lowercases; splits off `, ; : " `` '' ... -- % $ #` and runs of `?`/`!` as their own
//!   tokens;
//! - writes brackets as Java does, lowercased: `( )` → `-lrb- -rrb-`, `[ ]` → `-lsb- -rsb-`,
//!   `{ }` → `-lcb- -rcb-`. pycocoevalcap matches its upper-case punctuation list (`-LRB-`, ...)
//!   against these lowercased tokens, so brackets are *kept* as tokens; so are `?!`, `!!`, `??`
//!   (its list has only `?` and `!`);
//! - keeps `,` and `:` inside numbers (`1,000`, `3:30`), `.` inside words and numbers
//!   (`3.5`, `www.x.com`), and hyphenated words whole (`black-and-white`);
//! - splits the common PTB contractions: `don't` → `do n't`, `can't` → `ca n't`,
//!   `won't` → `wo n't`, `it's` → `it 's`, `we're` → `we 're`, `i've` → `i 've`,
//!   `you'll` → `you 'll`, `he'd` → `he 'd`, `i'm` → `i 'm`, possessive `dog's` → `dog 's`,
//!   `dogs'` → `dogs '`, `'tis`/`'twas` → `'t is`/`'t was`, and
//!   `cannot`/`gonna`/`gotta`/`wanna` → `can not`/`gon na`/`got ta`/`wan na`;
//! - maps typographic quotes (`’ ‘ “ ”`) to ASCII and `…` to `...`;
//! - deletes characters outside the Basic Multilingual Plane (emoji), splitting the word there.
//!
//! Where it differs (rare in captions):
//! - abbreviations: only a short list (`mr. mrs. ms. dr. st. jr. sr. vs. etc. inc. ltd. co.`) and
//!   letter-dot acronyms (`u.s.`) keep their final period; Stanford knows many more;
//! - no SGML/HTML entity handling, no American/British normalisation, no `\/` escaping of `/`,
//!   no currency or fraction mapping (`£` → `#`, `€` → `$`, `½` → `1/2`), no emoticons
//!   (`:)` → `:-rrb-`), no split at `·`;
//! - Java 3.4.1's odd splits of periods glued to words (`a...` → `a. . .`) and of a quote
//!   glued to the next word (`"hi"he` → ``` `` hi `` he ```) are not reproduced.

/// The tokens pycocoevalcap removes after PTB tokenization. It compares them with the
/// *lowercased* Java output, so the four upper-case bracket names never match.
pub const PUNCTUATION: [&str; 17] = [
    "''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-", "--",
    "...", ";",
];

/// Tokenize one caption: lowercase, PTB-style split, punctuation removed.
///
/// `tokenize("A man's dog (running).")` is
/// `["a", "man", "'s", "dog", "-lrb-", "running", "-rrb-"]`.
pub fn tokenize(caption: &str) -> Vec<String> {
    let normalized: String = caption
        .to_lowercase()
        .chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' | '\u{201B}' | '\u{2032}' => '\'',
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{2033}' => '"',
            '\u{2013}' => '-',
            // Java 3.4.1 lexes UTF-16 units and has no rule for surrogate pairs: it deletes
            // emoji and other characters outside the BMP, ending the word there.
            c if u32::from(c) > 0xFFFF => ' ',
            _ => c,
        })
        .collect::<String>()
        .replace('\u{2014}', " -- ")
        .replace('\u{2026}', " ... ");
    let mut raw = Vec::new();
    for chunk in normalized.split_whitespace() {
        split_chunk(chunk, &mut raw);
    }
    raw.into_iter().filter(|t| !is_punctuation(t)).collect()
}

fn is_punctuation(token: &str) -> bool {
    matches!(
        token,
        "''" | "'" | "``" | "`" | "\"" | "." | "?" | "!" | "," | ":" | "-" | "--" | "..." | ";"
    ) || token.chars().all(|c| c == '.' || c == '-')
}

/// Split one whitespace-free chunk into PTB tokens (punctuation still included).
fn split_chunk(chunk: &str, out: &mut Vec<String>) {
    let chars: Vec<char> = chunk.chars().collect();
    let mut word = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev_digit = i > 0 && chars[i - 1].is_ascii_digit();
        let next = chars.get(i + 1).copied();
        let next_digit = next.is_some_and(|n| n.is_ascii_digit());
        match c {
            '"' | ';' | '`' | '%' | '$' | '#' => {
                flush(&mut word, out);
                out.push(c.to_string());
            }
            '(' | ')' | '[' | ']' | '{' | '}' => {
                flush(&mut word, out);
                out.push(bracket_name(c).to_string());
            }
            '?' | '!' => {
                flush(&mut word, out);
                let mut j = i;
                while j < chars.len() && matches!(chars[j], '?' | '!') {
                    j += 1;
                }
                out.push(chars[i..j].iter().collect());
                i = j;
                continue;
            }
            ',' | ':' if prev_digit && next_digit && !word.is_empty() => word.push(c),
            ',' | ':' => {
                flush(&mut word, out);
                out.push(c.to_string());
            }
            '.' if next == Some('.') => {
                flush(&mut word, out);
                let mut j = i;
                while j < chars.len() && chars[j] == '.' {
                    j += 1;
                }
                out.push(".".repeat(j - i));
                i = j;
                continue;
            }
            '-' if next == Some('-') => {
                flush(&mut word, out);
                let mut j = i;
                while j < chars.len() && chars[j] == '-' {
                    j += 1;
                }
                out.push("--".to_string());
                i = j;
                continue;
            }
            _ => word.push(c),
        }
        i += 1;
    }
    flush(&mut word, out);
}

/// Java's names for brackets, lowercased by `-lowerCase` like every other token.
fn bracket_name(c: char) -> &'static str {
    match c {
        '(' => "-lrb-",
        ')' => "-rrb-",
        '[' => "-lsb-",
        ']' => "-rsb-",
        '{' => "-lcb-",
        _ => "-rcb-",
    }
}

const ABBREVIATIONS: [&str; 12] = [
    "mr.", "mrs.", "ms.", "dr.", "st.", "jr.", "sr.", "vs.", "etc.", "inc.", "ltd.", "co.",
];

/// Emit a word, peeling quotes, a sentence-final period, dangling hyphens and clitics.
fn flush(word: &mut String, out: &mut Vec<String>) {
    if word.is_empty() {
        return;
    }
    let mut w: &str = word.as_str();
    if w == "'tis" || w == "'twas" {
        out.push("'t".to_string());
        out.push(w[2..].to_string());
        word.clear();
        return;
    }
    while let Some(rest) = w.strip_prefix('\'') {
        out.push("`".to_string());
        w = rest;
    }
    let mut tail: Vec<&str> = Vec::new();
    loop {
        if let Some(rest) = w.strip_suffix('.') {
            if rest.is_empty() || ABBREVIATIONS.contains(&w) || is_acronym(w) {
                break;
            }
            tail.push(".");
            w = rest;
        } else if let Some(rest) = w.strip_suffix('-').filter(|r| !r.is_empty()) {
            tail.push("-");
            w = rest;
        } else if w.len() > 1 && w.ends_with('\'') && !w.ends_with("''") {
            // "dogs'" → "dogs '"; the quote is removed later as punctuation.
            tail.push("'");
            w = &w[..w.len() - 1];
        } else {
            break;
        }
    }
    let leading_hyphen = w.len() > 1 && w.starts_with('-');
    if leading_hyphen {
        out.push("-".to_string());
        w = &w[1..];
    }
    split_clitics(w, out);
    out.extend(tail.into_iter().rev().map(str::to_string));
    word.clear();
}

/// `u.s.`, `a.m.`: single letters separated by periods.
fn is_acronym(w: &str) -> bool {
    let parts: Vec<&str> = w.trim_end_matches('.').split('.').collect();
    parts.len() >= 2 && parts.iter().all(|p| p.chars().count() == 1)
}

fn split_clitics(w: &str, out: &mut Vec<String>) {
    if w.is_empty() {
        return;
    }
    for (whole, a, b) in [
        ("cannot", "can", "not"),
        ("gonna", "gon", "na"),
        ("gotta", "got", "ta"),
        ("wanna", "wan", "na"),
    ] {
        if w == whole {
            out.push(a.to_string());
            out.push(b.to_string());
            return;
        }
    }
    if w.len() > 3 && w.ends_with("n't") {
        out.push(w[..w.len() - 3].to_string());
        out.push("n't".to_string());
        return;
    }
    for clitic in ["'s", "'re", "'ve", "'ll", "'d", "'m"] {
        if w.len() > clitic.len() && w.ends_with(clitic) {
            out.push(w[..w.len() - clitic.len()].to_string());
            out.push(clitic.to_string());
            return;
        }
    }
    out.push(w.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Vec<String> {
        tokenize(s)
    }

    #[test]
    fn splits_contractions_and_drops_punctuation() {
        assert_eq!(t("Don't stop."), ["do", "n't", "stop"]);
        assert_eq!(
            t("It's a dog's life!"),
            ["it", "'s", "a", "dog", "'s", "life"]
        );
        // Java: `-lrb- a -rrb- cat ; `` nice '' -- ok ...`; pycocoevalcap keeps the brackets.
        assert_eq!(
            t("(A) cat; \"nice\" -- ok..."),
            ["-lrb-", "a", "-rrb-", "cat", "nice", "ok"]
        );
    }
}
