//! References of the regions profile: five annotators who differ, and the captions an oracle
//! writes from the true facts.
//!
//! Each reference comes from an annotator with a focus of their own (the main object alone, a
//! relation between two objects — not always the main one —, the objects counted, the place, or
//! a long sentence of several objects), a taste for adjectives, a habit of opening words and of
//! synonyms (some pick the rarer forms). Partly hidden objects are mentioned half as often.
//! So the five references of an image share the salient facts, word for word only in part,
//! and the consensus caption is not one template.

use rand::seq::IndexedRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::world::{Lexicon, Object, Relation, Scene, Words, COLOURS, MATERIALS, PLACES, SIZES};
use crate::synth::world::pick;

const NUMBERS: [&str; 7] = ["zero", "one", "two", "three", "four", "five", "six"];

/// What an annotator writes about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Focus {
    Main,
    Relation,
    Count,
    Place,
    Long,
}

const FOCUS_WEIGHTS: [(Focus, f64); 5] = [
    (Focus::Main, 0.25),
    (Focus::Relation, 0.3),
    (Focus::Count, 0.15),
    (Focus::Place, 0.15),
    (Focus::Long, 0.15),
];

/// One annotator's habits.
struct Annotator {
    focus: Focus,
    /// Chance of naming each optional adjective (scaled per attribute).
    adjectives: f64,
    /// Picks every synonym as often as the canonical word.
    rare_words: bool,
    opening: &'static str,
}

fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    rng.random::<f64>() < p
}

impl Annotator {
    fn new(rng: &mut ChaCha8Rng) -> Annotator {
        let focus = FOCUS_WEIGHTS[pick(rng, FOCUS_WEIGHTS.map(|f| f.1))].0;
        let openings = [
            "",
            "there is ",
            "a picture of ",
            "an image of ",
            "a photo of ",
            "this is ",
        ];
        Annotator {
            focus,
            adjectives: 0.2 + 0.7 * rng.random::<f64>(),
            rare_words: chance(rng, 0.3),
            opening: openings[pick(rng, [0.4, 0.2, 0.1, 0.1, 0.1, 0.1])],
        }
    }

    fn word<'a>(&self, rng: &mut ChaCha8Rng, words: &'a [(impl AsRef<str>, f64)]) -> &'a str {
        let i = match self.rare_words {
            true => rng.random_range(0..words.len()),
            false => pick(rng, words.iter().map(|w| w.1).collect::<Vec<_>>()),
        };
        words[i].0.as_ref()
    }
}

/// Which adjectives a noun phrase names.
#[derive(Clone, Copy)]
struct Adjectives {
    size: bool,
    colour: bool,
    material: bool,
}

impl Adjectives {
    const CANONICAL_SHORT: Adjectives = Adjectives {
        size: false,
        colour: true,
        material: false,
    };
    const ALL: Adjectives = Adjectives {
        size: true,
        colour: true,
        material: true,
    };

    fn drawn(rng: &mut ChaCha8Rng, who: &Annotator, main: bool) -> Adjectives {
        let p = who.adjectives;
        Adjectives {
            size: chance(rng, p * 0.5),
            colour: chance(rng, if main { 0.5 + 0.5 * p } else { p }),
            material: chance(rng, p * 0.4),
        }
    }
}

pub(crate) fn plural(noun: &str) -> String {
    if noun.ends_with(['s', 'x']) || noun.ends_with("ch") || noun.ends_with("sh") {
        format!("{noun}es")
    } else {
        format!("{noun}s")
    }
}

fn article(next: &str) -> &'static str {
    match next.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => "an",
        false => "a",
    }
}

/// Picks a surface form: the annotator's choice, or the canonical word for the oracle.
enum Writer<'w> {
    Annotator(&'w Annotator, &'w mut ChaCha8Rng),
    Canonical,
}

impl Writer<'_> {
    fn word<'a>(&mut self, words: &'a [(impl AsRef<str>, f64)]) -> &'a str {
        match self {
            Writer::Annotator(who, rng) => who.word(rng, words),
            Writer::Canonical => words[0].0.as_ref(),
        }
    }
}

/// `a large red ball`, or `three red balls` for a group of `count` objects.
fn noun_phrase(w: &mut Writer, lex: &Lexicon, o: &Object, count: usize, adj: Adjectives) -> String {
    let forms: &Words = &lex.categories[o.category];
    let mut words: Vec<String> = Vec::new();
    if adj.size && count == 1 {
        words.push(w.word(SIZES[o.size]).to_string());
    }
    if adj.colour {
        words.push(w.word(COLOURS[o.colour]).to_string());
    }
    if adj.material {
        words.push(w.word(MATERIALS[o.material]).to_string());
    }
    let noun = w.word(&forms.forms);
    if count == 1 {
        words.push(noun.to_string());
        let first = article(&words[0]);
        format!("{first} {}", words.join(" "))
    } else {
        words.push(plural(noun));
        format!("{} {}", NUMBERS[count], words.join(" "))
    }
}

/// The objects as the annotators see them: a group counts as one thing of `count` objects.
/// `(index of its first object, count)`, the main object's first.
fn things(scene: &Scene) -> Vec<(usize, usize)> {
    let groups = scene.groups();
    let mut out = Vec::new();
    for (i, o) in scene.objects.iter().enumerate() {
        match o.group {
            Some(g) if groups[g][0] == i => out.push((i, groups[g].len())),
            Some(_) => {}
            None => out.push((i, 1)),
        }
    }
    out
}

/// Five (or `n`) references of `scene`, as raw text.
pub(crate) fn references(
    rng: &mut ChaCha8Rng,
    lex: &Lexicon,
    scene: &Scene,
    n: usize,
) -> Vec<String> {
    (0..n)
        .map(|_| {
            let who = Annotator::new(rng);
            reference(rng, &who, lex, scene)
        })
        .collect()
}

fn reference(rng: &mut ChaCha8Rng, who: &Annotator, lex: &Lexicon, scene: &Scene) -> String {
    let things = things(scene);
    let seen = |rng: &mut ChaCha8Rng, (i, _): &(usize, usize)| {
        !scene.objects[*i].occluded || chance(rng, 0.5)
    };
    let others: Vec<(usize, usize)> = things[1..]
        .iter()
        .copied()
        .filter(|t| seen(rng, t))
        .collect();
    let np = |rng: &mut ChaCha8Rng, (i, count): (usize, usize)| {
        let adj = Adjectives::drawn(rng, who, i == 0);
        noun_phrase(
            &mut Writer::Annotator(who, rng),
            lex,
            &scene.objects[i],
            count,
            adj,
        )
    };
    let place = |rng: &mut ChaCha8Rng| who.word(rng, PLACES[scene.place]);
    let main = things[0];
    let body = match (who.focus, others.as_slice()) {
        (Focus::Relation, [_, ..]) => {
            // Mostly the main object and another; sometimes two others.
            let (a, b) = match others.len() >= 2 && chance(rng, 0.3) {
                true => (others[0], others[1]),
                false => (main, *others.choose(rng).expect("not empty")),
            };
            let (a, b) = if chance(rng, 0.3) { (b, a) } else { (a, b) };
            let rel = who.word(rng, scene.relation(a.0, b.0).words());
            format!("{} {rel} {}", np(rng, a), np(rng, b))
        }
        (Focus::Count, _) => {
            let listed: Vec<String> = std::iter::once(main)
                .chain(others.iter().copied().take(2))
                .map(|t| np(rng, t))
                .collect();
            match chance(rng, 0.3) {
                true => format!(
                    "{} objects including {}",
                    NUMBERS[scene.objects.len()],
                    listed[0]
                ),
                false => join_and(&listed),
            }
        }
        (Focus::Place, _) => {
            let subject = np(rng, main);
            match chance(rng, 0.5) {
                true => format!("{} {subject}", place(rng)),
                false => format!("{subject} {}", place(rng)),
            }
        }
        (Focus::Long, [_, ..]) => {
            let mut text = np(rng, main);
            for (k, &t) in others.iter().take(2).enumerate() {
                let rel = who.word(rng, scene.relation(main.0, t.0).words());
                let joiner = if k > 0 { " and" } else { "" };
                text = format!("{text}{joiner} {rel} {}", np(rng, t));
                if chance(rng, 0.5) {
                    break;
                }
            }
            format!("{text} {}", place(rng))
        }
        _ => np(rng, main),
    };
    let body = match who.focus == Focus::Place && body.starts_with(['i', 'o']) {
        // "in a kitchen a red cup": the opening word goes after the place.
        true => body,
        false => format!("{}{body}", who.opening),
    };
    body
}

fn join_and(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The captions an oracle writes from the true facts in canonical words: the main object with
/// its colour or with every adjective, with the next thing and their relation, with the place,
/// and the things counted. The oracle ceiling takes the best of them per image.
pub(crate) fn oracle_candidates(lex: &Lexicon, scene: &Scene) -> Vec<String> {
    let things = things(scene);
    let np = |(i, count): (usize, usize), adj: Adjectives| {
        noun_phrase(&mut Writer::Canonical, lex, &scene.objects[i], count, adj)
    };
    let main = np(things[0], Adjectives::CANONICAL_SHORT);
    let place = PLACES[scene.place][0].0;
    let mut out = vec![
        main.clone(),
        np(things[0], Adjectives::ALL),
        format!("{main} {place}"),
    ];
    if let Some(&next) = things.get(1) {
        let rel = scene.relation(things[0].0, next.0).name();
        let pair = format!("{main} {rel} {}", np(next, Adjectives::CANONICAL_SHORT));
        out.push(format!("{pair} {place}"));
        out.push(pair);
        let listed: Vec<String> = things
            .iter()
            .take(3)
            .map(|&t| np(t, Adjectives::CANONICAL_SHORT))
            .collect();
        out.push(join_and(&listed));
    }
    out
}

/// Every fact of the scene in canonical words, e.g. `a large red metal ball to the left of two
/// blue cubes and behind a small grey stone cup on a table` (`descriptions.json`).
pub(crate) fn description(lex: &Lexicon, scene: &Scene) -> String {
    let things = things(scene);
    let np = |(i, count): (usize, usize)| {
        noun_phrase(
            &mut Writer::Canonical,
            lex,
            &scene.objects[i],
            count,
            Adjectives::ALL,
        )
    };
    let mut text = np(things[0]);
    for (k, &t) in things.iter().enumerate().skip(1) {
        let rel: Relation = scene.relation(things[0].0, t.0);
        let joiner = if k > 1 { " and" } else { "" };
        text = format!("{text}{joiner} {} {}", rel.name(), np(t));
    }
    format!("{text} {}", PLACES[scene.place][0].0)
}
