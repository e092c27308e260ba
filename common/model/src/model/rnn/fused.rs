//! A whole recurrent layer over a sequence as one graph node (CPU, f32/f64).
//!
//! Inputs: the precomputed input term `gx = W_ih x_t + b_ih` for every step `[T, B, G]`, the
//! initial state `s0` `[B, S]` (GRU: `h`, `S = H`; LSTM: `[h, c]`, `S = 2H`) with the
//! recurrent bias `b_hh` `[G]`, both in one small vector `[s0 | b_hh]` (a custom op takes three
//! tensors), and the recurrent weights `W_hh` `[G, H]`. Output: the state after every step
//! `[T, B, S]`. Gate layout and formulas are those of [`super::cell`]:
//!
//! GRU: `gh = h W_hhᵀ + b_hh`, `r = σ(gx_r + gh_r)`, `z = σ(gx_z + gh_z)`,
//! `n = tanh(gx_n + r ⊙ gh_n)`, `h' = n + z ⊙ (h - n)`.
//! LSTM: `a = gx + h W_hhᵀ + b_hh`, `[i, f, g, o] = [σ, σ, tanh, σ](a)`, `c' = f ⊙ c + i ⊙ g`,
//! `h' = o ⊙ tanh(c')`.
//!
//! The forward pass is one gemm per step plus the gate arithmetic, and keeps the gate values.
//! The backward pass is back-propagation through time by hand: per step the gate gradients and
//! `dh_{t-1} = dgh_t W_hh` (one gemm), then the weight gradient of all steps as ONE gemm,
//! `dW_hh = dghᵀ [T·B, G] × h_prev [T·B, H]`, and `d gx` as one tensor. No per-step graph nodes.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Storage, Tensor};

use super::gates::{gates, grads};
use crate::model::config::RnnKind;
use caprl_kernels::host_gemm::{for_each_row, gemm_into, Mat, SendPtr};
use caprl_kernels::real::{
    by_dtype, by_storage_dtype, contiguous, err, lock_saved, no_forward_pass, Real, Saved,
};

/// Runs the layer: `gx` `[T, B, G]`, `s0` `[B, S]`, `w_hh` `[G, H]`, `b_hh` `[G]` → states
/// `[T, B, S]`. `w_hh_t` is a detached contiguous copy of `W_hhᵀ` `[H, G]` (the layout the
/// forward gemm reads without repacking); the gradient of the weights flows through `w_hh`.
/// Records a backward node when any input tracks gradients.
pub(crate) fn run(
    kind: RnnKind,
    gx: &Tensor,
    s0: &Tensor,
    w_hh: &Tensor,
    b_hh: &Tensor,
    w_hh_t: &Tensor,
) -> candle_core::Result<Tensor> {
    let gx = gx.contiguous()?;
    // `[s0 | b_hh]`: a few thousand values, where `[W_hh | b_hh]` would copy the weights (and
    // their gradient back) once per pass.
    let aux = Tensor::cat(&[&s0.flatten_all()?, &b_hh.flatten_all()?], 0)?;
    let w_hh = w_hh.contiguous()?;
    let save = gx.track_op() || aux.track_op() || w_hh.track_op();
    let op = FusedRnn {
        kind,
        save,
        saved: Mutex::new(None),
        w_hh_t: w_hh_t.detach().contiguous()?,
    };
    if save {
        gx.apply_op3(&aux, &w_hh, op)
    } else {
        gx.apply_op3_no_bwd(&aux, &w_hh, &op)
    }
}

/// The op; its [`Saved`] values are, per step and row, GRU `[r, z, n, gh_n]` or
/// LSTM `[i, f, g, o, tanh c]` (each `H` wide).
struct FusedRnn {
    kind: RnnKind,
    save: bool,
    saved: Mutex<Option<Saved>>,
    /// `W_hhᵀ` `[H, G]`, read by the forward gemm.
    w_hh_t: Tensor,
}

/// Sizes of one call.
#[derive(Clone, Copy)]
pub(super) struct Dims {
    pub t: usize,
    pub b: usize,
    pub h: usize,
    pub g: usize,
    /// State width: `H` (GRU) or `2H` (LSTM).
    pub s: usize,
}

impl Dims {
    /// The sizes of a `kind` layer over `t` steps of `b` rows with `g` gate columns, or `None`
    /// when `g` is not a whole number of gates.
    pub(super) fn of(kind: RnnKind, t: usize, b: usize, g: usize) -> Option<Dims> {
        let (gates, width) = match kind {
            RnnKind::Gru => (3, 1),
            RnnKind::Lstm => (4, 2),
        };
        let h = g / gates;
        (h > 0 && g == gates * h).then_some(Dims {
            t,
            b,
            h,
            g,
            s: width * h,
        })
    }

    /// Width of one row's saved gate values: GRU `[r, z, n, gh_n]`, LSTM `[i, f, g, o, tanh c]`.
    pub(super) fn saved_width(&self, kind: RnnKind) -> usize {
        match kind {
            RnnKind::Gru => 4 * self.h,
            RnnKind::Lstm => 5 * self.h,
        }
    }
}

fn dims(kind: RnnKind, l1: &Layout, l2: &Layout, l3: &Layout) -> candle_core::Result<Dims> {
    let (t, b, g) = l1.shape().dims3()?;
    let aux = l2.shape().elem_count();
    let (g3, h3) = l3.shape().dims2()?;
    match Dims::of(kind, t, b, g) {
        Some(d) if g3 == g && h3 == d.h && aux == b * d.s + g => Ok(d),
        _ => Err(err(format!(
            "fused rnn: shapes gx {:?}, [s0 | b_hh] {:?}, w_hh {:?} do not fit a {kind:?} layer",
            l1.shape(),
            l2.shape(),
            l3.shape()
        ))),
    }
}

/// One step's gates for every row: the states `o` `[B, S]` and gate values `sv` `[B, SW]` from
/// the input term `x` `[B, G]`, the recurrent term `gh` `[B, G]` and the previous states `prev`
/// (rows `S` apart).
#[allow(clippy::too_many_arguments)]
pub(super) fn gates_rows<T: Real>(
    kind: RnnKind,
    d: Dims,
    x: &[T],
    gh: &[T],
    prev: &[T],
    o: &mut [T],
    sv: &mut [T],
    threads: usize,
) {
    let Dims { b, h, g, s, .. } = d;
    let sw = d.saved_width(kind);
    let (o_ptr, sv_ptr) = (SendPtr(o.as_mut_ptr()), SendPtr(sv.as_mut_ptr()));
    for_each_row(threads, b, g, |i| {
        // SAFETY: row i of `o` ([B, S]) and of `sv` ([B, SW]) belong to this call alone
        // (for_each_row visits each row once).
        let (o, sv) = unsafe { (o_ptr.row(i, s), sv_ptr.row(i, sw)) };
        let (xr, ghr) = (&x[i * g..(i + 1) * g], &gh[i * g..(i + 1) * g]);
        gates(kind, h, xr, ghr, &prev[i * s..(i + 1) * s], o, sv);
    });
}

/// One step's gate gradients for every row, from its gate values `sv` `[B, SW]`, the states'
/// gradient `ds` `[B, S]` and the previous states `prev`: writes `ds_prev` `[B, S]` (the direct
/// part), the input term's gradient `dx` `[B, G]` and, for a GRU, the recurrent term's `dgh`
/// `[B, G]` (empty for an LSTM, whose `dgh` is `dx`).
#[allow(clippy::too_many_arguments)]
fn grads_rows<T: Real>(
    kind: RnnKind,
    d: Dims,
    sv: &[T],
    ds: &[T],
    prev: &[T],
    ds_prev: &mut [T],
    dx: &mut [T],
    dgh: &mut [T],
    threads: usize,
) {
    let Dims { b, h, g, s, .. } = d;
    let sw = d.saved_width(kind);
    let gru = kind == RnnKind::Gru;
    let (dp_ptr, dx_ptr, dgh_ptr) = (
        SendPtr(ds_prev.as_mut_ptr()),
        SendPtr(dx.as_mut_ptr()),
        SendPtr(dgh.as_mut_ptr()),
    );
    for_each_row(threads, b, g, |i| {
        // SAFETY: row i of ds_prev ([B, S]), dx ([B, G]) and the GRU's dgh ([B, G]) belong to
        // this call alone (for_each_row visits each row once).
        let (dp, dx) = unsafe { (dp_ptr.row(i, s), dx_ptr.row(i, g)) };
        let dgh: &mut [T] = match gru {
            // SAFETY: as above.
            true => unsafe { dgh_ptr.row(i, g) },
            false => &mut [],
        };
        let sv = &sv[i * sw..(i + 1) * sw];
        grads(
            kind,
            h,
            sv,
            &ds[i * s..(i + 1) * s],
            &prev[i * s..(i + 1) * s],
            dp,
            dx,
            dgh,
        );
    });
}

/// `Σ_t dy_tᵀ h_{t-1}` `[n, H]` in one product over every step's rows, for `dy` `[T, B, n]`: the
/// first step reads `s0`, the others the states `out` `[T, B, S]` of steps `0..T-1`.
pub(super) fn weight_grad<T: Real>(d: Dims, dy: &[T], n: usize, s0: &[T], out: &[T]) -> Vec<T> {
    let Dims { t, b, h, s, .. } = d;
    let mut dw = vec![T::ZERO; n * h];
    if t > 0 {
        // SAFETY: dyᵀ views [n, rows] of dy; the states view [rows, H] with row stride S; dw is
        // [n, H] and distinct from both.
        unsafe {
            gemm_into(
                n,
                h,
                b,
                dw.as_mut_ptr(),
                h,
                false,
                Mat::cols(dy, n),
                Mat::rows(s0, s),
            );
            gemm_into(
                n,
                h,
                (t - 1) * b,
                dw.as_mut_ptr(),
                h,
                true,
                Mat::cols(&dy[b * n..], n),
                Mat::rows(out, s),
            );
        }
    }
    dw
}

/// The column sums of `dy` `[rows, n]`: a bias's gradient.
pub(super) fn column_sums<T: Real>(dy: &[T], n: usize) -> Vec<T> {
    let mut db = vec![T::ZERO; n];
    for row in dy.chunks_exact(n) {
        for (x, &y) in db.iter_mut().zip(row) {
            *x += y;
        }
    }
    db
}

/// Forward pass; returns the states `[T, B, S]` and (when `save`) the saved gate values.
#[allow(clippy::too_many_arguments)]
fn forward<T: Real>(
    kind: RnnKind,
    d: Dims,
    gx: &[T],
    s0: &[T],
    bias: &[T],
    w_t: &[T],
    save: bool,
    threads: usize,
) -> (Vec<T>, Vec<T>) {
    let Dims { t, b, h, g, s } = d;
    let sw = d.saved_width(kind);
    let mut out = vec![T::ZERO; t * b * s];
    let mut saved = if save {
        vec![T::ZERO; t * b * sw]
    } else {
        Vec::new()
    };
    let mut gh = vec![T::ZERO; b * g];
    // Gate values of the current step when they are not kept.
    let mut scratch = if save {
        Vec::new()
    } else {
        vec![T::ZERO; b * sw]
    };
    let w_t = Mat::rows(w_t, g);
    for step in 0..t {
        let (prev, cur) = out.split_at_mut(step * b * s);
        let prev: &[T] = if step == 0 {
            s0
        } else {
            &prev[(step - 1) * b * s..]
        };
        let cur = &mut cur[..b * s];
        // gh = b_hh + h_prev W_hhᵀ.
        for row in gh.chunks_exact_mut(g) {
            row.copy_from_slice(bias);
        }
        // SAFETY: h_prev rows have stride S and width H within `prev`; W_hhᵀ is [H, G]; gh is
        // [B, G] and distinct from both.
        unsafe {
            gemm_into(b, g, h, gh.as_mut_ptr(), g, true, Mat::rows(prev, s), w_t);
        }
        let gx_t = &gx[step * b * g..(step + 1) * b * g];
        let sv_step: &mut [T] = if save {
            &mut saved[step * b * sw..(step + 1) * b * sw]
        } else {
            &mut scratch
        };
        gates_rows(kind, d, gx_t, &gh, prev, cur, sv_step, threads);
    }
    (out, saved)
}

/// The saved forward values [`bptt`] reads: the initial state `s0` `[B, S]`, the states `out`
/// `[T, B, S]`, the gate values `saved` `[T, B, SW]` and the recurrent weights `w_hh` `[G, H]`.
pub(super) struct Pass<'p, T> {
    pub s0: &'p [T],
    pub out: &'p [T],
    pub saved: &'p [T],
    pub w_hh: &'p [T],
}

/// What [`bptt`] gives: the input terms' gradient `dgx` `[T, B, G]`, the GRU's recurrent-term
/// gradient (an LSTM's is `dgx`) and the initial state's `ds0` `[B, S]`.
pub(super) struct Bptt<T> {
    pub dgx: Vec<T>,
    dgh_gru: Vec<T>,
    pub ds0: Vec<T>,
}

impl<T> Bptt<T> {
    /// The recurrent term's gradient `[T, B, G]`.
    pub fn dgh(&self) -> &[T] {
        match self.dgh_gru.is_empty() {
            true => &self.dgx,
            false => &self.dgh_gru,
        }
    }
}

/// Back-propagation through time from the states' gradient `grad_out` `[T, B, S]`: per step,
/// backwards, the gate gradients, then `step_also(step, dgx_t, ds_prev)` for what else the step
/// computed from the previous state (it adds into `ds_prev` `[B, S]`), then
/// `ds_prev += dgh_t W_hh`.
pub(super) fn bptt<T: Real>(
    kind: RnnKind,
    d: Dims,
    pass: &Pass<T>,
    grad_out: &[T],
    threads: usize,
    mut step_also: impl FnMut(usize, &[T], &mut [T]),
) -> Bptt<T> {
    let Dims { t, b, h, g, s } = d;
    let sw = d.saved_width(kind);
    let mut dgx = vec![T::ZERO; t * b * g];
    // GRU: the recurrent term's gradient differs from dgx in its n block; LSTM: they are equal.
    let mut dgh_gru = match kind {
        RnnKind::Gru => vec![T::ZERO; t * b * g],
        RnnKind::Lstm => Vec::new(),
    };
    // Running gradient of the state s_t (h, and c for LSTM), and the next one.
    let mut ds = vec![T::ZERO; b * s];
    let mut ds_prev = vec![T::ZERO; b * s];
    let w_mat = Mat::rows(pass.w_hh, h);
    for step in (0..t).rev() {
        let go = &grad_out[step * b * s..(step + 1) * b * s];
        for (a, &x) in ds.iter_mut().zip(go) {
            *a += x;
        }
        let prev: &[T] = if step == 0 {
            pass.s0
        } else {
            &pass.out[(step - 1) * b * s..step * b * s]
        };
        let rows = step * b * g..(step + 1) * b * g;
        let dgh_t: &mut [T] = match kind {
            RnnKind::Gru => &mut dgh_gru[rows.clone()],
            RnnKind::Lstm => &mut [],
        };
        let sv = &pass.saved[step * b * sw..(step + 1) * b * sw];
        let dgx_t = &mut dgx[rows.clone()];
        grads_rows(kind, d, sv, &ds, prev, &mut ds_prev, dgx_t, dgh_t, threads);
        step_also(step, &dgx[rows.clone()], &mut ds_prev);
        let dgh_t: &[T] = match kind {
            RnnKind::Gru => &dgh_gru[rows],
            RnnKind::Lstm => &dgx[rows],
        };
        // dh_prev += dgh_t W_hh  ([B, G] × [G, H]); rows of ds_prev have stride S.
        // SAFETY: dgh_t is [B, G]; W is [G, H]; ds_prev is [B, S] with S >= H, distinct.
        unsafe {
            gemm_into(
                b,
                h,
                g,
                ds_prev.as_mut_ptr(),
                s,
                true,
                Mat::rows(dgh_t, g),
                w_mat,
            );
        }
        std::mem::swap(&mut ds, &mut ds_prev);
    }
    Bptt {
        dgx,
        dgh_gru,
        ds0: ds,
    }
}

/// Gradients of `gx`, `s0`, `W_hh` and `b_hh` given the saved forward values and
/// `d out` `[T, B, S]`.
fn backward<T: Real>(
    kind: RnnKind,
    d: Dims,
    pass: &Pass<T>,
    grad_out: &[T],
    threads: usize,
) -> (Vec<T>, Vec<T>, Vec<T>, Vec<T>) {
    let grads = bptt(kind, d, pass, grad_out, threads, |_, _, _| {});
    // dW = Σ_t dgh_tᵀ h_{t-1}, db_hh = column sums of dgh.
    let dw = weight_grad(d, grads.dgh(), d.g, pass.s0, pass.out);
    let db = column_sums(grads.dgh(), d.g);
    (grads.dgx, grads.ds0, dw, db)
}

impl FusedRnn {
    #[allow(clippy::too_many_arguments)]
    fn fwd_typed<T: Real>(
        &self,
        d: Dims,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<Vec<T>> {
        let gx = contiguous::<T>(s1, l1, "gx")?;
        let (s0, bias) = contiguous::<T>(s2, l2, "[s0 | b_hh]")?.split_at(d.b * d.s);
        let (st, lt) = self.w_hh_t.storage_and_layout();
        let Storage::Cpu(ct) = &*st else {
            return Err(err("fused rnn: W_hhᵀ must be on the CPU".into()));
        };
        let w_t = contiguous::<T>(ct, lt, "W_hhᵀ")?;
        if w_t.len() != d.h * d.g {
            return Err(err(format!(
                "fused rnn: W_hhᵀ has {} values, expected {} x {}",
                w_t.len(),
                d.h,
                d.g
            )));
        }
        let threads = candle_core::utils::get_num_threads();
        let (out, saved) = forward(self.kind, d, gx, s0, bias, w_t, self.save, threads);
        if self.save {
            *lock_saved(&self.saved, "fused rnn")? = Some(T::wrap(saved));
        }
        Ok(out)
    }

    fn bwd_typed<T: Real>(
        &self,
        d: Dims,
        aux: &Tensor,
        w: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let grad = grad.contiguous()?;
        let slot = lock_saved(&self.saved, "fused rnn")?;
        let saved = slot
            .as_ref()
            .and_then(T::unwrap)
            .ok_or_else(|| no_forward_pass("fused rnn"))?;
        let (st0, l0) = aux.storage_and_layout();
        let (stw, lw) = w.storage_and_layout();
        let (str_, lr) = res.storage_and_layout();
        let (stg, lg) = grad.storage_and_layout();
        let (Storage::Cpu(c0), Storage::Cpu(cw), Storage::Cpu(cr), Storage::Cpu(cg)) =
            (&*st0, &*stw, &*str_, &*stg)
        else {
            return Err(err("fused rnn: backward expects CPU tensors".into()));
        };
        let s0 = &contiguous::<T>(c0, l0, "[s0 | b_hh]")?[..d.b * d.s];
        let pass = Pass {
            s0,
            out: contiguous::<T>(cr, lr, "output")?,
            saved,
            w_hh: contiguous::<T>(cw, lw, "w_hh")?,
        };
        let (dgx, mut ds0, dw, db) = backward(
            self.kind,
            d,
            &pass,
            contiguous::<T>(cg, lg, "output gradient")?,
            candle_core::utils::get_num_threads(),
        );
        let dev = Device::Cpu;
        ds0.extend(db);
        Ok((
            Tensor::from_vec(dgx, (d.t, d.b, d.g), &dev)?,
            Tensor::from_vec(ds0, d.b * d.s + d.g, &dev)?,
            Tensor::from_vec(dw, (d.g, d.h), &dev)?,
        ))
    }
}

impl CustomOp3 for FusedRnn {
    fn name(&self) -> &'static str {
        "fused-rnn"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        _s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = dims(self.kind, l1, l2, l3)?;
        let shape = Shape::from((d.t, d.b, d.s));
        let out = by_storage_dtype!(s1, "fused rnn", T => self.fwd_typed::<T>(d, s1, l1, s2, l2))?;
        Ok((out, shape))
    }

    fn bwd(
        &self,
        arg1: &Tensor,
        arg2: &Tensor,
        arg3: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = dims(self.kind, arg1.layout(), arg2.layout(), arg3.layout())?;
        let (a, b, c) = by_dtype!(arg1.dtype(), "fused rnn", T => {
            self.bwd_typed::<T>(d, arg2, arg3, res, grad_res)
        })?;
        Ok((Some(a), Some(b), Some(c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use caprl_kernels::host_gemm::PARALLEL_MIN_VALUES;

    /// Rows split across threads give bit-identical states and gradients (for a batch large
    /// enough to take the parallel path).
    #[test]
    fn rows_on_several_threads_match_one_thread_bit_for_bit() {
        for kind in [RnnKind::Gru, RnnKind::Lstm] {
            let (t, b, h) = (3usize, 64usize, 96usize);
            let g = kind.gates() * h;
            let s = match kind {
                RnnKind::Gru => h,
                RnnKind::Lstm => 2 * h,
            };
            assert!(
                b * g >= PARALLEL_MIN_VALUES,
                "the test must take the parallel path"
            );
            let d = Dims { t, b, h, g, s };
            let val = |n: usize, salt: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| (((i * 7919 + salt) % 97) as f32 - 48.0) / 160.0)
                    .collect()
            };
            let gx = val(t * b * g, 1);
            let s0 = val(b * s, 2);
            let w = val(g * h, 3);
            let bias = val(g, 5);
            let w_t: Vec<f32> = (0..h * g).map(|k| w[(k % g) * h + k / g]).collect();
            let grad_out = val(t * b * s, 4);
            let run = |threads: usize| {
                let (out, saved) = forward(kind, d, &gx, &s0, &bias, &w_t, true, threads);
                let pass = Pass {
                    s0: &s0,
                    out: &out,
                    saved: &saved,
                    w_hh: &w,
                };
                let grads = backward(kind, d, &pass, &grad_out, threads);
                (out, grads)
            };
            let (out1, g1) = run(1);
            let (out2, g2) = run(2);
            assert_eq!(out1, out2, "{kind:?} states");
            assert_eq!(g1, g2, "{kind:?} gradients");
        }
    }
}
