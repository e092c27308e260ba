//! A whole recurrent layer over a sequence as one graph node (CPU, f32/f64).
//!
//! Inputs: the precomputed input term `gx = W_ih x_t + b_ih` for every step `[T, B, G]`, the
//! initial state `s0` `[B, S]` (GRU: `h`, `S = H`; LSTM: `[h, c]`, `S = 2H`) with the
//! recurrent bias `b_hh` `[G]`, both in one small vector `[s0 | b_hh]` (a custom op takes three
//! tensors), and the recurrent weights `W_hh` `[G, H]`. Output: the state after every step
//! `[T, B, S]`. Gate layout and formulas are those of [`super::rnn`]:
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

use crate::fastmath::exp_f32;
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
    + std::ops::MulAssign
    + candle_core::WithDType
{
    const ZERO: Self;
    const ONE: Self;
    const NEG_INFINITY: Self;
    fn sigmoid(self) -> Self;
    /// `eˣ` and `ln x` (the library functions: log-softmax needs them exact).
    fn exp_(self) -> Self;
    fn ln_(self) -> Self;
    fn max_(self, other: Self) -> Self;
    fn tanh_(self) -> Self;
    fn cpu_slice(s: &CpuStorage) -> Option<&[Self]>;
    fn wrap(v: Vec<Self>) -> Saved;
    fn unwrap(s: &Saved) -> Option<&[Self]>;
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
    fn exp_(self) -> Self {
        self.exp()
    }
    fn ln_(self) -> Self {
        self.ln()
    }
    fn max_(self, other: Self) -> Self {
        self.max(other)
    }
    /// `σ(x) = 1 / (1 + e⁻ˣ)`.
    #[inline(always)]
    fn sigmoid(self) -> Self {
        1.0 / (1.0 + exp_f32(-self))
    }
    /// `tanh x = 1 - 2 / (e²ˣ + 1)` (absolute error below 1e-7).
    #[inline(always)]
    fn tanh_(self) -> Self {
        1.0 - 2.0 / (exp_f32(2.0 * self) + 1.0)
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
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
    fn exp_(self) -> Self {
        self.exp()
    }
    fn ln_(self) -> Self {
        self.ln()
    }
    fn max_(self, other: Self) -> Self {
        self.max(other)
    }
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
    /// `W_hhᵀ` `[H, G]`, read by the forward gemm.
    w_hh_t: Tensor,
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

pub(crate) fn err(msg: String) -> candle_core::Error {
    candle_core::Error::Msg(msg)
}

pub(crate) fn contiguous<'a, T: Real>(
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
    let aux = l2.shape().elem_count();
    let (g3, h3) = l3.shape().dims2()?;
    let (gates, width) = match kind {
        RnnKind::Gru => (3, 1),
        RnnKind::Lstm => (4, 2),
    };
    let h = g / gates;
    let s = width * h;
    if g3 != g || h3 != h || g != gates * h || h == 0 || aux != b * s + g {
        return Err(err(format!(
            "fused rnn: shapes gx {:?}, [s0 | b_hh] {:?}, w_hh {:?} do not fit a {kind:?} layer",
            l1.shape(),
            l2.shape(),
            l3.shape()
        )));
    }
    Ok(Dims { t, b, h, g, s })
}

/// Below this many gate values per step the rows run on the calling thread: handing them to
/// rayon costs more than it saves.
const PARALLEL_MIN_VALUES: usize = 16 * 1024;

/// Runs `f(i)` once for every row `i < rows`. With several `threads` and enough work
/// (`rows × values_per_row`), contiguous blocks of rows run on rayon's threads; each row is
/// computed by the same code either way, so results do not depend on the thread count.
fn for_each_row(threads: usize, rows: usize, values_per_row: usize, f: impl Fn(usize) + Sync) {
    if threads <= 1 || rows < 2 || rows * values_per_row < PARALLEL_MIN_VALUES {
        (0..rows).for_each(f);
        return;
    }
    use rayon::prelude::*;
    let blocks = threads.min(rows);
    let per = rows.div_ceil(blocks);
    (0..blocks)
        .into_par_iter()
        .for_each(|k| (k * per..((k + 1) * per).min(rows)).for_each(&f));
}

/// An output buffer that several threads write disjoint parts of while their caller waits for
/// them ([`for_each_row`]'s rows, `linear`'s two column halves, the host step's blocks).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);

// SAFETY: the pointer is only dereferenced through `row` and `slice`, whose callers guarantee
// that each part is borrowed by one thread at a time.
unsafe impl<T: Send> Send for SendPtr<T> {}
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The address of value `offset`.
    pub(crate) fn at(&self, offset: usize) -> *mut T {
        self.0.wrapping_add(offset)
    }

    /// The `len` values from `offset` on.
    ///
    /// # Safety
    /// They must lie inside the buffer, and no other reference to them may be live.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, offset: usize, len: usize) -> &mut [T] {
        std::slice::from_raw_parts_mut(self.0.add(offset), len)
    }

    /// Row `i` of width `w`.
    ///
    /// # Safety
    /// As for [`SendPtr::slice`] of values `i * w..(i + 1) * w`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, i: usize, w: usize) -> &mut [T] {
        self.slice(i * w, w)
    }
}

/// Below this many multiply-adds a product runs on one thread: splitting it costs more than it
/// saves (a `[32, 512] × [512, 200]` product is twice as slow on two threads).
pub(crate) const PARALLEL_MIN_MACS: usize = 8 << 20;

fn parallelism(m: usize, n: usize, k: usize) -> gemm::Parallelism {
    let threads = candle_core::utils::get_num_threads();
    if threads > 1 && m * n * k >= PARALLEL_MIN_MACS {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    }
}

/// A row-major matrix view: element `(i, j)` at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<T> {
    pub ptr: *const T,
    pub rs: isize,
    pub cs: isize,
}

impl<T> Mat<T> {
    /// The matrix stored row by row in `data`, rows `stride` apart.
    pub fn rows(data: &[T], stride: usize) -> Self {
        Mat {
            ptr: data.as_ptr(),
            rs: stride as isize,
            cs: 1,
        }
    }

    /// The transpose of the matrix stored row by row in `data` (rows `stride` apart).
    pub fn cols(data: &[T], stride: usize) -> Self {
        Mat {
            ptr: data.as_ptr(),
            rs: 1,
            cs: stride as isize,
        }
    }
}

/// `dst[m, n] (+)= lhs[m, k] × rhs[k, n]`, `dst` row-major with row stride `dst_rs`.
///
/// # Safety
/// Every view must address valid memory for its `m × k`, `k × n` and `m × n` extents, and `dst`
/// must not overlap the inputs.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_into<T: Real>(
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
        parallelism(m, n, k),
    );
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
        let gh = &gh[..];
        let sv_step: &mut [T] = if save {
            &mut saved[step * b * sw..(step + 1) * b * sw]
        } else {
            &mut scratch
        };
        let (o_ptr, sv_ptr) = (SendPtr(cur.as_mut_ptr()), SendPtr(sv_step.as_mut_ptr()));
        for_each_row(threads, b, g, |i| {
            let gxr = &gx_t[i * g..(i + 1) * g];
            let ghr = &gh[i * g..(i + 1) * g];
            let hp = &prev[i * s..(i + 1) * s];
            // SAFETY: row i of `cur` ([B, S]) and of the step's gate values ([B, SW]) belong to
            // this call alone (for_each_row visits each row once).
            let (o, sv) = unsafe { (o_ptr.row(i, s), sv_ptr.row(i, sw)) };
            gates(kind, h, gxr, ghr, hp, o, sv);
        });
    }
    (out, saved)
}

/// Whether the row kernels may run compiled for AVX2 and FMA (checked once by std, then cached).
/// The build targets baseline x86-64 (SSE2), so without this the gate loops run 4 lanes wide.
/// Rust never fuses `a * b + c` on its own, so both builds give the same bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Defines a row kernel three times over one body: `$plain` (baseline build), `$vector` (the
/// same code compiled for AVX2/FMA, x86-64 only) and `$name`, which calls the second when the
/// CPU has those features and the first otherwise.
macro_rules! row_kernel {
    ($(#[$doc:meta])* $vis:vis fn $name:ident, $vector:ident, $plain:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$doc])*
        #[allow(clippy::too_many_arguments)]
        #[inline(always)]
        $vis fn $name<T: Real>($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if avx2() {
                // SAFETY: the CPU has AVX2 and FMA (checked just above).
                return unsafe { $vector($($arg),*) };
            }
            $plain($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $vector<T: Real>($($arg: $ty),*) {
            $plain($($arg),*)
        }

        #[allow(clippy::too_many_arguments)]
        #[inline(always)]
        fn $plain<T: Real>($($arg: $ty),*) $body
    };
}

row_kernel! {
    /// One row of gate values ([`gru_gates`] or [`lstm_gates`]).
    pub(crate) fn gates, gates_avx2, gates_plain(
        kind: RnnKind,
        h: usize,
        gx: &[T],
        gh: &[T],
        hp: &[T],
        o: &mut [T],
        sv: &mut [T],
    ) {
        match kind {
            RnnKind::Gru => gru_gates(h, gx, gh, hp, o, sv),
            RnnKind::Lstm => lstm_gates(h, gx, gh, hp, o, sv),
        }
    }
}

row_kernel! {
    /// One row of gate gradients ([`gru_grads`], which also writes `dgh`, or [`lstm_grads`],
    /// which takes an empty `dgh`).
    fn grads, grads_avx2, grads_plain(
        kind: RnnKind,
        h: usize,
        sv: &[T],
        ds: &[T],
        hp: &[T],
        dp: &mut [T],
        dx: &mut [T],
        dgh: &mut [T],
    ) {
        match kind {
            RnnKind::Gru => gru_grads(h, sv, ds, hp, dp, dx, dgh),
            RnnKind::Lstm => lstm_grads(h, sv, ds, hp, dp, dx),
        }
    }
}

/// One row of GRU gates: `o = h'` `[H]`, `sv = [r, z, n, gh_n]`.
#[inline(always)]
fn gru_gates<T: Real>(h: usize, gx: &[T], gh: &[T], hp: &[T], o: &mut [T], sv: &mut [T]) {
    let (gxr, gxz, gxn) = (&gx[..h], &gx[h..2 * h], &gx[2 * h..3 * h]);
    let (ghr, ghz, ghn) = (&gh[..h], &gh[h..2 * h], &gh[2 * h..3 * h]);
    let hp = &hp[..h];
    let o = &mut o[..h];
    let (sr, rest) = sv.split_at_mut(h);
    let (sz, rest) = rest.split_at_mut(h);
    let (sn, rest) = rest.split_at_mut(h);
    let sg = &mut rest[..h];
    for j in 0..h {
        let r = (gxr[j] + ghr[j]).sigmoid();
        let z = (gxz[j] + ghz[j]).sigmoid();
        let n = (gxn[j] + r * ghn[j]).tanh_();
        o[j] = n + z * (hp[j] - n);
        sr[j] = r;
        sz[j] = z;
        sn[j] = n;
        sg[j] = ghn[j];
    }
}

/// One row of LSTM gates: `o = [h', c']` `[2H]`, `sv = [i, f, g, o, tanh c']`.
#[inline(always)]
fn lstm_gates<T: Real>(h: usize, gx: &[T], gh: &[T], hp: &[T], o: &mut [T], sv: &mut [T]) {
    let (gxi, gxf, gxg, gxo) = (
        &gx[..h],
        &gx[h..2 * h],
        &gx[2 * h..3 * h],
        &gx[3 * h..4 * h],
    );
    let (ghi, ghf, ghg, gho) = (
        &gh[..h],
        &gh[h..2 * h],
        &gh[2 * h..3 * h],
        &gh[3 * h..4 * h],
    );
    let cp = &hp[h..2 * h];
    let (oh, oc) = o.split_at_mut(h);
    let oc = &mut oc[..h];
    let (si, rest) = sv.split_at_mut(h);
    let (sf, rest) = rest.split_at_mut(h);
    let (sg, rest) = rest.split_at_mut(h);
    let (so, rest) = rest.split_at_mut(h);
    let st = &mut rest[..h];
    for j in 0..h {
        let ig = (gxi[j] + ghi[j]).sigmoid();
        let fg = (gxf[j] + ghf[j]).sigmoid();
        let gg = (gxg[j] + ghg[j]).tanh_();
        let og = (gxo[j] + gho[j]).sigmoid();
        let c = fg * cp[j] + ig * gg;
        let tc = c.tanh_();
        oh[j] = og * tc;
        oc[j] = c;
        si[j] = ig;
        sf[j] = fg;
        sg[j] = gg;
        so[j] = og;
        st[j] = tc;
    }
}

/// One row of GRU gate gradients from `dh` (first `H` of `ds`): `dx = d gx`, `dgh = d gh`,
/// `dp = ∂h'/∂h ⊙ dh` (the direct part of `d h_prev`).
#[inline(always)]
fn gru_grads<T: Real>(
    h: usize,
    sv: &[T],
    ds: &[T],
    hp: &[T],
    dp: &mut [T],
    dx: &mut [T],
    dgh: &mut [T],
) {
    let (r, z, n, ghn) = (
        &sv[..h],
        &sv[h..2 * h],
        &sv[2 * h..3 * h],
        &sv[3 * h..4 * h],
    );
    let (dh, hp, dp) = (&ds[..h], &hp[..h], &mut dp[..h]);
    let (dxr, rest) = dx.split_at_mut(h);
    let (dxz, rest) = rest.split_at_mut(h);
    let dxn = &mut rest[..h];
    let (dhr, rest) = dgh.split_at_mut(h);
    let (dhz, rest) = rest.split_at_mut(h);
    let dhn = &mut rest[..h];
    for j in 0..h {
        let (r, z, n) = (r[j], z[j], n[j]);
        let dan = dh[j] * (T::ONE - z) * (T::ONE - n * n);
        let daz = dh[j] * (hp[j] - n) * z * (T::ONE - z);
        let dar = dan * ghn[j] * r * (T::ONE - r);
        dxr[j] = dar;
        dxz[j] = daz;
        dxn[j] = dan;
        dhr[j] = dar;
        dhz[j] = daz;
        dhn[j] = dan * r;
        dp[j] = dh[j] * z;
    }
}

/// One row of LSTM gate gradients from `ds = [dh, dc]`: `dx = d gx = d gh`,
/// `dp = [0, f ⊙ dc_total]` (the direct part of `d [h_prev, c_prev]`).
#[inline(always)]
fn lstm_grads<T: Real>(h: usize, sv: &[T], ds: &[T], hp: &[T], dp: &mut [T], dx: &mut [T]) {
    let (ig, fg, gg) = (&sv[..h], &sv[h..2 * h], &sv[2 * h..3 * h]);
    let (og, tc) = (&sv[3 * h..4 * h], &sv[4 * h..5 * h]);
    let (dh, dcn) = (&ds[..h], &ds[h..2 * h]);
    let cp = &hp[h..2 * h];
    let (dph, dpc) = dp.split_at_mut(h);
    let dpc = &mut dpc[..h];
    let (dxi, rest) = dx.split_at_mut(h);
    let (dxf, rest) = rest.split_at_mut(h);
    let (dxg, rest) = rest.split_at_mut(h);
    let dxo = &mut rest[..h];
    for j in 0..h {
        let (i, f, g, o, t) = (ig[j], fg[j], gg[j], og[j], tc[j]);
        let dc = dcn[j] + dh[j] * o * (T::ONE - t * t);
        dxi[j] = dc * g * i * (T::ONE - i);
        dxf[j] = dc * cp[j] * f * (T::ONE - f);
        dxg[j] = dc * i * (T::ONE - g * g);
        dxo[j] = dh[j] * t * o * (T::ONE - o);
        dph[j] = T::ZERO;
        dpc[j] = dc * f;
    }
}

/// Gradients of `gx`, `s0`, `W_hh` and `b_hh` given the saved forward values and
/// `d out` `[T, B, S]`.
#[allow(clippy::too_many_arguments)]
fn backward<T: Real>(
    kind: RnnKind,
    d: Dims,
    s0: &[T],
    w: &[T],
    out: &[T],
    saved: &[T],
    grad_out: &[T],
    threads: usize,
) -> (Vec<T>, Vec<T>, Vec<T>, Vec<T>) {
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
    let w_mat = Mat::rows(w, h);
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
        let dgh_t = match kind {
            RnnKind::Gru => SendPtr(dgh_gru[step * b * g..].as_mut_ptr()),
            RnnKind::Lstm => SendPtr(std::ptr::null_mut()),
        };
        let (dp_ptr, dx_ptr) = (SendPtr(ds_prev.as_mut_ptr()), SendPtr(dgx_t.as_mut_ptr()));
        let ds_now = &ds[..];
        for_each_row(threads, b, g, |i| {
            let sv = &saved[(step * b + i) * sw..(step * b + i + 1) * sw];
            let dsr = &ds_now[i * s..(i + 1) * s];
            let hp = &prev[i * s..(i + 1) * s];
            // SAFETY: row i of ds_prev ([B, S]), of this step's dgx ([B, G]) and of its GRU dgh
            // ([B, G]) belong to this call alone (for_each_row visits each row once).
            let (dp, dx) = unsafe { (dp_ptr.row(i, s), dx_ptr.row(i, g)) };
            let dgh: &mut [T] = match kind {
                // SAFETY: as above; dgh_t is non-null for GRU.
                RnnKind::Gru => unsafe { dgh_t.row(i, g) },
                RnnKind::Lstm => &mut [],
            };
            grads(kind, h, sv, dsr, hp, dp, dx, dgh);
        });
        let dgh_t: &[T] = match kind {
            RnnKind::Gru => &dgh_gru[step * b * g..(step + 1) * b * g],
            RnnKind::Lstm => &dgx[step * b * g..(step + 1) * b * g],
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
    let ds0 = ds;
    // dW = Σ_t dgh_tᵀ h_{t-1}: the first step reads s0, the others the outputs 0..T-1.
    let dgh_all: &[T] = match kind {
        RnnKind::Gru => &dgh_gru,
        RnnKind::Lstm => &dgx,
    };
    let mut dw = vec![T::ZERO; g * h];
    if t > 0 {
        // SAFETY: dghᵀ views [G, rows] of dgh_all; h_prev views [rows, H] with row stride S;
        // dw is [G, H] and distinct from both.
        unsafe {
            gemm_into(
                g,
                h,
                b,
                dw.as_mut_ptr(),
                h,
                false,
                Mat::cols(dgh_all, g),
                Mat::rows(s0, s),
            );
            gemm_into(
                g,
                h,
                (t - 1) * b,
                dw.as_mut_ptr(),
                h,
                true,
                Mat::cols(&dgh_all[b * g..], g),
                Mat::rows(out, s),
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
    (dgx, ds0, dw, db)
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
        aux: &Tensor,
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
        let (dgx, mut ds0, dw, db) = backward(
            self.kind,
            d,
            s0,
            contiguous::<T>(cw, lw, "w_hh")?,
            contiguous::<T>(cr, lr, "output")?,
            saved,
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
        match s1 {
            CpuStorage::F32(_) => Ok((
                CpuStorage::F32(self.fwd_typed::<f32>(d, s1, l1, s2, l2)?),
                shape,
            )),
            CpuStorage::F64(_) => Ok((
                CpuStorage::F64(self.fwd_typed::<f64>(d, s1, l1, s2, l2)?),
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

#[cfg(test)]
mod tests {
    use super::*;

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
                let grads = backward(kind, d, &s0, &w, &out, &saved, &grad_out, threads);
                (out, grads)
            };
            let (out1, g1) = run(1);
            let (out2, g2) = run(2);
            assert_eq!(out1, out2, "{kind:?} states");
            assert_eq!(g1, g2, "{kind:?} gradients");
        }
    }

    /// The row kernels built for AVX2/FMA give the same bits as the baseline build (Rust does
    /// not fuse multiply-adds on its own), so a run does not depend on the CPU it lands on.
    #[test]
    fn vector_and_baseline_row_kernels_agree_bit_for_bit() {
        let h = 37;
        let val = |n: usize, salt: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 7919 + salt) % 97) as f32 - 48.0) / 12.0)
                .collect()
        };
        for kind in [RnnKind::Gru, RnnKind::Lstm] {
            let (g, s, sw) = match kind {
                RnnKind::Gru => (3 * h, h, 4 * h),
                RnnKind::Lstm => (4 * h, 2 * h, 5 * h),
            };
            let (gx, gh, hp) = (val(g, 1), val(g, 2), val(s, 3));
            let gates_of = |vector: bool| {
                let (mut o, mut sv) = (vec![0f32; s], vec![0f32; sw]);
                if vector {
                    gates(kind, h, &gx, &gh, &hp, &mut o, &mut sv);
                } else {
                    gates_plain(kind, h, &gx, &gh, &hp, &mut o, &mut sv);
                }
                (o, sv)
            };
            let (o, sv) = gates_of(true);
            assert_eq!((o.clone(), sv.clone()), gates_of(false), "{kind:?} gates");
            let ds = val(s, 4);
            let grads_of = |vector: bool| {
                let (mut dp, mut dx) = (vec![0f32; s], vec![0f32; g]);
                let mut dgh = vec![0f32; if kind == RnnKind::Gru { g } else { 0 }];
                if vector {
                    grads(kind, h, &sv, &ds, &hp, &mut dp, &mut dx, &mut dgh);
                } else {
                    grads_plain(kind, h, &sv, &ds, &hp, &mut dp, &mut dx, &mut dgh);
                }
                (dp, dx, dgh)
            };
            assert_eq!(grads_of(true), grads_of(false), "{kind:?} gradients");
        }
    }

    #[test]
    fn fast_exp_sigmoid_and_tanh_match_the_library_functions() {
        let mut x = -90.0f32;
        while x < 90.0 {
            let e = exp_f32(x);
            let want = x.clamp(-87.0, 88.0).exp();
            assert!(
                (e - want).abs() <= 4e-7 * want,
                "exp({x}) = {e}, want {want}"
            );
            let s = x.sigmoid();
            assert!((s - 1.0 / (1.0 + (-x).exp())).abs() < 2e-7, "sigmoid({x})");
            assert!((x.tanh_() - x.tanh()).abs() < 2e-7, "tanh({x})");
            x += 0.0137;
        }
    }
}
