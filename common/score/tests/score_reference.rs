//! The metrics equal pycocoevalcap (and ruotianluo/cider's CiderD with a
//! precomputed df, with and without self-critical.pytorch's `<eos>`) within 1e-6 on the
//! committed fixtures made by `scripts/score/make_fixtures.py` and
//! `make_cider_eos_fixture.py`. Their text was tokenised by
//! pycocoevalcap's Java PTBTokenizer, so whitespace splitting here sees the
//! same tokens the reference scorers saw.

use caprl_score::{
    bleu_corpus, cider_corpus, div_n, mbleu4, refs_with_eos, rouge_l_corpus, with_eos, CiderD,
    DocFreq, Interner,
};
use serde_json::Value;

const TOL: f64 = 1e-6;

struct Fixture {
    refs: Vec<Vec<Vec<u32>>>,
    cands: Vec<Vec<u32>>,
    train_refs: Vec<Vec<Vec<u32>>>,
    json: Value,
    interner: Interner,
}

fn load() -> Fixture {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/coco_reference.json"
    );
    let text = std::fs::read_to_string(path).expect("fixture present");
    let json: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let mut interner = Interner::new();
    let mut sentences = |v: &Value| -> Vec<Vec<u32>> {
        v.as_array()
            .expect("list of sentences")
            .iter()
            .map(|s| interner.intern_sentence(s.as_str().expect("string")))
            .collect()
    };
    let images = json["images"].as_array().expect("images");
    let refs: Vec<_> = images.iter().map(|im| sentences(&im["refs"])).collect();
    let train_refs: Vec<_> = json["train_refs"]
        .as_array()
        .expect("train_refs")
        .iter()
        .map(&mut sentences)
        .collect();
    let cands = images
        .iter()
        .map(|im| interner.intern_sentence(im["cand"].as_str().expect("cand")))
        .collect();
    Fixture {
        refs,
        cands,
        train_refs,
        json,
        interner,
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().expect("number")
}

fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= TOL,
        "{what}: got {got}, pycocoevalcap {want}"
    );
}

/// Checks metric `what` of each fixture image, `got(i)`, against the reference's `want(image)`.
fn close_per_image(
    fx: &Fixture,
    what: &str,
    got: impl Fn(usize) -> f64,
    want: impl Fn(&Value) -> f64,
) {
    let images = fx.json["images"].as_array().expect("images");
    for (i, im) in images.iter().enumerate() {
        close(&format!("{what} of {}", im["id"]), got(i), want(im));
    }
}

#[test]
fn fixture_covers_the_edge_cases() {
    let fx = load();
    assert!(fx.refs.len() >= 500);
    assert!(fx.refs.iter().filter(|r| r.len() == 5).count() >= 480);
    assert!(fx.cands.iter().any(Vec::is_empty), "empty caption");
    assert!(fx.cands.iter().any(|c| c.len() == 1), "single word");
    assert!(
        fx.cands
            .iter()
            .any(|c| c.len() > 1 && c.iter().all(|&t| t == c[0])),
        "repeated word"
    );
    assert!(
        fx.cands
            .iter()
            .zip(&fx.refs)
            .any(|(c, r)| r.iter().all(|s| s.len() < c.len())),
        "longer than all refs"
    );
    assert!(
        fx.interner.get("brûlée").is_some() || fx.interner.get("日本").is_some(),
        "unicode"
    );
    assert!(fx.interner.get("'s").is_some(), "PTB split of 's");
}

#[test]
fn cider_d_matches_pycocoevalcap_per_image_and_corpus() {
    let fx = load();
    let (corpus, per_image) = cider_corpus(&fx.refs, &fx.cands);
    close("corpus CIDEr-D", corpus, f(&fx.json["corpus"]["cider_d"]));
    close_per_image(&fx, "CIDEr-D", |i| per_image[i], |im| f(&im["cider_d"]));
}

#[test]
fn cider_d_with_training_df_matches_self_critical_scorer() {
    let fx = load();
    let scorer = CiderD::new(DocFreq::from_refs(&fx.train_refs));
    assert_eq!(scorer.num_images(), fx.train_refs.len());
    let prepared: Vec<_> = fx.refs.iter().map(|r| scorer.prepare(r)).collect();
    let refs: Vec<_> = prepared.iter().collect();
    let serial = scorer.score_batch(&refs, &fx.cands, false);
    let parallel = scorer.score_batch(&refs, &fx.cands, true);
    assert_eq!(serial, parallel, "parallel scoring changes nothing");
    close_per_image(
        &fx,
        "CIDEr-D (train df)",
        |i| serial[i],
        |im| f(&im["cider_d_train_df"]),
    );
    let mean = serial.iter().sum::<f64>() / serial.len() as f64;
    close(
        "corpus CIDEr-D (train df)",
        mean,
        f(&fx.json["corpus"]["cider_d_train_df"]),
    );
}

#[test]
fn cider_d_with_eos_matches_self_critical_scorer() {
    let fx = load();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cider_eos_reference.json"
    );
    let text = std::fs::read_to_string(path).expect("fixture present");
    let eos: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let images = eos["images"].as_array().expect("images");
    assert_eq!(images.len(), fx.cands.len());
    let finished: Vec<bool> = images
        .iter()
        .map(|im| im["finished"].as_bool().expect("finished"))
        .collect();
    assert!(finished.iter().any(|&f| f) && finished.iter().any(|&f| !f));

    let scorer = CiderD::new(DocFreq::from_refs(&refs_with_eos(&fx.train_refs)));
    let refs = refs_with_eos(&fx.refs);
    let cands: Vec<Vec<u32>> = fx
        .cands
        .iter()
        .zip(&finished)
        .map(|(c, &f)| with_eos(c, f))
        .collect();
    let mut sum = 0.0;
    for (i, im) in images.iter().enumerate() {
        assert_eq!(im["id"], fx.json["images"][i]["id"], "same images in order");
        let got = scorer.score(&scorer.prepare(&refs[i]), &cands[i]);
        close(
            &format!("CIDEr-D with <eos> of {}", im["id"]),
            got,
            f(&im["cider_d_eos"]),
        );
        sum += got;
    }
    close(
        "corpus CIDEr-D with <eos>",
        sum / images.len() as f64,
        f(&eos["corpus"]["cider_d_eos"]),
    );
}

#[test]
fn bleu_matches_pycocoevalcap_per_image_and_corpus() {
    let fx = load();
    let (corpus, per_image) = bleu_corpus(&fx.refs, &fx.cands);
    for (n, &got) in corpus.iter().enumerate() {
        close(
            &format!("corpus BLEU-{}", n + 1),
            got,
            f(&fx.json["corpus"]["bleu"][n]),
        );
    }
    for n in 0..4 {
        let what = format!("BLEU-{}", n + 1);
        close_per_image(&fx, &what, |i| per_image[i][n], |im| f(&im["bleu"][n]));
    }
}

#[test]
fn rouge_l_matches_pycocoevalcap_per_image_and_corpus() {
    let fx = load();
    let (corpus, per_image) = rouge_l_corpus(&fx.refs, &fx.cands);
    close("corpus ROUGE-L", corpus, f(&fx.json["corpus"]["rouge_l"]));
    close_per_image(&fx, "ROUGE-L", |i| per_image[i], |im| f(&im["rouge_l"]));
}

#[test]
fn mbleu4_and_div_match_reference_sets() {
    let mut fx = load();
    for set in fx.json["diversity_sets"].as_array().expect("sets") {
        let caps: Vec<Vec<u32>> = set["captions"]
            .as_array()
            .expect("captions")
            .iter()
            .map(|c| fx.interner.intern_sentence(c.as_str().expect("caption")))
            .collect();
        close("mBLEU-4", mbleu4(&caps), f(&set["mbleu4"]));
        close("Div-1", div_n(&caps, 1), f(&set["div1"]));
        close("Div-2", div_n(&caps, 2), f(&set["div2"]));
    }
}
