//! The att model's one-layer recurrent decoder over a whole sequence as one graph node (CPU,
//! f32/f64): at each step the previous hidden state attends over the row's image
//! ([`attention`](caprl_kernels::attention)'s row passes), the attended context term is
//! added to the step's input term, and the GRU/LSTM gates run ([`super::gates`]).
//!
//! As a loop of per-step nodes, every step read a slice of the input terms `[T, B, G]`, whose
//! gradient Candle pads to the whole tensor (T² work per pass), and every step had its own
//! weight gradients of `W_hh` and `W_h`, each a product over 50 rows and a sum. Here, as in
//! [`super::fused`], the backward pass runs back-propagation through time by hand and each
//! weight gradient is one product over all `T·B` rows.
//!
//! Inputs (a custom op takes three tensors): `gx` `[T, B, G]` (word and image terms with
//! `b_ih`), `kv` `[U, R, A + G]` (each image's keys and context terms, see
//! [`super::attention`]) and the small parameters with the initial state in one vector
//! `[W_hh (G×H) | b_hh (G) | W_h (A×H) | w_a (A) | s0 (B×S)]`. Output: the states `[T, B, S]`
//! (GRU: `h`; LSTM: `[h, c]`).

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};

use super::fused::{self, gates_rows};
use crate::model::config::RnnKind;
use caprl_kernels::additive_attention::{rows_backward, rows_forward, Dims as AttDims};
use caprl_kernels::host_gemm::{gemm_into, Mat};
use caprl_kernels::real::{
    by_dtype, by_storage_dtype, contiguous, err, host_values, lock_saved, no_forward_pass, Real,
    Saved,
};

/// The layer's weights as a pass prepared them.
pub(crate) struct Weights<'w> {
    /// `W_hh` `[G, H]` and a detached contiguous `W_hhᵀ` `[H, G]` (the layout the forward
    /// product reads; the gradient flows through `w_hh`).
    pub w_hh: &'w Tensor,
    pub w_hh_t: &'w Tensor,
    pub b_hh: &'w Tensor,
    /// The query weights transposed, `W_hᵀ` `[H, A]`, contiguous.
    pub w_h_t: &'w Tensor,
    /// The score weights `w_a` `[A, 1]`.
    pub w_a: &'w Tensor,
}

/// Runs the layer from the initial state `s0` `[B, S]`. `image[i]` is the image (row of `kv`)
/// that row `i` attends over; `a` the keys' width. Records a backward node.
pub(crate) fn run(
    kind: RnnKind,
    gx: &Tensor,
    (kv, a, image): (&Tensor, usize, &[u32]),
    w: &Weights,
    s0: &Tensor,
) -> candle_core::Result<Tensor> {
    let small = Tensor::cat(
        &[
            &w.w_hh.flatten_all()?,
            &w.b_hh.flatten_all()?,
            &w.w_h_t.t()?.flatten_all()?,
            &w.w_a.flatten_all()?,
            &s0.flatten_all()?,
        ],
        0,
    )?;
    let op = FusedAttRnn {
        kind,
        a,
        image: image.to_vec(),
        w_hh_t: w.w_hh_t.detach().contiguous()?,
        w_h_t: w.w_h_t.detach().contiguous()?,
        saved: Mutex::new(None),
    };
    gx.contiguous()?.apply_op3(&kv.contiguous()?, &small, op)
}

struct FusedAttRnn {
    kind: RnnKind,
    a: usize,
    image: Vec<u32>,
    /// `W_hhᵀ` `[H, G]` and `W_hᵀ` `[H, A]`, read by the forward products.
    w_hh_t: Tensor,
    w_h_t: Tensor,
    /// Per step and row the gate values (as [`super::fused`] keeps them), the attention's `e`
    /// `[B, R, A]` and `α` `[B, R]`.
    saved: Mutex<Option<(Saved, Saved, Saved)>>,
}

/// Sizes of one call: the recurrent layer's and the attention's.
#[derive(Clone, Copy)]
struct Dims {
    rnn: fused::Dims,
    att: AttDims,
}

/// The small parameters' places in their vector.
struct Small<'v, T> {
    w_hh: &'v [T],
    b_hh: &'v [T],
    w_h: &'v [T],
    w_a: &'v [T],
    s0: &'v [T],
}

impl<'v, T> Small<'v, T> {
    fn split(v: &'v [T], d: Dims) -> Self {
        let (g, h) = (d.rnn.g, d.rnn.h);
        let (w_hh, rest) = v.split_at(g * h);
        let (b_hh, rest) = rest.split_at(g);
        let (w_h, rest) = rest.split_at(d.att.a * h);
        let (w_a, s0) = rest.split_at(d.att.a);
        Small {
            w_hh,
            b_hh,
            w_h,
            w_a,
            s0,
        }
    }
}

impl FusedAttRnn {
    fn dims(&self, gx: &Layout, kv: &Layout, small: &Layout) -> candle_core::Result<Dims> {
        let (t, b, g) = gx.shape().dims3()?;
        let (u, r, width) = kv.shape().dims3()?;
        let a = self.a;
        let rnn = fused::Dims::of(self.kind, t, b, g).filter(|d| {
            width == a + g
                && self.image.len() == b
                && self.image.iter().all(|&i| (i as usize) < u)
                && small.shape().elem_count() == g * d.h + g + a * d.h + a + b * d.s
        });
        let Some(rnn) = rnn else {
            return Err(err(format!(
                "fused att rnn: shapes gx {:?}, kv {:?} (keys {a} wide), parameters {:?} and {} \
                 row images do not fit a {:?} layer",
                gx.shape(),
                kv.shape(),
                small.shape(),
                self.image.len(),
                self.kind
            )));
        };
        Ok(Dims {
            rnn,
            att: AttDims { b, u, r, a, d: g },
        })
    }
}

/// What the forward pass computes: the states and what the backward pass reads.
struct Forward<T> {
    out: Vec<T>,
    gate_values: Vec<T>,
    e: Vec<T>,
    alpha: Vec<T>,
}

/// The forward pass's values as the backward pass reads them.
struct Kept<'k, T> {
    out: &'k [T],
    gate_values: &'k [T],
    e: &'k [T],
    alpha: &'k [T],
}

/// The forward pass; `(w_hh_t, w_h_t)` are `W_hhᵀ` `[H, G]` and `W_hᵀ` `[H, A]`.
#[allow(clippy::too_many_arguments)]
fn forward<T: Real>(
    kind: RnnKind,
    d: Dims,
    gx: &[T],
    kv: &[T],
    image: &[u32],
    p: &Small<T>,
    (w_hh_t, w_h_t): (&[T], &[T]),
    threads: usize,
) -> Forward<T> {
    let Dims { rnn, att } = d;
    let fused::Dims { t, b, h, g, s } = rnn;
    let (a, r) = (att.a, att.r);
    let sw = rnn.saved_width(kind);
    let mut f = Forward {
        out: vec![T::ZERO; t * b * s],
        gate_values: vec![T::ZERO; t * b * sw],
        e: vec![T::ZERO; t * b * r * a],
        alpha: vec![T::ZERO; t * b * r],
    };
    let mut q = vec![T::ZERO; b * a];
    let mut inp = vec![T::ZERO; b * g];
    let mut gh = vec![T::ZERO; b * g];
    for step in 0..t {
        let (done, cur) = f.out.split_at_mut(step * b * s);
        let prev: &[T] = match step {
            0 => p.s0,
            _ => &done[(step - 1) * b * s..],
        };
        // The query `q = h W_hᵀ` and the recurrent term `gh = b_hh + h W_hhᵀ`.
        for row in gh.chunks_exact_mut(g) {
            row.copy_from_slice(p.b_hh);
        }
        // SAFETY: the rows of `prev` have stride S and width H; W_hᵀ is [H, A] and W_hhᵀ
        // [H, G]; q [B, A] and gh [B, G] are distinct from them.
        unsafe {
            let h_prev = Mat::rows(prev, s);
            gemm_into(
                b,
                a,
                h,
                q.as_mut_ptr(),
                a,
                false,
                h_prev,
                Mat::rows(w_h_t, a),
            );
            gemm_into(
                b,
                g,
                h,
                gh.as_mut_ptr(),
                g,
                true,
                h_prev,
                Mat::rows(w_hh_t, g),
            );
        }
        // The gates' input: the attended context term plus the step's input term.
        let e = &mut f.e[step * b * r * a..(step + 1) * b * r * a];
        let alpha = &mut f.alpha[step * b * r..(step + 1) * b * r];
        rows_forward(kv, &q, p.w_a, image, att, (&mut inp, e, alpha));
        for (x, &w) in inp.iter_mut().zip(&gx[step * b * g..(step + 1) * b * g]) {
            *x += w;
        }
        let sv = &mut f.gate_values[step * b * sw..(step + 1) * b * sw];
        gates_rows(kind, rnn, &inp, &gh, prev, &mut cur[..b * s], sv, threads);
    }
    f
}

/// The gradients of the three inputs: `gx`, `kv` and the small parameters' vector.
struct Backward<T> {
    dgx: Vec<T>,
    dkv: Vec<T>,
    dsmall: Vec<T>,
}

#[allow(clippy::too_many_arguments)]
fn backward<T: Real>(
    kind: RnnKind,
    d: Dims,
    kv: &[T],
    image: &[u32],
    p: &Small<T>,
    f: &Kept<T>,
    grad_out: &[T],
    threads: usize,
) -> Backward<T> {
    let Dims { rnn, att } = d;
    let fused::Dims { b, h, g, s, .. } = rnn;
    let (a, r) = (att.a, att.r);
    let mut dkv = vec![T::ZERO; kv.len()];
    let mut dw_a = vec![T::ZERO; a];
    let mut dq = vec![T::ZERO; rnn.t * b * a];
    let pass = fused::Pass {
        s0: p.s0,
        out: f.out,
        saved: f.gate_values,
        w_hh: p.w_hh,
    };
    let grads = fused::bptt(
        kind,
        rnn,
        &pass,
        grad_out,
        threads,
        |step, dgx_t, ds_prev| {
            // The attended term had the gates' input gradient, as `gx` did.
            let dq_t = &mut dq[step * b * a..(step + 1) * b * a];
            rows_backward(
                &f.e[step * b * r * a..(step + 1) * b * r * a],
                &f.alpha[step * b * r..(step + 1) * b * r],
                kv,
                p.w_a,
                dgx_t,
                image,
                att,
                (&mut dkv, &mut *dq_t, &mut dw_a),
            );
            // dh_prev += dq_t W_h; rows of ds_prev have stride S.
            // SAFETY: dq_t is [B, A], W_h [A, H]; ds_prev is [B, S] with S >= H, distinct from
            // both.
            unsafe {
                let w_h = Mat::rows(p.w_h, h);
                gemm_into(
                    b,
                    h,
                    a,
                    ds_prev.as_mut_ptr(),
                    s,
                    true,
                    Mat::rows(dq_t, a),
                    w_h,
                );
            }
        },
    );
    // `[dW_hh | db_hh | dW_h | dw_a | ds0]`, the weight gradients each one product over every
    // step's rows.
    let mut dsmall = fused::weight_grad(rnn, grads.dgh(), g, p.s0, f.out);
    dsmall.extend(fused::column_sums(grads.dgh(), g));
    dsmall.extend(fused::weight_grad(rnn, &dq, a, p.s0, f.out));
    dsmall.extend(dw_a);
    dsmall.extend(grads.ds0);
    let dgx = grads.dgx;
    Backward { dgx, dkv, dsmall }
}

impl FusedAttRnn {
    fn fwd_typed<T: Real>(
        &self,
        d: Dims,
        (s1, l1): (&CpuStorage, &Layout),
        (s2, l2): (&CpuStorage, &Layout),
        (s3, l3): (&CpuStorage, &Layout),
    ) -> candle_core::Result<Vec<T>> {
        let gx = contiguous::<T>(s1, l1, "gx")?;
        let kv = contiguous::<T>(s2, l2, "kv")?;
        let small = Small::split(contiguous::<T>(s3, l3, "parameters")?, d);
        let (sh, lh) = self.w_hh_t.storage_and_layout();
        let (sq, lq) = self.w_h_t.storage_and_layout();
        let w_t = (
            host_values::<T>(&sh, lh, "W_hhᵀ")?,
            host_values::<T>(&sq, lq, "W_hᵀ")?,
        );
        let (rnn, att) = (d.rnn, d.att);
        if w_t.0.len() != rnn.h * rnn.g || w_t.1.len() != rnn.h * att.a {
            return Err(err(format!(
                "fused att rnn: W_hhᵀ and W_hᵀ have {} and {} values, expected {} x {} and {} x {}",
                w_t.0.len(),
                w_t.1.len(),
                rnn.h,
                rnn.g,
                rnn.h,
                att.a
            )));
        }
        let threads = candle_core::utils::get_num_threads();
        let f = forward(self.kind, d, gx, kv, &self.image, &small, w_t, threads);
        *lock_saved(&self.saved, "fused att rnn")? =
            Some((T::wrap(f.gate_values), T::wrap(f.e), T::wrap(f.alpha)));
        Ok(f.out)
    }

    fn bwd_typed<T: Real>(
        &self,
        d: Dims,
        (kv, small): (&Tensor, &Tensor),
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let grad = grad.contiguous()?;
        let slot = lock_saved(&self.saved, "fused att rnn")?;
        let missing = || no_forward_pass("fused att rnn");
        let (gate_values, e, alpha) = slot.as_ref().ok_or_else(missing)?;
        let (skv, lkv) = kv.storage_and_layout();
        let (ssm, lsm) = small.storage_and_layout();
        let (sres, lres) = res.storage_and_layout();
        let (sg, lg) = grad.storage_and_layout();
        let f = Kept {
            out: host_values::<T>(&sres, lres, "output")?,
            gate_values: T::unwrap(gate_values).ok_or_else(missing)?,
            e: T::unwrap(e).ok_or_else(missing)?,
            alpha: T::unwrap(alpha).ok_or_else(missing)?,
        };
        let grads = backward(
            self.kind,
            d,
            host_values::<T>(&skv, lkv, "kv")?,
            &self.image,
            &Small::split(host_values::<T>(&ssm, lsm, "parameters")?, d),
            &f,
            host_values::<T>(&sg, lg, "output gradient")?,
            candle_core::utils::get_num_threads(),
        );
        let dev = Device::Cpu;
        Ok((
            Tensor::from_vec(grads.dgx, (d.rnn.t, d.rnn.b, d.rnn.g), &dev)?,
            Tensor::from_vec(grads.dkv, kv.shape(), &dev)?,
            Tensor::from_vec(grads.dsmall, small.shape(), &dev)?,
        ))
    }
}

impl CustomOp3 for FusedAttRnn {
    fn name(&self) -> &'static str {
        "fused-att-rnn"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = self.dims(l1, l2, l3)?;
        let shape = Shape::from((d.rnn.t, d.rnn.b, d.rnn.s));
        let args = ((s1, l1), (s2, l2), (s3, l3));
        let out = by_storage_dtype!(s1, "fused att rnn", T => {
            self.fwd_typed::<T>(d, args.0, args.1, args.2)
        })?;
        Ok((out, shape))
    }

    fn bwd(
        &self,
        gx: &Tensor,
        kv: &Tensor,
        small: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = self.dims(gx.layout(), kv.layout(), small.layout())?;
        let (a, b, c) = by_dtype!(gx.dtype(), "fused att rnn", T => {
            self.bwd_typed::<T>(d, (kv, small), res, grad_res)
        })?;
        Ok((Some(a), Some(b), Some(c)))
    }
}
