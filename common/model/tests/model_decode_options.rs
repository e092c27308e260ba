//! Decoding options against plain decoding: nucleus sampling (`top_p`), diverse beam search
//! (groups and the Hamming penalty) and bad endings.

#[path = "support/decode.rs"]
mod decode;

use caprl_wire::Sampling;

use caprl_model::model::{
    batch_tokens, BadEndings, BeamOptions, CaprlRng, Captioner, CaptionerConfig, Device,
    Hypothesis, ModelKind, RnnKind, SampleOptions, EOS,
};
use decode::{configs, inputs, opts, tiny};

/// Samples of one seed, recorded before top-p existed: with `top_p = 1` the sampler must still
/// draw these tokens with these log-probs (the learner's importance ratios read them).
#[test]
fn top_p_one_samples_what_plain_sampling_sampled() {
    type Pin = (f32, u32, Vec<Vec<u32>>, Vec<Vec<f32>>);
    let fc: Vec<Pin> = vec![
        (
            0.9,
            0,
            vec![
                vec![9, 9, 7, 8, 8, 3, 8],
                vec![11, 10, 6, 6, 9, 4, 7],
                vec![8, 6, 11, 7, 7, 10, 7, 2],
                vec![11, 4, 5, 3, 6, 4, 10],
                vec![8, 4, 5, 8, 6, 2],
                vec![10, 10, 5, 7, 3, 8, 7],
            ],
            vec![
                vec![
                    -2.283774, -2.318963, -1.9955231, -2.1887968, -2.1982574, -2.3598535,
                    -2.2109299,
                ],
                vec![
                    -2.4345794, -2.369264, -2.0381207, -2.027391, -2.3754504, -2.6217272,
                    -1.9984454,
                ],
                vec![
                    -2.1069467, -2.0199234, -2.403952, -1.9922417, -1.999143, -2.3282206,
                    -2.0013514, -2.5452304,
                ],
                vec![
                    -2.3343499, -2.5320668, -2.290296, -2.3721607, -2.0266683, -2.5644863,
                    -2.2800736,
                ],
                vec![
                    -2.1157618, -2.541592, -2.2947223, -2.188429, -2.0181417, -2.5423682,
                ],
                vec![
                    -2.3803651, -2.341264, -2.3077989, -2.1383824, -2.3774836, -2.186994,
                    -2.1208775,
                ],
            ],
        ),
        (
            1.0,
            4,
            vec![
                vec![6, 7, 7, 6, 8, 7, 10],
                vec![7, 6, 10, 9, 7, 8, 10],
                vec![7, 8, 6, 6, 8, 6, 7],
                vec![7, 7, 8, 7, 5, 8, 5],
                vec![9, 8, 6, 6, 6, 6, 6],
                vec![7, 5, 7, 7, 5, 7, 5],
            ],
            vec![
                vec![
                    -1.311982, -1.2843323, -1.2745136, -1.2916033, -1.4479005, -1.2676316,
                    -1.5561383,
                ],
                vec![
                    -1.3099583, -1.301449, -1.5759438, -1.5680778, -1.2665396, -1.4501059,
                    -1.5536749,
                ],
                vec![
                    -1.3099583, -1.4202694, -1.291375, -1.2898434, -1.4499261, -1.2946285,
                    -1.2708917,
                ],
                vec![
                    -1.4031308, -1.3838665, -1.4029409, -1.3736163, -1.4985361, -1.4204946,
                    -1.5005559,
                ],
                vec![
                    -1.5430673, -1.3822025, -1.2576866, -1.2608887, -1.2644807, -1.2676413,
                    -1.270113,
                ],
                vec![
                    -1.4031308, -1.54791, -1.3792521, -1.3780763, -1.4876653, -1.37352, -1.4796414,
                ],
            ],
        ),
    ];
    let transformer: Vec<Pin> = vec![
        (
            0.9,
            0,
            vec![
                vec![5, 9, 7, 8, 8, 3, 8],
                vec![5, 5, 3, 4, 8, 2],
                vec![8, 8, 10, 3, 2],
                vec![8, 4, 2],
                vec![8, 4, 5, 8, 3, 2],
                vec![10, 10, 5, 7, 3, 8, 7],
            ],
            vec![
                vec![
                    -2.0366137, -3.8026707, -2.4463816, -2.3173566, -2.3976536, -1.515575,
                    -1.4427915,
                ],
                vec![
                    -2.0366137, -1.3865724, -1.4362351, -2.6458535, -1.4760929, -1.3964883,
                ],
                vec![-2.2742443, -1.8262191, -1.117558, -1.5946783, -1.3660069],
                vec![-2.372079, -3.445497, -1.0184551],
                vec![
                    -2.372079, -3.445497, -2.194632, -2.2585943, -1.5582246, -1.1568365,
                ],
                vec![
                    -2.5052693, -2.7325435, -1.3402195, -3.3778176, -1.6803422, -1.5027089,
                    -2.5718775,
                ],
            ],
        ),
        (
            1.0,
            4,
            vec![
                vec![2],
                vec![3, 2],
                vec![3, 8, 2],
                vec![3, 5, 10, 3, 2],
                vec![2],
                vec![3, 2],
            ],
            vec![
                vec![-0.8967184],
                vec![-1.4503996, -1.1788139],
                vec![-1.4503996, -0.92313725, -1.4622464],
                vec![-1.5534232, -1.8218751, -1.6526161, -1.3370887, -0.9538778],
                vec![-0.85051906],
                vec![-1.5534232, -1.0843706],
            ],
        ),
    ];
    for (cfg, pins) in [
        (tiny(ModelKind::Fc, RnnKind::Gru, 1), fc),
        (tiny(ModelKind::Transformer, RnnKind::Gru, 2), transformer),
    ] {
        let m = Captioner::new(&cfg, &Device::Cpu, 15).unwrap();
        let x = inputs(&cfg, 2, 11);
        for (temperature, top_k, tokens, logprobs) in pins {
            let d = m
                .sample(&x, &opts(3, temperature, top_k), &mut CaprlRng::new(21))
                .unwrap();
            let case = format!("{:?} T = {temperature} top_k = {top_k}", cfg.model.kind);
            assert_eq!(d.tokens, tokens, "{case}");
            for (got, want) in d.logprobs.iter().flatten().zip(logprobs.iter().flatten()) {
                // Printed to the last digit; the margin only absorbs another CPU's rounding.
                assert!((got - want).abs() <= 1e-6, "{case}: {got} vs {want}");
            }
        }
    }
}

#[test]
fn top_p_near_zero_keeps_only_the_likeliest_word_as_greedy_does() {
    for cfg in configs() {
        let m = Captioner::new(&cfg, &Device::Cpu, 16).unwrap();
        let x = inputs(&cfg, 4, 12);
        let g = m.greedy(&x, cfg.max_len).unwrap();
        let nucleus = SampleOptions {
            sampling: Sampling {
                top_p: 1e-6,
                ..Sampling::default()
            },
            ..opts(2, 1.0, 0)
        };
        let s = m.sample(&x, &nucleus, &mut CaprlRng::new(6)).unwrap();
        for i in 0..4 {
            assert_eq!(
                s.tokens[2 * i],
                g.tokens[i],
                "{:?} input {i}",
                cfg.model.kind
            );
            assert_eq!(
                s.tokens[2 * i + 1],
                g.tokens[i],
                "{:?} input {i}",
                cfg.model.kind
            );
        }
        // A nucleus of one word has μ = 1.
        assert!(s.logprobs.iter().flatten().all(|&l| l == 0.0));
    }
}

/// Sampled tokens and log μ stay within the nucleus: every token's log-prob is at least its
/// log π at T = 1 (renormalising over fewer words only raises it) and at most 0.
#[test]
fn nucleus_log_probs_are_renormalised_log_probs() {
    let cfg = tiny(ModelKind::Att, RnnKind::Gru, 1);
    let m = Captioner::new(&cfg, &Device::Cpu, 17).unwrap();
    let x = inputs(&cfg, 3, 13);
    let nucleus = SampleOptions {
        sampling: Sampling {
            top_p: 0.6,
            ..Sampling::default()
        },
        ..opts(4, 1.0, 0)
    };
    let s = m.sample(&x, &nucleus, &mut CaprlRng::new(8)).unwrap();
    let xs = x.repeat_each(4).unwrap();
    let t = batch_tokens(&s.tokens, &Device::Cpu).unwrap();
    let (tf, _) = m.token_logprobs(&xs, &t, None).unwrap();
    let tf = tf.to_vec2::<f32>().unwrap();
    let mut raised = 0;
    for (lps, tf) in s.logprobs.iter().zip(&tf) {
        for (&mu, &pi) in lps.iter().zip(tf) {
            assert!(mu <= 0.0 && mu >= pi - 1e-5, "log μ {mu} vs log π {pi}");
            if mu > pi + 1e-3 {
                raised += 1;
            }
        }
    }
    assert!(
        raised > 0,
        "the nucleus never truncated anything: p = 0.6 is not tested"
    );
}

fn beam_opts(width: usize, groups: usize, diversity_lambda: f32) -> BeamOptions {
    BeamOptions {
        width,
        max_len: 7,
        length_norm: false,
        block_trigrams: false,
        groups,
        diversity_lambda,
        bad_endings: BadEndings::none(),
    }
}

fn tokens_of(hyps: &[Hypothesis]) -> Vec<Vec<u32>> {
    hyps.iter().map(|h| h.tokens.clone()).collect()
}

/// Diverse beam search without diversity is `G` copies of beam search of width `b / G`, and
/// one group is beam search whatever λ: the groups only differ through the penalty.
#[test]
fn diverse_beam_without_a_penalty_is_beam_search_per_group() {
    for cfg in configs() {
        let m = Captioner::new(&cfg, &Device::Cpu, 18).unwrap();
        let x = inputs(&cfg, 3, 14);
        for (length_norm, block_trigrams) in [(false, false), (true, true)] {
            let with = |width, groups, lambda| BeamOptions {
                length_norm,
                block_trigrams,
                ..beam_opts(width, groups, lambda)
            };
            let plain = m.beam(&x, &with(2, 1, 0.0)).unwrap();
            assert_eq!(m.beam(&x, &with(2, 1, 3.0)).unwrap(), plain);
            let grouped = m.beam(&x, &with(6, 3, 0.0)).unwrap();
            for (i, (hyps, one)) in grouped.iter().zip(&plain).enumerate() {
                let mut want: Vec<Hypothesis> = one
                    .iter()
                    .flat_map(|h| std::iter::repeat_n(h.clone(), 3))
                    .collect();
                want.sort_by(|a, b| b.score.total_cmp(&a.score));
                // The same words; log-probs up to rounding (the graph ops of other devices
                // compute a batch of 6 rows and one of 2 in different orders).
                assert_eq!(
                    tokens_of(hyps),
                    tokens_of(&want),
                    "{:?} input {i}",
                    cfg.model.kind
                );
                for (h, w) in hyps.iter().zip(&want) {
                    let close = |a: &[f32], b: &[f32]| {
                        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
                    };
                    assert!(
                        close(&h.logprobs, &w.logprobs) && (h.score - w.score).abs() < 1e-5,
                        "{:?} input {i}: {h:?} vs {w:?}",
                        cfg.model.kind
                    );
                }
            }
        }
    }
}

/// With one beam per group and a penalty larger than any log-prob gap, each group must start
/// with a word no earlier group chose: the groups' captions all begin differently, where
/// without the penalty they are one caption repeated. Hypotheses keep their unpenalised
/// `log p` and come best first by it.
#[test]
fn diversity_penalty_makes_groups_start_with_different_words() {
    for cfg in configs() {
        let m = Captioner::new(&cfg, &Device::Cpu, 19).unwrap();
        let x = inputs(&cfg, 4, 15);
        let firsts = |lambda| -> Vec<usize> {
            let beams = m.beam(&x, &beam_opts(4, 4, lambda)).unwrap();
            beams
                .iter()
                .map(|hyps| {
                    assert_eq!(hyps.len(), 4);
                    for w in hyps.windows(2) {
                        assert!(w[0].score >= w[1].score, "best first by score");
                    }
                    for h in hyps {
                        let sum: f32 = h.logprobs.iter().sum();
                        assert!((h.logp - sum).abs() < 1e-4);
                        assert_eq!(h.score, h.logp, "score without the penalty");
                    }
                    let mut first: Vec<u32> = hyps.iter().map(|h| h.tokens[0]).collect();
                    first.sort_unstable();
                    first.dedup();
                    first.len()
                })
                .collect()
        };
        assert_eq!(firsts(0.0), vec![1; 4], "{:?}", cfg.model.kind);
        assert_eq!(firsts(100.0), vec![4; 4], "{:?}", cfg.model.kind);
    }
}

#[test]
fn beam_groups_that_do_not_divide_the_width_are_refused_naming_both_keys() {
    let cfg = tiny(ModelKind::Fc, RnnKind::Gru, 1);
    let m = Captioner::new(&cfg, &Device::Cpu, 20).unwrap();
    let err = m
        .beam(&inputs(&cfg, 1, 0), &beam_opts(3, 2, 0.5))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("decode.beam = 3") && err.contains("decode.beam_groups = 2"),
        "{err}"
    );
}

/// A model that ends captions often: EOS's output bias raised, so that decoding ends on many
/// different words and banning some of them has something to forbid.
fn eos_prone_model(cfg: &CaptionerConfig, seed: u64) -> Captioner {
    let m = Captioner::new(cfg, &Device::Cpu, seed).unwrap();
    {
        let vars = m.varmap().data().lock().unwrap();
        let mut bias = vec![0f32; cfg.vocab_size];
        bias[EOS as usize] = 1.5;
        let bias = caprl_model::model::Tensor::new(bias.as_slice(), &Device::Cpu).unwrap();
        vars["logit.bias"].set(&bias).unwrap();
    }
    Captioner::from_safetensors(&m.to_safetensors().unwrap(), cfg, &Device::Cpu).unwrap()
}

/// The word before EOS of every caption that ends with EOS after a word.
fn endings(captions: &[Vec<u32>]) -> Vec<u32> {
    captions
        .iter()
        .filter(|t| t.len() >= 2 && t.last() == Some(&EOS))
        .map(|t| t[t.len() - 2])
        .collect()
}

/// For greedy, sampled and beam captions: the words they end on when left alone are banned,
/// and then no caption ends on one of them with EOS (one cut at the length limit may). The
/// control: each kind of decode ended on a banned word somewhere before (greedy captions of
/// these tiny models end with EOS after a word only for the Transformer).
#[test]
fn removed_bad_endings_never_end_a_caption() {
    const KINDS: [&str; 3] = ["greedy", "sample", "beam"];
    let mut tested = [0usize; 3];
    for cfg in configs() {
        let m = eos_prone_model(&cfg, 23);
        let x = inputs(&cfg, 6, 16);
        let decode = |bad: &BadEndings| -> [Vec<Vec<u32>>; 3] {
            let greedy = m
                .decoder()
                .unwrap()
                .greedy_avoiding(&x, cfg.max_len, bad)
                .unwrap()
                .tokens;
            let sampling = SampleOptions {
                bad_endings: bad.clone(),
                ..opts(4, 1.0, 0)
            };
            let sampled = m
                .sample(&x, &sampling, &mut CaprlRng::new(9))
                .unwrap()
                .tokens;
            let beams = BeamOptions {
                bad_endings: bad.clone(),
                ..beam_opts(4, 2, 0.5)
            };
            let beam = m
                .beam(&x, &beams)
                .unwrap()
                .iter()
                .flat_map(|h| tokens_of(h))
                .collect();
            [greedy, sampled, beam]
        };
        let free = decode(&BadEndings::none());
        let bad = BadEndings::from_ids(free.iter().flat_map(|c| endings(c)));
        let held = decode(&bad);
        for (k, kind) in KINDS.iter().enumerate() {
            tested[k] += endings(&free[k]).len();
            for w in endings(&held[k]) {
                assert!(
                    !bad.forbids_eos_after(Some(w)),
                    "{:?} {kind}: a caption ends on banned word {w}: {:?}",
                    cfg.model.kind,
                    held[k]
                );
            }
        }
    }
    for (kind, n) in KINDS.iter().zip(tested) {
        assert!(
            n > 0,
            "{kind}: no caption ended with EOS after a word, so nothing is tested"
        );
    }
}

/// With bad endings removed, a sampled token's log μ is under the distribution without EOS
/// after a banned word: `log π(w) − log(1 − π(EOS))` there, `log π(w)` elsewhere (T = 1).
#[test]
fn sampled_log_probs_without_bad_endings_are_renormalised_without_eos() {
    let cfg = tiny(ModelKind::Att, RnnKind::Gru, 1);
    let m = eos_prone_model(&cfg, 22);
    let x = inputs(&cfg, 3, 17);
    let bad = BadEndings::from_ids([4, 5, 6, 7]);
    let sampling = SampleOptions {
        bad_endings: bad.clone(),
        ..opts(4, 1.0, 0)
    };
    let s = m.sample(&x, &sampling, &mut CaprlRng::new(10)).unwrap();
    let xs = x.repeat_each(4).unwrap();
    let t = batch_tokens(&s.tokens, &Device::Cpu).unwrap();
    let full = m
        .teacher_forced(&xs, &t, None)
        .unwrap()
        .logprobs_full
        .to_vec3::<f32>()
        .unwrap();
    let mut renormalised = 0;
    for (r, (toks, lps)) in s.tokens.iter().zip(&s.logprobs).enumerate() {
        for (i, (&w, &mu)) in toks.iter().zip(lps).enumerate() {
            let pi = full[r][i][w as usize] as f64;
            let want = if i > 0 && bad.forbids_eos_after(Some(toks[i - 1])) {
                renormalised += 1;
                assert_ne!(w, EOS, "EOS after a banned word");
                pi - (1.0 - (full[r][i][EOS as usize] as f64).exp()).ln()
            } else {
                pi
            };
            assert!(
                (mu as f64 - want).abs() < 1e-4,
                "row {r} step {i}: {mu} vs {want}"
            );
        }
    }
    assert!(renormalised > 0, "no token followed a banned word");
}
