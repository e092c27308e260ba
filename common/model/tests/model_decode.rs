//! Decoders agree with each other and with teacher forcing: beam, greedy, sampling, lookahead,
//! dropout and threads. (Nucleus sampling, diverse beams and bad endings: `model_decode_options.rs`.)

#[path = "support/decode.rs"]
mod decode;
#[path = "support/threads.rs"]
mod threads;

use caprl_model::model::{
    batch_tokens, BadEndings, BeamOptions, CaprlRng, Captioner, CaptionerConfig, Decoded, Device,
    ModelKind, RnnKind, EOS,
};
use decode::{configs, inputs, opts, sample_seeded, teacher_logp, tiny};
use threads::on_threads;

#[test]
fn beam_of_width_one_equals_greedy() {
    for cfg in configs() {
        let m = Captioner::new(&cfg, &Device::Cpu, 3).unwrap();
        let x = inputs(&cfg, 5, 0);
        let g = m.greedy(&x, cfg.max_len).unwrap();
        let b = m.beam(&x, &BeamOptions::plain(1, cfg.max_len)).unwrap();
        for (i, hyps) in b.iter().enumerate() {
            assert_eq!(hyps[0].tokens, g.tokens[i], "input {i}");
        }
    }
}

#[test]
fn beam_logp_equals_teacher_forced_logp() {
    for cfg in configs() {
        let m = Captioner::new(&cfg, &Device::Cpu, 4).unwrap();
        let x = inputs(&cfg, 3, 1);
        for (length_norm, block_trigrams) in [(false, false), (true, true)] {
            let beams = m
                .beam(
                    &x,
                    &BeamOptions {
                        width: 4,
                        max_len: cfg.max_len,
                        length_norm,
                        block_trigrams,
                        groups: 1,
                        diversity_lambda: 0.0,
                        bad_endings: BadEndings::none(),
                    },
                )
                .unwrap();
            for (i, hyps) in beams.iter().enumerate() {
                assert_eq!(hyps.len(), 4);
                let seqs: Vec<Vec<u32>> = hyps.iter().map(|h| h.tokens.clone()).collect();
                let xi = x.select_rows(&vec![i; hyps.len()]).unwrap();
                let tf = teacher_logp(&m, &xi, &seqs);
                for (h, lp) in hyps.iter().zip(tf) {
                    assert!(
                        (h.logp - lp).abs() < 1e-4,
                        "beam {} vs teacher {lp}",
                        h.logp
                    );
                    let sum: f32 = h.logprobs.iter().sum();
                    assert!((h.logp - sum).abs() < 1e-4);
                }
                for w in hyps.windows(2) {
                    assert!(w[0].score >= w[1].score, "hypotheses sorted best first");
                }
            }
        }
    }
}

fn repeats_a_trigram(tokens: &[u32]) -> bool {
    let tri: Vec<&[u32]> = tokens.windows(3).collect();
    tri.iter().enumerate().any(|(a, t)| tri[..a].contains(t))
}

/// A model whose likeliest caption repeats itself: the output layer's weights scaled to 1/20 (the
/// next word hardly depends on the state) and its bias favouring words 5 and 6 over the rest and
/// ruling out EOS, so that the best captions run to the length limit on those two words.
fn repetitive_model(cfg: &CaptionerConfig) -> Captioner {
    let m = Captioner::new(cfg, &Device::Cpu, 5).unwrap();
    {
        let vars = m.varmap().data().lock().unwrap();
        let w = &vars["logit.weight"];
        w.set(&(w.as_tensor() * 0.05).unwrap()).unwrap();
        let mut bias = vec![0f32; cfg.vocab_size];
        bias[EOS as usize] = -20.0;
        bias[5] = 4.0;
        bias[6] = 3.0;
        let bias = caprl_model::model::Tensor::new(bias.as_slice(), &Device::Cpu).unwrap();
        vars["logit.bias"].set(&bias).unwrap();
    }
    Captioner::from_safetensors(&m.to_safetensors().unwrap(), cfg, &Device::Cpu).unwrap()
}

#[test]
fn trigrams_repeat_without_blocking_and_never_with_it() {
    let cfg = tiny(ModelKind::Fc, RnnKind::Gru, 1);
    let m = repetitive_model(&cfg);
    let x = inputs(&cfg, 4, 2);
    let beam = |block_trigrams| {
        m.beam(
            &x,
            &BeamOptions {
                width: 3,
                max_len: 7,
                length_norm: false,
                block_trigrams,
                groups: 1,
                diversity_lambda: 0.0,
                bad_endings: BadEndings::none(),
            },
        )
        .unwrap()
    };
    // The control: left alone, the best caption of every input repeats a trigram.
    for (i, hyps) in beam(false).iter().enumerate() {
        assert!(
            repeats_a_trigram(&hyps[0].tokens),
            "input {i}: no repeated trigram without blocking, so blocking is not tested: {:?}",
            hyps[0].tokens
        );
    }
    for (i, hyps) in beam(true).iter().enumerate() {
        assert_eq!(hyps.len(), 3, "input {i}");
        for h in hyps {
            assert!(
                !repeats_a_trigram(&h.tokens),
                "input {i}: repeated trigram with blocking in {:?}",
                h.tokens
            );
        }
        // Blocking picks other words; it does not end the caption early.
        assert_eq!(hyps[0].tokens.len(), 7, "input {i}: {:?}", hyps[0].tokens);
    }
}

/// Beam search keeps the `b` likeliest prefixes, so on these inputs it finds a caption at least
/// as likely as the greedy one (for beam search in general this is likely, not certain: the
/// greedy prefix can be displaced by `b` better ones that all end worse), and for some of them a
/// strictly likelier one: a beam search that only returned the greedy caption fails too.
#[test]
fn beam_finds_a_caption_at_least_as_likely_as_greedy() {
    let mut better = 0;
    let mut cases = 0;
    for cfg in configs() {
        for seed in [7, 8] {
            let m = Captioner::new(&cfg, &Device::Cpu, seed).unwrap();
            let x = inputs(&cfg, 6, 4);
            let greedy = m.greedy(&x, cfg.max_len).unwrap();
            let greedy_logp = teacher_logp(&m, &x, &greedy.tokens);
            for width in [2, 3, 5] {
                let beams = m.beam(&x, &BeamOptions::plain(width, cfg.max_len)).unwrap();
                let best: Vec<Vec<u32>> = beams.iter().map(|h| h[0].tokens.clone()).collect();
                let beam_logp = teacher_logp(&m, &x, &best);
                for i in 0..best.len() {
                    cases += 1;
                    assert!(
                        beam_logp[i] >= greedy_logp[i] - 1e-4,
                        "{:?} seed {seed} width {width} input {i}: beam {:?} has log p {}, \
                         greedy {:?} has {}",
                        cfg.model.kind,
                        best[i],
                        beam_logp[i],
                        greedy.tokens[i],
                        greedy_logp[i]
                    );
                    if beam_logp[i] > greedy_logp[i] + 1e-3 {
                        better += 1;
                    }
                }
            }
        }
    }
    eprintln!("beam likelier than greedy in {better} of {cases} cases");
    assert!(better > 0, "beam never beat greedy in {cases} cases");
}

#[test]
fn sampling_at_near_zero_temperature_equals_greedy() {
    for cfg in configs() {
        let m = Captioner::new(&cfg, &Device::Cpu, 6).unwrap();
        let x = inputs(&cfg, 4, 3);
        let g = m.greedy(&x, cfg.max_len).unwrap();
        let s = sample_seeded(&m, &x, &opts(2, 1e-5, 0), 1);
        for i in 0..4 {
            assert_eq!(s.tokens[2 * i], g.tokens[i]);
            assert_eq!(s.tokens[2 * i + 1], g.tokens[i]);
        }
    }
}

#[test]
fn sampling_is_reproducible_from_the_seed() {
    for cfg in configs() {
        let m = Captioner::new(&cfg, &Device::Cpu, 8).unwrap();
        let x = inputs(&cfg, 3, 4);
        let a = sample_seeded(&m, &x, &opts(5, 1.0, 0), 42);
        let b = sample_seeded(&m, &x, &opts(5, 1.0, 0), 42);
        let c = sample_seeded(&m, &x, &opts(5, 1.0, 0), 43);
        assert_eq!(a, b);
        assert_ne!(a.tokens, c.tokens);
        // The same row of a smaller batch gets the same sample (per-row streams).
        let first = sample_seeded(&m, &x.select_rows(&[0]).unwrap(), &opts(5, 1.0, 0), 42);
        assert_eq!(first.tokens[..], a.tokens[..5]);
    }
}

#[test]
fn sampled_logprobs_at_temperature_one_equal_teacher_forced() {
    let cfg = tiny(ModelKind::Att, RnnKind::Gru, 1);
    let m = Captioner::new(&cfg, &Device::Cpu, 9).unwrap();
    let x = inputs(&cfg, 2, 5);
    let s: Decoded = sample_seeded(&m, &x, &opts(3, 1.0, 0), 2);
    let tf = teacher_logp(&m, &x.repeat_each(3).unwrap(), &s.tokens);
    for (lps, t) in s.logprobs.iter().zip(tf) {
        let sum: f32 = lps.iter().sum();
        assert!((sum - t).abs() < 1e-4);
    }
    for toks in &s.tokens {
        assert!(toks.len() <= cfg.max_len + 1);
        let eos = toks.iter().position(|&w| w == EOS);
        assert!(eos.is_none() || eos == Some(toks.len() - 1));
        assert!(toks.iter().all(|&w| w >= 2), "PAD/BOS never emitted");
    }
}

#[test]
fn top_k_one_equals_greedy() {
    let cfg = tiny(ModelKind::Fc, RnnKind::Lstm, 1);
    let m = Captioner::new(&cfg, &Device::Cpu, 10).unwrap();
    let x = inputs(&cfg, 3, 6);
    let g = m.greedy(&x, cfg.max_len).unwrap();
    let s = sample_seeded(&m, &x, &opts(1, 1.0, 1), 3);
    assert_eq!(s.tokens, g.tokens);
    assert!(s.logprobs.iter().flatten().all(|&l| l == 0.0));
}

#[test]
fn completion_keeps_the_prefix_and_ended_prefixes_stay() {
    let cfg = tiny(ModelKind::Att, RnnKind::Lstm, 2);
    let m = Captioner::new(&cfg, &Device::Cpu, 11).unwrap();
    let x = inputs(&cfg, 3, 7);
    let prefixes = vec![vec![], vec![5, 6], vec![7, EOS]];
    let d = m
        .decoder()
        .unwrap()
        .complete_from_prefix(&x, &prefixes, &opts(2, 1.0, 0), &mut CaprlRng::new(4))
        .unwrap();
    assert_eq!(d.tokens.len(), 6);
    assert_eq!(&d.tokens[2][..2], &[5, 6]);
    assert_eq!(&d.tokens[3][..2], &[5, 6]);
    assert_eq!(d.tokens[4], vec![7, EOS]);
    assert_eq!(d.logprobs[4].len(), 2);
    // An empty prefix at near-zero temperature is greedy.
    let g = m
        .greedy(&x.select_rows(&[0]).unwrap(), cfg.max_len)
        .unwrap();
    let c = m
        .decoder()
        .unwrap()
        .complete_from_prefix(
            &x.select_rows(&[0]).unwrap(),
            &[vec![]],
            &opts(1, 1e-5, 0),
            &mut CaprlRng::new(5),
        )
        .unwrap();
    assert_eq!(c.tokens, g.tokens);
}

#[test]
fn teacher_forced_pass_exposes_hidden_states() {
    let cfg = tiny(ModelKind::Fc, RnnKind::Gru, 2);
    let m = Captioner::new(&cfg, &Device::Cpu, 12).unwrap();
    let x = inputs(&cfg, 2, 8);
    let seqs = batch_tokens(&[vec![4, 5, EOS], vec![6, EOS]], &Device::Cpu).unwrap();
    let tf = m.teacher_forced(&x, &seqs, None).unwrap();
    assert_eq!(tf.logprobs_full.dims(), &[2, 3, 12]);
    assert_eq!(tf.hidden.dims(), &[2, 3, 16]);
    let (_, mask) = m.token_logprobs(&x, &seqs, None).unwrap();
    assert_eq!(
        mask.to_vec2::<f32>().unwrap(),
        vec![vec![1.0, 1.0, 1.0], vec![1.0, 1.0, 0.0]]
    );
}

#[test]
fn dropout_is_reproducible_from_the_rng() {
    let cfg = tiny(ModelKind::Att, RnnKind::Gru, 2);
    let m = Captioner::new(&cfg, &Device::Cpu, 13).unwrap();
    let x = inputs(&cfg, 2, 9);
    let seqs = batch_tokens(&[vec![4, 5, EOS], vec![6, EOS]], &Device::Cpu).unwrap();
    let run = |seed| {
        let (lp, _) = m
            .token_logprobs(&x, &seqs, Some(&mut CaprlRng::new(seed)))
            .unwrap();
        lp.to_vec2::<f32>().unwrap()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
    let (eval, _) = m.token_logprobs(&x, &seqs, None).unwrap();
    assert_ne!(run(1), eval.to_vec2::<f32>().unwrap());
}

/// With dropout, the taken-token pass (its output mask applied inside its node, states read
/// time-major) drops the same units as the full pass from the same RNG: the same log-probs.
#[test]
fn token_logprobs_with_dropout_match_the_full_pass() {
    for (kind, rnn, layers) in [
        (ModelKind::Fc, RnnKind::Gru, 1),
        (ModelKind::Fc, RnnKind::Lstm, 2),
        (ModelKind::Att, RnnKind::Gru, 1),
    ] {
        let mut cfg = tiny(kind, rnn, layers);
        cfg.model.dropout = 0.4;
        let m = Captioner::new(&cfg, &Device::Cpu, 14).unwrap();
        let x = inputs(&cfg, 3, 10);
        let rows = vec![vec![4, 5, 6, EOS], vec![6, EOS], vec![7, 8, 9, 10]];
        let seqs = batch_tokens(&rows, &Device::Cpu).unwrap();
        let (lp, mask) = m
            .token_logprobs(&x, &seqs, Some(&mut CaprlRng::new(5)))
            .unwrap();
        let full = m
            .teacher_forced(&x, &seqs, Some(&mut CaprlRng::new(5)))
            .unwrap()
            .logprobs_full
            .gather(&seqs.unsqueeze(2).unwrap(), 2)
            .unwrap()
            .squeeze(2)
            .unwrap()
            .mul(&mask)
            .unwrap();
        let (a, b) = (lp.to_vec2::<f32>().unwrap(), full.to_vec2::<f32>().unwrap());
        for (ra, rb) in a.iter().zip(&b) {
            for (va, vb) in ra.iter().zip(rb) {
                assert!(
                    (va - vb).abs() < 1e-5,
                    "{kind:?} {rnn:?} x{layers}: {a:?} vs {b:?}"
                );
            }
        }
        let (eval, _) = m.token_logprobs(&x, &seqs, None).unwrap();
        assert_ne!(
            a,
            eval.to_vec2::<f32>().unwrap(),
            "{kind:?}: dropout had no effect"
        );
    }
}

/// Lookahead inference: λ = 1 is plain beam search, and with λ < 1 every hypothesis is scored
/// `λ·log p + (1 − λ)·v(state after its last token)`, `v` recomputed here by teacher forcing.
#[test]
fn lookahead_scores_mix_log_prob_and_value() {
    use caprl_model::model::{Lookahead, ValueHead};
    for cfg in configs() {
        let m = Captioner::new(&cfg, &Device::Cpu, 11).unwrap();
        let value = ValueHead::new(cfg.model.state_dim(), &Device::Cpu, 12).unwrap();
        let x = inputs(&cfg, 3, 4);
        let bo = BeamOptions::plain(3, cfg.max_len);
        let plain = m.beam(&x, &bo).unwrap();
        let lookahead = |lambda: f32| {
            let look = Lookahead {
                value: &value,
                lambda,
            };
            m.decoder().unwrap().beam_lookahead(&x, &bo, &look).unwrap()
        };
        assert_eq!(plain, lookahead(1.0));

        let lambda = 0.3f32;
        let mixed = lookahead(lambda);
        for (i, hyps) in mixed.iter().enumerate() {
            assert!(!hyps.is_empty());
            for h in hyps {
                // Teacher-force the hypothesis plus one token: the hidden state at its last
                // position is the state after reading the hypothesis' last token.
                let mut seq = h.tokens.clone();
                seq.push(EOS);
                let xi = x.select_rows(&[i]).unwrap();
                let t = batch_tokens(&[seq], &Device::Cpu).unwrap();
                let tf = m.teacher_forced(&xi, &t, None).unwrap();
                let hid = tf.hidden.get(0).unwrap().get(h.tokens.len()).unwrap();
                let v = value
                    .forward(&hid.unsqueeze(0).unwrap())
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()[0];
                let want = lambda * h.logp + (1.0 - lambda) * v;
                assert!(
                    (h.score - want).abs() < 1e-4,
                    "score {} vs λ·logp + (1−λ)·v = {want}",
                    h.score
                );
            }
            for w in hyps.windows(2) {
                assert!(w[0].score >= w[1].score, "hypotheses ranked by score");
            }
        }
    }
}

/// Sampled rows and beam rows spread over several threads give exactly what one thread gives
/// (each row draws from its own stream).
#[test]
fn decoding_on_several_threads_matches_one_thread() {
    let cfg = tiny(ModelKind::Fc, RnnKind::Gru, 1);
    let m = Captioner::new(&cfg, &Device::Cpu, 11).unwrap();
    // 280 images x 5 rows x 12 words: enough logits per step for the rows to be split.
    let x = inputs(&cfg, 280, 6);
    let prefixes: Vec<Vec<u32>> = (0..280).map(|i| vec![3 + (i % 5) as u32]).collect();
    let beam = BeamOptions::plain(5, 7);
    let run = |threads: usize| {
        on_threads(threads, || {
            let tempered = sample_seeded(&m, &x, &opts(5, 0.8, 0), 7);
            let top_k = sample_seeded(&m, &x, &opts(5, 1.0, 4), 8);
            let completed = m
                .decoder()
                .unwrap()
                .complete_from_prefix(&x, &prefixes, &opts(5, 1.0, 0), &mut CaprlRng::new(9))
                .unwrap();
            let beams = m.beam(&x, &beam).unwrap();
            (tempered, top_k, completed, beams)
        })
    };
    let one = run(1);
    assert_eq!(one.0.tokens.len(), 1400);
    assert_eq!(one, run(2));
    assert_eq!(one, run(3));
}
