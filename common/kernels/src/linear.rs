//! `y = x Wᵀ + b` as one graph node (CPU, f32/f64), where a matmul, a transpose and a bias add
//! would be three: every node of candle's graph costs a zero-filled gradient plus an add in the
//! backward pass, and the transposed weight's gradient is added with a strided walk.
//!
//! `x` `[.., K]`, `W` `[G, K]` ([`linear`]) or `Wᵀ` `[K, G]` ([`linear_t`]: decoding steps,
//! where repacking a transposed `W` at every step would cost more than the product), `b`
//! covering the trailing dims of `y` `[.., G]` (`[G]`, or `[M, G]` repeating every `M` rows: a
//! per-image term in a time-major batch). Products under 8M multiply-adds stay on one thread.
//! Backward: `dx = dy W`, `dW = dyᵀ x`, `db` = `dy`'s rows summed per bias row.

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};

use super::bias::add_row_bias;
use super::host_gemm::{gemm_into, Mat, SendPtr, PARALLEL_MIN_MACS};
use super::real::{by_dtype, by_storage_dtype, contiguous, err, host_values, Real};
use crate::kernels_enabled;
use candle_core::Result;

/// How the weight is stored.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum WLayout {
    /// `W` `[G, K]`, as parameters are stored.
    Rows,
    /// `Wᵀ` `[K, G]`, contiguous.
    Cols,
}

/// `x Wᵀ + b` for `W` `[G, K]`; other devices and dtypes take candle's ops.
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    apply(x, w, b, WLayout::Rows)
}

/// `x w_t + b` for `w_t = Wᵀ` `[K, G]`; other devices and dtypes take candle's ops.
pub fn linear_t(x: &Tensor, w_t: &Tensor, b: &Tensor) -> Result<Tensor> {
    apply(x, w_t, b, WLayout::Cols)
}

fn apply(x: &Tensor, w: &Tensor, b: &Tensor, layout: WLayout) -> Result<Tensor> {
    let (g, k) = match layout {
        WLayout::Rows => w.dims2()?,
        WLayout::Cols => {
            let (k, g) = w.dims2()?;
            (g, k)
        }
    };
    let mut out_dims = x.dims().to_vec();
    let fits = out_dims.last() == Some(&k) && {
        *out_dims.last_mut().unwrap_or(&mut 0) = g;
        out_dims.ends_with(b.dims()) && b.rank() >= 1
    };
    let native = kernels_enabled(x.device(), x.dtype())
        && w.dtype() == x.dtype()
        && b.dtype() == x.dtype()
        && w.device().is_cpu()
        && b.device().is_cpu();
    if !fits || !native {
        let rows = x.elem_count() / k.max(1);
        let w_t = match layout {
            WLayout::Rows => w.t()?,
            WLayout::Cols => w.clone(),
        };
        let y = x.reshape((rows, k))?.matmul(&w_t)?.reshape(out_dims)?;
        return add_row_bias(&y, b);
    }
    x.contiguous()?
        .apply_op3(&w.contiguous()?, &b.contiguous()?, Linear(layout))
}

struct Linear(WLayout);

/// `(rows of x, K, G, rows of b)` for the layouts of `x`, `W`, `b`.
fn sizes(
    lx: &Layout,
    lw: &Layout,
    lb: &Layout,
    layout: WLayout,
) -> candle_core::Result<(usize, usize, usize, usize)> {
    let (g, k) = match layout {
        WLayout::Rows => lw.shape().dims2()?,
        WLayout::Cols => {
            let (k, g) = lw.shape().dims2()?;
            (g, k)
        }
    };
    let n = lx.shape().elem_count() / k.max(1);
    let p = lb.shape().elem_count() / g.max(1);
    if k == 0 || g == 0 || p == 0 || !n.is_multiple_of(p) || lx.shape().dims().last() != Some(&k) {
        return Err(err(format!(
            "linear: shapes x {:?}, w {:?}, b {:?} do not fit",
            lx.shape(),
            lw.shape(),
            lb.shape()
        )));
    }
    Ok((n, k, g, p))
}

/// `Wᵀ` `[K, G]` as a matrix view of `w` stored in `layout`.
fn w_t<T>(w: &[T], k: usize, g: usize, layout: WLayout) -> Mat<T> {
    match layout {
        WLayout::Rows => Mat::cols(w, k),
        WLayout::Cols => Mat::rows(w, g),
    }
}

/// `W` `[G, K]` as a matrix view of `w` stored in `layout`.
fn w_rows<T>(w: &[T], k: usize, g: usize, layout: WLayout) -> Mat<T> {
    match layout {
        WLayout::Rows => Mat::rows(w, k),
        WLayout::Cols => Mat::cols(w, g),
    }
}

/// `x Wᵀ + b` on host slices: `x` `[n, k]`, `W` `[g, k]` (or `Wᵀ` `[k, g]`, per `layout`), `b`
/// `[p, g]` repeating every `p` rows.
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Real>(
    x: &[T],
    w: &[T],
    b: &[T],
    n: usize,
    k: usize,
    g: usize,
    layout: WLayout,
) -> Vec<T> {
    // The bias rows first, then the product accumulated onto them.
    assert!(
        x.len() >= n * k && w.len() >= g * k && (n * g == 0 || !b.is_empty()),
        "linear: short inputs"
    );
    let mut y: Vec<T> = Vec::with_capacity(n * g);
    while y.len() < n * g {
        let take = b.len().min(n * g - y.len());
        y.extend_from_slice(&b[..take]);
    }
    let x = Mat::rows(x, k);
    let w_t = w_t(w, k, g, layout);
    let macs = n * g * k;
    let threads = candle_core::utils::get_num_threads();
    if threads > 1 && (SPLIT_MIN_MACS..PARALLEL_MIN_MACS).contains(&macs) && g >= 64 {
        // Too small for gemm's own threading (a decoding step's logits): two halves of the
        // columns, one per thread, each computed exactly as the whole would be.
        let half = g / 2;
        let y_ptr = SendPtr(y.as_mut_ptr());
        let (x, w_t) = (SendMat(x), SendMat(w_t));
        let cols = move |j0: usize, width: usize| {
            let (y_ptr, x, w_t) = (y_ptr, x, w_t);
            let rhs = Mat {
                ptr: w_t.0.ptr.wrapping_offset(j0 as isize * w_t.0.cs),
                ..w_t.0
            };
            // SAFETY: columns j0..j0 + width of y (row stride g) and of Wᵀ; the two calls
            // write disjoint columns.
            unsafe { gemm_into(n, width, k, y_ptr.0.add(j0), g, true, x.0, rhs) }
        };
        rayon::join(|| cols(0, half), || cols(half, g - half));
        return y;
    }
    // SAFETY: x is n×k, w holds g×k values read through a k×g view, y is n×g, all distinct.
    unsafe { gemm_into(n, g, k, y.as_mut_ptr(), g, true, x, w_t) };
    y
}

/// From this many multiply-adds a product below gemm's own threading threshold is split in two
/// halves of columns on two threads.
const SPLIT_MIN_MACS: usize = 1 << 20;

#[derive(Clone, Copy)]
struct SendMat<T>(Mat<T>);
// SAFETY: read by `forward`'s two halves while `forward` waits for both.
unsafe impl<T: Sync> Send for SendMat<T> {}
unsafe impl<T: Sync> Sync for SendMat<T> {}

/// `dx`, `dW`, `db` of [`backward`].
pub struct Grads<T> {
    pub dx: Vec<T>,
    pub dw: Vec<T>,
    pub db: Vec<T>,
}

impl<T: Real> Grads<T> {
    /// The three gradients as CPU tensors shaped like the op's inputs.
    pub fn into_tensors(
        self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let dev = Device::Cpu;
        Ok((
            Tensor::from_vec(self.dx, x.shape(), &dev)?,
            Tensor::from_vec(self.dw, w.shape(), &dev)?,
            Tensor::from_vec(self.db, b.shape(), &dev)?,
        ))
    }
}

/// The gradients of [`forward`] given `dy` `[n, g]`; `dW` in the layout `W` came in.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Real>(
    x: &[T],
    w: &[T],
    dy: &[T],
    n: usize,
    k: usize,
    g: usize,
    p: usize,
    layout: WLayout,
) -> Grads<T> {
    assert!(
        x.len() >= n * k && w.len() >= g * k && dy.len() >= n * g,
        "linear: short inputs"
    );
    let mut dx = vec![T::ZERO; n * k];
    let mut dw = vec![T::ZERO; g * k];
    let x_rows = Mat::rows(x, k);
    let x_t = Mat::cols(x, k);
    let dy_rows = Mat::rows(dy, g);
    let dy_t = Mat::cols(dy, g);
    // SAFETY: every view stays within its slice's n×k, g×k or n×g values (checked above); dx
    // and dw are freshly allocated.
    unsafe {
        gemm_into(
            n,
            k,
            g,
            dx.as_mut_ptr(),
            k,
            false,
            dy_rows,
            w_rows(w, k, g, layout),
        );
        match layout {
            // dW [G, K] = dyᵀ x
            WLayout::Rows => gemm_into(g, k, n, dw.as_mut_ptr(), k, false, dy_t, x_rows),
            // dWᵀ [K, G] = xᵀ dy
            WLayout::Cols => gemm_into(k, g, n, dw.as_mut_ptr(), g, false, x_t, dy_rows),
        }
    }
    let mut db = vec![T::ZERO; p * g];
    for (i, row) in dy.chunks_exact(g).enumerate() {
        let at = (i % p) * g;
        for (a, &v) in db[at..at + g].iter_mut().zip(row) {
            *a += v;
        }
    }
    Grads { dx, dw, db }
}

impl Linear {
    fn fwd_typed<T: Real>(
        &self,
        (s1, l1): (&CpuStorage, &Layout),
        (s2, l2): (&CpuStorage, &Layout),
        (s3, l3): (&CpuStorage, &Layout),
    ) -> candle_core::Result<Vec<T>> {
        let (n, k, g, _) = sizes(l1, l2, l3, self.0)?;
        Ok(forward(
            contiguous::<T>(s1, l1, "x")?,
            contiguous::<T>(s2, l2, "w")?,
            contiguous::<T>(s3, l3, "b")?,
            n,
            k,
            g,
            self.0,
        ))
    }

    fn bwd_typed<T: Real>(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let (n, k, g, p) = sizes(x.layout(), w.layout(), b.layout(), self.0)?;
        let dy = dy.contiguous()?;
        let (sx, lx) = x.storage_and_layout();
        let (sw, lw) = w.storage_and_layout();
        let (sd, ld) = dy.storage_and_layout();
        let grads = backward(
            host_values::<T>(&sx, lx, "linear: x")?,
            host_values::<T>(&sw, lw, "linear: w")?,
            host_values::<T>(&sd, ld, "linear: output gradient")?,
            n,
            k,
            g,
            p,
            self.0,
        );
        grads.into_tensors(x, w, b)
    }
}

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "linear"
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
        let (_, _, g, _) = sizes(l1, l2, l3, self.0)?;
        let mut dims = l1.shape().dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = g;
        }
        let args = ((s1, l1), (s2, l2), (s3, l3));
        let out =
            by_storage_dtype!(s1, "linear", T => self.fwd_typed::<T>(args.0, args.1, args.2))?;
        Ok((out, Shape::from(dims)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, db) = by_dtype!(x.dtype(), "linear", T => self.bwd_typed::<T>(x, w, b, dy))?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_check::{
        assert_close as close, assert_same_with_gradients, grads_of_weighted_sum, values,
    };
    use candle_core::Var;

    #[test]
    fn linear_with_a_repeating_bias_matches_matmul_and_add_with_gradients() {
        // x [T=3, B=2, K=4], W [G=5, K], bias per image [B, G].
        let x = Var::from_tensor(&values(&[3, 2, 4], 1, 1.0)).unwrap();
        let w = Var::from_tensor(&values(&[5, 4], 2, 1.0)).unwrap();
        let b = Var::from_tensor(&values(&[2, 5], 3, 1.0)).unwrap();
        let up = values(&[3, 2, 5], 4, 1.0);
        let fused = linear(x.as_tensor(), w.as_tensor(), b.as_tensor()).unwrap();
        let graph = x
            .as_tensor()
            .reshape((6, 4))
            .unwrap()
            .matmul(&w.as_tensor().t().unwrap())
            .unwrap()
            .reshape((3, 2, 5))
            .unwrap()
            .broadcast_add(b.as_tensor())
            .unwrap();
        assert_same_with_gradients(&fused, &graph, &up, &[&x, &w, &b]);
    }

    #[test]
    fn linear_on_a_transposed_weight_matches_linear_with_gradients() {
        let x = Var::from_tensor(&values(&[6, 4], 1, 1.0)).unwrap();
        let w = Var::from_tensor(&values(&[5, 4], 2, 1.0)).unwrap();
        let w_t = Var::from_tensor(&w.as_tensor().t().unwrap().contiguous().unwrap()).unwrap();
        let b = Var::from_tensor(&values(&[5], 3, 1.0)).unwrap();
        let up = values(&[6, 5], 4, 1.0);
        let rows = linear(x.as_tensor(), w.as_tensor(), b.as_tensor()).unwrap();
        let cols = linear_t(x.as_tensor(), w_t.as_tensor(), b.as_tensor()).unwrap();
        close(&rows, &cols);
        let gr = grads_of_weighted_sum(&rows, &up);
        let gc = grads_of_weighted_sum(&cols, &up);
        close(
            gr.get(x.as_tensor()).unwrap(),
            gc.get(x.as_tensor()).unwrap(),
        );
        close(
            gr.get(b.as_tensor()).unwrap(),
            gc.get(b.as_tensor()).unwrap(),
        );
        close(
            &gr.get(w.as_tensor()).unwrap().t().unwrap(),
            gc.get(w_t.as_tensor()).unwrap(),
        );
    }

    #[test]
    fn a_decoding_sized_product_split_over_threads_matches_matmul() {
        // 32 × 512 × 200 multiply-adds: the two-halves path when there are two threads.
        let (x, w_t, b) = (
            values(&[32, 512], 5, 1.0),
            values(&[512, 200], 6, 1.0),
            values(&[200], 7, 1.0),
        );
        let want = x.matmul(&w_t).unwrap().broadcast_add(&b).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let got = pool.install(|| linear_t(&x, &w_t, &b).unwrap());
        close(&got, &want);
        close(&linear_t(&x, &w_t, &b).unwrap(), &got);
    }

    #[test]
    fn linear_refuses_a_bias_that_does_not_fit() {
        let x = values(&[6, 4], 1, 1.0);
        let w = values(&[5, 4], 2, 1.0);
        assert!(linear(&x, &w, &values(&[4, 5], 3, 1.0)).is_err());
        assert!(linear(&x, &w, &values(&[3], 3, 1.0)).is_err());
    }
}
