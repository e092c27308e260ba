//! Small dense products on host slices for the reward path, through the `gemm` crate (the
//! kernels Candle's CPU backend uses, picked at run time for the CPU's vector units) without a
//! tensor's per-operation overhead: a rollout's similarity matrix is a few hundred thousand
//! multiply-adds, where that overhead would dominate. Both operands row-major, the right one
//! `k × m`: the layout these kernels read without repacking (about 1.5× faster than `a · bᵀ`
//! at a rollout's sizes).

/// `a · b` for row-major `a` (`n × k`) and `b` (`k × m`): the `n × m` product, row-major.
/// Single-threaded, so the same inputs give the same bits every call.
pub fn matmul(a: &[f32], b: &[f32], k: usize) -> Vec<f32> {
    let (n, m) = (rows(a, k), b.len().checked_div(k).unwrap_or(0));
    assert_eq!(b.len(), k * m, "{} values are not rows of {m}", b.len());
    let mut out = vec![0f32; n * m];
    if n == 0 || m == 0 {
        return out;
    }
    // SAFETY: `a` holds n×k values read with row stride k, `b` holds k×m values read with row
    // stride m, `out` holds n×m values written with row stride m; `out` is a fresh buffer that
    // overlaps neither input.
    unsafe {
        gemm::gemm(
            n,
            m,
            k,
            out.as_mut_ptr(),
            1,
            m as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            m as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    out
}

/// The transpose of row-major `x` (`len / cols` rows of `cols`).
pub fn transpose(x: &[f32], cols: usize) -> Vec<f32> {
    let n = rows(x, cols);
    let mut out = vec![0f32; x.len()];
    for (j, out_row) in out.chunks_exact_mut(n.max(1)).enumerate() {
        for (o, &v) in out_row.iter_mut().zip(x[j..].iter().step_by(cols)) {
            *o = v;
        }
    }
    out
}

fn rows(x: &[f32], k: usize) -> usize {
    if k == 0 {
        return 0;
    }
    assert_eq!(x.len() % k, 0, "{} values are not rows of {k}", x.len());
    x.len() / k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_row_dot_products() {
        let k = 19;
        let a: Vec<f32> = (0..5 * k).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
        let b: Vec<f32> = (0..3 * k)
            .map(|i| ((i * 5) % 11) as f32 * 0.5 - 2.0)
            .collect();
        let c = matmul(&a, &transpose(&b, k), k);
        assert_eq!(c.len(), 15);
        for i in 0..5 {
            for j in 0..3 {
                let want: f32 = (0..k).map(|t| a[i * k + t] * b[j * k + t]).sum();
                assert!((c[i * 3 + j] - want).abs() < 1e-3, "{i},{j}");
            }
        }
        assert!(matmul(&[], &b, k).is_empty());
        assert_eq!(transpose(&transpose(&b, k), 3), b);
    }
}
