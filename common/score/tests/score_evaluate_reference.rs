//! `score_captions` (the whole-corpus path on dense n-gram ids behind `caprl
//! score`) gives the pycocoevalcap numbers of the committed fixture within
//! 1e-6, in corpus-df mode and with a precomputed df table, serial and
//! parallel, and `cider_corpus_parallel` equals `cider_corpus`.

use caprl_score::{
    cider_corpus, cider_corpus_parallel, load_cands, load_refs, score_captions, DocFreq, Interner,
};
use serde_json::{json, Map, Value};

#[path = "support/fixture.rs"]
mod fixture;
use fixture::{image_cands, image_refs, load_fixture};

const TOL: f64 = 1e-6;

fn fixture() -> Value {
    load_fixture("coco_reference.json")
}

fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= TOL,
        "{what}: got {got}, pycocoevalcap {want}"
    );
}

fn f(v: &Value) -> f64 {
    v.as_f64().expect("number")
}

/// Writes the fixture as REFS / CANDS files and returns their paths.
fn write_set(dir: &tempfile::TempDir, fx: &Value) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut refs = Map::new();
    let mut cands = Vec::new();
    for im in fx["images"].as_array().expect("images") {
        let id = im["id"].as_str().expect("id");
        refs.insert(id.to_owned(), im["refs"].clone());
        cands.push(json!({"image_id": id, "caption": im["cand"]}));
    }
    let rp = dir.path().join("refs.json");
    let cp = dir.path().join("cands.json");
    std::fs::write(&rp, Value::Object(refs).to_string()).expect("write refs");
    std::fs::write(&cp, Value::Array(cands).to_string()).expect("write cands");
    (rp, cp)
}

#[test]
fn evaluate_matches_pycocoevalcap_serial_and_parallel() {
    let fx = fixture();
    let dir = tempfile::tempdir().expect("tempdir");
    let (rp, cp) = write_set(&dir, &fx);
    let refs = load_refs(&rp).expect("refs");
    let cands = load_cands(&cp).expect("cands");
    for parallel in [false, true] {
        let report = score_captions(&rp, &refs, &cands, None, parallel).expect("scores");
        for n in 0..4 {
            close(
                &format!("corpus BLEU-{}", n + 1),
                report.corpus.bleu[n],
                f(&fx["corpus"]["bleu"][n]),
            );
        }
        close(
            "corpus ROUGE-L",
            report.corpus.rouge_l,
            f(&fx["corpus"]["rouge_l"]),
        );
        close(
            "corpus CIDEr-D",
            report.corpus.cider_d,
            f(&fx["corpus"]["cider_d"]),
        );
        let images = fx["images"].as_array().expect("images");
        assert_eq!(report.images.len(), images.len());
        for (got, im) in report.images.iter().zip(images) {
            assert_eq!(got.image_id, im["id"].as_str().expect("id"));
            for n in 0..4 {
                close(
                    &format!("BLEU-{} of {}", n + 1, im["id"]),
                    got.scores.bleu[n],
                    f(&im["bleu"][n]),
                );
            }
            close(
                &format!("ROUGE-L of {}", im["id"]),
                got.scores.rouge_l,
                f(&im["rouge_l"]),
            );
            close(
                &format!("CIDEr-D of {}", im["id"]),
                got.scores.cider_d,
                f(&im["cider_d"]),
            );
        }
    }
}

#[test]
fn evaluate_with_training_df_matches_self_critical_scorer() {
    let fx = fixture();
    let dir = tempfile::tempdir().expect("tempdir");
    let (rp, cp) = write_set(&dir, &fx);
    let mut interner = Interner::new();
    let train: Vec<Vec<Vec<u32>>> = fx["train_refs"]
        .as_array()
        .expect("train_refs")
        .iter()
        .map(|im| {
            im.as_array()
                .expect("sentences")
                .iter()
                .map(|s| interner.intern_sentence(s.as_str().expect("string")))
                .collect()
        })
        .collect();
    let words: Vec<String> = (0..interner.len())
        .map(|i| interner.word(i as u32).expect("word").to_owned())
        .collect();
    let df = DocFreq::from_refs(&train).with_words(words);
    let report = score_captions(
        &rp,
        &load_refs(&rp).expect("refs"),
        &load_cands(&cp).expect("cands"),
        Some(df),
        true,
    )
    .expect("scores");
    for (got, im) in report
        .images
        .iter()
        .zip(fx["images"].as_array().expect("images"))
    {
        close(
            &format!("CIDEr-D (train df) of {}", im["id"]),
            got.scores.cider_d,
            f(&im["cider_d_train_df"]),
        );
    }
    close(
        "corpus CIDEr-D (train df)",
        report.corpus.cider_d,
        f(&fx["corpus"]["cider_d_train_df"]),
    );
}

#[test]
fn parallel_cider_corpus_equals_serial() {
    let fx = fixture();
    let mut interner = Interner::new();
    let images = fx["images"].as_array().expect("images");
    let refs: Vec<Vec<Vec<u32>>> = image_refs(images)
        .into_iter()
        .map(|r| r.into_iter().map(|s| interner.intern_sentence(s)).collect())
        .collect();
    let cands: Vec<Vec<u32>> = image_cands(images)
        .into_iter()
        .map(|c| interner.intern_sentence(c))
        .collect();
    assert_eq!(
        cider_corpus(&refs, &cands),
        cider_corpus_parallel(&refs, &cands, true)
    );
}
