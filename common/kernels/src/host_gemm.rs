//! Host matrix products and the row-parallel helpers of the CPU kernels.

use super::real::Real;

/// Below this many gate values per step the rows run on the calling thread: handing them to
/// rayon costs more than it saves.
pub const PARALLEL_MIN_VALUES: usize = 16 * 1024;

/// Runs `f(i)` once for every row `i < rows`. With several `threads` and enough work
/// (`rows × values_per_row`), contiguous blocks of rows run on rayon's threads; each row is
/// computed by the same code either way, so results do not depend on the thread count.
pub fn for_each_row(threads: usize, rows: usize, values_per_row: usize, f: impl Fn(usize) + Sync) {
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
pub struct SendPtr<T>(pub *mut T);

// SAFETY: the pointer is only dereferenced through `row` and `slice`, whose callers guarantee
// that each part is borrowed by one thread at a time.
unsafe impl<T: Send> Send for SendPtr<T> {}
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The address of value `offset`.
    pub fn at(&self, offset: usize) -> *mut T {
        self.0.wrapping_add(offset)
    }

    /// The `len` values from `offset` on.
    ///
    /// # Safety
    /// They must lie inside the buffer, and no other reference to them may be live.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, offset: usize, len: usize) -> &mut [T] {
        std::slice::from_raw_parts_mut(self.0.add(offset), len)
    }

    /// Row `i` of width `w`.
    ///
    /// # Safety
    /// As for [`SendPtr::slice`] of values `i * w..(i + 1) * w`.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn row(&self, i: usize, w: usize) -> &mut [T] {
        self.slice(i * w, w)
    }
}

/// Below this many multiply-adds a product runs on one thread: splitting it costs more than it
/// saves (a `[32, 512] × [512, 200]` product is twice as slow on two threads).
pub const PARALLEL_MIN_MACS: usize = 8 << 20;

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
pub struct Mat<T> {
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

/// `dst[m, n] (+)= lhs[m, k] × rhs[k, n]`, `dst` row-major with row stride `dst_rs`; on
/// several threads from [`PARALLEL_MIN_MACS`] multiply-adds.
///
/// # Safety
/// Every view must address valid memory for its `m × k`, `k × n` and `m × n` extents, and `dst`
/// must not overlap the inputs.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_into<T: Real>(
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
