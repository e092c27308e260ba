//! `caprl features --clip DIR --images DIR --out DIR`: a folder of images becomes a features
//! file (ids = file stems, sorted) of the checkpoint's projection width; a folder without
//! images is a clear error.

mod support;

#[path = "../common/clip/tests/support/tiny_clip.rs"]
mod tiny_clip;

use std::path::Path;
use std::process::Output;

use image::{Rgb, RgbImage};
use support::{caprl, text};

/// Runs `caprl features -q --clip <clip> --images <images> --out <out>` to the end.
fn features(clip: &Path, images: &Path, out: &Path) -> Output {
    caprl()
        .args(["features", "-q", "--clip"])
        .arg(clip)
        .arg("--images")
        .arg(images)
        .arg("--out")
        .arg(out)
        .output()
        .expect("caprl runs")
}

#[test]
fn features_embeds_every_image_of_a_folder_sorted_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip");
    tiny_clip::write(&clip, &["a".into(), "cat".into()]);
    let images = dir.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    for (i, name) in ["b.png", "a.jpg", "c.JPEG", "notes.txt"].iter().enumerate() {
        let path = images.join(name);
        if name.ends_with(".txt") {
            std::fs::write(&path, "not an image").unwrap();
        } else {
            RgbImage::from_fn(40, 30, |x, y| {
                Rgb([(x * 5) as u8, (y * 7) as u8, (i * 60) as u8])
            })
            .save_with_format(&path, image::ImageFormat::from_path(&path).unwrap())
            .unwrap();
        }
    }
    let out = dir.path().join("features");
    let run = features(&clip, &images, &out);
    assert!(run.status.success(), "{}", text(&run));

    let ids: Vec<String> =
        serde_json::from_slice(&std::fs::read(out.join("features.ids.json")).unwrap()).unwrap();
    assert_eq!(ids, ["a", "b", "c"]);
    let bytes = std::fs::read(out.join("features.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let fc = st.tensor("fc").unwrap();
    assert_eq!(fc.shape(), [3, tiny_clip::PROJECTION]);
    let values: Vec<f32> = fc
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    for row in values.chunks(tiny_clip::PROJECTION) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "row norm {norm}");
    }
}

#[test]
fn features_without_images_says_which_files_it_looks_for() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip");
    tiny_clip::write(&clip, &["a".into()]);
    let images = dir.path().join("images");
    std::fs::create_dir_all(images.join("nested")).unwrap();
    std::fs::write(images.join("readme.md"), "no images here").unwrap();
    let run = features(&clip, &images, &dir.path().join("out"));
    assert!(!run.status.success(), "{}", text(&run));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("no .png, .jpg or .jpeg files"),
        "{}",
        text(&run)
    );
    assert!(!dir.path().join("out").exists());
}
