//! Features of the regions profile, built like bottom-up features: 36 regions per image, one per
//! object in shuffled order among background and clutter regions, and a pooled vector.
//!
//! Every value of every attribute has a fixed random embedding (entries N(0, 1/D), |e| ≈ 1),
//! one table for the regions and one for the pooled vector, drawn from the data seed.
//!
//! - A region `[appearance | geometry]`: an object's appearance is
//!   `v·(o + Σ_a s_a·e_a(value_a)) + σ·n`, with `o` an objectness vector, visibility `v` = 1 and
//!   noise `σ` = 0.3 (0.5 and 0.5 when the object is partly hidden); its geometry is the box
//!   (centre, depth, extent). Background regions are `0.7·e_place + 0.6·c + σ·n` with `c` one of
//!   64 clutter vectors, and a quarter of them fragments of a scene object (`0.4·e_category`,
//!   as bottom-up detectors also box parts of objects).
//! - `fc` = `Σ_objects Σ_a s_a·g_a(value_a) + g_place + σ_fc·n`: a bag of the scene's
//!   attributes with no positions and no binding, so swapping the colours of two objects leaves
//!   it unchanged (up to noise) and which colour belongs to which object is read only from the
//!   regions.

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::world::{Object, Scene, CATEGORIES, COLOURS, MATERIALS, PLACES, SIZES};
use crate::synth::features::{normal, table};

pub(crate) const FC_DIM: usize = 128;
pub(crate) const REGIONS: usize = 36;
pub(crate) const ATT_DIM: usize = 128;
/// The last dimensions of a region: its box (x, y, depth, extent), the rest zero.
const GEOMETRY: usize = 8;
const APPEARANCE: usize = ATT_DIM - GEOMETRY;
const CLUTTER: usize = 64;

/// Salience of category, colour, size, material.
const SALIENCE: [f32; 4] = [1.2, 0.9, 0.5, 0.5];
const OBJECTNESS: f32 = 0.8;
const SIGMA_CLEAR: f32 = 0.3;
const SIGMA_OCCLUDED: f32 = 0.5;
const VISIBLE_OCCLUDED: f32 = 0.5;
const SIGMA_GEOMETRY: f32 = 0.05;
const SIGMA_FC: f32 = 0.25;
const P_FRAGMENT: f64 = 0.25;

/// One table per attribute (category, colour, size, material) and the places.
pub(crate) struct Space {
    pub attrs: [Vec<Vec<f32>>; 4],
    pub places: Vec<Vec<f32>>,
}

impl Space {
    fn new(rng: &mut ChaCha8Rng, dim: usize) -> Space {
        Space {
            attrs: [
                table(rng, CATEGORIES, dim),
                table(rng, COLOURS.len(), dim),
                table(rng, SIZES.len(), dim),
                table(rng, MATERIALS.len(), dim),
            ],
            places: table(rng, PLACES.len(), dim),
        }
    }
}

/// Everything drawn once from the seed.
pub(crate) struct Embeddings {
    pub region: Space,
    pub pooled: Space,
    objectness: Vec<f32>,
    clutter: Vec<Vec<f32>>,
}

impl Embeddings {
    pub(crate) fn new(rng: &mut ChaCha8Rng) -> Embeddings {
        let region = Space::new(rng, APPEARANCE);
        let pooled = Space::new(rng, FC_DIM);
        let objectness = table(rng, 1, APPEARANCE).remove(0);
        let clutter = table(rng, CLUTTER, APPEARANCE);
        Embeddings {
            region,
            pooled,
            objectness,
            clutter,
        }
    }
}

fn values(o: &Object) -> [usize; 4] {
    [o.category, o.colour, o.size, o.material]
}

fn add(acc: &mut [f32], v: &[f32], scale: f32) {
    for (a, x) in acc.iter_mut().zip(v) {
        *a += scale * x;
    }
}

/// Writes one image's `fc` (`FC_DIM` values) and `att` (`REGIONS × ATT_DIM`), and returns the
/// region of each object.
pub(crate) fn render(
    rng: &mut ChaCha8Rng,
    emb: &Embeddings,
    scene: &Scene,
    fc: &mut [f32],
    att: &mut [f32],
) -> Vec<usize> {
    pooled(rng, emb, scene, fc);
    let mut order: Vec<usize> = (0..REGIONS).collect();
    order.shuffle(rng);
    for (slot, &region) in order.iter().enumerate() {
        let out = &mut att[region * ATT_DIM..(region + 1) * ATT_DIM];
        match scene.objects.get(slot) {
            Some(o) => object_region(rng, emb, o, out),
            None => background_region(rng, emb, scene, out),
        }
    }
    order[..scene.objects.len()].to_vec()
}

fn pooled(rng: &mut ChaCha8Rng, emb: &Embeddings, scene: &Scene, fc: &mut [f32]) {
    fc.fill(0.0);
    for o in &scene.objects {
        for (a, v) in values(o).into_iter().enumerate() {
            add(fc, &emb.pooled.attrs[a][v], SALIENCE[a]);
        }
    }
    add(fc, &emb.pooled.places[scene.place], 1.0);
    for x in fc.iter_mut() {
        *x += SIGMA_FC * normal(rng);
    }
}

fn object_region(rng: &mut ChaCha8Rng, emb: &Embeddings, o: &Object, out: &mut [f32]) {
    let (appearance, geometry) = out.split_at_mut(APPEARANCE);
    let (visible, sigma) = match o.occluded {
        true => (VISIBLE_OCCLUDED, SIGMA_OCCLUDED),
        false => (1.0, SIGMA_CLEAR),
    };
    appearance.fill(0.0);
    add(appearance, &emb.objectness, visible * OBJECTNESS);
    for (a, v) in values(o).into_iter().enumerate() {
        add(appearance, &emb.region.attrs[a][v], visible * SALIENCE[a]);
    }
    for x in appearance.iter_mut() {
        *x += sigma * normal(rng);
    }
    write_box(rng, geometry, [o.x, o.y, o.depth, o.extent()]);
}

fn background_region(rng: &mut ChaCha8Rng, emb: &Embeddings, scene: &Scene, out: &mut [f32]) {
    let (appearance, geometry) = out.split_at_mut(APPEARANCE);
    appearance.fill(0.0);
    add(appearance, &emb.region.places[scene.place], 0.7);
    let clutter = &emb.clutter[rng.random_range(0..CLUTTER)];
    add(appearance, clutter, 0.6);
    let mut bbox = [
        rng.random::<f32>(),
        rng.random::<f32>(),
        rng.random::<f32>(),
        0.1 + 0.3 * rng.random::<f32>(),
    ];
    if rng.random::<f64>() < P_FRAGMENT {
        let o = &scene.objects[rng.random_range(0..scene.objects.len())];
        add(appearance, &emb.region.attrs[0][o.category], 0.4);
        bbox = [o.x, o.y, o.depth, 0.3 * o.extent()];
    }
    for x in appearance.iter_mut() {
        *x += SIGMA_CLEAR * normal(rng);
    }
    write_box(rng, geometry, bbox);
}

fn write_box(rng: &mut ChaCha8Rng, geometry: &mut [f32], [x, y, depth, extent]: [f32; 4]) {
    geometry.fill(0.0);
    for (g, v) in geometry
        .iter_mut()
        .zip([2.0 * x - 1.0, 2.0 * y - 1.0, 2.0 * depth - 1.0, extent])
    {
        *g = v + SIGMA_GEOMETRY * normal(rng);
    }
}

/// Share of images whose main object's category and colour a matched filter reads from the
/// object's own region (`argmax_v ⟨e_a(v), region⟩`): a floor on what a model that finds the
/// region can recover.
pub(crate) fn recoverability(
    emb: &Embeddings,
    scenes: &[Scene],
    main_regions: &[usize],
    att: &[f32],
) -> [f64; 2] {
    let mut hits = [0usize; 2];
    for (i, (scene, &region)) in scenes.iter().zip(main_regions).enumerate() {
        let start = (i * REGIONS + region) * ATT_DIM;
        let r = &att[start..start + APPEARANCE];
        let truth = values(&scene.objects[0]);
        for (a, hit) in hits.iter_mut().enumerate() {
            let best = emb.region.attrs[a]
                .iter()
                .map(|e| e.iter().zip(r).map(|(x, y)| x * y).sum::<f32>())
                .enumerate()
                .max_by(|x, y| x.1.total_cmp(&y.1))
                .map(|(v, _)| v);
            *hit += usize::from(best == Some(truth[a]));
        }
    }
    let n = scenes.len().max(1) as f64;
    hits.map(|h| h as f64 / n)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::synth::regions::world::{sample_scene, Combos, HeldOut, Lexicon};

    /// A scene of two single objects of different colours.
    fn two_colours(rng: &mut ChaCha8Rng, lex: &Lexicon, held_out: &HeldOut) -> Scene {
        loop {
            let s = sample_scene(rng, lex, held_out, Combos::SeenOnly);
            if s.objects.len() == 2
                && s.objects.iter().all(|o| o.group.is_none())
                && s.objects[0].colour != s.objects[1].colour
            {
                return s;
            }
        }
    }

    fn features(emb: &Embeddings, scene: &Scene) -> (Vec<f32>, Vec<f32>, Vec<usize>) {
        let (mut fc, mut att) = (vec![0.0; FC_DIM], vec![0.0; REGIONS * ATT_DIM]);
        let regions = render(
            &mut ChaCha8Rng::seed_from_u64(5),
            emb,
            scene,
            &mut fc,
            &mut att,
        );
        (fc, att, regions)
    }

    #[test]
    fn pooled_vector_cannot_bind_colours_but_regions_can() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let (lex, held_out) = (Lexicon::new(), HeldOut::new(&mut rng));
        let emb = Embeddings::new(&mut rng);
        let (mut own, mut other) = (0.0, 0.0);
        let n = 40;
        for _ in 0..n {
            let scene = two_colours(&mut rng, &lex, &held_out);
            let mut swapped = scene.clone();
            let (a, b) = (scene.objects[0].colour, scene.objects[1].colour);
            (swapped.objects[0].colour, swapped.objects[1].colour) = (b, a);
            let (fc, att, regions) = features(&emb, &scene);
            let (fc_swapped, att_swapped, _) = features(&emb, &swapped);
            // Same noise draws: the pooled vectors differ only by float rounding.
            let fc_gap = fc
                .iter()
                .zip(&fc_swapped)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            assert!(
                fc_gap < 1e-4,
                "fc changed by {fc_gap} when two colours swapped"
            );
            // The main object's region reads its own colour, not the other one.
            let read = |att: &[f32]| {
                let r = &att[regions[0] * ATT_DIM..regions[0] * ATT_DIM + APPEARANCE];
                let dot = |c: usize| {
                    emb.region.attrs[1][c]
                        .iter()
                        .zip(r)
                        .map(|(x, y)| x * y)
                        .sum::<f32>()
                };
                dot(a) - dot(b)
            };
            own += read(&att) / n as f32;
            other += read(&att_swapped) / n as f32;
        }
        // The colour's salience is 0.9: the own colour leads by about that much on average.
        assert!(
            own > 0.6 && other < -0.6,
            "region 0 reads its own colour {own}, the other {other}"
        );
    }

    #[test]
    fn objects_sit_in_shuffled_regions() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let (lex, held_out) = (Lexicon::new(), HeldOut::new(&mut rng));
        let emb = Embeddings::new(&mut rng);
        let mut first_regions = std::collections::BTreeSet::new();
        for seed in 0..30 {
            let scene = sample_scene(&mut rng, &lex, &held_out, Combos::SeenOnly);
            let (mut fc, mut att) = (vec![0.0; FC_DIM], vec![0.0; REGIONS * ATT_DIM]);
            let regions = render(
                &mut ChaCha8Rng::seed_from_u64(seed),
                &emb,
                &scene,
                &mut fc,
                &mut att,
            );
            assert_eq!(regions.len(), scene.objects.len());
            first_regions.insert(regions[0]);
        }
        assert!(
            first_regions.len() > 10,
            "the main object keeps to {first_regions:?}"
        );
    }
}
