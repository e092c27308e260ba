//! The att model's one-layer recurrent decoder over a whole sequence as one graph node (CPU,
//! f32/f64): at each step the previous hidden state attends over the row's image
//! ([`attention`](crate::model::kernels::attention)'s row passes), the attended context term is
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

use candle_core::{CpuStorage, CustomOp3, DType, Device, Layout, Shape, Storage, Tensor};

use super::gates::{gates, grads};
use crate::model::config::RnnKind;
use crate::model::kernels::attention::{Dims as AttDims, RowKernels};
use crate::model::kernels::host_gemm::{for_each_row, gemm_into, Mat, SendPtr};
use crate::model::kernels::real::{contiguous, err, Saved};

/// Runs the layer. `image[i]` is the image (row of `kv`) that row `i` attends over; `a` the
/// keys' width. Records a backward node when any input tracks gradients.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    kind: RnnKind,
    gx: &Tensor,
    kv: &Tensor,
    a: usize,
    image: &[u32],
    w_hh: &Tensor,
    b_hh: &Tensor,
    w_h: &Tensor,
    w_a: &Tensor,
    s0: &Tensor,
) -> candle_core::Result<Tensor> {
    let small = Tensor::cat(
        &[
            &w_hh.flatten_all()?,
            &b_hh.flatten_all()?,
            &w_h.flatten_all()?,
            &w_a.flatten_all()?,
            &s0.flatten_all()?,
        ],
        0,
    )?;
    let op = FusedAttRnn {
        kind,
        a,
        image: image.to_vec(),
        saved: Mutex::new(None),
    };
    gx.contiguous()?.apply_op3(&kv.contiguous()?, &small, op)
}

struct FusedAttRnn {
    kind: RnnKind,
    a: usize,
    image: Vec<u32>,
    /// Per step and row the gate values (as [`super::fused`] keeps them), the attention's `e`
    /// `[B, R, A]` and `α` `[B, R]`.
    saved: Mutex<Option<(Saved, Saved, Saved)>>,
}

/// Sizes of one call.
#[derive(Clone, Copy)]
struct Dims {
    t: usize,
    b: usize,
    h: usize,
    g: usize,
    /// State width: `H` (GRU) or `2H` (LSTM).
    s: usize,
    att: AttDims,
}

impl Dims {
    fn saved_width(&self, kind: RnnKind) -> usize {
        match kind {
            RnnKind::Gru => 4 * self.h,
            RnnKind::Lstm => 5 * self.h,
        }
    }
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
        let (w_hh, rest) = v.split_at(d.g * d.h);
        let (b_hh, rest) = rest.split_at(d.g);
        let (w_h, rest) = rest.split_at(d.att.a * d.h);
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
        let (gates, state) = match self.kind {
            RnnKind::Gru => (3, 1),
            RnnKind::Lstm => (4, 2),
        };
        let (h, a) = (g / gates, self.a);
        let s = state * h;
        let fits = h > 0
            && g == gates * h
            && width == a + g
            && self.image.len() == b
            && self.image.iter().all(|&i| (i as usize) < u)
            && small.shape().elem_count() == g * h + g + a * h + a + b * s;
        if !fits {
            return Err(err(format!(
                "fused att rnn: shapes gx {:?}, kv {:?} (keys {a} wide), parameters {:?} and {} \
                 row images do not fit a {:?} layer",
                gx.shape(),
                kv.shape(),
                small.shape(),
                self.image.len(),
                self.kind
            )));
        }
        Ok(Dims {
            t,
            b,
            h,
            g,
            s,
            att: AttDims { b, u, r, a, d: g },
        })
    }
}

/// `W` `[rows, cols]` transposed into a new `[cols, rows]` array.
fn transposed<T: Copy>(w: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(w.len());
    for j in 0..cols {
        out.extend((0..rows).map(|i| w[i * cols + j]));
    }
    out
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

fn forward<T: RowKernels>(
    kind: RnnKind,
    d: Dims,
    gx: &[T],
    kv: &[T],
    image: &[u32],
    p: &Small<T>,
    threads: usize,
) -> Forward<T> {
    let Dims { t, b, h, g, s, att } = d;
    let (a, r) = (att.a, att.r);
    let sw = d.saved_width(kind);
    let mut f = Forward {
        out: vec![T::ZERO; t * b * s],
        gate_values: vec![T::ZERO; t * b * sw],
        e: vec![T::ZERO; t * b * r * a],
        alpha: vec![T::ZERO; t * b * r],
    };
    let (w_hh_t, w_h_t) = (transposed(p.w_hh, g, h), transposed(p.w_h, a, h));
    let mut q = vec![T::ZERO; b * a];
    let mut inp = vec![T::ZERO; b * g];
    let mut gh = vec![T::ZERO; b * g];
    for step in 0..t {
        let (done, cur) = f.out.split_at_mut(step * b * s);
        let prev: &[T] = match step {
            0 => p.s0,
            _ => &done[(step - 1) * b * s..],
        };
        // SAFETY: the rows of `prev` have stride S and width H >= the product's k; W_hᵀ is
        // [H, A] and W_hhᵀ [H, G]; q [B, A] and gh [B, G] are distinct from both.
        unsafe {
            gemm_into(
                b,
                a,
                h,
                q.as_mut_ptr(),
                a,
                false,
                Mat::rows(prev, s),
                Mat::rows(&w_h_t, a),
            );
        }
        let e = &mut f.e[step * b * r * a..(step + 1) * b * r * a];
        let alpha = &mut f.alpha[step * b * r..(step + 1) * b * r];
        T::forward(kv, &q, p.w_a, image, att, (&mut inp, e, alpha));
        for (x, &w) in inp.iter_mut().zip(&gx[step * b * g..(step + 1) * b * g]) {
            *x += w;
        }
        for row in gh.chunks_exact_mut(g) {
            row.copy_from_slice(p.b_hh);
        }
        // SAFETY: as above.
        unsafe {
            gemm_into(
                b,
                g,
                h,
                gh.as_mut_ptr(),
                g,
                true,
                Mat::rows(prev, s),
                Mat::rows(&w_hh_t, g),
            );
        }
        let sv = &mut f.gate_values[step * b * sw..(step + 1) * b * sw];
        let (o_ptr, sv_ptr) = (SendPtr(cur.as_mut_ptr()), SendPtr(sv.as_mut_ptr()));
        let (inp, gh) = (&inp[..], &gh[..]);
        for_each_row(threads, b, g, |i| {
            // SAFETY: row i of this step's states ([B, S]) and gate values ([B, SW]) belong to
            // this call alone (for_each_row visits each row once).
            let (o, sv) = unsafe { (o_ptr.row(i, s), sv_ptr.row(i, sw)) };
            let (x, hh) = (&inp[i * g..(i + 1) * g], &gh[i * g..(i + 1) * g]);
            gates(kind, h, x, hh, &prev[i * s..(i + 1) * s], o, sv);
        });
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
fn backward<T: RowKernels>(
    kind: RnnKind,
    d: Dims,
    kv: &[T],
    image: &[u32],
    p: &Small<T>,
    f: &Kept<T>,
    grad_out: &[T],
    threads: usize,
) -> Backward<T> {
    let Dims { t, b, h, g, s, att } = d;
    let (a, r) = (att.a, att.r);
    let sw = d.saved_width(kind);
    let mut dgx = vec![T::ZERO; t * b * g];
    let mut dkv = vec![T::ZERO; kv.len()];
    let mut dw_a = vec![T::ZERO; a];
    let mut dq = vec![T::ZERO; t * b * a];
    // GRU: the recurrent term's gradient differs from dgx in its n block; LSTM: they are equal.
    let mut dgh_gru = match kind {
        RnnKind::Gru => vec![T::ZERO; t * b * g],
        RnnKind::Lstm => Vec::new(),
    };
    let mut ds = vec![T::ZERO; b * s];
    let mut ds_prev = vec![T::ZERO; b * s];
    let prev_of = |step: usize| -> &[T] {
        match step {
            0 => p.s0,
            _ => &f.out[(step - 1) * b * s..step * b * s],
        }
    };
    for step in (0..t).rev() {
        for (x, &y) in ds
            .iter_mut()
            .zip(&grad_out[step * b * s..(step + 1) * b * s])
        {
            *x += y;
        }
        let prev = prev_of(step);
        let dgx_t = &mut dgx[step * b * g..(step + 1) * b * g];
        let dgh_t = match kind {
            RnnKind::Gru => SendPtr(dgh_gru[step * b * g..].as_mut_ptr()),
            RnnKind::Lstm => SendPtr(std::ptr::null_mut()),
        };
        let (dp_ptr, dx_ptr) = (SendPtr(ds_prev.as_mut_ptr()), SendPtr(dgx_t.as_mut_ptr()));
        let ds_now = &ds[..];
        for_each_row(threads, b, g, |i| {
            let sv = &f.gate_values[(step * b + i) * sw..(step * b + i + 1) * sw];
            // SAFETY: row i of ds_prev ([B, S]), of this step's dgx ([B, G]) and of its GRU dgh
            // ([B, G]) belong to this call alone (for_each_row visits each row once).
            let (dp, dx) = unsafe { (dp_ptr.row(i, s), dx_ptr.row(i, g)) };
            let dgh: &mut [T] = match kind {
                // SAFETY: as above; dgh_t is non-null for GRU.
                RnnKind::Gru => unsafe { dgh_t.row(i, g) },
                RnnKind::Lstm => &mut [],
            };
            grads(
                kind,
                h,
                sv,
                &ds_now[i * s..(i + 1) * s],
                &prev[i * s..(i + 1) * s],
                dp,
                dx,
                dgh,
            );
        });
        let dgh_t: &[T] = match kind {
            RnnKind::Gru => &dgh_gru[step * b * g..(step + 1) * b * g],
            RnnKind::Lstm => &dgx[step * b * g..(step + 1) * b * g],
        };
        // The attended term had the gates' input gradient, as `gx` did.
        let dq_t = &mut dq[step * b * a..(step + 1) * b * a];
        T::backward(
            &f.e[step * b * r * a..(step + 1) * b * r * a],
            &f.alpha[step * b * r..(step + 1) * b * r],
            kv,
            p.w_a,
            &dgx[step * b * g..(step + 1) * b * g],
            image,
            att,
            (&mut dkv, dq_t, &mut dw_a),
        );
        // dh_prev += dgh_t W_hh + dq_t W_h; rows of ds_prev have stride S.
        // SAFETY: dgh_t is [B, G], W_hh [G, H], dq_t [B, A], W_h [A, H]; ds_prev is [B, S] with
        // S >= H and distinct from all of them.
        unsafe {
            let dst = ds_prev.as_mut_ptr();
            gemm_into(
                b,
                h,
                g,
                dst,
                s,
                true,
                Mat::rows(dgh_t, g),
                Mat::rows(p.w_hh, h),
            );
            let dq_t = &dq[step * b * a..(step + 1) * b * a];
            gemm_into(
                b,
                h,
                a,
                dst,
                s,
                true,
                Mat::rows(dq_t, a),
                Mat::rows(p.w_h, h),
            );
        }
        std::mem::swap(&mut ds, &mut ds_prev);
    }
    let dgh_all: &[T] = match kind {
        RnnKind::Gru => &dgh_gru,
        RnnKind::Lstm => &dgx,
    };
    // dW_hh = Σ_t dgh_tᵀ h_{t-1} and dW_h = Σ_t dq_tᵀ h_{t-1}, each one product over every
    // step's rows (the first step reads s0, the others the outputs 0..T-1).
    let weight_grad = |dy: &[T], n: usize| -> Vec<T> {
        let mut dw = vec![T::ZERO; n * h];
        if t > 0 {
            // SAFETY: dyᵀ views [n, rows] of dy; the states view [rows, H] with row stride S;
            // dw is [n, H] and distinct from both.
            unsafe {
                gemm_into(
                    n,
                    h,
                    b,
                    dw.as_mut_ptr(),
                    h,
                    false,
                    Mat::cols(dy, n),
                    Mat::rows(p.s0, s),
                );
                gemm_into(
                    n,
                    h,
                    (t - 1) * b,
                    dw.as_mut_ptr(),
                    h,
                    true,
                    Mat::cols(&dy[b * n..], n),
                    Mat::rows(f.out, s),
                );
            }
        }
        dw
    };
    let mut dsmall = weight_grad(dgh_all, g);
    // db_hh = column sums of dgh.
    let mut db = vec![T::ZERO; g];
    for row in dgh_all.chunks_exact(g) {
        for (x, &y) in db.iter_mut().zip(row) {
            *x += y;
        }
    }
    dsmall.extend(db);
    dsmall.extend(weight_grad(&dq, a));
    dsmall.extend(dw_a);
    dsmall.extend(ds);
    Backward { dgx, dkv, dsmall }
}

/// The CPU values of a tensor's storage.
fn host<'s, T: RowKernels>(
    storage: &'s Storage,
    layout: &Layout,
    what: &str,
) -> candle_core::Result<&'s [T]> {
    match storage {
        Storage::Cpu(c) => contiguous::<T>(c, layout, what),
        _ => Err(err(format!("fused att rnn: {what} is not on the CPU"))),
    }
}

impl FusedAttRnn {
    fn fwd_typed<T: RowKernels>(
        &self,
        d: Dims,
        (s1, l1): (&CpuStorage, &Layout),
        (s2, l2): (&CpuStorage, &Layout),
        (s3, l3): (&CpuStorage, &Layout),
    ) -> candle_core::Result<Vec<T>> {
        let gx = contiguous::<T>(s1, l1, "gx")?;
        let kv = contiguous::<T>(s2, l2, "kv")?;
        let small = Small::split(contiguous::<T>(s3, l3, "parameters")?, d);
        let threads = candle_core::utils::get_num_threads();
        let f = forward(self.kind, d, gx, kv, &self.image, &small, threads);
        let mut slot = self
            .saved
            .lock()
            .map_err(|_| err("fused att rnn: saved state lock poisoned".into()))?;
        *slot = Some((T::wrap(f.gate_values), T::wrap(f.e), T::wrap(f.alpha)));
        Ok(f.out)
    }

    fn bwd_typed<T: RowKernels>(
        &self,
        d: Dims,
        (kv, small): (&Tensor, &Tensor),
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let grad = grad.contiguous()?;
        let slot = self
            .saved
            .lock()
            .map_err(|_| err("fused att rnn: saved state lock poisoned".into()))?;
        let missing = || err("fused att rnn: backward without a saved forward pass".into());
        let (gate_values, e, alpha) = slot.as_ref().ok_or_else(missing)?;
        let (skv, lkv) = kv.storage_and_layout();
        let (ssm, lsm) = small.storage_and_layout();
        let (sres, lres) = res.storage_and_layout();
        let (sg, lg) = grad.storage_and_layout();
        let f = Kept {
            out: host::<T>(&sres, lres, "output")?,
            gate_values: T::unwrap(gate_values).ok_or_else(missing)?,
            e: T::unwrap(e).ok_or_else(missing)?,
            alpha: T::unwrap(alpha).ok_or_else(missing)?,
        };
        let grads = backward(
            self.kind,
            d,
            host::<T>(&skv, lkv, "kv")?,
            &self.image,
            &Small::split(host::<T>(&ssm, lsm, "parameters")?, d),
            &f,
            host::<T>(&sg, lg, "output gradient")?,
            candle_core::utils::get_num_threads(),
        );
        let dev = Device::Cpu;
        Ok((
            Tensor::from_vec(grads.dgx, (d.t, d.b, d.g), &dev)?,
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
        let shape = Shape::from((d.t, d.b, d.s));
        let args = ((s1, l1), (s2, l2), (s3, l3));
        let out = match s1 {
            CpuStorage::F32(_) => {
                CpuStorage::F32(self.fwd_typed::<f32>(d, args.0, args.1, args.2)?)
            }
            CpuStorage::F64(_) => {
                CpuStorage::F64(self.fwd_typed::<f64>(d, args.0, args.1, args.2)?)
            }
            _ => return Err(err("fused att rnn: f32 or f64 expected".into())),
        };
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
        let (a, b, c) = match gx.dtype() {
            DType::F32 => self.bwd_typed::<f32>(d, (kv, small), res, grad_res)?,
            DType::F64 => self.bwd_typed::<f64>(d, (kv, small), res, grad_res)?,
            other => return Err(err(format!("fused att rnn: dtype {other:?} (f32 or f64)"))),
        };
        Ok((Some(a), Some(b), Some(c)))
    }
}
