//! The regions profile (the benchmark task): each property it is built for, read back from the
//! files it writes — determinism, held-out combinations, near-duplicate families, annotators
//! that differ over a long-tail vocabulary, counts and relations, the ceilings. (That the
//! pooled vector cannot bind colours to objects while the regions can is a unit test of the
//! generator's features, which this file cannot reach.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::OnceLock;

use caprl_data::{synth_profile, Dataset, SynthConfig, SynthProfile};
use serde_json::Value;

fn config(seed: u64, train: usize, val: usize, test: usize) -> SynthConfig {
    SynthConfig {
        seed,
        train,
        val,
        test,
        progress: false,
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// One set at the profile's default sizes, generated once for the tests that need its size.
fn full_set() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = tempfile::tempdir().unwrap();
        let (train, val, test) = SynthProfile::Regions.default_sizes();
        synth_profile(
            &root.path().join("regions"),
            SynthProfile::Regions,
            &config(3, train, val, test),
        )
        .unwrap();
        root
    })
    .path()
    .join("regions")
    .leak()
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn regions_set_is_byte_identical_for_a_seed_and_differs_across_seeds() {
    let root = tempfile::tempdir().unwrap();
    let dirs: Vec<_> = [("a", 7), ("b", 7), ("c", 8)]
        .iter()
        .map(|(name, seed)| {
            let dir = root.path().join(name);
            synth_profile(&dir, SynthProfile::Regions, &config(*seed, 120, 20, 40)).unwrap();
            files(&dir)
        })
        .collect();
    let names: Vec<&String> = dirs[0].keys().collect();
    for wanted in [
        "ceilings.json",
        "scenes.json",
        "subsets.json",
        "features.safetensors",
    ] {
        assert!(
            names.iter().any(|n| *n == wanted),
            "{wanted} missing from {names:?}"
        );
    }
    assert_eq!(dirs[0], dirs[1], "same seed, same bytes");
    for name in ["captions.json", "features.safetensors", "scenes.json"] {
        assert_ne!(
            dirs[0][name], dirs[2][name],
            "{name} is the same for seeds 7 and 8"
        );
    }
}

/// `(colour, category)` of every object of the scenes of `split`.
fn pairs(scenes: &[Value], split: &str) -> BTreeSet<(String, String)> {
    scenes
        .iter()
        .filter(|s| s["split"] == split)
        .flat_map(|s| s["objects"].as_array().unwrap().iter())
        .map(|o| {
            (
                o["colour"].as_str().unwrap().into(),
                o["category"].as_str().unwrap().into(),
            )
        })
        .collect()
}

#[test]
fn held_out_combinations_appear_only_in_val_and_test_and_are_reported_apart() {
    let dir = full_set();
    let scenes = read_json(&dir.join("scenes.json"));
    let scenes = scenes.as_array().unwrap();
    let train_pairs = pairs(scenes, "train");
    let subsets = read_json(&dir.join("subsets.json"));
    let members = |name: &str| -> BTreeSet<String> {
        subsets[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().into())
            .collect()
    };
    let (seen, unseen, tail) = (members("seen"), members("unseen"), members("tail"));
    // The matched comparison: seen images' main objects are common categories, as the
    // held-out combinations' are; the long tail is reported apart.
    let mut train_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in scenes.iter().filter(|s| s["split"] == "train") {
        for o in s["objects"].as_array().unwrap() {
            *train_counts
                .entry(o["category"].as_str().unwrap())
                .or_default() += 1;
        }
    }
    let mut by_count: Vec<(usize, &str)> = train_counts.iter().map(|(c, n)| (*n, *c)).collect();
    by_count.sort_unstable_by(|a, b| b.cmp(a));
    let common: BTreeSet<&str> = by_count.iter().take(40).map(|(_, c)| *c).collect();
    assert!(!tail.is_empty());
    let pair = |o: &Value| {
        (
            o["colour"].as_str().unwrap().to_string(),
            o["category"].as_str().unwrap().to_string(),
        )
    };
    let mut held_out = BTreeSet::new();
    let mut test_unseen = 0;
    for s in scenes {
        let id = s["id"].as_str().unwrap();
        let flagged = s["unseen_combination"] == true;
        match s["split"].as_str().unwrap() {
            "train" => assert!(!flagged, "training image {id} shows a held-out combination"),
            split => {
                assert_eq!(
                    unseen.contains(id),
                    flagged,
                    "{split} image {id} in subset unseen"
                );
                assert_eq!(
                    seen.contains(id) || tail.contains(id),
                    !flagged,
                    "{split} {id}"
                );
                let subset = match (flagged, seen.contains(id)) {
                    (true, _) => "unseen",
                    (false, true) => "seen",
                    (false, false) => "tail",
                };
                assert_eq!(s["subset"], subset, "{split} image {id}");
                let main = s["objects"][0]["category"].as_str().unwrap();
                assert!(
                    subset == "tail" || common.contains(main),
                    "{split} image {id}: main object {main} is not a common category"
                );
                if flagged {
                    held_out.insert(pair(&s["objects"][0]));
                    test_unseen += usize::from(split == "test");
                }
            }
        }
    }
    let leaked: Vec<_> = held_out.intersection(&train_pairs).collect();
    assert!(
        leaked.is_empty(),
        "held-out combinations seen in training: {leaked:?}"
    );
    for s in scenes.iter().filter(|s| s["unseen_combination"] == false) {
        for o in s["objects"].as_array().unwrap() {
            assert!(
                !held_out.contains(&pair(o)),
                "image {} is in seen but shows {:?}",
                s["id"],
                pair(o)
            );
        }
    }
    let test = scenes.iter().filter(|s| s["split"] == "test").count();
    let share = test_unseen as f64 / test as f64;
    assert!(
        (0.3..0.7).contains(&share),
        "{test_unseen} of {test} test images are unseen"
    );
}

/// The facts of a scene that a variation may change.
fn facts(scene: &Value) -> (Vec<[String; 4]>, Vec<(String, String)>, String) {
    let objects = scene["objects"].as_array().unwrap();
    let attrs = objects
        .iter()
        .map(|o| {
            ["category", "colour", "size", "material"].map(|k| o[k].as_str().unwrap().to_string())
        })
        .collect();
    let layout = objects
        .iter()
        .map(|o| (o["x"].to_string(), o["y"].to_string()))
        .collect();
    (attrs, layout, scene["place"].as_str().unwrap().to_string())
}

#[test]
fn near_duplicate_families_differ_in_exactly_the_fact_they_name() {
    let dir = full_set();
    let scenes = read_json(&dir.join("scenes.json"));
    let descriptions = read_json(&dir.join("descriptions.json"));
    let scenes = scenes.as_array().unwrap();
    let mut first_of: BTreeMap<u64, usize> = BTreeMap::new();
    let mut members = 0;
    for (i, s) in scenes.iter().enumerate() {
        let family = s["family"].as_u64().unwrap();
        let Some(&base_index) = first_of.get(&family) else {
            first_of.insert(family, i);
            assert!(
                s.get("differs").is_none(),
                "image {i} opens family {family}"
            );
            continue;
        };
        members += 1;
        let base = &scenes[base_index];
        assert_eq!(s["split"], base["split"], "family {family} crosses splits");
        let ((a0, l0, p0), (a1, l1, p1)) = (facts(base), facts(s));
        let changed_attrs: Vec<(usize, usize)> = (0..a0.len())
            .flat_map(|k| (0..4).map(move |f| (k, f)))
            .filter(|&(k, f)| a0[k][f] != a1[k][f])
            .collect();
        let moved = (0..l0.len()).filter(|&k| l0[k] != l1[k]).count();
        match s["differs"].as_str().unwrap() {
            "main colour" => {
                assert!(!changed_attrs.is_empty() && changed_attrs.iter().all(|&(_, f)| f == 1));
                assert!(
                    changed_attrs.iter().any(|&(k, _)| k == 0),
                    "image {i}: the main object keeps its colour"
                );
                assert!(moved == 0 && p0 == p1);
            }
            "other category" => {
                assert_eq!(changed_attrs.len(), 1, "image {i}: {changed_attrs:?}");
                assert!(changed_attrs[0].0 > 0 && changed_attrs[0].1 == 0);
                assert!(moved == 0 && p0 == p1);
            }
            "place" => assert!(changed_attrs.is_empty() && moved == 0 && p0 != p1),
            "swapped positions" => {
                assert!(changed_attrs.is_empty() && p0 == p1);
                assert_eq!(moved, 2, "image {i}");
                assert_ne!(
                    base["relations"], s["relations"],
                    "image {i}: no relation turned"
                );
            }
            other => panic!("image {i}: unknown variation {other}"),
        }
        assert_ne!(
            descriptions[i]["description"], descriptions[base_index]["description"],
            "image {i}: the full description does not tell it from its family's first"
        );
    }
    let share = members as f64 / scenes.len() as f64;
    assert!(
        share > 0.15,
        "only {members} of {} images are near-duplicates",
        scenes.len()
    );
}

#[test]
fn annotators_differ_over_a_long_tail_vocabulary() {
    let dir = full_set();
    let ds = Dataset::open(dir).unwrap();
    assert!(
        ds.vocab.len() >= 1000,
        "vocabulary of {} words",
        ds.vocab.len()
    );
    let mut distinct_refs = 0;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for item in &ds.train.items {
        let refs: BTreeSet<&Vec<String>> = item.refs.iter().collect();
        distinct_refs += usize::from(refs.len() == item.refs.len());
        for w in item.refs.iter().flatten() {
            *counts.entry(w.as_str()).or_default() += 1;
        }
    }
    let share = distinct_refs as f64 / ds.train.len() as f64;
    assert!(
        share > 0.9,
        "only {share:.2} of images have five different references"
    );
    // Zipf-like: log frequency falls about linearly in log rank (least-squares slope).
    let mut freq: Vec<usize> = counts.into_values().collect();
    freq.sort_unstable_by(|a, b| b.cmp(a));
    let points: Vec<(f64, f64)> = (20..600.min(freq.len()))
        .map(|r| (((r + 1) as f64).ln(), (freq[r] as f64).ln()))
        .collect();
    let n = points.len() as f64;
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let slope = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>()
        / points.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
    assert!(
        (-2.0..-0.7).contains(&slope),
        "rank-frequency slope {slope:.2}"
    );
}

#[test]
fn references_count_groups_and_relate_objects_other_than_the_main_one() {
    let dir = full_set();
    let scenes = read_json(&dir.join("scenes.json"));
    let captions = read_json(&dir.join("captions.json"));
    let (mut groups, mut counted, mut relations_between_others) = (0, 0, 0);
    for (s, image) in scenes
        .as_array()
        .unwrap()
        .iter()
        .zip(captions["images"].as_array().unwrap())
    {
        let refs: Vec<&str> = image["sentences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["raw"].as_str().unwrap())
            .collect();
        let objects = s["objects"].as_array().unwrap();
        if objects.iter().any(|o| o.get("group").is_some()) {
            groups += 1;
            counted += usize::from(
                refs.iter()
                    .any(|r| r.contains("two ") || r.contains("three ")),
            );
        }
        relations_between_others += s["relations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r[0].as_u64() != Some(0))
            .count();
    }
    assert!(
        groups > 0 && counted as f64 > 0.3 * groups as f64,
        "{counted} of {groups} group scenes counted"
    );
    assert!(relations_between_others > 0);
}

#[test]
fn ceilings_are_stored_beside_the_data_for_all_and_each_subset() {
    let c = read_json(&full_set().join("ceilings.json"));
    for part in [&c["all"], &c["subsets"]["seen"], &c["subsets"]["unseen"]] {
        let human = part["human"]["cider_d"].as_f64().unwrap();
        let oracle = part["oracle"]["cider_d"].as_f64().unwrap();
        assert!(human > 0.1 && oracle > 0.1, "ceilings {part}");
        assert!(part["oracle"]["bleu4"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(c["split"], "test");
}
