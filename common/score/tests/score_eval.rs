//! `caprl score`'s file handling: both input shapes, clear errors.

use caprl_score::{load_cands, load_refs, score_captions, EvalError};

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write");
    p
}

#[test]
fn coco_and_plain_formats_give_the_same_scores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refs_coco = write(
        &dir,
        "refs_coco.json",
        r#"{"annotations":[{"image_id":1,"caption":"a dog runs on grass"},{"image_id":1,"caption":"a brown dog running"},
            {"image_id":2,"caption":"a cat on a bed"},{"image_id":2,"caption":"the cat sleeps"}]}"#,
    );
    let refs_plain = write(
        &dir,
        "refs.json",
        r#"{"1":["a dog runs on grass","a brown dog running"],"2":["a cat on a bed","the cat sleeps"]}"#,
    );
    let cands_coco = write(
        &dir,
        "cands_coco.json",
        r#"[{"image_id":1,"caption":"a dog running on grass"},{"image_id":2,"caption":"a cat"}]"#,
    );
    let cands_plain = write(
        &dir,
        "cands.json",
        r#"{"1":"a dog running on grass","2":"a cat"}"#,
    );
    let a = score_captions(
        &refs_coco,
        &load_refs(&refs_coco).expect("refs"),
        &load_cands(&cands_coco).expect("cands"),
        None,
        false,
    )
    .expect("scores");
    let b = score_captions(
        &refs_plain,
        &load_refs(&refs_plain).expect("refs"),
        &load_cands(&cands_plain).expect("cands"),
        None,
        true,
    )
    .expect("scores");
    assert_eq!(a, b);
    assert_eq!(a.images.len(), 2);
    assert!(a.corpus.cider_d > 0.0 && a.corpus.bleu[0] > 0.5);
    let json = serde_json::to_value(&a).expect("json");
    assert!(json["images"][0]["cider_d"].is_number());
}

#[test]
fn candidates_without_references_are_listed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refs = write(&dir, "refs.json", r#"{"1":["a dog"]}"#);
    let cands = write(&dir, "cands.json", r#"{"1":"a dog","7":"x","8":"y"}"#);
    let err = score_captions(
        &refs,
        &load_refs(&refs).expect("refs"),
        &load_cands(&cands).expect("cands"),
        None,
        false,
    )
    .expect_err("missing refs");
    assert!(matches!(err, EvalError::MissingRefs { count: 2, .. }));
    let msg = err.to_string();
    assert!(
        msg.contains('7') && msg.contains('8') && msg.contains("refs.json"),
        "{msg}"
    );
}

#[test]
fn malformed_files_name_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = write(&dir, "bad.json", "{\"1\": [\"a\",\n 3]}");
    assert!(load_refs(&bad)
        .expect_err("not strings")
        .to_string()
        .contains("\"1\""));
    let broken = write(&dir, "broken.json", "{\n\"1\": ");
    assert!(matches!(
        load_refs(&broken),
        Err(EvalError::Json { line: 2, .. })
    ));
    let dup = write(
        &dir,
        "dup.json",
        r#"[{"image_id":1,"caption":"a"},{"image_id":1,"caption":"b"}]"#,
    );
    assert!(load_cands(&dup)
        .expect_err("dup")
        .to_string()
        .contains("more than one caption"));
    let wrong = write(&dir, "wrong.json", r#"[{"image_id":1,"text":"a"}]"#);
    assert!(load_cands(&wrong)
        .expect_err("no caption")
        .to_string()
        .contains("caption"));
}
