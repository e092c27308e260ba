//! The audio front end: log-mel against a NumPy reference, frame counts, WAV decoding,
//! resampling, and clear errors for bad audio.

use std::path::Path;

use caprl_data::audio::{read_wav, resample, LogMel, MelConfig, MAX_CHANNELS};

fn reference() -> serde_json::Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/audio/logmel_sine_reference.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn logmel_of_sine_matches_numpy_reference() {
    let r = reference();
    let sr = r["sample_rate"].as_u64().unwrap() as u32;
    let n = r["samples"].as_u64().unwrap() as usize;
    let x: Vec<f64> = (0..n)
        .map(|i| {
            let t = i as f64 / sr as f64;
            0.5 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()
                + 0.25 * (2.0 * std::f64::consts::PI * 3000.0 * t).sin()
        })
        .collect();
    let cfg = MelConfig {
        sample_rate: sr,
        ..MelConfig::default()
    };
    assert_eq!(cfg.win_length() as u64, r["win_length"].as_u64().unwrap());
    assert_eq!(cfg.hop_length() as u64, r["hop_length"].as_u64().unwrap());
    let mel = LogMel::new(cfg).unwrap().compute(&x);
    let want: Vec<f64> = r["logmel"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()))
        .collect();
    assert_eq!(mel.len(), want.len(), "frames x bands");
    let worst = mel
        .iter()
        .zip(&want)
        .map(|(a, b)| (*a as f64 - b).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-4, "largest difference from NumPy {worst}");
    // The 440 Hz band is the loudest of the lower half, as a sanity check of the layout.
    let frame = &mel[10 * 64..11 * 64];
    let loudest = (0..32)
        .max_by(|&a, &b| frame[a].total_cmp(&frame[b]))
        .unwrap();
    assert!((8..=14).contains(&loudest), "440 Hz peak in band {loudest}");
}

#[test]
fn frame_count_follows_window_hop_and_fft_sizes() {
    for (sr, samples) in [
        (16_000u32, 16_000usize),
        (16_000, 100),
        (44_100, 44_100 * 3),
        (8_000, 7_999),
    ] {
        let cfg = MelConfig {
            sample_rate: sr,
            ..MelConfig::default()
        };
        let hop = (sr as f64 * 0.020).round() as usize;
        assert_eq!(cfg.hop_length(), hop);
        assert_eq!(cfg.win_length(), (sr as f64 * 0.040).round() as usize);
        let mel = LogMel::new(cfg).unwrap().compute(&vec![0.1; samples]);
        assert_eq!(
            mel.len(),
            (1 + samples / hop) * 64,
            "sr {sr}, {samples} samples"
        );
    }
    // One second at 16 kHz with a 20 ms hop: 51 centred frames.
    assert_eq!(MelConfig::default().frames(16_000), 51);
    let bad = MelConfig {
        n_fft: 512,
        sample_rate: 44_100,
        ..MelConfig::default()
    };
    let err = LogMel::new(bad).err().unwrap();
    assert!(err.contains("n_fft"), "{err}");
}

fn sine(sr: u32, f: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 0.5 * (2.0 * std::f64::consts::PI * f * i as f64 / sr as f64).sin())
        .collect()
}

fn write(path: &Path, spec: hound::WavSpec, frames: &[Vec<f64>]) {
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for frame in frames {
        for &v in frame {
            match (spec.sample_format, spec.bits_per_sample) {
                (hound::SampleFormat::Float, _) => w.write_sample(v as f32).unwrap(),
                (_, 8) => w.write_sample((v * 127.0) as i8).unwrap(),
                (_, 16) => w.write_sample((v * 32767.0) as i16).unwrap(),
                (_, bits) => w
                    .write_sample((v * ((1i64 << (bits - 1)) - 1) as f64) as i32)
                    .unwrap(),
            }
        }
    }
    w.finalize().unwrap();
}

fn spec(channels: u16, bits: u16, format: hound::SampleFormat) -> hound::WavSpec {
    hound::WavSpec {
        channels,
        sample_rate: 16_000,
        bits_per_sample: bits,
        sample_format: format,
    }
}

#[test]
fn wav_formats_decode_to_the_same_mono_signal() {
    let dir = tempfile::tempdir().unwrap();
    let x = sine(16_000, 500.0, 1600);
    let mono: Vec<Vec<f64>> = x.iter().map(|&v| vec![v]).collect();
    let cases: Vec<(&str, hound::WavSpec, Vec<Vec<f64>>, f64)> = vec![
        (
            "pcm16.wav",
            spec(1, 16, hound::SampleFormat::Int),
            mono.clone(),
            1e-4,
        ),
        (
            "pcm24.wav",
            spec(1, 24, hound::SampleFormat::Int),
            mono.clone(),
            1e-6,
        ),
        (
            "float.wav",
            spec(1, 32, hound::SampleFormat::Float),
            mono.clone(),
            1e-7,
        ),
        // Stereo is averaged to mono.
        (
            "stereo.wav",
            spec(2, 16, hound::SampleFormat::Int),
            x.iter().map(|&v| vec![v, v * 0.5]).collect(),
            1e-4,
        ),
    ];
    for (name, spec, frames, tol) in cases {
        let path = dir.path().join(name);
        write(&path, spec, &frames);
        let clip = read_wav(&path).unwrap();
        assert_eq!(clip.sample_rate, 16_000);
        assert_eq!(clip.samples.len(), x.len(), "{name}");
        let want: Vec<f64> = frames
            .iter()
            .map(|f| f.iter().sum::<f64>() / f.len() as f64)
            .collect();
        let worst = clip
            .samples
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(worst < tol, "{name}: off by {worst}");
    }
}

#[test]
fn resampling_keeps_a_tone_and_removes_what_the_new_rate_cannot_hold() {
    // 1 kHz at 48 kHz → 16 kHz matches 1 kHz generated at 16 kHz (away from the edges).
    let y = resample(&sine(48_000, 1000.0, 48_000), 48_000, 16_000);
    assert_eq!(y.len(), 16_000);
    let want = sine(16_000, 1000.0, 16_000);
    let worst = y[200..15_800]
        .iter()
        .zip(&want[200..15_800])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-2, "tone off by {worst}");
    // 12 kHz is above the new Nyquist frequency (8 kHz): it is filtered out, not aliased.
    let z = resample(&sine(48_000, 12_000.0, 48_000), 48_000, 16_000);
    let rms = (z[200..15_800].iter().map(|v| v * v).sum::<f64>() / 15_600.0).sqrt();
    assert!(rms < 0.02, "12 kHz leaked with rms {rms}");
    // Upsampling keeps the length ratio.
    assert_eq!(resample(&want, 16_000, 44_100).len(), 44_100);
}

fn error_of(path: &Path) -> String {
    let err = read_wav(path)
        .expect_err("bad audio must be refused")
        .to_string();
    assert!(
        err.contains(&path.display().to_string()),
        "error does not name the file: {err}"
    );
    err
}

fn valid_pcm16(path: &Path, n: usize) {
    write(
        path,
        spec(1, 16, hound::SampleFormat::Int),
        &sine(16_000, 300.0, n)
            .into_iter()
            .map(|v| vec![v])
            .collect::<Vec<_>>(),
    );
}

#[test]
fn bad_audio_is_refused_with_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();

    let not_riff = dir.path().join("not_riff.wav");
    std::fs::write(&not_riff, b"ID3\x03\x00 this is an mp3, not a wav file").unwrap();
    let err = error_of(&not_riff);
    assert!(err.contains("RIFF") && err.contains("convert"), "{err}");

    let truncated = dir.path().join("truncated.wav");
    valid_pcm16(&truncated, 4000);
    let bytes = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 1001]).unwrap();
    let err = error_of(&truncated);
    assert!(err.contains("data chunk is truncated"), "{err}");

    let eight_bit = dir.path().join("pcm8.wav");
    write(
        &eight_bit,
        spec(1, 8, hound::SampleFormat::Int),
        &[vec![0.1], vec![0.2]],
    );
    let err = error_of(&eight_bit);
    assert!(err.contains("unsupported sample format 8-bit"), "{err}");

    let empty = dir.path().join("empty.wav");
    write(&empty, spec(1, 16, hound::SampleFormat::Int), &[]);
    let err = error_of(&empty);
    assert!(err.contains("zero-length"), "{err}");

    let many = dir.path().join("many_channels.wav");
    let ch = MAX_CHANNELS + 1;
    write(
        &many,
        spec(ch, 16, hound::SampleFormat::Int),
        &[vec![0.1; ch as usize]],
    );
    let err = error_of(&many);
    assert!(err.contains(&format!("{ch} channels")), "{err}");

    // A header claiming zero channels (bytes 22..24 of the canonical header).
    let zero_ch = dir.path().join("zero_channels.wav");
    valid_pcm16(&zero_ch, 100);
    let mut bytes = std::fs::read(&zero_ch).unwrap();
    bytes[22] = 0;
    bytes[23] = 0;
    std::fs::write(&zero_ch, bytes).unwrap();
    let err = error_of(&zero_ch);
    assert!(err.contains("channels"), "{err}");

    let missing = dir.path().join("missing.wav");
    error_of(&missing);
}
