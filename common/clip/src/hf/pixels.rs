//! Image files → CLIP pixel values, as transformers' `CLIPImageProcessor` makes them: resize
//! the shortest side to `image_size` (bicubic), center crop to a square, scale to `[0, 1]`,
//! normalise each channel with the CLIP mean and std.

use std::path::Path;

use image::imageops::{self, FilterType};
use image::RgbImage;

use crate::{ClipError, Result};

// The values as OpenAI and transformers publish them, digit for digit, so they can be checked.
/// Per-channel (RGB) mean of the CLIP training images.
#[allow(clippy::excessive_precision)]
const MEAN: [f32; 3] = [0.48145466, 0.4578275, 0.40821073];
/// Per-channel (RGB) standard deviation of the CLIP training images.
#[allow(clippy::excessive_precision)]
const STD: [f32; 3] = [0.26862954, 0.26130258, 0.27577711];

/// The pixel values of one image, channel-major `3 × size × size`.
pub(crate) fn load(path: &Path, size: usize) -> Result<Vec<f32>> {
    let bad = |reason: String| ClipError::File {
        path: path.to_path_buf(),
        reason,
    };
    let decoded = image::io::Reader::open(path)
        .map_err(|e| bad(format!("cannot open: {e}")))?
        .with_guessed_format()
        .map_err(|e| bad(format!("cannot read: {e}")))?
        .decode()
        .map_err(|e| bad(format!("cannot decode ({e}); expected a PNG or JPEG image")))?;
    let rgb = decoded.to_rgb8();
    if rgb.width() == 0 || rgb.height() == 0 {
        return Err(bad("the image is empty (0 pixels)".into()));
    }
    let square = resize_and_crop(&rgb, u32::try_from(size).unwrap_or(u32::MAX));
    Ok(normalise(&square))
}

/// Shortest side to `size` (the other scaled and floored, as transformers does), then the
/// central `size × size` square.
fn resize_and_crop(rgb: &RgbImage, size: u32) -> RgbImage {
    let (w, h) = rgb.dimensions();
    if (w, h) == (size, size) {
        return rgb.clone();
    }
    let scaled = |long: u32, short: u32| {
        let n = u64::from(size) * u64::from(long) / u64::from(short);
        u32::try_from(n).unwrap_or(u32::MAX).max(size)
    };
    let (nw, nh) = if w <= h {
        (size, scaled(h, w))
    } else {
        (scaled(w, h), size)
    };
    let resized = imageops::resize(rgb, nw, nh, FilterType::CatmullRom);
    imageops::crop_imm(&resized, (nw - size) / 2, (nh - size) / 2, size, size).to_image()
}

/// `(x / 255 - mean) / std`, channel-major.
fn normalise(square: &RgbImage) -> Vec<f32> {
    let plane = (square.width() * square.height()) as usize;
    let mut out = vec![0f32; 3 * plane];
    for (i, pixel) in square.pixels().enumerate() {
        for c in 0..3 {
            out[c * plane + i] = (f32::from(pixel[c]) / 255.0 - MEAN[c]) / STD[c];
        }
    }
    out
}
