//! The committed reference fixtures of the score tests (`tests/fixtures/*.json`): reading one,
//! and the captions of its `images`.
#![allow(dead_code)]

use serde_json::Value;

/// The fixture `tests/fixtures/<name>`, parsed.
pub fn load_fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("fixture present");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// The reference captions of each of a fixture's `images`.
pub fn image_refs(images: &[Value]) -> Vec<Vec<&str>> {
    images
        .iter()
        .map(|im| {
            im["refs"]
                .as_array()
                .expect("refs")
                .iter()
                .map(|r| r.as_str().expect("ref"))
                .collect()
        })
        .collect()
}

/// The candidate caption of each of a fixture's `images`.
pub fn image_cands(images: &[Value]) -> Vec<&str> {
    images
        .iter()
        .map(|im| im["cand"].as_str().expect("cand"))
        .collect()
}
