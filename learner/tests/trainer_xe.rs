//! The learner's XE path end to end on a tiny synthetic data set: training
//! improves the model, and a resumed run is bit-for-bit the uninterrupted one.

#[path = "support/trainer.rs"]
mod support;
use support::{opts, tiny_data};

use caprl_data::{Dataset, Item};
use caprl_learner::eval::{evaluate, EvalOptions};
use caprl_learner::{checkpoint, Trainer};
use caprl_model::model::{Captioner, CaptionerConfig, Device, ModelKind};
use caprl_model::optim::AdamWParams;

fn tiny_model(data: &Dataset, hidden: usize) -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, data.vocab.len(), data.fc_dim(), None);
    cfg.model.embed = 32;
    cfg.model.hidden = hidden;
    cfg.model.dropout = 0.1;
    cfg
}

/// Runs XE steps until `steps` optimizer steps have been taken.
fn run_steps(trainer: &mut Trainer, data: &Dataset, steps: u64, batch: usize) -> Vec<f32> {
    let mut losses = Vec::new();
    while trainer.state.step < steps {
        let Some(idx) = trainer.next_batch(data.train.items.len(), batch) else {
            continue;
        };
        let items: Vec<&Item> = idx.iter().map(|&i| &data.train.items[i]).collect();
        losses.push(trainer.xe_step(data, &items, opts(3e-3)).unwrap().loss);
    }
    losses
}

fn weights(trainer: &Trainer) -> Vec<u8> {
    trainer.model.to_safetensors().unwrap()
}

#[test]
fn resumed_training_equals_uninterrupted_training_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path(), 24);
    let cfg = tiny_model(&data, 24);
    let dev = Device::Cpu;
    let adam = AdamWParams::default();

    // 2N steps straight through (crossing an epoch boundary: 24 images / batch 8 = 3 steps).
    let mut straight = Trainer::new(Captioner::new(&cfg, &dev, 1).unwrap(), adam, 11).unwrap();
    run_steps(&mut straight, &data, 8, 8);

    // N steps, checkpoint, a fresh process restores, N more steps.
    let ck_root = tmp.path().join("ck");
    let mut first = Trainer::new(Captioner::new(&cfg, &dev, 1).unwrap(), adam, 11).unwrap();
    run_steps(&mut first, &data, 4, 8);
    first.save(&ck_root, 2, &[]).unwrap();
    drop(first);
    let ck = checkpoint::latest_valid(&ck_root).unwrap().unwrap();
    let mut resumed = Trainer::restore(&ck, &cfg, &dev, adam, 11).unwrap();
    assert_eq!(resumed.state.step, 4);
    run_steps(&mut resumed, &data, 8, 8);

    assert_eq!(resumed.state, straight.state);
    assert!(
        weights(&resumed) == weights(&straight),
        "resumed weights differ from the uninterrupted run"
    );
}

#[test]
fn xe_training_lowers_loss_and_raises_validation_cider() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path(), 160);
    let cfg = tiny_model(&data, 64);
    let dev = Device::Cpu;
    let mut trainer = Trainer::new(
        Captioner::new(&cfg, &dev, 3).unwrap(),
        AdamWParams::default(),
        5,
    )
    .unwrap();
    let eval_opts = EvalOptions {
        beam: 1,
        samples: 0,
        ..EvalOptions::default()
    };
    let before = evaluate(&trainer.model, &data, &data.val.items, &eval_opts).unwrap();
    let losses = run_steps(&mut trainer, &data, 60, 16);
    let after = evaluate(&trainer.model, &data, &data.val.items, &eval_opts).unwrap();

    let head: f32 = losses[..5].iter().sum::<f32>() / 5.0;
    let tail: f32 = losses[losses.len() - 5..].iter().sum::<f32>() / 5.0;
    assert!(
        tail < 0.7 * head,
        "XE loss did not fall enough: {head:.3} → {tail:.3}"
    );
    let (c0, c1) = (before.metrics["cider_d"], after.metrics["cider_d"]);
    assert!(
        c1 > c0 + 0.3,
        "validation CIDEr-D did not rise by 0.3: {c0:.3} → {c1:.3}"
    );
}

#[test]
fn upcoming_batches_are_the_ones_next_batch_hands_out_across_epochs_and_stop_at_the_last() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path(), 24);
    let cfg = tiny_model(&data, 24);
    let adam = AdamWParams::default();
    let mut trainer =
        Trainer::new(Captioner::new(&cfg, &Device::Cpu, 1).unwrap(), adam, 11).unwrap();
    // 10 images, batches of 4: 3 batches per epoch (4, 4, 2); 2 epochs in all.
    let (n, batch, epochs) = (10, 4, 2);
    trainer.next_batch(n, batch).unwrap();
    let ahead = trainer.upcoming_batches(n, batch, 3, epochs);
    assert_eq!(
        ahead.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![4, 2, 4]
    );
    let mut handed = Vec::new();
    while handed.len() < 3 {
        match trainer.next_batch(n, batch) {
            Some(b) => handed.push(b),
            None => continue, // the end of epoch 0
        }
    }
    assert_eq!(
        ahead, handed,
        "issue ahead names the images the steps will train on"
    );
    // Two batches of the last epoch are left: asking for five gives those two.
    assert_eq!(trainer.upcoming_batches(n, batch, 5, epochs).len(), 2);
}
