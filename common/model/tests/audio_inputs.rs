//! Audio clips as model inputs: a clip repeated in a batch is encoded once.

use caprl_data::audio::{synth_audio, SynthAudioConfig};
use caprl_data::Dataset;
use caprl_model::model::{inputs_for_rows, Captioner, CaptionerConfig, Device, ModelKind};

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

#[test]
fn a_clip_repeated_in_a_batch_is_encoded_once_with_the_same_result() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    synth_audio(&dir, &tiny()).unwrap();
    let data = Dataset::open(&dir).unwrap();
    let mut cfg = CaptionerConfig::new(ModelKind::Crnn, data.vocab.len(), 64, data.att_shape());
    cfg.model.crnn_width = 4;
    cfg.model.embed = 8;
    cfg.model.hidden = 8;
    let m = Captioner::new(&cfg, &Device::Cpu, 1).unwrap();
    let rows = [0usize, 0, 3, 3, 3, 1];
    let x = inputs_for_rows(&data, &rows, &cfg, &Device::Cpu).unwrap();
    // Three distinct clips are held once each, six rows are decoded.
    assert_eq!(x.att.as_ref().unwrap().dims()[0], 3);
    assert_eq!(x.batch_size().unwrap(), 6);
    let together = m.greedy(&x, 6).unwrap();
    for (i, &r) in rows.iter().enumerate() {
        let alone = inputs_for_rows(&data, &[r], &cfg, &Device::Cpu).unwrap();
        let one = m.greedy(&alone, 6).unwrap();
        assert_eq!(one.tokens[0], together.tokens[i], "row {i} (clip {r})");
    }
}
