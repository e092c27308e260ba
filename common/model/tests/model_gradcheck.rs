//! The teacher-forced decoder's gradients match central finite differences (f64, tiny model).

use caprl_model::model::{
    batch_tokens, Captioner, CaptionerConfig, DType, Device, Inputs, ModelKind, RnnKind, Tensor,
};

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

fn loss(m: &Captioner, x: &Inputs, seqs: &Tensor) -> Tensor {
    let (logp, _) = m.token_logprobs(x, seqs, None).unwrap();
    logp.sum_all().unwrap()
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
    let seqs = batch_tokens(&seqs, &Device::Cpu).unwrap();
    let grads = loss(&m, &x, &seqs).backward().unwrap();
    let data = m.varmap().data().lock().unwrap();
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    let eps = 1e-6;
    for name in names {
        let var = &data[name];
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("no gradient for {name}"))
            .flatten_all()
            .unwrap()
            .to_vec1::<f64>()
            .unwrap();
        let base = var
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f64>()
            .unwrap();
        // A few entries per parameter keep the test fast.
        for i in [0, base.len() / 2, base.len() - 1] {
            let mut plus = base.clone();
            plus[i] += eps;
            var.set(&Tensor::from_vec(plus, var.shape(), &Device::Cpu).unwrap())
                .unwrap();
            let lp = loss(&m, &x, &seqs).to_scalar::<f64>().unwrap();
            let mut minus = base.clone();
            minus[i] -= eps;
            var.set(&Tensor::from_vec(minus, var.shape(), &Device::Cpu).unwrap())
                .unwrap();
            let lm = loss(&m, &x, &seqs).to_scalar::<f64>().unwrap();
            var.set(&Tensor::from_vec(base.clone(), var.shape(), &Device::Cpu).unwrap())
                .unwrap();
            let fd = (lp - lm) / (2.0 * eps);
            let tol = 1e-6 + 1e-5 * fd.abs().max(g[i].abs());
            assert!(
                (fd - g[i]).abs() < tol,
                "{name}[{i}]: analytic {} vs finite difference {fd}",
                g[i]
            );
        }
    }
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
