//! The element types the CPU kernels run on (f32, f64) and the small helpers every kernel
//! shares: choosing the typed pass for a storage's or tensor's dtype ([`by_storage_dtype!`],
//! [`by_dtype!`]), reading a contiguous host slice out of a storage, locking the values kept
//! between passes, and the kernels' errors.

use std::sync::{Mutex, MutexGuard};

use candle_core::{CpuStorage, DType, Layout, Shape, Tensor};

use crate::fastmath::{exp_f32, vectorised};

/// Partial sums of [`dot`].
const LANES: usize = 16;

/// `Σ xᵢ yᵢ` in 16 partial sums added in a fixed order, so that it vectorises (inline it into a
/// loop built through `fastmath::simd_dispatch!`); the same bits on any vector width.
#[inline(always)]
pub fn dot<T: Real>(x: &[T], y: &[T]) -> T {
    let mut acc = [T::ZERO; LANES];
    let (xs, ys) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let rest = xs.remainder().iter().zip(ys.remainder());
    for (cx, cy) in xs.zip(ys) {
        for ((a, &u), &v) in acc.iter_mut().zip(cx).zip(cy) {
            *a += u * v;
        }
    }
    let tail = rest.fold(T::ZERO, |s, (&u, &v)| s + u * v);
    acc.iter().fold(tail, |s, &a| s + a)
}

/// Element types the CPU kernels run on.
pub trait Real:
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
    /// `eˣ` fast where exactness is not needed (f32: `fastmath::exp_f32`, which vectorises).
    fn exp_fast(self) -> Self;
    fn ln_(self) -> Self;
    fn max_(self, other: Self) -> Self;
    fn tanh_(self) -> Self;
    fn cpu_slice(s: &CpuStorage) -> Option<&[Self]>;
    fn wrap(v: Vec<Self>) -> Saved;
    fn unwrap(s: &Saved) -> Option<&[Self]>;
}

/// The members of [`Real`] that read the same for f32 and f64 (`$t`): the constants, the
/// library functions of the same name and the storages' `$variant`.
macro_rules! members_alike_for_f32_and_f64 {
    ($t:ident, $variant:ident) => {
        const ZERO: Self = 0.0;
        const ONE: Self = 1.0;
        const NEG_INFINITY: Self = $t::NEG_INFINITY;
        fn exp_(self) -> Self {
            self.exp()
        }
        fn ln_(self) -> Self {
            self.ln()
        }
        fn max_(self, other: Self) -> Self {
            self.max(other)
        }
        fn cpu_slice(s: &CpuStorage) -> Option<&[Self]> {
            match s {
                CpuStorage::$variant(v) => Some(v),
                _ => None,
            }
        }
        fn wrap(v: Vec<Self>) -> Saved {
            Saved::$variant(v)
        }
        fn unwrap(s: &Saved) -> Option<&[Self]> {
            match s {
                Saved::$variant(v) => Some(v),
                _ => None,
            }
        }
    };
}

impl Real for f32 {
    members_alike_for_f32_and_f64!(f32, F32);
    #[inline(always)]
    fn exp_fast(self) -> Self {
        exp_f32(self)
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
}

impl Real for f64 {
    members_alike_for_f32_and_f64!(f64, F64);
    fn exp_fast(self) -> Self {
        self.exp()
    }
    #[inline(always)]
    fn sigmoid(self) -> Self {
        1.0 / (1.0 + (-self).exp())
    }
    #[inline(always)]
    fn tanh_(self) -> Self {
        self.tanh()
    }
}

/// Values a kernel keeps from its forward pass for its backward pass (the fused recurrent
/// layer's gate values, the token log-softmax's probabilities).
pub enum Saved {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// The error a kernel returns; its message names the kernel and what was wrong.
pub fn err(msg: String) -> candle_core::Error {
    candle_core::Error::Msg(msg)
}

/// The error of kernel `what` given a dtype it has no build for.
pub fn unsupported_dtype(what: &str, dtype: DType) -> candle_core::Error {
    err(format!(
        "{what}: dtype {dtype:?} is not supported (f32 or f64)"
    ))
}

/// The error of kernel `what`'s backward pass when no forward pass saved its values.
pub fn no_forward_pass(what: &str) -> candle_core::Error {
    err(format!("{what}: backward without a saved forward pass"))
}

/// Kernel `what`'s values saved between its passes, locked.
pub fn lock_saved<'m, S>(
    saved: &'m Mutex<S>,
    what: &str,
) -> candle_core::Result<MutexGuard<'m, S>> {
    saved
        .lock()
        .map_err(|_| err(format!("{what}: saved state lock poisoned")))
}

/// `by_storage_dtype!(storage, what, T => body)`: `body`, a `Result<Vec<T>>`, with the type
/// name `T` standing for the element type of the CPU storage `storage`, its values given back
/// as a storage of that dtype; another dtype is [`unsupported_dtype`] for the kernel `what`.
/// A `CustomOp`'s `cpu_fwd` names its typed pass once this way.
#[doc(hidden)]
#[macro_export]
macro_rules! __by_storage_dtype {
    ($storage:expr, $what:expr, $t:ident => $body:expr) => {
        match $storage {
            ::candle_core::CpuStorage::F32(_) => {
                type $t = f32;
                $body.map(::candle_core::CpuStorage::F32)
            }
            ::candle_core::CpuStorage::F64(_) => {
                type $t = f64;
                $body.map(::candle_core::CpuStorage::F64)
            }
            other => Err($crate::real::unsupported_dtype(
                $what,
                ::candle_core::backend::BackendStorage::dtype(other),
            )),
        }
    };
}
pub use crate::__by_storage_dtype as by_storage_dtype;

/// `by_dtype!(dtype, what, T => body)`: `body`, a `Result`, with the type name `T` standing for
/// `dtype` (f32 or f64); another dtype is [`unsupported_dtype`] for the kernel `what`. A
/// `CustomOp`'s `bwd` names its typed pass once this way.
#[doc(hidden)]
#[macro_export]
macro_rules! __by_dtype {
    ($dtype:expr, $what:expr, $t:ident => $body:expr) => {
        match $dtype {
            ::candle_core::DType::F32 => {
                type $t = f32;
                $body
            }
            ::candle_core::DType::F64 => {
                type $t = f64;
                $body
            }
            other => Err($crate::real::unsupported_dtype($what, other)),
        }
    };
}
pub use crate::__by_dtype as by_dtype;

pub fn contiguous<'a, T: Real>(
    s: &'a CpuStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<&'a [T]> {
    let all =
        T::cpu_slice(s).ok_or_else(|| err(format!("cpu kernel: {what} has the wrong dtype")))?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&all[a..b]),
        None => Err(err(format!("cpu kernel: {what} is not contiguous"))),
    }
}

/// [`contiguous`] of a tensor's storage, which must be on the CPU (a backward pass reads its
/// inputs' values this way); `what` names the value in errors.
pub fn host_values<'a, T: Real>(
    storage: &'a candle_core::Storage,
    layout: &Layout,
    what: &str,
) -> candle_core::Result<&'a [T]> {
    match storage {
        candle_core::Storage::Cpu(c) => contiguous::<T>(c, layout, what),
        _ => Err(err(format!("cpu kernel: {what} is not on the CPU"))),
    }
}

/// A host function of one contiguous f32 or f64 storage, such as a node's forward pass;
/// [`host_map1`] compiles it for the level in use, so implementations mark `apply`
/// `#[inline(always)]`.
pub trait HostMap1 {
    fn apply<T: Real>(&self, x: &[T], shape: &Shape) -> candle_core::Result<Vec<T>>;
}

/// `f(x)` as a storage of `x`'s dtype and shape (a `CustomOp1`'s `cpu_fwd`); `what` names the
/// kernel in errors.
pub fn host_map1(
    f: &impl HostMap1,
    s: &CpuStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<(CpuStorage, Shape)> {
    let shape = l.shape();
    let out = by_storage_dtype!(s, what, T => {
        let x = contiguous::<T>(s, l, what)?;
        vectorised!(f.apply(x, shape))
    })?;
    Ok((out, l.shape().clone()))
}

/// A host function of two CPU tensors of one shape and dtype (f32 or f64), such as a
/// backward pass from a node's output and its gradient; [`host_map2`] compiles it for the level
/// in use, so implementations mark `apply` `#[inline(always)]`.
pub trait HostMap2 {
    fn apply<T: Real>(&self, a: &[T], b: &[T], shape: &Shape) -> candle_core::Result<Vec<T>>;
}

/// `f(a, b)` as a CPU tensor shaped like `a`; `what` names the kernel in errors.
pub fn host_map2(
    f: &impl HostMap2,
    a: &Tensor,
    b: &Tensor,
    what: &str,
) -> candle_core::Result<Tensor> {
    let (a, b) = (a.contiguous()?, b.contiguous()?);
    if a.shape() != b.shape() {
        return Err(err(format!(
            "{what}: shapes {:?} and {:?} differ",
            a.shape(),
            b.shape()
        )));
    }
    let (sa, la) = a.storage_and_layout();
    let (sb, lb) = b.storage_and_layout();
    let shape = a.shape();
    by_dtype!(a.dtype(), what, T => {
        let (x, y) = (host_values::<T>(&sa, la, what)?, host_values::<T>(&sb, lb, what)?);
        let v = vectorised!(f.apply(x, y, shape))?;
        Tensor::from_vec(v, shape, a.device())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
