//! The audio front end (paper 000): WAV decoding ([`read_wav`]), resampling, the 64-band
//! log-mel spectrogram ([`LogMel`]), the Clotho captions format, feature preparation with a
//! cache ([`prepare_clotho`]) and generated sound scenes ([`synth_audio`]).
//!
//! Audio becomes an ordinary data set: normalised log-mel frames are the `att` features
//! `[N, frames, n_mels]` that the `crnn` model encodes, so training, rollouts and evaluation
//! handle audio exactly like image features (clips travel as ids).

mod clotho;
mod logmel;
mod prepare;
mod resample;
mod synth;
mod wav;

pub use clotho::{clotho_csv, read_clotho_csv, ClothoClip, CAPTION_COLUMNS, CLOTHO_SPLITS};
pub use logmel::{LogMel, MelConfig, LOG_FLOOR};
pub use prepare::{
    cached_logmel, prepare_clotho, AudioNorm, PrepareConfig, PrepareSummary, AUDIO_NORM_JSON,
    MEL_CACHE_DIR,
};
pub use resample::resample;
pub use synth::{synth_audio, SynthAudioConfig};
pub use wav::{read_wav, write_wav_i16, Clip, MAX_CHANNELS};
