//! `caprl data synth-audio`: generated sound scenes as real WAV files with Clotho-style
//! captions, so the audio path can be trained and tested without a download.
//!
//! A clip is 2–3 events one after another, each from one family, with a loudness:
//! tones (low / mid / high pitch), chirps (rising / falling sweeps), noise bursts (white hiss,
//! pink rush, brown rumble) and rhythmic clicks (fast / slow), over a faint noise floor.
//! Its five references mention different subsets of the events (all in order, the first,
//! the last, a pair, or only how many sounds there are), so a caption that names what is
//! actually heard scores higher than a generic one.
//!
//! Output (deterministic per seed): `clotho/clotho_captions_{development,validation,evaluation}.csv`
//! and 16-bit WAVs in `clotho/{development,validation,evaluation}/`, then the prepared
//! features of [`super::prepare`] in the same directory.

use std::f64::consts::PI;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::clotho::{clotho_csv, CAPTION_COLUMNS, CLOTHO_SPLITS};
use super::prepare::{prepare_clotho, PrepareConfig, PrepareSummary};
use super::wav::write_wav_i16;
use crate::atomic::write_atomic;
use crate::DataError;

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthAudioConfig {
    pub seed: u64,
    pub train: usize,
    pub val: usize,
    pub test: usize,
    /// Clip length in seconds.
    pub seconds: f64,
    /// Rate the WAVs are written at (the front end resamples to its own).
    pub sample_rate: u32,
    pub prepare: PrepareConfig,
}

impl Default for SynthAudioConfig {
    fn default() -> Self {
        SynthAudioConfig {
            seed: 42,
            train: 400,
            val: 50,
            test: 100,
            seconds: 3.0,
            sample_rate: 16_000,
            prepare: PrepareConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Family {
    Tone(usize),
    Chirp(bool),
    Noise(usize),
    Clicks(bool),
}

#[derive(Debug, Clone, Copy)]
struct Event {
    family: Family,
    loud: bool,
}

const PITCH_HZ: [f64; 3] = [220.0, 880.0, 3520.0];
const PITCH_WORDS: [&[&str]; 3] = [
    &["low", "deep", "low pitched"],
    &["medium pitched", "mid pitched"],
    &["high", "shrill", "high pitched"],
];
const TONE_NOUNS: [&str; 3] = ["tone", "beep", "hum"];
const NOISE_WORDS: [&[&str]; 3] = [
    &["hiss", "burst of static", "burst of white noise"],
    &["rushing noise", "whoosh", "rush of wind"],
    &["rumble", "low roar", "deep rumble"],
];

impl Event {
    fn draw(rng: &mut ChaCha8Rng) -> Self {
        let family = match rng.random_range(0..4) {
            0 => Family::Tone(rng.random_range(0..3)),
            1 => Family::Chirp(rng.random_bool(0.5)),
            2 => Family::Noise(rng.random_range(0..3)),
            _ => Family::Clicks(rng.random_bool(0.5)),
        };
        Event {
            family,
            loud: rng.random_bool(0.5),
        }
    }

    /// A noun phrase for the event, e.g. "a loud high pitched beep".
    fn phrase(&self, rng: &mut ChaCha8Rng, loudness: bool) -> String {
        let pick = |rng: &mut ChaCha8Rng, w: &[&str]| w[rng.random_range(0..w.len())].to_string();
        let body = match self.family {
            Family::Tone(p) => format!("{} {}", pick(rng, PITCH_WORDS[p]), pick(rng, &TONE_NOUNS)),
            Family::Chirp(true) => pick(rng, &["rising chirp", "upward sweep", "rising whistle"]),
            Family::Chirp(false) => {
                pick(rng, &["falling chirp", "downward sweep", "falling whistle"])
            }
            Family::Noise(c) => pick(rng, NOISE_WORDS[c]),
            Family::Clicks(true) => pick(rng, &["fast clicking", "rapid ticking", "quick clicks"]),
            Family::Clicks(false) => pick(rng, &["slow ticking", "slow clicks", "steady knocking"]),
        };
        let body = if loudness {
            let adj = if self.loud {
                pick(rng, &["loud", "strong"])
            } else {
                pick(rng, &["quiet", "faint", "soft"])
            };
            format!("{adj} {body}")
        } else {
            body
        };
        // Plural-like click phrases take no article.
        if matches!(self.family, Family::Clicks(_)) && !body.ends_with("ticking") {
            return body;
        }
        let article = if body.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        format!("{article} {body}")
    }

    /// Adds the event to `out[start..end]`.
    fn render(&self, rng: &mut ChaCha8Rng, out: &mut [f64], sr: f64) {
        let n = out.len();
        let mut src = vec![0.0; n];
        match self.family {
            Family::Tone(p) => {
                let f = PITCH_HZ[p] * (1.0 + 0.03 * (rng.random::<f64>() - 0.5));
                for (i, s) in src.iter_mut().enumerate() {
                    *s = (2.0 * PI * f * i as f64 / sr).sin();
                }
            }
            Family::Chirp(up) => {
                let (f0, f1): (f64, f64) = if up { (300.0, 4000.0) } else { (4000.0, 300.0) };
                let dur = n as f64 / sr;
                let k = (f1 / f0).ln() / dur;
                for (i, s) in src.iter_mut().enumerate() {
                    let t = i as f64 / sr;
                    *s = (2.0 * PI * f0 * ((k * t).exp() - 1.0) / k).sin();
                }
            }
            Family::Noise(colour) => {
                let (mut b0, mut b1, mut b2, mut brown) = (0.0, 0.0, 0.0, 0.0);
                for s in src.iter_mut() {
                    let w = gauss(rng);
                    *s = match colour {
                        0 => w,
                        1 => {
                            b0 = 0.99765 * b0 + w * 0.099046;
                            b1 = 0.963 * b1 + w * 0.2965164;
                            b2 = 0.57 * b2 + w * 1.0526913;
                            b0 + b1 + b2 + w * 0.1848
                        }
                        _ => {
                            brown = 0.995 * brown + 0.1 * w;
                            brown
                        }
                    };
                }
            }
            Family::Clicks(fast) => {
                let rate = if fast { 12.0 } else { 3.0 };
                let period = (sr / rate) as usize;
                let click = (0.004 * sr) as usize;
                let mut start = rng.random_range(0..period / 2 + 1);
                while start < n {
                    for j in 0..click.min(n - start) {
                        let t = j as f64 / sr;
                        src[start + j] = (2.0 * PI * 2000.0 * t).sin() * (-t / 0.001).exp();
                    }
                    start += period;
                }
            }
        }
        let peak = src.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-9);
        let gain = if self.loud { 0.6 } else { 0.12 } / peak;
        let fade = ((0.01 * sr) as usize).min(n / 2).max(1);
        for (i, (o, s)) in out.iter_mut().zip(&src).enumerate() {
            let env = (i.min(n - 1 - i) as f64 / fade as f64).min(1.0);
            *o += s * gain * env;
        }
    }
}

fn gauss(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(1e-12);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
}

const COUNT_WORDS: [&str; 4] = ["", "one", "two", "three"];

/// Five references mentioning different subsets of `events` (in clip order).
fn references(events: &[Event], rng: &mut ChaCha8Rng) -> Vec<String> {
    let n = events.len();
    let mut pool: Vec<String> = Vec::new();
    let all: Vec<String> = events.iter().map(|e| e.phrase(rng, true)).collect();
    pool.push(match n {
        2 => format!("{} followed by {}", all[0], all[1]),
        _ => format!("{} then {} and finally {}", all[0], all[1], all[2]),
    });
    let bare: Vec<String> = events.iter().map(|e| e.phrase(rng, false)).collect();
    pool.push(format!("{} is heard and then {}", bare[0], bare[1]));
    pool.push(format!(
        "the clip starts with {}",
        events[0].phrase(rng, true)
    ));
    let loudness = rng.random_bool(0.5);
    pool.push(format!(
        "{} can be heard at the end",
        events[n - 1].phrase(rng, loudness)
    ));
    let (i, j) = if n == 3 && rng.random_bool(0.5) {
        (0, 2)
    } else {
        (n - 2, n - 1)
    };
    pool.push(format!(
        "{} and {}",
        events[i].phrase(rng, false),
        events[j].phrase(rng, true)
    ));
    pool.push(match rng.random_range(0..3) {
        0 => format!("{} different sounds play one after another", COUNT_WORDS[n]),
        1 => "several electronic sounds play in a sequence".to_string(),
        _ => format!("a sequence of {} sounds", COUNT_WORDS[n]),
    });
    // Keep the full description, drop one of the others at random.
    let drop = rng.random_range(1..pool.len());
    pool.remove(drop);
    pool
}

/// One clip's samples and references.
fn clip(rng: &mut ChaCha8Rng, len: usize, sr: f64) -> (Vec<f64>, Vec<String>) {
    let n_events = if rng.random_bool(0.5) { 2 } else { 3 };
    let events: Vec<Event> = (0..n_events).map(|_| Event::draw(rng)).collect();
    let mut x: Vec<f64> = (0..len).map(|_| 0.003 * gauss(rng)).collect();
    // Segment boundaries: equal shares, jittered, with short gaps between events.
    let share = len / n_events;
    let gap = (0.08 * sr) as usize;
    for (k, e) in events.iter().enumerate() {
        let jitter = rng.random_range(0..share / 8 + 1);
        let start = k * share + jitter;
        let end = ((k + 1) * share)
            .saturating_sub(gap)
            .max(start + 1)
            .min(len);
        e.render(rng, &mut x[start..end], sr);
    }
    (x, references(&events, rng))
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Generates the clips under `out/clotho` and prepares the features in `out`.
pub fn synth_audio(out: &Path, cfg: &SynthAudioConfig) -> Result<PrepareSummary, DataError> {
    if out.exists()
        && std::fs::read_dir(out)
            .map_err(|e| DataError::io(out, e))?
            .next()
            .is_some()
    {
        return Err(DataError::OutputExists {
            path: out.to_path_buf(),
        });
    }
    for (flag, n) in [
        ("--train", cfg.train),
        ("--val", cfg.val),
        ("--test", cfg.test),
    ] {
        if n == 0 {
            return Err(DataError::invalid(
                out,
                format!("{flag} must be at least 1"),
            ));
        }
    }
    if !(0.5..=60.0).contains(&cfg.seconds) {
        return Err(DataError::invalid(
            out,
            format!("--seconds {} must be between 0.5 and 60", cfg.seconds),
        ));
    }
    let root: PathBuf = out.join("clotho");
    let sr = cfg.sample_rate as f64;
    let len = (cfg.seconds * sr).round() as usize;
    for (split_idx, ((name, _), count)) in CLOTHO_SPLITS
        .iter()
        .zip([cfg.train, cfg.val, cfg.test])
        .enumerate()
    {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| DataError::io(&dir, e))?;
        // One stream per split, so changing one split's size leaves the others unchanged.
        let mut rng =
            ChaCha8Rng::seed_from_u64(cfg.seed.wrapping_mul(31).wrapping_add(split_idx as u64));
        let mut csv = format!("file_name,{}\n", CAPTION_COLUMNS.join(","));
        for i in 0..count {
            let file_name = format!("{name}_{i:05}.wav");
            let (x, refs) = clip(&mut rng, len, sr);
            write_wav_i16(&dir.join(&file_name), &x, cfg.sample_rate)?;
            let fields: Vec<String> = refs.iter().map(|r| csv_field(r)).collect();
            csv.push_str(&format!("{file_name},{}\n", fields.join(",")));
        }
        write_atomic(&clotho_csv(&root, name), csv.as_bytes())?;
    }
    prepare_clotho(&root, out, &cfg.prepare)
}
