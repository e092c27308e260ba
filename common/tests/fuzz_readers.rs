//! Bad input for the readers `fuzz_inputs.rs` does not reach, as property tests: NumPy
//! features (`features/fc/<id>.npy`, `features/att/<id>.npz` or `.npy`), CIDEr-D
//! document-frequency tables (`train-df.bin`); the Hugging Face CLIP checkpoint's readers are
//! fuzzed in `common/clip/tests/fuzz_hf.rs`. Mutated or random bytes give a value or an error
//! that names the file, never a panic or a runaway allocation.
//!
//! Cases, seed and saved failures: `support/fuzz.rs` (`CAPRL_FUZZ_CASES`, `CAPRL_FUZZ_SEED`,
//! `fuzz_readers.proptest-regressions`).

#[path = "support/ci.rs"]
mod ci;
#[path = "support/fuzz.rs"]
mod fuzz;

use std::io::Write;
use std::path::Path;

use caprl_data::{npy, Dataset};
use caprl_score::DocFreq;
use fuzz::{mutate, mutations};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

/// Cases per property in CI (fixed seed; more by hand with `CAPRL_FUZZ_CASES`).
const CASES: u32 = 256;

const CSV: &str = "image_id,split,caption\n11,train,a red cube\n12,train,a blue ball\n13,val,a green cone\n14,test,a yellow star\n";
const IDS: [&str; 4] = ["11", "12", "13", "14"];

/// The `.npz` of self-critical.pytorch: one array `feat` in a zip, deflated or stored.
fn npz(shape: &[usize], data: &[f32], deflate: bool) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    let options = zip::write::SimpleFileOptions::default().compression_method(method);
    zip.start_file("feat.npy", options).unwrap();
    zip.write_all(&npy::encode_f32(shape, data)).unwrap();
    zip.finish().unwrap().into_inner()
}

/// A valid NumPy-layout data set in `dir`: fc `[3]` per image; att `[2, 2]` per image, in a
/// deflated `.npz` for 11, a stored `.npz` for 12 and 13, an `.npy` for 14.
/// Returns the path of every feature file.
fn write_npy_dataset(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::write(dir.join("captions.csv"), CSV).unwrap();
    let feats = dir.join("features");
    std::fs::create_dir_all(feats.join("fc")).unwrap();
    std::fs::create_dir_all(feats.join("att")).unwrap();
    let mut files = Vec::new();
    for (i, id) in IDS.iter().enumerate() {
        let v = i as f32;
        let fc = feats.join("fc").join(format!("{id}.npy"));
        npy::write_f32(&fc, &[3], &[v, v + 0.5, v + 1.0]).unwrap();
        files.push(fc);
        let att_values = [v, -v, v * 2.0, 0.25];
        let att = if i == 3 {
            let path = feats.join("att").join(format!("{id}.npy"));
            npy::write_f32(&path, &[2, 2], &att_values).unwrap();
            path
        } else {
            let path = feats.join("att").join(format!("{id}.npz"));
            std::fs::write(&path, npz(&[2, 2], &att_values, i == 0)).unwrap();
            path
        };
        files.push(att);
    }
    files
}

/// Opens the data set in `dir`; when it opens, reads every fc and att row too.
/// Returns the error text, if any.
fn open_and_read(dir: &Path) -> Option<String> {
    let ds = match Dataset::open(dir) {
        Ok(ds) => ds,
        Err(e) => return Some(e.to_string()),
    };
    let rows: Vec<usize> = [&ds.train, &ds.val, &ds.test]
        .iter()
        .flat_map(|split| split.iter().map(|i| i.row))
        .collect();
    if let Err(e) = ds.fc_rows(&rows) {
        return Some(e.to_string());
    }
    ds.att_rows(&rows).err().map(|e| e.to_string())
}

/// A document-frequency table over a few images of ids 4..12, with its vocabulary.
fn df_bytes(dir: &Path) -> Vec<u8> {
    let refs: Vec<Vec<Vec<u32>>> = (0..5u32)
        .map(|i| vec![vec![4, 5 + i % 3, 6, 7], vec![8 + i % 4, 9, 4]])
        .collect();
    let words = (0..12).map(|i| format!("w{i}")).collect();
    let path = dir.join("train-df.bin");
    DocFreq::from_refs(&refs)
        .with_words(words)
        .save(&path)
        .unwrap();
    std::fs::read(&path).unwrap()
}

#[test]
fn valid_samples_open() {
    // The files the properties mutate are themselves valid.
    let dir = tempfile::tempdir().unwrap();
    write_npy_dataset(dir.path());
    assert_eq!(open_and_read(dir.path()), None);
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.att_shape(), Some((2, 2)));

    let df = DocFreq::load(&dir.path().join("train-df.bin"));
    assert!(df.is_err(), "no table written yet");
    df_bytes(dir.path());
    let df = DocFreq::load(&dir.path().join("train-df.bin")).unwrap();
    assert_eq!(
        (df.num_images(), df.get(&[4]), df.words().len()),
        (5, 5, 12)
    );
}

/// A mutated copy of `valid` with its SHA-256 trailer recomputed, so the damage reaches the
/// parser behind the checksum.
fn resealed(valid: &[u8], muts: &[fuzz::Mutation]) -> Vec<u8> {
    let body = &valid[..valid.len() - 32];
    let mut bytes = mutate(body, muts);
    let digest = Sha256::digest(&bytes);
    bytes.extend_from_slice(&digest);
    bytes
}

proptest! {
    #![proptest_config(fuzz::config(CASES))]

    #[test]
    fn npy_features_reader_never_panics_on_mutated_or_random_files(
        which in 0usize..8,
        muts in mutations(),
        noise in prop::option::of(prop::collection::vec(any::<u8>(), 0..256)),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let files = write_npy_dataset(dir.path());
        let victim = &files[which];
        let bytes = match noise {
            Some(noise) => noise,
            None => mutate(&std::fs::read(victim).unwrap(), &muts),
        };
        std::fs::write(victim, &bytes).unwrap();
        if let Some(e) = open_and_read(dir.path()) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn df_reader_never_panics_on_mutated_tables(
        muts in mutations(),
        reseal in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let valid = df_bytes(dir.path());
        let path = dir.path().join("train-df.bin");
        let bytes = if reseal { resealed(&valid, &muts) } else { mutate(&valid, &muts) };
        std::fs::write(&path, &bytes).unwrap();
        match DocFreq::load(&path) {
            Ok(df) => {
                // Whatever loads answers lookups.
                let _ = (df.get(&[4, 6]), df.len(), df.words().len());
            }
            Err(e) => prop_assert!(e.to_string().contains("train-df.bin"), "{}", e),
        }
    }
}
