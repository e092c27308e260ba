//! Synthetic image features: noisy compositions of fixed random attribute embeddings.
//!
//! All embeddings are drawn once from the seed. With `e_a(v)` the embedding of value `v` of
//! attribute `a` (entries N(0, 1/D), so |e| ≈ 1), `s_a` its salience and `p_k` a ±1 binding
//! vector of slot `k`:
//!
//! - global `fc` (D = 256): `Σ_k [p_k ⊙ Σ_a s_a·e_a(v_ka) + q_k] + σ_fc·n` (n ~ N(0, I)), binding each
//!   object's attributes to its slot so that a linear read-out `⟨p_0 ⊙ e_a(v), fc⟩` recovers
//!   the main object's attributes;
//! - regions `att` (R = 4, D = 128): region `k` = `r_k + Σ_a s_a·f_a(v_ka) + σ_att·n` for an
//!   occupied slot, and `σ_att·n` alone (noise only) for an empty one.
//!
//! Colour and shape are salient; size, material and the relation are faint, so a model reads
//! colours and shapes reliably and the rare distinguishing facts only with some doubt.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::world::{Scene, COLOURS, MATERIALS, RELATIONS, SHAPES, SIZES, SLOTS};

pub(crate) const FC_DIM: usize = 256;
pub(crate) const ATT_DIM: usize = 128;

/// Salience of colour, shape, size, material, relation.
pub(crate) const SALIENCE: [f32; 5] = [1.2, 1.2, 0.45, 0.35, 0.4];
/// Per-dimension noise std; with unit-norm embeddings it is also the std of the noise along
/// any one embedding, to compare with the salience (the signal along it).
pub(crate) const SIGMA_FC: f32 = 0.25;
pub(crate) const SIGMA_ATT: f32 = 0.3;

/// Standard normal draw (Box–Muller, one value per call; deterministic for the stream).
pub(crate) fn normal(rng: &mut ChaCha8Rng) -> f32 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

fn gaussian_vec(rng: &mut ChaCha8Rng, dim: usize) -> Vec<f32> {
    let scale = 1.0 / (dim as f32).sqrt();
    (0..dim).map(|_| normal(rng) * scale).collect()
}

/// `n` random embeddings of `dim` values, entries N(0, 1/dim) (so |e| ≈ 1).
pub(crate) fn table(rng: &mut ChaCha8Rng, n: usize, dim: usize) -> Vec<Vec<f32>> {
    (0..n).map(|_| gaussian_vec(rng, dim)).collect()
}

/// Embeddings for one feature space: per attribute a table of value vectors.
pub(crate) struct Space {
    /// colour, shape, size, material, relation.
    pub attrs: [Vec<Vec<f32>>; 5],
    /// Slot position vectors (`q_k` / `r_k`).
    pub slots: Vec<Vec<f32>>,
}

impl Space {
    fn new(rng: &mut ChaCha8Rng, dim: usize) -> Space {
        Space {
            attrs: [
                table(rng, COLOURS.len(), dim),
                table(rng, SHAPES.len(), dim),
                table(rng, SIZES.len(), dim),
                table(rng, MATERIALS.len(), dim),
                table(rng, RELATIONS.len(), dim),
            ],
            slots: table(rng, SLOTS, dim),
        }
    }
}

/// Everything drawn once from the seed.
pub(crate) struct Embeddings {
    pub fc: Space,
    pub att: Space,
    /// ±1 binding vectors of the slots in the fc space.
    pub bind: Vec<Vec<f32>>,
}

impl Embeddings {
    pub(crate) fn new(rng: &mut ChaCha8Rng) -> Embeddings {
        let fc = Space::new(rng, FC_DIM);
        let att = Space::new(rng, ATT_DIM);
        let bind = (0..SLOTS)
            .map(|_| {
                (0..FC_DIM)
                    .map(|_| if rng.random::<bool>() { 1.0 } else { -1.0 })
                    .collect()
            })
            .collect();
        Embeddings { fc, att, bind }
    }
}

/// Attribute values of slot `k` in table order (relation only for k > 0).
fn values(scene: &Scene, k: usize) -> [Option<usize>; 5] {
    let o = &scene.objects[k];
    [
        Some(o.colour),
        Some(o.shape),
        Some(o.size),
        Some(o.material),
        (k > 0).then(|| scene.relations[k - 1]),
    ]
}

/// Append one image's fc `[FC_DIM]` and att `[SLOTS * ATT_DIM]` features.
pub(crate) fn render(
    rng: &mut ChaCha8Rng,
    emb: &Embeddings,
    scene: &Scene,
    fc: &mut Vec<f32>,
    att: &mut Vec<f32>,
) {
    let mut g = vec![0f32; FC_DIM];
    for k in 0..scene.objects.len() {
        for (a, v) in values(scene, k).into_iter().enumerate() {
            if let Some(v) = v {
                let e = &emb.fc.attrs[a][v];
                for d in 0..FC_DIM {
                    g[d] += SALIENCE[a] * emb.bind[k][d] * e[d];
                }
            }
        }
        for (gd, q) in g.iter_mut().zip(&emb.fc.slots[k]) {
            *gd += q;
        }
    }
    let noise = SIGMA_FC;
    fc.extend(g.iter().map(|x| x + noise * normal(rng)));

    let noise = SIGMA_ATT;
    for k in 0..SLOTS {
        let mut r = vec![0f32; ATT_DIM];
        if k < scene.objects.len() {
            r.copy_from_slice(&emb.att.slots[k]);
            for (a, v) in values(scene, k).into_iter().enumerate() {
                if let Some(v) = v {
                    for (rd, e) in r.iter_mut().zip(&emb.att.attrs[a][v]) {
                        *rd += SALIENCE[a] * e;
                    }
                }
            }
        }
        att.extend(r.iter().map(|x| x + noise * normal(rng)));
    }
}

/// Share of images whose main-object attributes (colour, shape, size, material) a
/// matched filter reads correctly from fc (`argmax_v ⟨p_0 ⊙ e_a(v), fc⟩`) and from region 0
/// of att (`argmax_v ⟨f_a(v), att_0⟩`): a floor on what a trained model can recover.
pub(crate) fn recoverability(
    emb: &Embeddings,
    scenes: &[Scene],
    fc: &[f32],
    att: &[f32],
) -> ([f64; 4], [f64; 4]) {
    let mut hits_fc = [0usize; 4];
    let mut hits_att = [0usize; 4];
    for (i, scene) in scenes.iter().enumerate() {
        let g = &fc[i * FC_DIM..(i + 1) * FC_DIM];
        let r0 = &att[i * SLOTS * ATT_DIM..i * SLOTS * ATT_DIM + ATT_DIM];
        let truth = values(scene, 0);
        for a in 0..4 {
            let best_fc = argmax(emb.fc.attrs[a].iter().map(|e| {
                (0..FC_DIM)
                    .map(|d| emb.bind[0][d] * e[d] * g[d])
                    .sum::<f32>()
            }));
            let best_att = argmax(
                emb.att.attrs[a]
                    .iter()
                    .map(|e| e.iter().zip(r0).map(|(x, y)| x * y).sum::<f32>()),
            );
            hits_fc[a] += usize::from(Some(best_fc) == truth[a]);
            hits_att[a] += usize::from(Some(best_att) == truth[a]);
        }
    }
    let n = scenes.len().max(1) as f64;
    (
        hits_fc.map(|h| h as f64 / n),
        hits_att.map(|h| h as f64 / n),
    )
}

fn argmax(scores: impl Iterator<Item = f32>) -> usize {
    let mut best = (0, f32::NEG_INFINITY);
    for (i, s) in scores.enumerate() {
        if s > best.1 {
            best = (i, s);
        }
    }
    best.0
}
