//! The teacher-forced decoder's gradients match central finite differences (f64, tiny model).

#[path = "support/gradcheck.rs"]
mod gradcheck;

use caprl_model::model::{Captioner, CaptionerConfig, DType, Device, Inputs, ModelKind, RnnKind};
use gradcheck::assert_gradients_match;

fn tiny(kind: ModelKind, rnn: RnnKind, layers: usize) -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(kind, 9, 5, Some((3, 4)));
    cfg.model.rnn = rnn;
    cfg.model.layers = layers;
    cfg.model.embed = 4;
    cfg.model.hidden = 6;
    cfg.model.att_hidden = 5;
    cfg.max_len = 5;
    cfg.model.dropout = 0.0;
    cfg.dtype = DType::F64;
    cfg.compute_dtype = DType::F64;
    cfg
}

fn inputs(cfg: &CaptionerConfig) -> Inputs {
    let b = 2;
    let fc: Vec<f32> = (0..b * cfg.fc_dim)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0)
        .collect();
    let att: Vec<f32> = (0..b * 3 * 4)
        .map(|i| ((i * 5 % 13) as f32 - 6.0) / 6.0)
        .collect();
    Inputs::from_host(&fc, Some(&att), b, cfg, &Device::Cpu).unwrap()
}

fn check(kind: ModelKind, rnn: RnnKind, layers: usize) {
    check_rows(kind, rnn, layers, None);
}

/// As [`check`], on the batch's `rows` (an image repeated, as for its captions) when given.
fn check_rows(kind: ModelKind, rnn: RnnKind, layers: usize, rows: Option<&[usize]>) {
    let cfg = tiny(kind, rnn, layers);
    let m = Captioner::new(&cfg, &Device::Cpu, 7).unwrap();
    let mut x = inputs(&cfg);
    let mut seqs = vec![vec![4, 5, 6, 2], vec![7, 2]];
    if let Some(rows) = rows {
        x = x.select_rows(rows).unwrap();
        seqs = (0..rows.len())
            .map(|i| seqs[i % 2][i / 2..].to_vec())
            .collect();
    }
    // A few entries per parameter keep the test fast.
    let entries = |n: usize| vec![0, n / 2, n - 1];
    assert_gradients_match(&m, &x, &seqs, |_| true, entries, 1e-5);
}

#[test]
fn fc_gru_gradients_match_finite_differences() {
    check(ModelKind::Fc, RnnKind::Gru, 1);
}

#[test]
fn att_lstm_two_layer_gradients_match_finite_differences() {
    check(ModelKind::Att, RnnKind::Lstm, 2);
}

#[test]
fn att_gru_two_layer_gradients_match_finite_differences() {
    check(ModelKind::Att, RnnKind::Gru, 2);
}

#[test]
fn fc_lstm_gradients_match_finite_differences() {
    check(ModelKind::Fc, RnnKind::Lstm, 1);
}

#[test]
fn fc_gru_two_layer_gradients_match_finite_differences() {
    check(ModelKind::Fc, RnnKind::Gru, 2);
}

#[test]
fn fc_lstm_two_layer_gradients_match_finite_differences() {
    check(ModelKind::Fc, RnnKind::Lstm, 2);
}

#[test]
fn att_gru_gradients_match_finite_differences_when_rows_share_an_image() {
    // Rows of one image attend over its regions, stored and differentiated once.
    check_rows(ModelKind::Att, RnnKind::Gru, 1, Some(&[0, 1, 0, 1, 0]));
}

#[test]
fn att_lstm_one_layer_gradients_match_finite_differences_when_rows_share_an_image() {
    check_rows(ModelKind::Att, RnnKind::Lstm, 1, Some(&[1, 0, 1]));
}

#[test]
fn att_gru_one_layer_gradients_match_finite_differences() {
    check(ModelKind::Att, RnnKind::Gru, 1);
}
