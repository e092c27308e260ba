//! Loading every supported layout, and a clear error for every kind of bad input.

use std::io::Write;
use std::path::Path;

use caprl_data::{
    npy, stats, write_safetensors, DataError, Dataset, Format, OpenOptions, SplitName,
};

/// `(id, split, captions)` of a small data set.
fn images() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    vec![
        ("11", "train", vec!["A red cube.", "a red block"]),
        ("12", "restval", vec!["A blue ball!"]),
        ("13", "val", vec!["a green cone", "the cone is green"]),
        ("14", "test", vec!["A yellow star"]),
    ]
}

fn karpathy_json(imgs: &[(&str, &str, Vec<&str>)]) -> String {
    let images: Vec<serde_json::Value> = imgs
        .iter()
        .enumerate()
        .map(|(i, (id, split, caps))| {
            serde_json::json!({
                "imgid": i, "cocoid": id.parse::<u64>().unwrap(),
                "filename": format!("COCO_{id}.jpg"), "split": split,
                "sentences": caps.iter().map(|c| serde_json::json!({"raw": c, "tokens": []})).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({ "dataset": "coco", "images": images }))
        .unwrap()
}

/// fc row of image `id`: `[id, id + 0.5, id + 0.25]`; att: 2 regions of dim 2.
fn fc_of(id: &str) -> Vec<f32> {
    let x: f32 = id.parse().unwrap();
    vec![x, x + 0.5, x + 0.25]
}
fn att_of(id: &str) -> Vec<f32> {
    let x: f32 = id.parse().unwrap();
    vec![x, -x, 2.0 * x, 0.0]
}

/// Features in safetensors, rows in the order of `ids`.
fn write_st(dir: &Path, ids: &[&str], with_att: bool) {
    let fc: Vec<f32> = ids.iter().flat_map(|id| fc_of(id)).collect();
    let att: Vec<f32> = ids.iter().flat_map(|id| att_of(id)).collect();
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    write_safetensors(dir, &ids, &fc, 3, with_att.then_some((&att[..], 2, 2))).unwrap();
}

fn karpathy_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("captions.json"), karpathy_json(&images())).unwrap();
    // Rows in another order than the captions, plus a row nobody captions.
    write_st(dir.path(), &["14", "99", "12", "11", "13"], true);
    dir
}

fn open_err(dir: &Path) -> (DataError, String) {
    let err = Dataset::open(dir).unwrap_err();
    let msg = err.to_string();
    (err, msg)
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

#[test]
fn karpathy_with_safetensors_loads_rows_by_image_id() {
    let dir = karpathy_dir();
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.format(), Format::Karpathy);
    assert_eq!(ds.train.len(), 2, "restval is folded into train");
    assert_eq!(ds.val.len(), 1);
    assert_eq!(ds.split(SplitName::Test).items[0].id, "14");
    let first = &ds.train.items[0];
    assert_eq!(first.id, "11");
    assert_eq!(first.row, 3);
    assert_eq!(first.refs, vec![words("a red cube"), words("a red block")]);
    assert_eq!(ds.fc_dim(), 3);
    assert_eq!(ds.att_shape(), Some((2, 2)));
    let rows: Vec<usize> = ds.train.iter().map(|i| i.row).collect();
    let fc = ds.fc_rows(&rows).unwrap();
    assert_eq!(fc, [fc_of("11"), fc_of("12")].concat());
    let att = ds.att_rows(&rows).unwrap().unwrap();
    assert_eq!(att, [att_of("11"), att_of("12")].concat());
    assert!(
        dir.path().join("vocab.json").is_file(),
        "vocab built on first open"
    );
    assert_eq!(ds.vocab.id("red"), 5, "most frequent after `a`");
    let again = Dataset::open_expecting(dir.path(), ds.vocab.hash()).unwrap();
    assert_eq!(again.vocab, ds.vocab);
    let text = stats(&ds).to_string();
    assert!(
        text.contains("train") && text.contains("att 2 x 2"),
        "{text}"
    );
}

#[test]
fn fc_only_safetensors_has_no_att() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("captions.json"), karpathy_json(&images())).unwrap();
    write_st(dir.path(), &["11", "12", "13", "14"], false);
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.att_shape(), None);
    assert_eq!(ds.att_rows(&[0]).unwrap(), None);
    let err = ds.fc_rows(&[4]).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::RowOutOfRange {
                row: 4,
                rows: 4,
                ..
            }
        ),
        "{err}"
    );
}

fn write_npz(path: &Path, shape: &[usize], data: &[f32]) {
    let file = std::fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("feat.npy", options).unwrap();
    zip.write_all(&npy::encode_f32(shape, data)).unwrap();
    zip.finish().unwrap();
}

/// `.npy` v1 holding f64 values, written by hand like numpy does.
fn write_npy_f64(path: &Path, shape: &[usize], data: &[f64]) {
    let dims = shape.iter().map(|d| format!("{d}, ")).collect::<String>();
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({dims}), }}");
    while (12 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x02\x00".to_vec();
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, out).unwrap();
}

fn npy_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("captions.json"), karpathy_json(&images())).unwrap();
    let feats = dir.path().join("features");
    std::fs::create_dir_all(feats.join("fc")).unwrap();
    std::fs::create_dir_all(feats.join("att")).unwrap();
    for (id, _, _) in images() {
        npy::write_f32(
            &feats.join("fc").join(format!("{id}.npy")),
            &[3],
            &fc_of(id),
        )
        .unwrap();
        if id == "13" {
            let att: Vec<f64> = att_of(id).iter().map(|&x| x as f64).collect();
            write_npy_f64(
                &feats.join("att").join(format!("{id}.npy")),
                &[1, 2, 2],
                &att,
            );
        } else {
            write_npz(
                &feats.join("att").join(format!("{id}.npz")),
                &[2, 2],
                &att_of(id),
            );
        }
    }
    dir
}

#[test]
fn npy_directory_loads_fc_npy_and_att_npz_or_npy() {
    let dir = npy_dir();
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.fc_dim(), 3);
    assert_eq!(ds.att_shape(), Some((2, 2)));
    let rows: Vec<usize> = ds
        .val
        .iter()
        .chain(ds.train.iter())
        .map(|i| i.row)
        .collect();
    assert_eq!(
        ds.fc_rows(&rows).unwrap(),
        [fc_of("13"), fc_of("11"), fc_of("12")].concat()
    );
    assert_eq!(
        ds.att_rows(&rows).unwrap().unwrap(),
        [att_of("13"), att_of("11"), att_of("12")].concat()
    );
}

#[test]
fn custom_csv_groups_rows_by_image() {
    let dir = tempfile::tempdir().unwrap();
    let csv = "image_id,split,caption\n\
               11,train,A red cube.\n\
               12,train,\"A blue ball, rolling\"\n\
               11,train,a red block\n\
               13,val,a green cone\n\
               14,test,a yellow star\n";
    std::fs::write(dir.path().join("captions.csv"), csv).unwrap();
    write_st(dir.path(), &["11", "12", "13", "14"], false);
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.format(), Format::Custom);
    assert_eq!(
        ds.train.items[0].refs,
        vec![words("a red cube"), words("a red block")]
    );
    assert_eq!(ds.train.items[1].refs, vec![words("a blue ball rolling")]);
    assert_eq!(ds.test.items[0].row, 3);
}

#[test]
fn custom_json_array_is_detected_and_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let json = r#"[
        {"image_id": "11", "split": "train", "caption": "A red cube."},
        {"image_id": 12, "split": "restval", "caption": "a blue ball"},
        {"image_id": "13", "split": "val", "caption": "a green cone"},
        {"image_id": "14", "split": "test", "caption": "a yellow star"}
    ]"#;
    std::fs::write(dir.path().join("captions.json"), json).unwrap();
    write_st(dir.path(), &["11", "12", "13", "14"], true);
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.format(), Format::Custom);
    assert_eq!(ds.train.len(), 2);
    assert_eq!(ds.train.items[1].id, "12");
    let forced = Dataset::open_with(
        dir.path(),
        &OpenOptions {
            format: Format::Karpathy,
            ..OpenOptions::default()
        },
    );
    // Forcing the other format names what the file is and the setting that fits it.
    let message = forced.unwrap_err().to_string();
    assert!(
        message.contains("format is karpathy but the file is a custom list")
            && message.contains("format = \"custom\""),
        "{message}"
    );
}

#[test]
fn malformed_json_names_file_line_and_column() {
    let dir = karpathy_dir();
    std::fs::write(
        dir.path().join("captions.json"),
        "{\n  \"images\": [\n    {\"split\": \"train\",,}\n]}",
    )
    .unwrap();
    let (err, msg) = open_err(dir.path());
    assert!(matches!(err, DataError::Json { line: 3, .. }), "{msg}");
    assert!(msg.contains("captions.json:3:"), "{msg}");
}

#[test]
fn split_without_images_is_rejected() {
    let dir = karpathy_dir();
    let imgs: Vec<_> = images().into_iter().filter(|i| i.1 != "val").collect();
    std::fs::write(dir.path().join("captions.json"), karpathy_json(&imgs)).unwrap();
    let (err, msg) = open_err(dir.path());
    assert!(matches!(err, DataError::EmptySplit { .. }), "{msg}");
    assert!(
        msg.contains("val split has no images") && msg.contains("captions.json"),
        "{msg}"
    );
}

#[test]
fn image_without_captions_is_rejected() {
    let dir = karpathy_dir();
    let mut imgs = images();
    imgs[2].2 = vec!["...", ""];
    std::fs::write(dir.path().join("captions.json"), karpathy_json(&imgs)).unwrap();
    let (err, msg) = open_err(dir.path());
    assert!(matches!(err, DataError::NoCaptions { .. }), "{msg}");
    assert!(msg.contains("image 13 has no captions"), "{msg}");
}

#[test]
fn unknown_split_lists_allowed_values() {
    let dir = karpathy_dir();
    let mut imgs = images();
    imgs[0].1 = "training";
    std::fs::write(dir.path().join("captions.json"), karpathy_json(&imgs)).unwrap();
    let (_, msg) = open_err(dir.path());
    assert!(
        msg.contains("\"training\"") && msg.contains("restval"),
        "{msg}"
    );
}

#[test]
fn feature_ids_missing_for_captioned_images_are_listed() {
    let dir = karpathy_dir();
    write_st(dir.path(), &["11", "99"], true);
    let (err, msg) = open_err(dir.path());
    assert!(
        matches!(err, DataError::MissingFeatures { missing: 3, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("12, 13, 14") && msg.contains("features.safetensors"),
        "{msg}"
    );
}

#[test]
fn missing_npy_files_are_listed() {
    let dir = npy_dir();
    std::fs::remove_file(dir.path().join("features/fc/12.npy")).unwrap();
    let (err, msg) = open_err(dir.path());
    assert!(
        matches!(err, DataError::MissingFeatures { missing: 1, .. }),
        "{msg}"
    );
    assert!(msg.contains("e.g. 12"), "{msg}");
}

#[test]
fn fc_dimension_mismatch_between_npy_rows_is_rejected() {
    let dir = npy_dir();
    npy::write_f32(&dir.path().join("features/fc/13.npy"), &[4], &[1.0; 4]).unwrap();
    let (err, msg) = open_err(dir.path());
    assert!(matches!(err, DataError::FeatureShape { .. }), "{msg}");
    assert!(
        msg.contains("13.npy") && msg.contains("dimension 4 differs from 3"),
        "{msg}"
    );
}

#[test]
fn att_shape_mismatch_between_npy_rows_is_rejected_on_read() {
    let dir = npy_dir();
    write_npz(&dir.path().join("features/att/12.npz"), &[3, 2], &[0.5; 6]);
    let ds = Dataset::open(dir.path()).unwrap();
    let err = ds.att_rows(&[0, 1]).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("12.npz") && msg.contains("expected 2 regions"),
        "{msg}"
    );
}

#[test]
fn att_rows_not_matching_fc_rows_are_rejected() {
    let dir = karpathy_dir();
    // Hand-build a safetensors file whose att has fewer rows than fc.
    let fc: Vec<u8> = [1f32; 12].iter().flat_map(|x| x.to_le_bytes()).collect();
    let att: Vec<u8> = [1f32; 12].iter().flat_map(|x| x.to_le_bytes()).collect();
    let views = vec![
        (
            "fc",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4, 3], &fc).unwrap(),
        ),
        (
            "att",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3, 2, 2], &att)
                .unwrap(),
        ),
    ];
    let bytes = safetensors::tensor::serialize(views, None).unwrap();
    std::fs::write(dir.path().join("features.safetensors"), bytes).unwrap();
    std::fs::write(
        dir.path().join("features.ids.json"),
        r#"["11", "12", 13, 14]"#,
    )
    .unwrap();
    let (err, msg) = open_err(dir.path());
    assert!(matches!(err, DataError::FeatureShape { .. }), "{msg}");
    assert!(msg.contains("`att` has 3 rows but `fc` has 4"), "{msg}");
}

#[test]
fn nan_in_features_names_the_row_and_image() {
    let dir = karpathy_dir();
    let ids = ["11", "12", "13", "14"];
    let mut fc: Vec<f32> = ids.iter().flat_map(|id| fc_of(id)).collect();
    fc[2 * 3 + 1] = f32::NAN;
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    write_safetensors(dir.path(), &ids, &fc, 3, None).unwrap();
    let (err, msg) = open_err(dir.path());
    assert!(matches!(err, DataError::NonFinite { row: 2, .. }), "{msg}");
    assert!(
        msg.contains("row 2 (image 13)") && msg.contains("features.safetensors"),
        "{msg}"
    );
}

#[test]
fn infinity_in_npy_features_is_reported_on_read() {
    let dir = npy_dir();
    npy::write_f32(
        &dir.path().join("features/fc/14.npy"),
        &[3],
        &[1.0, f32::INFINITY, 0.0],
    )
    .unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    let row = ds.test.items[0].row;
    let msg = ds.fc_rows(&[row]).unwrap_err().to_string();
    assert!(msg.contains("14.npy") && msg.contains("image 14"), "{msg}");
}

#[test]
fn truncated_safetensors_is_reported() {
    let dir = karpathy_dir();
    let path = dir.path().join("features.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    let (err, msg) = open_err(dir.path());
    assert!(matches!(err, DataError::Safetensors { .. }), "{msg}");
    assert!(
        msg.contains("features.safetensors") && msg.contains("truncated"),
        "{msg}"
    );
}

#[test]
fn truncated_or_foreign_npy_is_reported() {
    let dir = npy_dir();
    let path = dir.path().join("features/fc/12.npy");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
    let (err, msg) = open_err(dir.path());
    assert!(matches!(err, DataError::Npy { .. }), "{msg}");
    assert!(msg.contains("12.npy") && msg.contains("truncated"), "{msg}");
    std::fs::write(&path, b"hello").unwrap();
    let (_, msg) = open_err(dir.path());
    assert!(msg.contains("12.npy") && msg.contains("magic"), "{msg}");
}

#[test]
fn vocabulary_hash_mismatch_is_rejected() {
    let dir = karpathy_dir();
    let ds = Dataset::open(dir.path()).unwrap();
    let err = Dataset::open_expecting(dir.path(), "deadbeefdeadbeef").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, DataError::VocabHash { .. }), "{msg}");
    assert!(
        msg.contains("vocab.json") && msg.contains(ds.vocab.hash()),
        "{msg}"
    );
    assert!(Dataset::open_expecting(dir.path(), ds.vocab.hash()).is_ok());
}

#[test]
fn missing_ids_file_and_missing_captions_say_what_to_add() {
    let dir = karpathy_dir();
    std::fs::remove_file(dir.path().join("features.ids.json")).unwrap();
    let (_, msg) = open_err(dir.path());
    assert!(msg.contains("features.ids.json"), "{msg}");
    std::fs::remove_file(dir.path().join("captions.json")).unwrap();
    let (_, msg) = open_err(dir.path());
    assert!(
        msg.contains("captions.json") && msg.contains("captions.csv"),
        "{msg}"
    );
}

#[test]
fn csv_without_required_column_names_the_header() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("captions.csv"),
        "image,split,caption\n1,train,a cat\n",
    )
    .unwrap();
    write_st(dir.path(), &["1"], false);
    let (err, msg) = open_err(dir.path());
    assert!(matches!(err, DataError::Csv { line: 1, .. }), "{msg}");
    assert!(
        msg.contains("captions.csv:1") && msg.contains("image_id"),
        "{msg}"
    );
}
