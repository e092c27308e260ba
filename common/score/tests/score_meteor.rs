//! METEOR through the jar equals pycocoevalcap's own `Meteor().compute_score` within 1e-4
//! (corpus aggregate and every image) on the committed fixture made by
//! `scripts/score/make_meteor_fixture.py`. Needs Java and `pip install pycocoevalcap`: skipped
//! with a printed reason where they are missing, a failure in CI (`support/ci.rs`).

#[path = "../../tests/support/ci.rs"]
mod ci;
#[path = "support/fixture.rs"]
mod fixture;

use std::path::PathBuf;

use caprl_score::{locate_jar, Meteor, MeteorError};
use fixture::{image_cands, image_refs, load_fixture};

const TOL: f64 = 1e-4;

/// The jar, or None after [`ci::unavailable`] when it or Java is missing.
fn jar() -> Option<PathBuf> {
    ci::tool("java")?;
    match locate_jar() {
        Ok(jar) => Some(jar),
        Err(e) => {
            ci::unavailable(&format!("no METEOR jar: {e}"));
            None
        }
    }
}

#[test]
fn meteor_matches_pycocoevalcap_per_image_and_corpus() {
    let Some(jar) = jar() else { return };
    let fx = load_fixture("meteor_reference.json");
    let images = fx["images"].as_array().expect("images");
    let (refs, cands) = (image_refs(images), image_cands(images));
    let mut meteor = Meteor::start(&jar).expect("the jar starts");
    let (corpus, per_image) = meteor.compute_score(&refs, &cands).expect("scores");
    let want = fx["corpus"]["meteor"].as_f64().expect("corpus");
    assert!(
        (corpus - want).abs() <= TOL,
        "corpus METEOR {corpus}, pycocoevalcap {want}"
    );
    let mean = per_image.iter().sum::<f64>() / per_image.len() as f64;
    assert!(
        (mean - corpus).abs() > 1e-3,
        "the corpus score is the jar's aggregate, not the mean of the images ({mean})"
    );
    for (im, got) in images.iter().zip(&per_image) {
        let want = im["meteor"].as_f64().expect("meteor");
        assert!(
            (got - want).abs() <= TOL,
            "METEOR of {}: {got}, pycocoevalcap {want}",
            im["id"]
        );
    }

    // The same process scores a second set (pycocoevalcap keeps one jar per Meteor()).
    let (again, _) = meteor
        .compute_score(&refs[..4], &cands[..4])
        .expect("second set");
    assert!((0.0..=1.0).contains(&again));
}

#[test]
fn missing_jar_is_an_error_naming_the_install_command() {
    let err = Meteor::start(std::path::Path::new("/nonexistent/dir/meteor-1.5.jar"))
        .err()
        .expect("no jar there");
    assert!(matches!(err, MeteorError::NoJar { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("pip install pycocoevalcap"), "{msg}");
    assert!(msg.contains("CAPRL_METEOR_JAR"), "{msg}");
}

#[test]
fn a_file_that_is_not_the_jar_is_a_protocol_error_quoting_java() {
    if ci::tool("java").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let fake = dir.path().join("meteor-1.5.jar");
    std::fs::write(&fake, b"not a jar").expect("write");
    let mut meteor = Meteor::start(&fake).expect("java starts");
    let err = meteor
        .compute_score(&[vec!["a dog".to_string()]], &["a dog"])
        .expect_err("java cannot run it");
    let msg = err.to_string();
    assert!(matches!(err, MeteorError::Protocol { .. }), "{msg}");
    assert!(msg.contains("stopped before"), "{msg}");
    assert!(msg.to_lowercase().contains("jar"), "{msg}");
}
