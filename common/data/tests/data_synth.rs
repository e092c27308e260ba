//! The synthetic task: byte-for-byte determinism, a loadable result, atomic output.

use std::path::Path;

use caprl_data::{
    already_generated, synth, synth_profile, DataError, Dataset, SynthConfig, SynthProfile,
};

fn small(seed: u64) -> SynthConfig {
    SynthConfig {
        seed,
        train: 50,
        val: 10,
        test: 10,
        progress: false,
    }
}

/// `(file name, bytes)` of every file in `dir`, sorted.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn synth_is_byte_identical_for_a_seed_and_differs_across_seeds() {
    let root = tempfile::tempdir().unwrap();
    let a = root.path().join("a");
    let b = root.path().join("b");
    let c = root.path().join("c");
    synth(&a, &small(7)).unwrap();
    synth(&b, &small(7)).unwrap();
    synth(&c, &small(8)).unwrap();
    let (sa, sb, sc) = (snapshot(&a), snapshot(&b), snapshot(&c));
    let names: Vec<&str> = sa.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "captions.json",
            "descriptions.json",
            "features.ids.json",
            "features.safetensors",
            "scenes.json",
            "synth.json",
            "vocab.json"
        ]
    );
    assert_eq!(sa, sb, "same seed, same bytes");
    for (fa, fc) in sa.iter().zip(&sc) {
        if fa.0 != "features.ids.json" {
            assert_ne!(fa.1, fc.1, "{} should depend on the seed", fa.0);
        }
    }
}

#[test]
fn synth_output_is_a_valid_karpathy_data_set_with_readable_features() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("nested").join("synth");
    let cfg = SynthConfig {
        train: 300,
        ..small(3)
    };
    let summary = synth(&out, &cfg).unwrap();
    let ds = Dataset::open(&out).unwrap();
    assert_eq!((ds.train.len(), ds.val.len(), ds.test.len()), (300, 10, 10));
    assert!(ds.train.iter().all(|i| i.refs.len() == 5));
    assert_eq!(ds.fc_dim(), 256);
    assert_eq!(ds.att_shape(), Some((4, 128)));
    assert_eq!(summary.stats.images, 320);
    assert_eq!(summary.stats.captions, 1600);
    assert_eq!(
        summary.bytes,
        summary.files.iter().map(|f| f.1).sum::<u64>()
    );
    // Colour and shape of the main object are readable; material less so.
    let (fc, _att) = summary.recover.expect("scenes report recoverability");
    let [colour, shape, _size, material] = fc;
    assert!(colour > 0.8 && shape > 0.8, "{:?}", fc);
    assert!(material < colour, "{:?}", fc);
    let text = summary.to_string();
    assert!(
        text.contains("captions.json") && text.contains("caption length"),
        "{text}"
    );
    // The main object's shape word appears in nearly every reference.
    let scenes: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("scenes.json")).unwrap()).unwrap();
    let shape0 = scenes[0]["objects"][0]["shape"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!shape0.is_empty());
    let no_tmp = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .all(|e| !e.unwrap().file_name().to_string_lossy().contains(".tmp-"));
    assert!(no_tmp, "temporary directory left behind");
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn failed_synth_leaves_no_partial_output() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("synth");
    let err = synth(&out, &SynthConfig { val: 0, ..small(1) }).unwrap_err();
    assert!(err.to_string().contains("--val 0"), "{err}");
    assert!(
        entries(root.path()).is_empty(),
        "{:?}",
        entries(root.path())
    );

    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let err = synth(&out, &small(1)).unwrap_err();
    assert!(matches!(err, DataError::OutputExists { .. }), "{err}");
    assert!(err.to_string().contains("synth"), "{err}");
    assert_eq!(entries(root.path()), ["synth"]);
    assert_eq!(entries(&out), ["keep.txt"]);

    // An empty existing directory is fine.
    std::fs::remove_file(out.join("keep.txt")).unwrap();
    synth(&out, &small(1)).unwrap();
    assert_eq!(entries(root.path()), ["synth"]);
}

#[test]
fn a_directory_holding_the_same_set_is_recognised_and_any_other_is_not() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("synth");
    assert!(!already_generated(&out, SynthProfile::Scenes, &small(1)));
    synth(&out, &small(1)).unwrap();
    assert!(already_generated(&out, SynthProfile::Scenes, &small(1)));
    assert!(
        !already_generated(&out, SynthProfile::Scenes, &small(2)),
        "another seed"
    );
    let more = SynthConfig {
        train: 51,
        ..small(1)
    };
    assert!(
        !already_generated(&out, SynthProfile::Scenes, &more),
        "another size"
    );
    // A set that no longer opens is not taken for a finished one.
    std::fs::remove_file(out.join("captions.json")).unwrap();
    assert!(!already_generated(&out, SynthProfile::Scenes, &small(1)));
}

#[test]
fn the_coco_profile_has_cocos_shapes_and_zipfian_words_and_is_deterministic() {
    let root = tempfile::tempdir().unwrap();
    let config = SynthConfig {
        seed: 3,
        train: 40,
        val: 4,
        test: 4,
        progress: false,
    };
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let summary = synth_profile(&a, SynthProfile::Coco, &config).unwrap();
    synth_profile(&b, SynthProfile::Coco, &config).unwrap();
    assert_eq!(snapshot(&a), snapshot(&b), "same seed, same bytes");
    assert!(summary.recover.is_none());
    assert!(
        summary.to_string().contains("fc 2048, att 36 x 2048"),
        "{summary}"
    );

    let ds = Dataset::open(&a).unwrap();
    assert_eq!(ds.fc_dim(), 2048);
    assert_eq!(ds.att_shape(), Some((36, 2048)));
    let rows: Vec<usize> = ds.train.items.iter().map(|it| it.row).collect();
    let fc = ds.fc_rows(&rows).unwrap();
    let att = ds.att_rows(&rows[..2]).unwrap().unwrap();
    assert_eq!((fc.len(), att.len()), (40 * 2048, 2 * 36 * 2048));
    assert!(fc.iter().chain(&att).all(|&x| (0.0..4.0).contains(&x)));
    // A region that holds a topic carries its pattern: well above the noise-only level.
    let region_mean = |r: usize| att[r * 2048..(r + 1) * 2048].iter().sum::<f32>() / 2048.0;
    assert!(region_mean(0) > 0.15, "{}", region_mean(0));

    let mut counts: std::collections::HashMap<&str, usize> = Default::default();
    for it in &ds.train.items {
        assert_eq!(it.refs.len(), 5);
        for r in &it.refs {
            assert!((8..=15).contains(&r.len()), "{r:?}");
            for w in r {
                *counts.entry(w.as_str()).or_default() += 1;
            }
        }
    }
    // COCO's commonest word is among the leaders (the others are topic words shared by many
    // images), and most words are rare (a long Zipfian tail).
    let mut ranked: Vec<(&str, usize)> = counts.iter().map(|(w, c)| (*w, *c)).collect();
    ranked.sort_by_key(|w| std::cmp::Reverse(w.1));
    assert!(
        ranked[..3].iter().any(|(w, _)| *w == "a"),
        "{:?}",
        &ranked[..5]
    );
    let once = counts.values().filter(|&&c| c == 1).count();
    assert!(
        once * 2 > counts.len(),
        "{once} of {} words seen once",
        counts.len()
    );

    assert!(already_generated(&a, SynthProfile::Coco, &config));
    assert!(
        !already_generated(&a, SynthProfile::Scenes, &config),
        "another profile"
    );
}
