//! The host steps against the graph steps they replace.

use super::super::decode::RnnSteps;
use super::super::RnnCaptioner;
use crate::model::{
    BeamOptions, CaprlRng, CaptionerConfig, Decoder, Device, Inputs, ModelKind, RnnKind,
    SampleOptions,
};
use caprl_wire::Sampling;

fn model(rnn: RnnKind, layers: usize) -> (RnnCaptioner, Inputs) {
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, 30, 12, None);
    cfg.model.rnn = rnn;
    cfg.model.layers = layers;
    cfg.model.embed = 16;
    cfg.model.hidden = 64;
    cfg.max_len = 6;
    let m = RnnCaptioner::new(
        &cfg,
        &Device::Cpu,
        &crate::model::params::ParamOrigin::Seed(5),
    )
    .unwrap();
    // 100 images: the gate products of a step are large enough to run on several threads.
    let b = 100;
    let fc: Vec<f32> = (0..b * 12)
        .map(|i| ((i * 7919 % 23) as f32 - 11.0) / 4.0)
        .collect();
    let x = Inputs::from_host(&fc, None, b, &cfg, &Device::Cpu).unwrap();
    (m, x)
}

/// A decoder of `m`'s weights, on host arrays or (`host` false) graph ops, and the number
/// of blocks its host step splits the batch into.
fn decoder(m: &RnnCaptioner, host: bool) -> (Decoder, Option<usize>) {
    decoder_with(m, host, true)
}

/// [`decoder`] with or without the word table.
fn decoder_with(m: &RnnCaptioner, host: bool, table: bool) -> (Decoder, Option<usize>) {
    let mut steps = RnnSteps::with_word_table(m, table).unwrap();
    if !host {
        steps.host = None;
    }
    let blocks = steps.host.as_ref().map(|h| h.blocks());
    let decoder = Decoder {
        cfg: m.base.cfg.clone(),
        device: m.base.device.clone(),
        steps: Box::new(steps),
    };
    (decoder, blocks)
}

/// Everything a decoder gives for `x`.
type Outputs = (
    crate::model::Decoded,
    crate::model::Decoded,
    crate::model::Decoded,
    Vec<Vec<crate::model::Hypothesis>>,
);

fn decode_all(d: &Decoder, x: &Inputs) -> Outputs {
    let opts = SampleOptions {
        n_per_input: 3,
        sampling: Sampling {
            temperature: 0.9,
            top_k: 0,
            top_p: 1.0,
        },
        bad_endings: crate::model::BadEndings::none(),
        max_len: 6,
    };
    let prefixes: Vec<Vec<u32>> = (0..100).map(|i| vec![4 + (i % 7) as u32]).collect();
    let beam = BeamOptions::plain(3, 6);
    (
        d.greedy(x, 6).unwrap(),
        d.sample(x, &opts, &mut CaprlRng::new(1)).unwrap(),
        d.complete_from_prefix(x, &prefixes, &opts, &mut CaprlRng::new(2))
            .unwrap(),
        d.beam(x, &beam).unwrap(),
    )
}

/// The same tokens, and log-probs within rounding (the host logits sum in another order).
fn assert_same_decodes(got: &Outputs, want: &Outputs, what: &str) {
    let close = |a: &[f32], b: &[f32]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5)
    };
    let decoded = |g: &crate::model::Decoded, w: &crate::model::Decoded| {
        g.tokens == w.tokens
            && g.logprobs.len() == w.logprobs.len()
            && g.logprobs.iter().zip(&w.logprobs).all(|(a, b)| close(a, b))
    };
    assert!(decoded(&got.0, &want.0), "{what}: greedy");
    assert!(decoded(&got.1, &want.1), "{what}: samples");
    assert!(decoded(&got.2, &want.2), "{what}: completions");
    let hyps = |g: &[crate::model::Hypothesis], w: &[crate::model::Hypothesis]| {
        g.len() == w.len()
            && g.iter().zip(w).all(|(a, b)| {
                a.tokens == b.tokens
                    && close(&a.logprobs, &b.logprobs)
                    && (a.logp - b.logp).abs() <= 1e-4
            })
    };
    let beams = got.3.len() == want.3.len() && got.3.iter().zip(&want.3).all(|(g, w)| hyps(g, w));
    assert!(beams, "{what}: beams");
}

/// The host step and the graph step give the same tokens and log-probs within rounding, for
/// both cells, one and two layers, in one block and in three blocks on three threads; the
/// host steps give the same bits on any thread count.
#[test]
fn host_steps_give_the_graph_steps_tokens_and_log_probs() {
    for (rnn, layers) in [
        (RnnKind::Gru, 1),
        (RnnKind::Lstm, 1),
        (RnnKind::Gru, 2),
        (RnnKind::Lstm, 2),
    ] {
        let (m, x) = model(rnn, layers);
        let (graph, _) = decoder(&m, false);
        let expected = decode_all(&graph, &x);
        let mut first = None;
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let (host, blocks) = pool.install(|| decoder(&m, true));
            assert_eq!(blocks, Some(threads), "{rnn:?} x {layers}");
            let got = pool.install(|| decode_all(&host, &x));
            let what = format!("{rnn:?} x {layers} on {threads} threads");
            assert_same_decodes(&got, &expected, &what);
            assert!(*first.get_or_insert_with(|| got.clone()) == got, "{what}");
        }
    }
}

/// Without a word table (large vocabularies) the word term's rows are made as steps feed
/// their words (on host arrays; graph steps make them at each step), with the table's bits:
/// on each path the same tokens and log-probs as with the table, on one and three threads.
#[test]
fn word_rows_made_on_demand_give_the_bits_of_the_word_table() {
    for (rnn, layers) in [(RnnKind::Gru, 1), (RnnKind::Lstm, 2)] {
        let (m, x) = model(rnn, layers);
        for host in [false, true] {
            // With the word table, on the same path.
            let expected = decode_all(&decoder(&m, host).0, &x);
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let (d, _) = pool.install(|| decoder_with(&m, host, false));
                let got = pool.install(|| decode_all(&d, &x));
                assert!(
                    got == expected,
                    "{rnn:?} x {layers}, host {host}, {threads} threads"
                );
            }
        }
    }
}
