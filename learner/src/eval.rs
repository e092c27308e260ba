//! Evaluation: caption a split and compute every metric the source papers report.
//!
//! - Main captions: beam search of width `beam` (greedy when `beam = 1`), the
//!   top hypothesis per image; BLEU-1..4, ROUGE-L and CIDEr-D (corpus df, as
//!   pycocoevalcap) against the references; vocabulary used and mean length;
//!   Self-BLEU over the set of main captions (paper 004).
//! - Diversity (paper 002, table 4): Div-1, Div-2 and mBLEU-4 over `samples`
//!   random samples per image (`_sample`) and over the top `samples` beams
//!   (`_beam`), averaged over images.
//! - Retrieval (paper 004), when an evaluation encoder is given ([`add_retrieval`]): R@1/5/10
//!   text→image and image→text of the main captions among the evaluated images.
//! - Subsets: CIDEr-D and BLEU-4 on each named subset of the data set (`subsets.json`, e.g.
//!   the regions task's `seen` and `unseen` colour–category combinations).
//! - METEOR 1.5 of the main captions when asked for ([`add_meteor`]; the jar pycocoevalcap
//!   runs, so Java is needed).

use std::collections::{BTreeMap, BTreeSet};

use caprl_wire::Sampling;

use caprl_clip::retrieval::{recall, RECALL_KS};
use caprl_clip::Encoder;
use caprl_common::progress::Progress;
use caprl_data::{Dataset, Item};
use caprl_model::model::{
    inputs_for_rows, BadEndings, BeamOptions, CaprlRng, Captioner, Lookahead, SampleOptions, EOS,
};
use caprl_score::Interner;

use crate::error::{Doing, LearnerError};

/// How to evaluate.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Beam width of the main captions; 1 = greedy.
    pub beam: usize,
    pub length_norm: bool,
    pub block_trigrams: bool,
    /// Diverse beam search groups (`decode.beam_groups`); the beam width is rounded up to a
    /// multiple of them.
    pub beam_groups: usize,
    /// Diversity penalty λ between beam groups (`decode.diversity_lambda`).
    pub diversity_lambda: f32,
    /// Never end a caption right after a bad-ending word (`decode.remove_bad_endings`).
    pub remove_bad_endings: bool,
    /// Samples (and beams) per image for the diversity metrics; 0 = skip them.
    pub samples: usize,
    /// What those samples are drawn from (the callers keep temperature 1 and every word but
    /// `decode.top_p`'s nucleus).
    pub sampling: Sampling,
    /// Images per decode batch.
    pub batch: usize,
    /// Evaluate only the first `limit` images; 0 = all.
    pub limit: usize,
    pub seed: u64,
    /// Show a progress bar.
    pub progress: bool,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            beam: 1,
            length_norm: false,
            block_trigrams: false,
            beam_groups: 1,
            diversity_lambda: 0.5,
            remove_bad_endings: false,
            samples: 5,
            sampling: Sampling::default(),
            batch: 64,
            limit: 0,
            seed: 1234,
            progress: false,
        }
    }
}

/// Metrics by name, and the main caption of every image.
#[derive(Debug, Clone)]
pub struct EvalReport {
    pub metrics: BTreeMap<String, f64>,
    /// `(image id, caption)` in split order.
    pub captions: Vec<(String, String)>,
    /// The same captions as vocabulary ids (no EOS).
    pub tokens: Vec<Vec<u32>>,
}

/// Adds paper 004's retrieval metrics to `report` (made from `items`, in order): recall@1/5/10
/// of text→image (`r1_t2i`, ...) and image→text (`r1_i2t`, ...) among the evaluated images,
/// in %, with the frozen evaluation `encoder`.
pub fn add_retrieval(
    report: &mut EvalReport,
    encoder: &dyn Encoder,
    data: &Dataset,
    items: &[Item],
) -> Result<(), LearnerError> {
    let rows: Vec<usize> = items
        .iter()
        .take(report.tokens.len())
        .map(|it| it.row)
        .collect();
    let texts = encoder
        .embed_captions(&report.tokens)
        .doing(|| "retrieval: embedding the captions".into())?;
    let images = encoder
        .embed_images(data, &rows)
        .doing(|| "retrieval: embedding the images".into())?;
    let r = recall(&texts, &images);
    for (j, k) in RECALL_KS.iter().enumerate() {
        report.metrics.insert(format!("r{k}_t2i"), r.t2i[j]);
        report.metrics.insert(format!("r{k}_i2t"), r.i2t[j]);
    }
    Ok(())
}

/// Adds `meteor`, METEOR 1.5 of the main captions of `report` (made from `items`, in order)
/// against their references, the jar's corpus aggregate as pycocoevalcap reports it.
pub fn add_meteor(
    report: &mut EvalReport,
    meteor: &mut caprl_score::Meteor,
    items: &[Item],
) -> Result<(), LearnerError> {
    let refs: Vec<Vec<String>> = items
        .iter()
        .take(report.captions.len())
        .map(|it| it.refs.iter().map(|ws| ws.join(" ")).collect())
        .collect();
    let cands: Vec<&str> = report.captions.iter().map(|(_, c)| c.as_str()).collect();
    let (corpus, _) = meteor.compute_score(&refs, &cands)?;
    report.metrics.insert("meteor".into(), corpus);
    Ok(())
}

fn strip_eos(tokens: &[u32]) -> Vec<u32> {
    tokens.iter().copied().take_while(|&t| t != EOS).collect()
}

/// Captions `items` with `model` and scores them against their references.
pub fn evaluate(
    model: &Captioner,
    data: &Dataset,
    items: &[Item],
    opts: &EvalOptions,
) -> Result<EvalReport, LearnerError> {
    evaluate_with(model, None, data, items, opts)
}

/// [`evaluate`] with the beams ranked by lookahead inference (paper 001) when `lookahead` is given.
pub fn evaluate_with(
    model: &Captioner,
    lookahead: Option<&Lookahead>,
    data: &Dataset,
    items: &[Item],
    opts: &EvalOptions,
) -> Result<EvalReport, LearnerError> {
    let items = if opts.limit > 0 && opts.limit < items.len() {
        &items[..opts.limit]
    } else {
        items
    };
    if items.is_empty() {
        return Err(LearnerError::Misconfigured(
            "nothing to evaluate: the split has no images".into(),
        ));
    }
    let cfg = model.config().clone();
    let device = model.device().clone();
    // Vocabulary ids are interner ids; reference words outside the vocabulary get new ids.
    let mut interner = Interner::with_words(data.vocab.words());
    let refs: Vec<Vec<Vec<u32>>> = items
        .iter()
        .map(|it| interner.intern_refs(&it.refs))
        .collect();

    let mut main: Vec<Vec<u32>> = Vec::with_capacity(items.len());
    let (mut div_sample, mut div_beam) = ([0.0f64; 3], [0.0f64; 3]);
    let mut rng = CaprlRng::new(opts.seed);
    let bar = opts
        .progress
        .then(|| Progress::new(items.len() as u64, "eval"));
    let groups = opts.beam_groups.max(1);
    let beam_width = opts.beam.max(opts.samples).max(1).div_ceil(groups) * groups;
    let bad_endings = match opts.remove_bad_endings {
        true => BadEndings::from_vocab(&data.vocab),
        false => BadEndings::none(),
    };
    // The weights do not change during the evaluation: prepared once for every batch.
    let decoder = model.decoder()?;
    for chunk in items.chunks(opts.batch.max(1)) {
        let rows: Vec<usize> = chunk.iter().map(|it| it.row).collect();
        let x = inputs_for_rows(data, &rows, &cfg, &device)?;
        if opts.beam <= 1 {
            let d = decoder.greedy_avoiding(&x, cfg.max_len, &bad_endings)?;
            main.extend(d.tokens.iter().map(|t| strip_eos(t)));
        }
        if opts.beam > 1 || opts.samples > 1 {
            let beam_opts = BeamOptions {
                width: beam_width,
                max_len: cfg.max_len,
                length_norm: opts.length_norm,
                block_trigrams: opts.block_trigrams,
                groups,
                diversity_lambda: opts.diversity_lambda,
                bad_endings: bad_endings.clone(),
            };
            let beams = match lookahead {
                Some(la) => decoder.beam_lookahead(&x, &beam_opts, la)?,
                None => decoder.beam(&x, &beam_opts)?,
            };
            for hyps in &beams {
                if opts.beam > 1 {
                    main.push(
                        hyps.first()
                            .map(|h| strip_eos(&h.tokens))
                            .unwrap_or_default(),
                    );
                }
                if opts.samples > 1 {
                    let set: Vec<Vec<u32>> = hyps
                        .iter()
                        .take(opts.samples)
                        .map(|h| strip_eos(&h.tokens))
                        .collect();
                    add_diversity(&mut div_beam, &set);
                }
            }
        }
        if opts.samples > 1 {
            let sample = SampleOptions {
                n_per_input: opts.samples,
                sampling: opts.sampling,
                bad_endings: bad_endings.clone(),
                max_len: cfg.max_len,
            };
            let d = decoder.sample(&x, &sample, &mut rng)?;
            for set in d.tokens.chunks(opts.samples) {
                let set: Vec<Vec<u32>> = set.iter().map(|t| strip_eos(t)).collect();
                add_diversity(&mut div_sample, &set);
            }
        }
        if let Some(b) = &bar {
            b.inc(chunk.len() as u64);
        }
    }
    if let Some(b) = bar {
        b.finish();
    }

    let diversity = (opts.samples > 1).then_some([("sample", div_sample), ("beam", div_beam)]);
    let mut metrics = corpus_metrics(&refs, &main, diversity);
    add_subset_metrics(&mut metrics, &data.subsets()?, items, &refs, &main);
    let captions = caption_texts(items, &main, &interner);
    Ok(EvalReport {
        metrics,
        captions,
        tokens: main,
    })
}

/// The corpus scores of the main captions `main` against `refs` (one entry per image), and
/// the mean diversity of each named caption set (`div1_*`, `div2_*`, `mbleu4_*`) when given.
fn corpus_metrics(
    refs: &[Vec<Vec<u32>>],
    main: &[Vec<u32>],
    diversity: Option<[(&str, [f64; 3]); 2]>,
) -> BTreeMap<String, f64> {
    let n = main.len().max(1) as f64;
    let mut metrics = BTreeMap::new();
    let (bleu, _) = caprl_score::bleu_corpus(refs, main);
    for (k, b) in bleu.iter().enumerate() {
        metrics.insert(format!("bleu{}", k + 1), *b);
    }
    metrics.insert("rouge_l".into(), caprl_score::rouge_l_corpus(refs, main).0);
    metrics.insert("cider_d".into(), caprl_score::cider_corpus(refs, main).0);
    metrics.insert("self_bleu".into(), caprl_score::self_bleu(main));
    let used: BTreeSet<u32> = main.iter().flatten().copied().collect();
    metrics.insert("vocab_used".into(), used.len() as f64);
    metrics.insert(
        "mean_len".into(),
        main.iter().map(|c| c.len()).sum::<usize>() as f64 / n,
    );
    for (name, v) in diversity.into_iter().flatten() {
        metrics.insert(format!("div1_{name}"), v[0] / n);
        metrics.insert(format!("div2_{name}"), v[1] / n);
        metrics.insert(format!("mbleu4_{name}"), v[2] / n);
    }
    metrics
}

/// CIDEr-D and BLEU-4 of the main captions on each named subset of the data set's images
/// (`cider_d_NAME`, `bleu4_NAME`, `images_NAME`), each subset scored as a corpus of its own (its
/// document frequencies from its own references), as an evaluation of those images alone.
fn add_subset_metrics(
    metrics: &mut BTreeMap<String, f64>,
    subsets: &BTreeMap<String, BTreeSet<String>>,
    items: &[Item],
    refs: &[Vec<Vec<u32>>],
    main: &[Vec<u32>],
) {
    for (name, ids) in subsets {
        let picked: Vec<usize> = (0..main.len())
            .filter(|&i| ids.contains(&items[i].id))
            .collect();
        if picked.is_empty() {
            continue;
        }
        let sub_refs: Vec<Vec<Vec<u32>>> = picked.iter().map(|&i| refs[i].clone()).collect();
        let sub_main: Vec<&[u32]> = picked.iter().map(|&i| main[i].as_slice()).collect();
        let cider = caprl_score::cider_corpus(&sub_refs, &sub_main).0;
        metrics.insert(format!("cider_d_{name}"), cider);
        let bleu4 = caprl_score::bleu_corpus(&sub_refs, &sub_main).0[3];
        metrics.insert(format!("bleu4_{name}"), bleu4);
        metrics.insert(format!("images_{name}"), picked.len() as f64);
    }
}

/// Each item's id and its main caption as words.
fn caption_texts(items: &[Item], main: &[Vec<u32>], interner: &Interner) -> Vec<(String, String)> {
    items
        .iter()
        .zip(main)
        .map(|(it, c)| {
            let words: Vec<&str> = c
                .iter()
                .map(|&t| interner.word(t).unwrap_or("<unk>"))
                .collect();
            (it.id.clone(), words.join(" "))
        })
        .collect()
}

fn add_diversity(acc: &mut [f64; 3], set: &[Vec<u32>]) {
    acc[0] += caprl_score::div_n(set, 1);
    acc[1] += caprl_score::div_n(set, 2);
    acc[2] += caprl_score::mbleu4(set);
}
