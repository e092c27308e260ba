//! Generated sound scenes, the Clotho loader and feature preparation with its cache.

use std::path::Path;

use caprl_data::audio::{
    clotho_csv, prepare_clotho, read_clotho_csv, synth_audio, AudioNorm, PrepareConfig,
    SynthAudioConfig, AUDIO_NORM_JSON,
};
use caprl_data::Dataset;

fn tiny() -> SynthAudioConfig {
    SynthAudioConfig {
        seed: 7,
        train: 6,
        val: 2,
        test: 3,
        seconds: 1.0,
        ..SynthAudioConfig::default()
    }
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for split in ["development", "validation", "evaluation"] {
        let mut names: Vec<_> = std::fs::read_dir(dir.join("clotho").join(split))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
        let csv = clotho_csv(&dir.join("clotho"), split);
        out.push((csv.display().to_string(), std::fs::read(&csv).unwrap()));
    }
    out
}

#[test]
fn synth_audio_is_deterministic_and_opens_as_a_data_set() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    let summary = synth_audio(&a, &tiny()).unwrap();
    synth_audio(&b, &tiny()).unwrap();
    assert_eq!(summary.clips, [6, 2, 3]);
    // One second at 16 kHz, 20 ms hop, centred frames.
    assert_eq!(summary.frames, 51);
    let (fa, fb) = (files(&a), files(&b));
    assert_eq!(fa.len(), 6 + 2 + 3 + 3);
    for ((_, x), (name, y)) in fa.iter().zip(&fb) {
        assert_eq!(x, y, "{name} differs between two runs with the same seed");
    }
    let other = root.path().join("c");
    synth_audio(&other, &SynthAudioConfig { seed: 8, ..tiny() }).unwrap();
    assert_ne!(
        files(&other)[0].1,
        fa[0].1,
        "another seed gives other audio"
    );

    let data = Dataset::open(&a).unwrap();
    assert_eq!(
        (data.train.len(), data.val.len(), data.test.len()),
        (6, 2, 3)
    );
    assert_eq!(data.att_shape(), Some((51, 64)));
    assert_eq!(data.fc_dim(), 64);
    for item in data.train.iter() {
        assert_eq!(item.refs.len(), 5, "five references per clip");
        let distinct: std::collections::HashSet<_> = item.refs.iter().collect();
        assert_eq!(distinct.len(), 5, "references of {} repeat", item.id);
    }
    // Training features are normalised per band: mean ~0 and std ~1 over the training frames.
    let rows: Vec<usize> = data.train.iter().map(|i| i.row).collect();
    let att = data.att_rows(&rows).unwrap().unwrap();
    let mean = att.iter().map(|&v| v as f64).sum::<f64>() / att.len() as f64;
    let var = att.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / att.len() as f64;
    assert!(
        mean.abs() < 1e-3 && (var - 1.0).abs() < 1e-2,
        "mean {mean}, var {var}"
    );
    let norm: AudioNorm =
        serde_json::from_slice(&std::fs::read(a.join(AUDIO_NORM_JSON)).unwrap()).unwrap();
    assert_eq!((norm.mean.len(), norm.std.len(), norm.frames), (64, 64, 51));
}

#[test]
fn preparing_again_reads_every_clip_from_the_feature_cache() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    let first = synth_audio(&dir, &tiny()).unwrap();
    assert_eq!((first.computed, first.cached), (11, 0));
    let before = std::fs::read(dir.join("features.safetensors")).unwrap();
    let again = prepare_clotho(&dir.join("clotho"), &dir, &PrepareConfig::default()).unwrap();
    assert_eq!((again.computed, again.cached), (0, 11));
    assert_eq!(
        std::fs::read(dir.join("features.safetensors")).unwrap(),
        before
    );
    // Another frame count is a crop of the same cached spectrograms.
    let cropped = PrepareConfig {
        frames: Some(20),
        ..PrepareConfig::default()
    };
    let third = prepare_clotho(&dir.join("clotho"), &dir, &cropped).unwrap();
    assert_eq!((third.computed, third.frames), (0, 20));
    assert_eq!(Dataset::open(&dir).unwrap().att_shape(), Some((20, 64)));
}

#[test]
fn clotho_csv_with_a_missing_file_or_column_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let audio = dir.path().join("development");
    std::fs::create_dir_all(&audio).unwrap();
    caprl_data::audio::write_wav_i16(&audio.join("a.wav"), &[0.1; 1600], 16_000).unwrap();

    let good = dir.path().join("good.csv");
    std::fs::write(
        &good,
        "file_name,caption_1,caption_2,caption_3,caption_4,caption_5\n\
         a.wav,A dog BARKS!,\"Wind, then rain.\",c three,d four,e five\n",
    )
    .unwrap();
    let clips = read_clotho_csv(&good, &audio).unwrap();
    assert_eq!(
        clips[0].captions[0], "a dog barks",
        "lowercased, punctuation removed"
    );
    assert_eq!(clips[0].captions[1], "wind then rain");

    let no_column = dir.path().join("no_column.csv");
    std::fs::write(
        &no_column,
        "file_name,caption_1,caption_2,caption_4,caption_5\na.wav,a,b,d,e\n",
    )
    .unwrap();
    let err = read_clotho_csv(&no_column, &audio).unwrap_err().to_string();
    assert!(
        err.contains("no_column.csv") && err.contains("no `caption_3` column"),
        "{err}"
    );

    let no_file = dir.path().join("no_file.csv");
    std::fs::write(
        &no_file,
        "file_name,caption_1,caption_2,caption_3,caption_4,caption_5\n\
         a.wav,a,b,c,d,e\n\
         gone.wav,a,b,c,d,e\n",
    )
    .unwrap();
    let err = read_clotho_csv(&no_file, &audio).unwrap_err().to_string();
    assert!(
        err.contains("no_file.csv") && err.contains("line 3") && err.contains("gone.wav"),
        "{err}"
    );

    // A directory without the split CSVs names what is expected.
    let err = prepare_clotho(
        dir.path(),
        &dir.path().join("out"),
        &PrepareConfig::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("clotho_captions_development.csv"), "{err}");
}
