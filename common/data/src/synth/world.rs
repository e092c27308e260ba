//! The synthetic world: attribute tables with their synonyms and frequencies, and scene
//! sampling. A scene has 1–4 objects in slots 0..4; slot 0 holds the main object, and every
//! other object stands in one spatial relation to it.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// One attribute value: canonical word, synonyms (canonical first) with their weights.
pub(crate) struct Value {
    pub name: &'static str,
    pub words: &'static [(&'static str, f64)],
    /// Relative frequency of the value in scenes.
    pub freq: f64,
}

const fn v(name: &'static str, words: &'static [(&'static str, f64)], freq: f64) -> Value {
    Value { name, words, freq }
}

pub(crate) const COLOURS: [Value; 8] = [
    v("red", &[("red", 1.0)], 1.0),
    v("blue", &[("blue", 1.0)], 1.0),
    v("green", &[("green", 1.0)], 1.0),
    v("yellow", &[("yellow", 1.0)], 1.0),
    v("purple", &[("purple", 0.8), ("violet", 0.2)], 1.0),
    v("orange", &[("orange", 1.0)], 1.0),
    v("white", &[("white", 1.0)], 1.0),
    v("black", &[("black", 1.0)], 1.0),
];

pub(crate) const SHAPES: [Value; 7] = [
    v("cube", &[("cube", 0.6), ("block", 0.4)], 1.0),
    v("sphere", &[("sphere", 0.5), ("ball", 0.5)], 1.0),
    v("cylinder", &[("cylinder", 0.7), ("tube", 0.3)], 1.0),
    v("cone", &[("cone", 1.0)], 1.0),
    v("pyramid", &[("pyramid", 1.0)], 1.0),
    v("ring", &[("ring", 0.7), ("hoop", 0.3)], 1.0),
    v("star", &[("star", 1.0)], 1.0),
];

pub(crate) const SIZES: [Value; 3] = [
    v(
        "small",
        &[("small", 0.6), ("little", 0.25), ("tiny", 0.15)],
        0.4,
    ),
    v("medium", &[("medium", 1.0)], 0.2),
    v("large", &[("large", 0.55), ("big", 0.45)], 0.4),
];

/// Materials are skewed so that `glass` and `wooden` are rare, distinguishing facts.
pub(crate) const MATERIALS: [Value; 4] = [
    v("rubber", &[("rubber", 0.7), ("matte", 0.3)], 0.4),
    v(
        "metal",
        &[("metal", 0.5), ("metallic", 0.3), ("shiny", 0.2)],
        0.3,
    ),
    v("wooden", &[("wooden", 0.7), ("wood", 0.3)], 0.2),
    v("glass", &[("glass", 1.0)], 0.1),
];

/// Relation of the main object to another: "main REL other".
pub(crate) const RELATIONS: [Value; 4] = [
    v("left of", &[("to the left of", 0.6), ("left of", 0.4)], 1.0),
    v("above", &[("above", 0.6), ("on top of", 0.4)], 1.0),
    v("next to", &[("next to", 0.6), ("beside", 0.4)], 1.0),
    v("behind", &[("behind", 1.0)], 1.0),
];

/// Weights of 1, 2, 3, 4 objects per scene.
const OBJECT_COUNTS: [f64; 4] = [0.2, 0.35, 0.3, 0.15];

/// Number of object slots (and attention regions).
pub(crate) const SLOTS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Object {
    pub colour: usize,
    pub shape: usize,
    pub size: usize,
    pub material: usize,
}

/// `relations[j - 1]` relates the main object to object `j`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scene {
    pub objects: Vec<Object>,
    pub relations: Vec<usize>,
}

/// Index drawn with probability proportional to `weights`.
pub(crate) fn pick(rng: &mut ChaCha8Rng, weights: impl IntoIterator<Item = f64> + Clone) -> usize {
    let total: f64 = weights.clone().into_iter().sum();
    let mut u = rng.random::<f64>() * total;
    let mut last = 0;
    for (i, w) in weights.into_iter().enumerate() {
        if u < w {
            return i;
        }
        u -= w;
        last = i;
    }
    last
}

fn pick_value(rng: &mut ChaCha8Rng, table: &[Value]) -> usize {
    pick(rng, table.iter().map(|v| v.freq).collect::<Vec<_>>())
}

/// A surface form of `value`, drawn by synonym weight.
pub(crate) fn word(rng: &mut ChaCha8Rng, value: &Value) -> &'static str {
    let i = pick(rng, value.words.iter().map(|w| w.1).collect::<Vec<_>>());
    value.words[i].0
}

pub(crate) fn sample_scene(rng: &mut ChaCha8Rng) -> Scene {
    let n = pick(rng, OBJECT_COUNTS) + 1;
    let objects: Vec<Object> = (0..n)
        .map(|_| Object {
            colour: pick_value(rng, &COLOURS),
            shape: pick_value(rng, &SHAPES),
            size: pick_value(rng, &SIZES),
            material: pick_value(rng, &MATERIALS),
        })
        .collect();
    let relations = (1..n)
        .map(|_| rng.random_range(0..RELATIONS.len()))
        .collect();
    Scene { objects, relations }
}

/// `scenes.json` entry: the structured facts of one image.
#[derive(Serialize)]
pub(crate) struct SceneRecord {
    pub id: String,
    pub split: &'static str,
    pub objects: Vec<ObjectRecord>,
    pub relations: Vec<RelationRecord>,
}

#[derive(Serialize)]
pub(crate) struct ObjectRecord {
    pub slot: usize,
    pub colour: &'static str,
    pub shape: &'static str,
    pub size: &'static str,
    pub material: &'static str,
}

#[derive(Serialize)]
pub(crate) struct RelationRecord {
    pub subject: usize,
    pub relation: &'static str,
    pub object: usize,
}

impl Scene {
    pub(crate) fn record(&self, id: String, split: &'static str) -> SceneRecord {
        SceneRecord {
            id,
            split,
            objects: self
                .objects
                .iter()
                .enumerate()
                .map(|(slot, o)| ObjectRecord {
                    slot,
                    colour: COLOURS[o.colour].name,
                    shape: SHAPES[o.shape].name,
                    size: SIZES[o.size].name,
                    material: MATERIALS[o.material].name,
                })
                .collect(),
            relations: self
                .relations
                .iter()
                .enumerate()
                .map(|(k, &r)| RelationRecord {
                    subject: 0,
                    relation: RELATIONS[r].name,
                    object: k + 1,
                })
                .collect(),
        }
    }
}
