//! A whole recurrent layer over a sequence as one graph node (CPU, f32/f64).
//!
//! Inputs: the precomputed input term `gx = W_ih x_t + b_ih` for every step `[T, B, G]`, the
//! initial state `s0` `[B, S]` (GRU: `h`, `S = H`; LSTM: `[h, c]`, `S = 2H`) and the recurrent
//! weights with their bias as one matrix `W = [W_hh | b_hh]` `[G, H + 1]`. Output: the state
//! after every step `[T, B, S]`. Gate layout and formulas are those of [`super::rnn`]:
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

use candle_core::{CpuStorage, CustomOp3, DType, Device, Layout, Shape, Storage, Tensor};

use super::config::RnnKind;

/// Element types the fused layer runs on.
pub(crate) trait Real:
    Copy
    + Send
    + Sync
    + 'static
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::AddAssign
    + candle_core::WithDType
{
    const ZERO: Self;
    const ONE: Self;
    fn sigmoid(self) -> Self;
    fn tanh_(self) -> Self;
    fn cpu_slice(s: &CpuStorage) -> Option<&[Self]>;
    fn wrap(v: Vec<Self>) -> Saved;
    fn unwrap(s: &Saved) -> Option<&[Self]>;
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn sigmoid(self) -> Self {
        1.0 / (1.0 + (-self).exp())
    }
    #[inline(always)]
    fn tanh_(self) -> Self {
        self.tanh()
    }
    fn cpu_slice(s: &CpuStorage) -> Option<&[Self]> {
        match s {
            CpuStorage::F32(v) => Some(v),
            _ => None,
        }
    }
    fn wrap(v: Vec<Self>) -> Saved {
        Saved::F32(v)
    }
    fn unwrap(s: &Saved) -> Option<&[Self]> {
        match s {
            Saved::F32(v) => Some(v),
            Saved::F64(_) => None,
        }
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn sigmoid(self) -> Self {
        1.0 / (1.0 + (-self).exp())
    }
    #[inline(always)]
    fn tanh_(self) -> Self {
        self.tanh()
    }
    fn cpu_slice(s: &CpuStorage) -> Option<&[Self]> {
        match s {
            CpuStorage::F64(v) => Some(v),
            _ => None,
        }
    }
    fn wrap(v: Vec<Self>) -> Saved {
        Saved::F64(v)
    }
    fn unwrap(s: &Saved) -> Option<&[Self]> {
        match s {
            Saved::F64(v) => Some(v),
            Saved::F32(_) => None,
        }
    }
}

/// Whether the fused layer can run on tensors of this device and dtype.
pub(crate) fn supported(device: &Device, dtype: DType) -> bool {
    device.is_cpu() && matches!(dtype, DType::F32 | DType::F64)
}

/// Runs the layer: `gx` `[T, B, G]`, `s0` `[B, S]`, `w_aug` `[G, H + 1]` → states `[T, B, S]`.
/// Records a backward node when any input tracks gradients.
pub(crate) fn run(
    kind: RnnKind,
    gx: &Tensor,
    s0: &Tensor,
    w_aug: &Tensor,
) -> candle_core::Result<Tensor> {
    let gx = gx.contiguous()?;
    let s0 = s0.contiguous()?;
    let w_aug = w_aug.contiguous()?;
    let save = gx.track_op() || s0.track_op() || w_aug.track_op();
    let op = FusedRnn {
        kind,
        save,
        saved: Mutex::new(None),
    };
    if save {
        gx.apply_op3(&s0, &w_aug, op)
    } else {
        gx.apply_op3_no_bwd(&s0, &w_aug, &op)
    }
}

/// The values the backward pass needs, per step and row: GRU `[r, z, n, gh_n]`,
/// LSTM `[i, f, g, o, tanh c]` (each `H` wide).
pub(crate) enum Saved {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

struct FusedRnn {
    kind: RnnKind,
    save: bool,
    saved: Mutex<Option<Saved>>,
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
}

impl Dims {
    fn saved_width(&self, kind: RnnKind) -> usize {
        match kind {
            RnnKind::Gru => 4 * self.h,
            RnnKind::Lstm => 5 * self.h,
        }
    }
}

fn err(msg: String) -> candle_core::Error {
    candle_core::Error::Msg(msg)
}

fn contiguous<'a, T: Real>(
    s: &'a CpuStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<&'a [T]> {
    let all =
        T::cpu_slice(s).ok_or_else(|| err(format!("fused rnn: {what} has the wrong dtype")))?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&all[a..b]),
        None => Err(err(format!("fused rnn: {what} is not contiguous"))),
    }
}

fn dims(kind: RnnKind, l1: &Layout, l2: &Layout, l3: &Layout) -> candle_core::Result<Dims> {
    let (t, b, g) = l1.shape().dims3()?;
    let (b2, s) = l2.shape().dims2()?;
    let (g3, h1) = l3.shape().dims2()?;
    let h = h1.saturating_sub(1);
    let (gates, width) = match kind {
        RnnKind::Gru => (3, 1),
        RnnKind::Lstm => (4, 2),
    };
    if b2 != b || g3 != g || g != gates * h || s != width * h || h == 0 {
        return Err(err(format!(
            "fused rnn: shapes gx {:?}, s0 {:?}, w {:?} do not fit a {kind:?} layer",
            l1.shape(),
            l2.shape(),
            l3.shape()
        )));
    }
    Ok(Dims { t, b, h, g, s })
}

fn parallelism() -> gemm::Parallelism {
    let n = candle_core::utils::get_num_threads();
    if n > 1 {
        gemm::Parallelism::Rayon(n)
    } else {
        gemm::Parallelism::None
    }
}

/// A row-major matrix view: element `(i, j)` at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy)]
struct Mat<T> {
    ptr: *const T,
    rs: isize,
    cs: isize,
}

/// `dst[m, n] (+)= lhs[m, k] × rhs[k, n]`, `dst` row-major with row stride `dst_rs`.
///
/// # Safety
/// Every view must address valid memory for its `m × k`, `k × n` and `m × n` extents, and `dst`
/// must not overlap the inputs.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_into<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: usize,
    accumulate: bool,
    lhs: Mat<T>,
    rhs: Mat<T>,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    *dst.add(i * dst_rs + j) = T::ZERO;
                }
            }
        }
        return;
    }
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        accumulate,
        lhs.ptr,
        lhs.cs,
        lhs.rs,
        rhs.ptr,
        rhs.cs,
        rhs.rs,
        T::ONE,
        T::ONE,
        false,
        false,
        false,
        parallelism(),
    );
}

/// Forward pass; returns the states `[T, B, S]` and (when `save`) the saved gate values.
fn forward<T: Real>(
    kind: RnnKind,
    d: Dims,
    gx: &[T],
    s0: &[T],
    w: &[T],
    save: bool,
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
    // W_hhᵀ as a [H, G] view of the [G, H + 1] matrix.
    let w_t = Mat {
        ptr: w.as_ptr(),
        rs: 1,
        cs: (h + 1) as isize,
    };
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
            for (j, v) in row.iter_mut().enumerate() {
                *v = w[j * (h + 1) + h];
            }
        }
        // SAFETY: h_prev rows have stride S and width H within `prev`; W is [G, H + 1]; gh is
        // [B, G] and distinct from both.
        unsafe {
            gemm_into(
                b,
                g,
                h,
                gh.as_mut_ptr(),
                g,
                true,
                Mat {
                    ptr: prev.as_ptr(),
                    rs: s as isize,
                    cs: 1,
                },
                w_t,
            );
        }
        let gx_t = &gx[step * b * g..(step + 1) * b * g];
        for i in 0..b {
            let gxr = &gx_t[i * g..(i + 1) * g];
            let ghr = &gh[i * g..(i + 1) * g];
            let hp = &prev[i * s..i * s + s];
            let o = &mut cur[i * s..(i + 1) * s];
            let sv: &mut [T] = if save {
                let at = (step * b + i) * sw;
                &mut saved[at..at + sw]
            } else {
                &mut []
            };
            match kind {
                RnnKind::Gru => {
                    for j in 0..h {
                        let r = (gxr[j] + ghr[j]).sigmoid();
                        let z = (gxr[h + j] + ghr[h + j]).sigmoid();
                        let ghn = ghr[2 * h + j];
                        let n = (gxr[2 * h + j] + r * ghn).tanh_();
                        o[j] = n + z * (hp[j] - n);
                        if save {
                            sv[j] = r;
                            sv[h + j] = z;
                            sv[2 * h + j] = n;
                            sv[3 * h + j] = ghn;
                        }
                    }
                }
                RnnKind::Lstm => {
                    for j in 0..h {
                        let ig = (gxr[j] + ghr[j]).sigmoid();
                        let fg = (gxr[h + j] + ghr[h + j]).sigmoid();
                        let gg = (gxr[2 * h + j] + ghr[2 * h + j]).tanh_();
                        let og = (gxr[3 * h + j] + ghr[3 * h + j]).sigmoid();
                        let c = fg * hp[h + j] + ig * gg;
                        let tc = c.tanh_();
                        o[j] = og * tc;
                        o[h + j] = c;
                        if save {
                            sv[j] = ig;
                            sv[h + j] = fg;
                            sv[2 * h + j] = gg;
                            sv[3 * h + j] = og;
                            sv[4 * h + j] = tc;
                        }
                    }
                }
            }
        }
    }
    (out, saved)
}

/// Gradients of `(gx, s0, w_aug)` given the saved forward values and `d out` `[T, B, S]`.
#[allow(clippy::too_many_arguments)]
fn backward<T: Real>(
    kind: RnnKind,
    d: Dims,
    s0: &[T],
    w: &[T],
    out: &[T],
    saved: &[T],
    grad_out: &[T],
) -> (Vec<T>, Vec<T>, Vec<T>) {
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
    let w_mat = Mat {
        ptr: w.as_ptr(),
        rs: (h + 1) as isize,
        cs: 1,
    };
    for step in (0..t).rev() {
        let go = &grad_out[step * b * s..(step + 1) * b * s];
        for (a, &x) in ds.iter_mut().zip(go) {
            *a += x;
        }
        let prev: &[T] = if step == 0 {
            s0
        } else {
            &out[(step - 1) * b * s..step * b * s]
        };
        let dgx_t = &mut dgx[step * b * g..(step + 1) * b * g];
        for i in 0..b {
            let sv = &saved[(step * b + i) * sw..(step * b + i + 1) * sw];
            let dsr = &ds[i * s..(i + 1) * s];
            let hp = &prev[i * s..(i + 1) * s];
            let dp = &mut ds_prev[i * s..(i + 1) * s];
            let dx = &mut dgx_t[i * g..(i + 1) * g];
            match kind {
                RnnKind::Gru => {
                    let at = (step * b + i) * g;
                    let dhh = &mut dgh_gru[at..at + g];
                    for j in 0..h {
                        let (r, z, n, ghn) = (sv[j], sv[h + j], sv[2 * h + j], sv[3 * h + j]);
                        let dh = dsr[j];
                        let dan = dh * (T::ONE - z) * (T::ONE - n * n);
                        let daz = dh * (hp[j] - n) * z * (T::ONE - z);
                        let dar = dan * ghn * r * (T::ONE - r);
                        dx[j] = dar;
                        dx[h + j] = daz;
                        dx[2 * h + j] = dan;
                        dhh[j] = dar;
                        dhh[h + j] = daz;
                        dhh[2 * h + j] = dan * r;
                        dp[j] = dh * z;
                    }
                }
                RnnKind::Lstm => {
                    for j in 0..h {
                        let (ig, fg, gg, og, tc) = (
                            sv[j],
                            sv[h + j],
                            sv[2 * h + j],
                            sv[3 * h + j],
                            sv[4 * h + j],
                        );
                        let dh = dsr[j];
                        let dc = dsr[h + j] + dh * og * (T::ONE - tc * tc);
                        let c_prev = hp[h + j];
                        dx[j] = dc * gg * ig * (T::ONE - ig);
                        dx[h + j] = dc * c_prev * fg * (T::ONE - fg);
                        dx[2 * h + j] = dc * ig * (T::ONE - gg * gg);
                        dx[3 * h + j] = dh * tc * og * (T::ONE - og);
                        dp[j] = T::ZERO;
                        dp[h + j] = dc * fg;
                    }
                }
            }
        }
        let dgh_t: &[T] = match kind {
            RnnKind::Gru => &dgh_gru[step * b * g..(step + 1) * b * g],
            RnnKind::Lstm => &dgx[step * b * g..(step + 1) * b * g],
        };
        // dh_prev += dgh_t W_hh  ([B, G] × [G, H]); rows of ds_prev have stride S.
        // SAFETY: dgh_t is [B, G]; W is [G, H + 1]; ds_prev is [B, S] with S >= H, distinct.
        unsafe {
            gemm_into(
                b,
                h,
                g,
                ds_prev.as_mut_ptr(),
                s,
                true,
                Mat {
                    ptr: dgh_t.as_ptr(),
                    rs: g as isize,
                    cs: 1,
                },
                w_mat,
            );
        }
        std::mem::swap(&mut ds, &mut ds_prev);
    }
    let ds0 = ds;
    // dW = Σ_t dgh_tᵀ h_{t-1}: the first step reads s0, the others the outputs 0..T-1.
    let dgh_all: &[T] = match kind {
        RnnKind::Gru => &dgh_gru,
        RnnKind::Lstm => &dgx,
    };
    let mut dw = vec![T::ZERO; g * (h + 1)];
    if t > 0 {
        // SAFETY: dghᵀ views [G, rows] of dgh_all; h_prev views [rows, H] with row stride S;
        // dw is [G, H + 1] and distinct from both.
        unsafe {
            gemm_into(
                g,
                h,
                b,
                dw.as_mut_ptr(),
                h + 1,
                false,
                Mat {
                    ptr: dgh_all.as_ptr(),
                    rs: 1,
                    cs: g as isize,
                },
                Mat {
                    ptr: s0.as_ptr(),
                    rs: s as isize,
                    cs: 1,
                },
            );
            gemm_into(
                g,
                h,
                (t - 1) * b,
                dw.as_mut_ptr(),
                h + 1,
                true,
                Mat {
                    ptr: dgh_all[b * g..].as_ptr(),
                    rs: 1,
                    cs: g as isize,
                },
                Mat {
                    ptr: out.as_ptr(),
                    rs: s as isize,
                    cs: 1,
                },
            );
        }
    }
    // db_hh = column sums of dgh.
    let mut db = vec![T::ZERO; g];
    for row in dgh_all.chunks_exact(g) {
        for (a, &x) in db.iter_mut().zip(row) {
            *a += x;
        }
    }
    for (j, v) in db.into_iter().enumerate() {
        dw[j * (h + 1) + h] = v;
    }
    (dgx, ds0, dw)
}

impl FusedRnn {
    fn fwd_typed<T: Real>(
        &self,
        d: Dims,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<Vec<T>> {
        let gx = contiguous::<T>(s1, l1, "gx")?;
        let s0 = contiguous::<T>(s2, l2, "s0")?;
        let w = contiguous::<T>(s3, l3, "w_hh")?;
        let (out, saved) = forward(self.kind, d, gx, s0, w, self.save);
        if self.save {
            let mut slot = self
                .saved
                .lock()
                .map_err(|_| err("fused rnn: saved state lock poisoned".into()))?;
            *slot = Some(T::wrap(saved));
        }
        Ok(out)
    }

    fn bwd_typed<T: Real>(
        &self,
        d: Dims,
        s0: &Tensor,
        w: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let grad = grad.contiguous()?;
        let slot = self
            .saved
            .lock()
            .map_err(|_| err("fused rnn: saved state lock poisoned".into()))?;
        let saved = slot
            .as_ref()
            .and_then(T::unwrap)
            .ok_or_else(|| err("fused rnn: backward without a saved forward pass".into()))?;
        let (st0, l0) = s0.storage_and_layout();
        let (stw, lw) = w.storage_and_layout();
        let (str_, lr) = res.storage_and_layout();
        let (stg, lg) = grad.storage_and_layout();
        let (Storage::Cpu(c0), Storage::Cpu(cw), Storage::Cpu(cr), Storage::Cpu(cg)) =
            (&*st0, &*stw, &*str_, &*stg)
        else {
            return Err(err("fused rnn: backward expects CPU tensors".into()));
        };
        let (dgx, ds0, dw) = backward(
            self.kind,
            d,
            contiguous::<T>(c0, l0, "s0")?,
            contiguous::<T>(cw, lw, "w_hh")?,
            contiguous::<T>(cr, lr, "output")?,
            saved,
            contiguous::<T>(cg, lg, "output gradient")?,
        );
        let dev = Device::Cpu;
        Ok((
            Tensor::from_vec(dgx, (d.t, d.b, d.g), &dev)?,
            Tensor::from_vec(ds0, (d.b, d.s), &dev)?,
            Tensor::from_vec(dw, (d.g, d.h + 1), &dev)?,
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
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = dims(self.kind, l1, l2, l3)?;
        let shape = Shape::from((d.t, d.b, d.s));
        match s1 {
            CpuStorage::F32(_) => Ok((
                CpuStorage::F32(self.fwd_typed::<f32>(d, s1, l1, s2, l2, s3, l3)?),
                shape,
            )),
            CpuStorage::F64(_) => Ok((
                CpuStorage::F64(self.fwd_typed::<f64>(d, s1, l1, s2, l2, s3, l3)?),
                shape,
            )),
            other => Err(err(format!(
                "fused rnn: dtype {:?} is not supported (f32 or f64)",
                candle_core::backend::BackendStorage::dtype(other)
            ))),
        }
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
        let (a, b, c) = match arg1.dtype() {
            DType::F32 => self.bwd_typed::<f32>(d, arg2, arg3, res, grad_res)?,
            DType::F64 => self.bwd_typed::<f64>(d, arg2, arg3, res, grad_res)?,
            other => {
                return Err(err(format!(
                    "fused rnn: dtype {other:?} is not supported (f32 or f64)"
                )))
            }
        };
        Ok((Some(a), Some(b), Some(c)))
    }
}
