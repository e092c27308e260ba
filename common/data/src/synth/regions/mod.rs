//! `caprl data synth --profile regions`: the benchmark task, built to have the properties that
//! make real captioning hard, each checked by a test of the generator:
//!
//! - **binding needs regions**: scenes of 2–6 objects with several attributes; `fc` is a pooled
//!   bag of attributes (swapping two objects' colours leaves it unchanged up to noise), and
//!   `att` holds one region per object in shuffled order among background and clutter regions
//!   (36 in all, as bottom-up features), partly hidden objects weaker and noisier ([`features`]);
//! - **counts and relations** between any two objects, groups of identical objects ("three red
//!   balls") ([`world`], [`annotators`]);
//! - **a compositional test split**: a fifth of the colour–category pairs of the common
//!   categories never appear in training; half of the val/test images show one as their main
//!   object (`subsets.json`: `unseen`; `seen`, the images whose main object is a common
//!   category in a combination training shows; and `tail`, a long-tail category; `caprl eval`
//!   reports each apart);
//! - **annotators that differ** in focus, length, order and synonyms, over a long-tail
//!   vocabulary (500 object categories with Zipf frequencies, most with made-up names);
//! - **near-duplicate families**: images that differ in one fact (the main object's colour,
//!   another object's category, the place, or two objects' positions), in one split;
//! - **ceilings** ([`ceilings`]): the human and oracle scores, in `ceilings.json`.

mod annotators;
mod ceilings;
mod features;
mod world;

use std::collections::BTreeMap;
use std::path::Path;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::{
    karpathy_image, split_of, stream, write_captions, DescriptionRecord, SynthConfig,
    REFS_PER_IMAGE,
};
use crate::atomic::write_json_atomic;
use crate::dataset::{SUBSETS_JSON, VOCAB_JSON};
use crate::error::DataError;
use crate::features::write_safetensors;
use ceilings::{ceiling, Ceilings, Scored};
use world::{
    sample_scene, vary, Combos, HeldOut, Lexicon, Scene, Variation, COLOURS, MATERIALS, SIZES,
};

pub(crate) use features::{ATT_DIM, FC_DIM, REGIONS};

/// The file of the ceilings beside a generated data set.
pub const CEILINGS_JSON: &str = "ceilings.json";
/// Share of val/test images whose main object shows a held-out combination.
const P_UNSEEN: f64 = 0.5;
/// Chance that an image starts a near-duplicate family, and its extra members (1–2).
const P_FAMILY: f64 = 0.4;

/// One image as drawn: its scene and its family.
struct Drawn {
    scene: Scene,
    family: usize,
    /// The fact this image changes from its family's first image.
    differs: Option<Variation>,
}

/// Draws every image, split by split, families kept inside one split.
fn draw(
    config: &SynthConfig,
    lex: &Lexicon,
    held_out: &HeldOut,
    rng: &mut ChaCha8Rng,
) -> Vec<Drawn> {
    let mut images: Vec<Drawn> = Vec::new();
    let mut family = 0;
    for (size, training) in [
        (config.train, true),
        (config.val, false),
        (config.test, false),
    ] {
        let end = images.len() + size;
        while images.len() < end {
            let combos = match !training && rng.random::<f64>() < P_UNSEEN {
                true => Combos::MainUnseen,
                false => Combos::SeenOnly,
            };
            let base = sample_scene(rng, lex, held_out, combos);
            let members = match rng.random::<f64>() < P_FAMILY {
                true => rng.random_range(1..=2),
                false => 0,
            };
            let mut variants = Vec::new();
            for _ in 0..members {
                let variation = Variation::ALL[rng.random_range(0..Variation::ALL.len())];
                if let Some(scene) = vary(rng, &base, variation, lex, held_out, combos) {
                    variants.push((scene, variation));
                }
            }
            images.push(Drawn {
                scene: base,
                family,
                differs: None,
            });
            for (scene, variation) in variants {
                if images.len() < end {
                    images.push(Drawn {
                        scene,
                        family,
                        differs: Some(variation),
                    });
                }
            }
            family += 1;
        }
    }
    images
}

/// `scenes.json` entry: the facts of one image as data.
#[derive(Serialize)]
struct SceneRecord {
    id: String,
    split: &'static str,
    family: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    differs: Option<&'static str>,
    unseen_combination: bool,
    /// Val/test: `seen`, `unseen` or `tail` ([`Scene::subset`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    subset: Option<&'static str>,
    place: &'static str,
    objects: Vec<ObjectRecord>,
    /// `[a, relation, b]` for every ordered pair of objects a < b.
    relations: Vec<(usize, &'static str, usize)>,
}

#[derive(Serialize)]
struct ObjectRecord {
    category: String,
    colour: &'static str,
    size: &'static str,
    material: &'static str,
    x: f32,
    y: f32,
    depth: f32,
    occluded: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<usize>,
}

fn record(
    lex: &Lexicon,
    d: &Drawn,
    id: String,
    split: &'static str,
    held_out: &HeldOut,
) -> SceneRecord {
    let s = &d.scene;
    let n = s.objects.len();
    SceneRecord {
        id,
        split,
        family: d.family,
        differs: d.differs.map(Variation::name),
        unseen_combination: s.has_unseen(held_out),
        subset: (split != "train").then(|| s.subset(held_out)),
        place: world::PLACES[s.place][0].0,
        objects: s
            .objects
            .iter()
            .map(|o| ObjectRecord {
                category: lex.categories[o.category].canonical().to_string(),
                colour: COLOURS[o.colour][0].0,
                size: SIZES[o.size][0].0,
                material: MATERIALS[o.material][0].0,
                x: o.x,
                y: o.y,
                depth: o.depth,
                occluded: o.occluded,
                group: o.group,
            })
            .collect(),
        relations: (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .map(|(a, b)| (a, s.relation(a, b).name(), b))
            .collect(),
    }
}

/// Writes the regions data set into `dir`; returns the lines its summary adds.
pub(crate) fn generate(dir: &Path, config: &SynthConfig) -> Result<Vec<String>, DataError> {
    let n = config.train + config.val + config.test;
    let lex = Lexicon::new();
    let mut rng_world = stream(config.seed, 10);
    let mut rng_text = stream(config.seed, 11);
    let mut rng_noise = stream(config.seed, 12);
    let held_out = HeldOut::new(&mut rng_world);
    let emb = features::Embeddings::new(&mut rng_world);
    let drawn = draw(config, &lex, &held_out, &mut rng_world);

    let bar = super::progress_bar(config.progress, n);
    let (mut fc, mut att) = (vec![0f32; n * FC_DIM], vec![0f32; n * REGIONS * ATT_DIM]);
    let mut main_regions = Vec::with_capacity(n);
    let (mut images, mut descriptions, mut records, mut ids) = (vec![], vec![], vec![], vec![]);
    let mut subsets: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut scored_refs = Vec::new();
    for (i, d) in drawn.iter().enumerate() {
        let split = split_of(i, config);
        let id = i.to_string();
        let refs = annotators::references(&mut rng_text, &lex, &d.scene, REFS_PER_IMAGE);
        let regions = features::render(
            &mut rng_noise,
            &emb,
            &d.scene,
            &mut fc[i * FC_DIM..(i + 1) * FC_DIM],
            &mut att[i * REGIONS * ATT_DIM..(i + 1) * REGIONS * ATT_DIM],
        );
        main_regions.push(regions[0]);
        if split != "train" {
            let subset = d.scene.subset(&held_out);
            subsets.entry(subset.into()).or_default().push(id.clone());
        }
        if split == "test" {
            scored_refs.push((i, refs.clone()));
        }
        images.push(karpathy_image(
            i,
            format!("regions_{i:06}.png"),
            split,
            refs,
        ));
        descriptions.push(DescriptionRecord {
            id: id.clone(),
            split,
            description: annotators::description(&lex, &d.scene),
        });
        records.push(record(&lex, d, id.clone(), split, &held_out));
        ids.push(id);
        bar.inc(1);
    }
    bar.finish_and_clear();

    let ceilings = test_ceilings(&lex, &drawn, &scored_refs, &subsets);
    let vocab = write_captions(dir, "synth-regions", images, config.train)?;
    write_safetensors(dir, &ids, &fc, FC_DIM, Some((&att, REGIONS, ATT_DIM)))?;
    vocab.save(&dir.join(VOCAB_JSON))?;
    write_json_atomic(&dir.join("descriptions.json"), &descriptions)?;
    write_json_atomic(&dir.join("scenes.json"), &records)?;
    write_json_atomic(&dir.join(SUBSETS_JSON), &subsets)?;
    write_json_atomic(&dir.join(CEILINGS_JSON), &ceilings)?;

    let scenes: Vec<Scene> = drawn.into_iter().map(|d| d.scene).collect();
    let [category, colour] = features::recoverability(&emb, &scenes, &main_regions, &att);
    Ok(vec![
        format!(
            "main object read by a matched filter from its own region: category {:.0}%, colour {:.0}%",
            100.0 * category,
            100.0 * colour
        ),
        format!(
            "ceilings on the test split ({} images): human CIDEr-D {:.3} BLEU-4 {:.3}, oracle CIDEr-D {:.3} BLEU-4 {:.3} ({CEILINGS_JSON})",
            ceilings.all.images,
            ceilings.all.human.cider_d,
            ceilings.all.human.bleu4,
            ceilings.all.oracle.cider_d,
            ceilings.all.oracle.bleu4
        ),
    ])
}

/// The ceilings of the test images (`scored`: image index and references), on all of them and
/// on each subset.
fn test_ceilings(
    lex: &Lexicon,
    drawn: &[Drawn],
    scored: &[(usize, Vec<String>)],
    subsets: &BTreeMap<String, Vec<String>>,
) -> Ceilings {
    let oracle: Vec<Vec<String>> = scored
        .iter()
        .map(|(i, _)| annotators::oracle_candidates(lex, &drawn[*i].scene))
        .collect();
    let of = |keep: &dyn Fn(usize) -> bool| -> Vec<Scored> {
        scored
            .iter()
            .zip(&oracle)
            .filter(|((i, _), _)| keep(*i))
            .map(|((_, refs), oracle)| Scored { refs, oracle })
            .collect()
    };
    let mut per_subset = BTreeMap::new();
    for (name, members) in subsets {
        let members: std::collections::BTreeSet<&str> =
            members.iter().map(String::as_str).collect();
        let images = of(&|i| members.contains(i.to_string().as_str()));
        if !images.is_empty() {
            per_subset.insert(name.clone(), ceiling(&images));
        }
    }
    Ceilings {
        split: "test",
        scoring: "CIDEr-D and BLEU-4 as pycocoevalcap (caprl's tokenizer, df from the scored images' references, no <eos>); human: each reference against the other four",
        all: ceiling(&of(&|_| true)),
        subsets: per_subset,
    }
}
