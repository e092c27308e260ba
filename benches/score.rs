//! Scoring speed: CIDEr-D rewards (prepared references, one sample batch)
//! and the full evaluation (BLEU, ROUGE-L, CIDEr-D) of a 5,000 × 5 set.
//!
//! With `CAPRL_SCORE_SET=FILE` (written by `scripts/score/bench.py`) the
//! bench also scores that file once on one thread and on all threads and
//! prints captions/s, for the comparison with pycocoevalcap.

use std::time::Instant;

use caprl_score::{
    cider_corpus_parallel, load_cands, load_refs, score_captions, CiderD, DocFreq, Interner,
};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// The allocator the `caprl` binary runs with, so that the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bench(c: &mut Criterion) {
    let (refs, cands) = caprl_score::bench_set::synthetic_captions(5_000, 5);
    let scorer = CiderD::new(DocFreq::from_refs(&refs));
    let prepared: Vec<_> = refs.iter().map(|r| scorer.prepare(r)).collect();
    let prepared_refs: Vec<_> = prepared.iter().collect();

    let mut g = c.benchmark_group("cider_d_5000x5");
    g.throughput(Throughput::Elements(cands.len() as u64));
    g.bench_function("score_batch_1_thread", |b| {
        b.iter(|| scorer.score_batch(&prepared_refs, &cands, false))
    });
    g.bench_function("score_batch_all_threads", |b| {
        b.iter(|| scorer.score_batch(&prepared_refs, &cands, true))
    });
    g.bench_function("prepare_refs", |b| {
        b.iter(|| refs.iter().map(|r| scorer.prepare(r)).collect::<Vec<_>>())
    });
    g.bench_function("cider_corpus_1_thread", |b| {
        b.iter(|| cider_corpus_parallel(&refs, &cands, false))
    });
    g.bench_function("cider_corpus_all_threads", |b| {
        b.iter(|| cider_corpus_parallel(&refs, &cands, true))
    });
    g.finish();

    if let Ok(path) = std::env::var("CAPRL_SCORE_SET") {
        compare(std::path::Path::new(&path));
    }
}

/// Captions/s of the best of 10 runs after one warm-up (the machine may be
/// shared; `bench.py` takes pycocoevalcap's best run too).
fn rate(n: usize, f: impl Fn()) -> f64 {
    f();
    let best = (0..10)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    n as f64 / best
}

/// Scores a REFS/CANDS pair the way `caprl score` does and prints captions/s.
fn compare(set: &std::path::Path) {
    let refs_path = set.join("refs.json");
    let refs = load_refs(&refs_path).expect("refs.json");
    let cands = load_cands(&set.join("cands.json")).expect("cands.json");
    let n = cands.len();
    let mut interner = Interner::new();
    let ref_ids: Vec<Vec<Vec<u32>>> = cands
        .iter()
        .map(|(id, _)| {
            refs[id]
                .iter()
                .map(|r| interner.intern_sentence(r))
                .collect()
        })
        .collect();
    let cand_ids: Vec<Vec<u32>> = cands
        .iter()
        .map(|(_, c)| interner.intern_sentence(c))
        .collect();
    // End to end like pycocoevalcap's Cider().compute_score: df over the
    // set's references, then every image.
    let cider_only = |parallel: bool| {
        cider_corpus_parallel(&ref_ids, &cand_ids, parallel);
    };
    let c1 = rate(n, || cider_only(false));
    let call = rate(n, || cider_only(true));
    let full = |parallel| {
        score_captions(&refs_path, &refs, &cands, None, parallel).expect("score_captions");
    };
    let f1 = rate(n, || full(false));
    let fall = rate(n, || full(true));
    println!(
        "CAPRL cider_d_1core={c1:.0} cider_d_allcores={call:.0} all_metrics_1core={f1:.0} all_metrics_allcores={fall:.0} threads={}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
