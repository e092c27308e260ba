//! WAV decoding to one mono `f64` channel in `[-1, 1]`: PCM 16/24/32-bit integer or 32-bit
//! float, mono or several channels averaged (downmix). Every error names the file and says
//! how to convert it.

use std::path::Path;

use hound::{SampleFormat, WavReader};

use crate::DataError;

/// Most channels accepted for a downmix (7.1 surround).
pub const MAX_CHANNELS: u16 = 8;

/// A decoded clip: mono samples and their rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    pub samples: Vec<f64>,
    pub sample_rate: u32,
}

fn bad(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Audio {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

const CONVERT: &str = "convert it to 16-bit PCM WAV (e.g. `sox IN -b 16 OUT.wav` or `ffmpeg -i IN -c:a pcm_s16le OUT.wav`)";

/// An error while reading the samples: the header was fine, so the data chunk is short.
fn sample_err(path: &Path, e: hound::Error) -> DataError {
    match e {
        hound::Error::IoError(io) => bad(
            path,
            format!("the data chunk is truncated ({io}): the file ends before the samples its header announces; re-export or re-download the file"),
        ),
        other => hound_err(path, other),
    }
}

fn hound_err(path: &Path, e: hound::Error) -> DataError {
    match e {
        hound::Error::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => bad(
            path,
            "the data chunk is truncated (the file ends before the samples its header announces); re-export or re-download the file",
        ),
        hound::Error::IoError(io) => DataError::Io {
            path: path.to_path_buf(),
            source: io,
        },
        hound::Error::FormatError(m) => bad(path, format!("not a readable WAV file ({m}); {CONVERT}")),
        hound::Error::Unsupported => bad(
            path,
            format!("unsupported WAV encoding (compressed or an unusual format tag); {CONVERT}"),
        ),
        other => bad(path, format!("{other}; {CONVERT}")),
    }
}

/// Reads `path` and averages its channels.
pub fn read_wav(path: &Path) -> Result<Clip, DataError> {
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut reader =
        WavReader::new(std::io::BufReader::new(file)).map_err(|e| hound_err(path, e))?;
    let spec = reader.spec();
    if spec.channels == 0 || spec.channels > MAX_CHANNELS {
        return Err(bad(
            path,
            format!(
                "{} channels; expected 1 to {MAX_CHANNELS} (they are averaged to mono)",
                spec.channels
            ),
        ));
    }
    if spec.sample_rate == 0 {
        return Err(bad(
            path,
            "sample rate 0 in the header; the file is corrupt",
        ));
    }
    if reader.len() == 0 {
        return Err(bad(
            path,
            "no samples (zero-length audio); remove the clip or replace it",
        ));
    }
    let interleaved: Vec<f64> = match (spec.sample_format, spec.bits_per_sample) {
        (SampleFormat::Int, bits @ (16 | 24 | 32)) => {
            let scale = 1.0 / (1u64 << (bits - 1)) as f64;
            reader
                .samples::<i32>()
                .map(|s| s.map(|v| v as f64 * scale))
                .collect::<Result<_, _>>()
                .map_err(|e| sample_err(path, e))?
        }
        (SampleFormat::Float, 32) => reader
            .samples::<f32>()
            .map(|s| s.map(|v| v as f64))
            .collect::<Result<_, _>>()
            .map_err(|e| sample_err(path, e))?,
        (format, bits) => {
            let kind = match format {
                SampleFormat::Int => "integer PCM",
                SampleFormat::Float => "float",
            };
            return Err(bad(
                path,
                format!("unsupported sample format {bits}-bit {kind}; supported: 16/24/32-bit integer PCM and 32-bit float; {CONVERT}"),
            ));
        }
    };
    let c = spec.channels as usize;
    let samples = interleaved
        .chunks_exact(c)
        .map(|frame| frame.iter().sum::<f64>() / c as f64)
        .collect::<Vec<_>>();
    if let Some(i) = samples.iter().position(|v| !v.is_finite()) {
        return Err(bad(
            path,
            format!("sample {i} is NaN or infinite; re-export the file"),
        ));
    }
    Ok(Clip {
        samples,
        sample_rate: spec.sample_rate,
    })
}

/// Writes mono `samples` in `[-1, 1]` as 16-bit PCM (values outside are clipped).
pub fn write_wav_i16(path: &Path, samples: &[f64], sample_rate: u32) -> Result<(), DataError> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate,
        bits_per_sample: 16,
        sample_format: SampleFormat::Int,
    };
    let err = |e: hound::Error| hound_err(path, e);
    let mut w = hound::WavWriter::create(path, spec).map_err(err)?;
    for &s in samples {
        let v = (s.clamp(-1.0, 1.0) * 32767.0).round() as i16;
        w.write_sample(v).map_err(err)?;
    }
    w.finalize().map_err(err)
}
