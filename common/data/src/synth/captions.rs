//! Reference captions and full descriptions of synthetic scenes.
//!
//! Each of the five references mentions a random subset of the facts: the main object
//! nearly always, its colour usually, its size and material (the rare, distinguishing facts)
//! only sometimes, a second object and the relation in about half. Synonyms and templates
//! vary the wording, but the canonical words dominate, so n-grams shared by several
//! references of an image exist (what CIDEr-D rewards, paper 000/002) while a caption that
//! names every fact is the one that singles the image out (paper 004).

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::world::{pick, word, Object, Scene, COLOURS, MATERIALS, RELATIONS, SHAPES, SIZES};

/// Probabilities that a reference mentions each fact.
const P_MAIN: f64 = 0.95;
const P_MAIN_COLOUR: f64 = 0.85;
const P_MAIN_SIZE: f64 = 0.3;
const P_MAIN_MATERIAL: f64 = 0.25;
const P_SECOND: f64 = 0.45;
const P_SECOND_COLOUR: f64 = 0.7;
const P_SECOND_SIZE: f64 = 0.15;
const P_SECOND_MATERIAL: f64 = 0.1;
const P_RELATION: f64 = 0.65;
const P_COUNT: f64 = 0.2;

const NUMBERS: [&str; 5] = ["zero", "one", "two", "three", "four"];

/// Which attributes a noun phrase names.
#[derive(Clone, Copy)]
struct Mention {
    colour: bool,
    size: bool,
    material: bool,
}

fn noun_phrase(rng: &mut ChaCha8Rng, o: &Object, m: Mention) -> Vec<&'static str> {
    let mut words = Vec::new();
    if m.size {
        words.push(word(rng, &SIZES[o.size]));
    }
    if m.colour {
        words.push(word(rng, &COLOURS[o.colour]));
    }
    if m.material {
        words.push(word(rng, &MATERIALS[o.material]));
    }
    words.push(word(rng, &SHAPES[o.shape]));
    let article = if words[0].starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    words.insert(0, article);
    words
}

fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    rng.random::<f64>() < p
}

/// Five (or `n`) reference captions, as raw text.
pub(crate) fn references(rng: &mut ChaCha8Rng, scene: &Scene, n: usize) -> Vec<String> {
    (0..n).map(|_| reference(rng, scene)).collect()
}

fn reference(rng: &mut ChaCha8Rng, scene: &Scene) -> String {
    let objects = &scene.objects;
    let many = objects.len() > 1;
    // Rarely a reference describes only another object.
    let (first, other) = if many && !chance(rng, P_MAIN) {
        (rng.random_range(1..objects.len()), None)
    } else {
        let second = (many && chance(rng, P_SECOND)).then(|| rng.random_range(1..objects.len()));
        (0, second)
    };
    let main_mention = if first == 0 {
        Mention {
            colour: chance(rng, P_MAIN_COLOUR),
            size: chance(rng, P_MAIN_SIZE),
            material: chance(rng, P_MAIN_MATERIAL),
        }
    } else {
        Mention {
            colour: chance(rng, P_SECOND_COLOUR),
            size: chance(rng, P_SECOND_SIZE),
            material: chance(rng, P_SECOND_MATERIAL),
        }
    };
    let mut np = noun_phrase(rng, &objects[first], main_mention);
    if let Some(j) = other {
        let m = Mention {
            colour: chance(rng, P_SECOND_COLOUR),
            size: chance(rng, P_SECOND_SIZE),
            material: chance(rng, P_SECOND_MATERIAL),
        };
        let np2 = noun_phrase(rng, &objects[j], m);
        if chance(rng, P_RELATION) {
            np.push(word(rng, &RELATIONS[scene.relations[j - 1]]));
        } else {
            np.push("and");
        }
        np.extend(np2);
    }
    let body = np.join(" ");
    if many && other.is_none() && chance(rng, P_COUNT) {
        let count = NUMBERS[objects.len()];
        return match pick(rng, [0.5, 0.5]) {
            0 => format!("{count} objects including {body}"),
            _ => format!("{body} and {} other objects", NUMBERS[objects.len() - 1])
                .replace("one other objects", "one other object"),
        };
    }
    let prefix = match pick(rng, [0.4, 0.2, 0.15, 0.15, 0.1]) {
        0 => "",
        1 => "there is ",
        2 => "a picture of ",
        3 => "an image of ",
        _ => "this is ",
    };
    let suffix = if other.is_none() && chance(rng, 0.15) {
        " in the scene"
    } else {
        ""
    };
    format!("{prefix}{body}{suffix}")
}

/// Every fact of the scene in canonical words, e.g.
/// `a large red metal cube left of a small blue rubber sphere and above a ...`.
pub(crate) fn description(scene: &Scene) -> String {
    let full = |o: &Object| {
        let size = SIZES[o.size].name;
        let article = if size.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        format!(
            "{article} {size} {} {} {}",
            COLOURS[o.colour].name, MATERIALS[o.material].name, SHAPES[o.shape].name
        )
    };
    let mut text = full(&scene.objects[0]);
    for (k, o) in scene.objects.iter().enumerate().skip(1) {
        if k > 1 {
            text.push_str(" and");
        }
        text.push(' ');
        text.push_str(RELATIONS[scene.relations[k - 1]].name);
        text.push(' ');
        text.push_str(&full(o));
    }
    text
}
