//! The world of the regions profile: its word tables, scenes of 2–6 objects with positions,
//! groups of identical objects, the held-out colour–category combinations, and the one-fact
//! variations that make near-duplicate images.
//!
//! The word tables are the same for every seed (drawn from a fixed stream), so runs on sets of
//! different seeds share one language; the scenes, the embeddings and the held-out combinations
//! come from the data seed.

use std::collections::BTreeSet;

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::synth::world::pick;

/// One attribute value: its canonical word first, then synonyms, with their weights.
pub(crate) struct Words {
    pub forms: Vec<(String, f64)>,
}

impl Words {
    fn english(forms: &[(&str, f64)]) -> Words {
        Words {
            forms: forms.iter().map(|(w, p)| (w.to_string(), *p)).collect(),
        }
    }

    pub(crate) fn canonical(&self) -> &str {
        &self.forms[0].0
    }
}

/// English object names with their synonyms: the head of the category distribution.
const HEAD_CATEGORIES: [&[(&str, f64)]; 24] = [
    &[("ball", 0.6), ("sphere", 0.4)],
    &[("cube", 0.6), ("block", 0.4)],
    &[("cup", 0.7), ("mug", 0.3)],
    &[("box", 0.7), ("crate", 0.3)],
    &[("bottle", 1.0)],
    &[("vase", 0.7), ("jug", 0.3)],
    &[("lamp", 0.8), ("light", 0.2)],
    &[("chair", 0.8), ("seat", 0.2)],
    &[("book", 1.0)],
    &[("bowl", 0.7), ("dish", 0.3)],
    &[("plate", 0.8), ("saucer", 0.2)],
    &[("clock", 1.0)],
    &[("hat", 0.7), ("cap", 0.3)],
    &[("shoe", 0.7), ("boot", 0.3)],
    &[("kite", 1.0)],
    &[("bag", 0.7), ("purse", 0.3)],
    &[("pot", 0.6), ("pan", 0.4)],
    &[("candle", 1.0)],
    &[("jar", 0.8), ("tin", 0.2)],
    &[("spoon", 1.0)],
    &[("key", 1.0)],
    &[("bell", 1.0)],
    &[("drum", 1.0)],
    &[("fan", 1.0)],
];
/// Object categories in all; the rest are made-up names (two forms each), the long tail.
pub(crate) const CATEGORIES: usize = 500;
/// Zipf exponent of category frequency by rank.
const CATEGORY_ZIPF: f64 = 1.0;

pub(crate) const COLOURS: [&[(&str, f64)]; 10] = [
    &[("red", 1.0)],
    &[("blue", 1.0)],
    &[("green", 1.0)],
    &[("yellow", 1.0)],
    &[("purple", 0.7), ("violet", 0.3)],
    &[("orange", 1.0)],
    &[("white", 1.0)],
    &[("black", 1.0)],
    &[("brown", 1.0)],
    &[("grey", 0.6), ("gray", 0.4)],
];
pub(crate) const SIZES: [&[(&str, f64)]; 3] = [
    &[("small", 0.6), ("little", 0.25), ("tiny", 0.15)],
    &[("medium", 0.7), ("midsize", 0.3)],
    &[("large", 0.55), ("big", 0.35), ("huge", 0.1)],
];
pub(crate) const MATERIALS: [&[(&str, f64)]; 6] = [
    &[("rubber", 0.7), ("matte", 0.3)],
    &[("metal", 0.5), ("metallic", 0.3), ("shiny", 0.2)],
    &[("wooden", 0.7), ("wood", 0.3)],
    &[("glass", 1.0)],
    &[("plastic", 1.0)],
    &[("stone", 0.7), ("marble", 0.3)],
];
/// Where the scene is; read from the background regions and the pooled vector.
pub(crate) const PLACES: [&[(&str, f64)]; 12] = [
    &[("on a table", 0.7), ("on the table", 0.3)],
    &[("in a kitchen", 1.0)],
    &[("on the floor", 0.7), ("on the ground", 0.3)],
    &[("on the grass", 0.6), ("on a lawn", 0.4)],
    &[("in a garden", 1.0)],
    &[("on a shelf", 1.0)],
    &[("on a beach", 0.6), ("on the sand", 0.4)],
    &[("in a room", 0.6), ("indoors", 0.4)],
    &[("on a desk", 1.0)],
    &[("in the snow", 1.0)],
    &[("on a road", 0.6), ("on the street", 0.4)],
    &[("on a bed", 1.0)],
];

/// A relation of one object to another, from their positions ("A REL B").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relation {
    LeftOf,
    RightOf,
    Above,
    Below,
    InFrontOf,
    Behind,
    NextTo,
}

impl Relation {
    pub(crate) fn words(self) -> &'static [(&'static str, f64)] {
        match self {
            Relation::LeftOf => &[("to the left of", 0.6), ("left of", 0.4)],
            Relation::RightOf => &[("to the right of", 0.6), ("right of", 0.4)],
            Relation::Above => &[("above", 0.6), ("on top of", 0.4)],
            Relation::Below => &[("below", 0.6), ("under", 0.4)],
            Relation::InFrontOf => &[("in front of", 1.0)],
            Relation::Behind => &[("behind", 1.0)],
            Relation::NextTo => &[("next to", 0.6), ("beside", 0.4)],
        }
    }

    pub(crate) fn name(self) -> &'static str {
        self.words()[0].0
    }
}

/// The fixed word tables (seed-independent).
pub(crate) struct Lexicon {
    pub categories: Vec<Words>,
    /// Relative frequency of each category (Zipf by rank).
    pub category_freq: Vec<f64>,
}

impl Lexicon {
    pub(crate) fn new() -> Lexicon {
        let mut rng = ChaCha8Rng::seed_from_u64(0x0072_6567_696f_6e73);
        let mut taken: BTreeSet<String> = HEAD_CATEGORIES
            .iter()
            .flat_map(|forms| forms.iter().map(|f| f.0.to_string()))
            .collect();
        let mut categories: Vec<Words> =
            HEAD_CATEGORIES.iter().map(|f| Words::english(f)).collect();
        while categories.len() < CATEGORIES {
            let a = made_up_word(&mut rng, &mut taken);
            let b = made_up_word(&mut rng, &mut taken);
            categories.push(Words {
                forms: vec![(a, 0.7), (b, 0.3)],
            });
        }
        let category_freq = (0..CATEGORIES)
            .map(|rank| 1.0 / ((rank + 1) as f64).powf(CATEGORY_ZIPF))
            .collect();
        Lexicon {
            categories,
            category_freq,
        }
    }
}

/// A pronounceable made-up word of 2–3 syllables that no table uses yet.
fn made_up_word(rng: &mut ChaCha8Rng, taken: &mut BTreeSet<String>) -> String {
    const ONSETS: [&str; 16] = [
        "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr",
    ];
    const VOWELS: [&str; 5] = ["a", "e", "i", "o", "u"];
    loop {
        let syllables = rng.random_range(2..=3);
        let mut w = String::new();
        for _ in 0..syllables {
            w.push_str(ONSETS[rng.random_range(0..ONSETS.len())]);
            w.push_str(VOWELS[rng.random_range(0..VOWELS.len())]);
        }
        if rng.random::<bool>() {
            w.push(['n', 'l', 'r', 'k'][rng.random_range(0..4)]);
        }
        if taken.insert(w.clone()) {
            return w;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Object {
    pub category: usize,
    pub colour: usize,
    pub size: usize,
    pub material: usize,
    /// Centre in the image, each in [0, 1] (y grows downwards).
    pub x: f32,
    pub y: f32,
    /// 0 = nearest the camera, 1 = farthest.
    pub depth: f32,
    /// Partly hidden: its region is weaker and noisier, annotators mention it less.
    pub occluded: bool,
    /// Index of the group this object belongs to (identical objects), if any.
    pub group: Option<usize>,
}

impl Object {
    /// How much of the image the object takes: larger and nearer objects take more.
    pub(crate) fn extent(&self) -> f32 {
        (0.5 + 0.5 * self.size as f32) * (1.0 - 0.5 * self.depth)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scene {
    /// `objects[0]` is the main object: the largest in view and not occluded.
    pub objects: Vec<Object>,
    pub place: usize,
}

impl Scene {
    /// The relation of object `a` to object `b`, read from their positions.
    pub(crate) fn relation(&self, a: usize, b: usize) -> Relation {
        let (p, q) = (&self.objects[a], &self.objects[b]);
        let (dx, dy, dz) = (p.x - q.x, p.y - q.y, p.depth - q.depth);
        let far = dx.abs().max(dy.abs()).max(dz.abs());
        if far < 0.2 {
            Relation::NextTo
        } else if dx.abs() >= dy.abs() && dx.abs() >= dz.abs() {
            if dx < 0.0 {
                Relation::LeftOf
            } else {
                Relation::RightOf
            }
        } else if dy.abs() >= dz.abs() {
            if dy < 0.0 {
                Relation::Above
            } else {
                Relation::Below
            }
        } else if dz < 0.0 {
            Relation::InFrontOf
        } else {
            Relation::Behind
        }
    }

    /// The groups of identical objects: `(members)` for each group, in order of first member.
    pub(crate) fn groups(&self) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (i, o) in self.objects.iter().enumerate() {
            if let Some(g) = o.group {
                if groups.len() <= g {
                    groups.resize(g + 1, Vec::new());
                }
                groups[g].push(i);
            }
        }
        groups
    }

    /// Whether any object shows a held-out colour–category combination.
    pub(crate) fn has_unseen(&self, held_out: &HeldOut) -> bool {
        self.objects.iter().any(|o| held_out.contains(o))
    }

    /// Which evaluation subset the image belongs to, by its main object: `unseen` (a held-out
    /// combination), `seen` (a common category in a combination training shows: the matched
    /// comparison for `unseen`, whose main objects are common categories too) or `tail` (a
    /// category of the long tail).
    pub(crate) fn subset(&self, held_out: &HeldOut) -> &'static str {
        if self.has_unseen(held_out) {
            "unseen"
        } else if self.objects[0].category < HEAD_CATEGORIES.len() {
            "seen"
        } else {
            "tail"
        }
    }
}

/// The colour–category combinations that appear only in val/test: a share of the pairs over
/// the head categories (where a model sees each colour and each category often enough to
/// compose them).
pub(crate) struct HeldOut {
    pairs: BTreeSet<(usize, usize)>,
}

/// Share of head colour–category pairs held out of training.
const HELD_OUT_SHARE: f64 = 0.2;

impl HeldOut {
    pub(crate) fn new(rng: &mut ChaCha8Rng) -> HeldOut {
        let mut pairs = BTreeSet::new();
        for category in 0..HEAD_CATEGORIES.len() {
            for colour in 0..COLOURS.len() {
                if rng.random::<f64>() < HELD_OUT_SHARE {
                    pairs.insert((colour, category));
                }
            }
        }
        HeldOut { pairs }
    }

    pub(crate) fn contains(&self, o: &Object) -> bool {
        self.pairs.contains(&(o.colour, o.category))
    }

    pub(crate) fn pairs(&self) -> impl Iterator<Item = &(usize, usize)> {
        self.pairs.iter()
    }
}

/// Weights of 2, 3, 4, 5, 6 objects per scene.
const OBJECT_COUNTS: [f64; 5] = [0.25, 0.25, 0.2, 0.15, 0.15];
const SIZE_FREQ: [f64; 3] = [0.4, 0.25, 0.35];
const MATERIAL_FREQ: [f64; 6] = [0.3, 0.25, 0.15, 0.08, 0.15, 0.07];
/// Chance that a scene holds a group of 2–3 identical objects.
const P_GROUP: f64 = 0.35;
/// Chance that an object other than the main one is partly hidden.
const P_OCCLUDED: f64 = 0.2;

/// Whether scenes may show held-out combinations: never in training; in val/test a scene is
/// drawn either with its main object in a held-out combination or with none at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Combos {
    SeenOnly,
    MainUnseen,
}

fn new_object(rng: &mut ChaCha8Rng, lex: &Lexicon) -> Object {
    Object {
        category: pick(rng, lex.category_freq.iter().copied()),
        colour: rng.random_range(0..COLOURS.len()),
        size: pick(rng, SIZE_FREQ),
        material: pick(rng, MATERIAL_FREQ),
        x: rng.random::<f32>(),
        y: rng.random::<f32>(),
        depth: rng.random::<f32>(),
        occluded: rng.random::<f64>() < P_OCCLUDED,
        group: None,
    }
}

/// A scene drawn under `combos`.
pub(crate) fn sample_scene(
    rng: &mut ChaCha8Rng,
    lex: &Lexicon,
    held_out: &HeldOut,
    combos: Combos,
) -> Scene {
    let n = pick(rng, OBJECT_COUNTS) + 2;
    let mut objects: Vec<Object> = Vec::with_capacity(n);
    if rng.random::<f64>() < P_GROUP {
        let members = rng.random_range(2..=3);
        let first = new_object(rng, lex);
        for _ in 0..members {
            objects.push(Object {
                x: rng.random::<f32>(),
                y: rng.random::<f32>(),
                depth: rng.random::<f32>(),
                occluded: rng.random::<f64>() < P_OCCLUDED,
                group: Some(0),
                ..first
            });
        }
    }
    while objects.len() < n {
        objects.push(new_object(rng, lex));
    }
    let mut scene = Scene {
        objects,
        place: rng.random_range(0..PLACES.len()),
    };
    put_main_first(&mut scene);
    for i in 0..scene.objects.len() {
        // Every member of a group shares its colour: recolour the group through its first.
        let o = scene.objects[i];
        if o.group.is_some() && scene.objects[..i].iter().any(|p| p.group == o.group) {
            continue;
        }
        if held_out.contains(&o) && !(combos == Combos::MainUnseen && i == 0) {
            let colour = seen_colour(rng, held_out, &o);
            recolour(&mut scene, i, colour);
        }
    }
    if combos == Combos::MainUnseen && !held_out.contains(&scene.objects[0]) {
        let main = scene.objects[0];
        let unseen: Vec<usize> = (0..COLOURS.len())
            .filter(|&c| held_out.contains(&Object { colour: c, ..main }))
            .collect();
        match unseen.as_slice() {
            [] => {
                // No held-out colour for this category: take a held-out pair whole.
                let pairs: Vec<&(usize, usize)> = held_out.pairs().collect();
                let &&(colour, category) = pairs.choose(rng).expect("held-out pairs exist");
                for o in scene.objects.iter_mut().filter(|o| same_object(o, &main)) {
                    o.category = category;
                    o.colour = colour;
                }
            }
            colours => {
                let colour = *colours.choose(rng).expect("not empty");
                recolour(&mut scene, 0, colour);
            }
        }
    }
    scene
}

fn same_object(o: &Object, main: &Object) -> bool {
    match main.group {
        Some(g) => o.group == Some(g),
        None => o == main,
    }
}

/// A colour that makes `o` a seen combination.
fn seen_colour(rng: &mut ChaCha8Rng, held_out: &HeldOut, o: &Object) -> usize {
    let allowed: Vec<usize> = (0..COLOURS.len())
        .filter(|&c| !held_out.contains(&Object { colour: c, ..*o }))
        .collect();
    *allowed.choose(rng).expect("a category has a seen colour")
}

/// Gives object `i` (and every member of its group) `colour`.
fn recolour(scene: &mut Scene, i: usize, colour: usize) {
    let target = scene.objects[i];
    for o in scene.objects.iter_mut().filter(|o| same_object(o, &target)) {
        o.colour = colour;
    }
}

/// Moves the main object (the largest in view among those not occluded) to index 0.
fn put_main_first(scene: &mut Scene) {
    let main = (0..scene.objects.len())
        .max_by(|&a, &b| {
            let key = |i: usize| {
                let o = &scene.objects[i];
                (!o.occluded, o.extent())
            };
            key(a)
                .partial_cmp(&key(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .unwrap_or(0);
    scene.objects.swap(0, main);
    scene.objects[0].occluded = false;
}

/// The fact a near-duplicate image changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variation {
    /// The main object's colour (its whole group's).
    MainColour,
    /// The category of an object other than the main one.
    OtherCategory,
    /// The place.
    Place,
    /// Two objects trade places, so the relations between them turn around.
    SwapPositions,
}

impl Variation {
    pub(crate) const ALL: [Variation; 4] = [
        Variation::MainColour,
        Variation::OtherCategory,
        Variation::Place,
        Variation::SwapPositions,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Variation::MainColour => "main colour",
            Variation::OtherCategory => "other category",
            Variation::Place => "place",
            Variation::SwapPositions => "swapped positions",
        }
    }
}

/// `base` with one fact changed, keeping held-out combinations as `combos` allows (`None` when
/// the variation cannot apply to this scene).
pub(crate) fn vary(
    rng: &mut ChaCha8Rng,
    base: &Scene,
    variation: Variation,
    lex: &Lexicon,
    held_out: &HeldOut,
    combos: Combos,
) -> Option<Scene> {
    let mut scene = base.clone();
    let allowed =
        |o: &Object, main: bool| !held_out.contains(o) || (combos == Combos::MainUnseen && main);
    match variation {
        Variation::MainColour => {
            let main = base.objects[0];
            let colours: Vec<usize> = (0..COLOURS.len())
                .filter(|&c| c != main.colour && allowed(&Object { colour: c, ..main }, true))
                .collect();
            recolour(&mut scene, 0, *colours.choose(rng)?);
        }
        Variation::OtherCategory => {
            let singles: Vec<usize> = (1..base.objects.len())
                .filter(|&i| base.objects[i].group.is_none())
                .collect();
            let &i = singles.choose(rng)?;
            let o = base.objects[i];
            let category = (0..8)
                .map(|_| pick(rng, lex.category_freq.iter().copied()))
                .find(|&c| c != o.category && allowed(&Object { category: c, ..o }, false))?;
            scene.objects[i].category = category;
        }
        Variation::Place => {
            scene.place = (base.place + rng.random_range(1..PLACES.len())) % PLACES.len();
        }
        Variation::SwapPositions => {
            // With a single object, so the relation the captions name for it turns around.
            let singles: Vec<usize> = (1..base.objects.len())
                .filter(|&i| base.objects[i].group.is_none())
                .collect();
            let &i = singles.choose(rng)?;
            let (a, b) = (base.objects[0], base.objects[i]);
            for (k, from) in [(0, b), (i, a)] {
                let o = &mut scene.objects[k];
                (o.x, o.y) = (from.x, from.y);
            }
            if scene.relation(0, i) == base.relation(0, i) {
                return None;
            }
        }
    }
    (scene != *base).then_some(scene)
}
