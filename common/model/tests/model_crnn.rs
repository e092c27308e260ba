//! The CRNN audio encoder (paper 000): size, shapes, time subsampling, gradients, and running
//! batch-norm statistics that survive a save/load.

#[path = "support/gradcheck.rs"]
mod gradcheck;

use caprl_model::model::{
    batch_tokens, crnn_param_count, Captioner, CaptionerConfig, DType, Device, Inputs, ModelKind,
};
use gradcheck::{assert_gradients_match, loss};

fn cfg(width: usize, frames: usize, dtype: DType) -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(ModelKind::Crnn, 9, 64, Some((frames, 64)));
    cfg.model.crnn_width = width;
    cfg.model.embed = 4;
    cfg.model.hidden = 6;
    cfg.max_len = 5;
    cfg.model.dropout = 0.0;
    cfg.dtype = dtype;
    cfg.compute_dtype = dtype;
    cfg
}

fn inputs(cfg: &CaptionerConfig, b: usize) -> Inputs {
    let (frames, mels) = cfg.att.unwrap();
    let fc: Vec<f32> = (0..b * cfg.fc_dim).map(|i| (i % 5) as f32 / 5.0).collect();
    let att: Vec<f32> = (0..b * frames * mels)
        .map(|i| ((i * 7919 % 101) as f32 - 50.0) / 25.0)
        .collect();
    Inputs::from_host(&fc, Some(&att), b, cfg, &Device::Cpu).unwrap()
}

#[test]
fn crnn_parameter_count_is_the_papers_679k() {
    // 5 conv layers (480,064) + 5 batch norms (834) + BiGRU 128 (198,144).
    assert_eq!(crnn_param_count(128, 64), 679_042);
    let m = Captioner::new(&cfg(128, 8, DType::F32), &Device::Cpu, 1).unwrap();
    let data = m.varmap().data().lock().unwrap();
    let in_model: usize = data
        .iter()
        .filter(|(n, _)| n.starts_with("crnn.") && !n.contains("running"))
        .map(|(_, v)| v.elem_count())
        .sum();
    assert_eq!(in_model, 679_042);
}

#[test]
fn crnn_output_shape_and_time_subsampling() {
    for (frames, width) in [(8, 4), (51, 6), (150, 3)] {
        let c = cfg(width, frames, DType::F32);
        let m = Captioner::new(&c, &Device::Cpu, 3).unwrap();
        let x = inputs(&c, 3);
        let (conv, v) = m.audio_encoding(x.att.as_ref().unwrap()).unwrap();
        assert_eq!(conv.dims(), &[3, frames / 4, 1, width], "{frames} frames");
        assert_eq!(v.dims(), &[3, 2 * width]);
    }
    // Too few frames or a band count the pools cannot divide is refused, not mis-shaped.
    let mut bad = cfg(4, 3, DType::F32);
    assert!(bad.validate().is_err());
    bad.att = Some((8, 40));
    assert!(bad.validate().unwrap_err().to_string().contains("crnn"));
}

#[test]
fn crnn_gradients_match_finite_differences() {
    let c = cfg(2, 8, DType::F64);
    let m = Captioner::new(&c, &Device::Cpu, 5).unwrap();
    let x = inputs(&c, 2);
    let encoder = |name: &str| name.starts_with("crnn.") && !name.contains("running");
    let entries = |n: usize| vec![0, n / 2, n - 1];
    let checked = assert_gradients_match(
        &m,
        &x,
        &[vec![4, 5, 6, 2], vec![7, 2]],
        encoder,
        entries,
        1e-4,
    );
    assert_eq!(checked, 5 * 4 + 8);
}

#[test]
fn running_statistics_are_learned_in_training_and_saved_with_the_weights() {
    let c = cfg(4, 16, DType::F32);
    let m = Captioner::new(&c, &Device::Cpu, 9).unwrap();
    let x = inputs(&c, 4);
    let mel = x.att.clone().unwrap();
    let (_, before) = m.audio_encoding(&mel).unwrap();
    let seqs = batch_tokens(
        &[vec![4, 2], vec![5, 2], vec![6, 2], vec![7, 2]],
        &Device::Cpu,
    )
    .unwrap();
    for _ in 0..3 {
        loss(&m, &x, &seqs);
    }
    let running = |m: &Captioner| {
        m.varmap().data().lock().unwrap()["crnn.bn1.running_mean"]
            .as_tensor()
            .to_vec1::<f32>()
            .unwrap()
    };
    assert!(
        running(&m).iter().any(|&v| v != 0.0),
        "training passes update the running mean"
    );
    let (_, after) = m.audio_encoding(&mel).unwrap();
    let moved = (after - &before).unwrap().abs().unwrap().sum_all().unwrap();
    assert!(
        moved.to_scalar::<f32>().unwrap() > 0.0,
        "decoding uses the running statistics"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crnn.safetensors");
    m.save(&path).unwrap();
    let back = Captioner::load(&path, &c, &Device::Cpu).unwrap();
    assert_eq!(running(&back), running(&m));
    let a = m.greedy(&x, 5).unwrap();
    let b = back.greedy(&x, 5).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

#[test]
fn policy_gradient_passes_use_running_statistics_and_leave_them_unchanged() {
    let c = cfg(4, 16, DType::F32);
    let m = Captioner::new(&c, &Device::Cpu, 11).unwrap();
    let x = inputs(&c, 3);
    let seqs = batch_tokens(&[vec![4, 2], vec![5, 6, 2], vec![7, 2]], &Device::Cpu).unwrap();
    // Some XE passes move the running statistics away from their start.
    loss(&m, &x, &seqs);
    let running = || {
        m.varmap().data().lock().unwrap()["crnn.bn2.running_var"]
            .as_tensor()
            .to_vec1::<f32>()
            .unwrap()
    };
    let before = running();
    m.set_running_norm(true);
    let (all, _) = m.token_logprobs(&x, &seqs, None).unwrap();
    assert_eq!(running(), before, "running statistics are not updated");
    // With running statistics a clip's log-probabilities do not depend on its batch mates.
    let first = x.select_rows(&[0]).unwrap();
    let (alone, _) = m
        .token_logprobs(&first, &seqs.narrow(0, 0, 1).unwrap(), None)
        .unwrap();
    let a = all.get(0).unwrap().to_vec1::<f32>().unwrap();
    let b = alone.get(0).unwrap().to_vec1::<f32>().unwrap();
    for (u, v) in a.iter().zip(&b) {
        assert!((u - v).abs() < 1e-5, "{a:?} vs {b:?}");
    }
    // Gradients still reach the encoder.
    let grads = all.sum_all().unwrap().backward().unwrap();
    let data = m.varmap().data().lock().unwrap();
    assert!(grads.get(data["crnn.conv3.weight"].as_tensor()).is_some());
    m.set_running_norm(false);
}
