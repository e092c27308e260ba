//! The finite-difference check of the model gradient tests (f64 models).

use caprl_model::model::{batch_tokens, Captioner, Device, Inputs, Tensor};

/// `Σ log p` of `seqs`, teacher-forced without dropout: the loss every check differentiates.
pub fn loss(m: &Captioner, x: &Inputs, seqs: &Tensor) -> Tensor {
    let (logp, _) = m.token_logprobs(x, seqs, None).unwrap();
    logp.sum_all().unwrap()
}

/// Checks the gradient of [`loss`] on `x` and `captions` for every parameter whose name
/// `checked` accepts, at the entries `entries(len)` of each, against central finite differences
/// (step 1e-6, tolerance `1e-6 + rel · max(|fd|, |g|)`). Returns how many parameters it checked.
pub fn assert_gradients_match(
    m: &Captioner,
    x: &Inputs,
    captions: &[Vec<u32>],
    checked: impl Fn(&str) -> bool,
    entries: impl Fn(usize) -> Vec<usize>,
    rel: f64,
) -> usize {
    let seqs = batch_tokens(captions, &Device::Cpu).unwrap();
    let grads = loss(m, x, &seqs).backward().unwrap();
    let data = m.varmap().data().lock().unwrap();
    let mut names: Vec<&String> = data.keys().filter(|n| checked(n)).collect();
    names.sort();
    let eps = 1e-6;
    for &name in &names {
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
        for i in entries(base.len()) {
            let at = |delta: f64| {
                let mut p = base.clone();
                p[i] += delta;
                var.set(&Tensor::from_vec(p, var.shape(), &Device::Cpu).unwrap())
                    .unwrap();
                loss(m, x, &seqs).to_scalar::<f64>().unwrap()
            };
            let fd = (at(eps) - at(-eps)) / (2.0 * eps);
            at(0.0);
            let tol = 1e-6 + rel * fd.abs().max(g[i].abs());
            assert!(
                (fd - g[i]).abs() < tol,
                "{name}[{i}]: analytic {} vs finite difference {fd}",
                g[i]
            );
        }
    }
    names.len()
}
