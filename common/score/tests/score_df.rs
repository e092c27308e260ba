//! The document-frequency file round-trips and bad files give typed errors.

use caprl_score::{CiderD, DfError, DocFreq};

fn sample() -> DocFreq {
    DocFreq::from_refs(&[
        vec![vec![0, 1, 2, 3, 4], vec![0, 1, 5]],
        vec![vec![1, 2, 9], vec![7]],
        vec![vec![u32::MAX - 1, 3]],
    ])
}

#[test]
fn df_file_round_trips_and_scores_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("train.df");
    let words: Vec<String> = ["<eos>", "a", "café", ""]
        .iter()
        .map(|w| w.to_string())
        .collect();
    let df = sample().with_words(words.clone());
    df.save(&path).expect("save");
    let loaded = DocFreq::load(&path).expect("load");
    assert_eq!(loaded, df);
    assert_eq!(loaded.num_images(), 3);
    assert_eq!(loaded.words(), &words[..]);
    assert_eq!(loaded.get(&[1, 2]), 2);
    let (a, b) = (CiderD::new(df), CiderD::new(loaded));
    let refs = [vec![0u32, 1, 2, 3], vec![1, 2, 9]];
    assert_eq!(
        a.score(&a.prepare(&refs), &[0, 1, 2]),
        b.score(&b.prepare(&refs), &[0, 1, 2])
    );
}

#[test]
fn save_replaces_an_existing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("train.df");
    std::fs::write(&path, b"old").expect("write");
    sample().save(&path).expect("save over");
    assert_eq!(DocFreq::load(&path).expect("load").num_images(), 3);
}

#[test]
fn bad_df_files_give_typed_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.df");
    assert!(matches!(DocFreq::load(&missing), Err(DfError::Io { .. })));

    let path = dir.path().join("x.df");
    std::fs::write(&path, b"{\"not\": \"a df\"}").expect("write");
    let err = DocFreq::load(&path).expect_err("bad magic");
    assert!(matches!(err, DfError::BadMagic { .. }));
    assert!(err.to_string().contains("x.df"), "{err}");

    sample().save(&path).expect("save");
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.truncate(bytes.len() - 5);
    std::fs::write(&path, &bytes).expect("write");
    assert!(matches!(DocFreq::load(&path), Err(DfError::Length { .. })));

    sample().save(&path).expect("save");
    let mut bytes = std::fs::read(&path).expect("read");
    let at = bytes.len() - 40;
    bytes[at] ^= 0xff;
    std::fs::write(&path, &bytes).expect("write");
    assert!(matches!(
        DocFreq::load(&path),
        Err(DfError::Checksum { .. })
    ));

    sample().save(&path).expect("save");
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[8] = 9;
    std::fs::write(&path, &bytes).expect("write");
    assert!(matches!(
        DocFreq::load(&path),
        Err(DfError::UnsupportedVersion { found: 9, .. })
    ));
}
