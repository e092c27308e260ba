//! The gate arithmetic of one row of a recurrent layer, forward ([`gates`]) and backward
//! ([`grads`]), compiled for the level in use (`fastmath::vectorised!`). Formulas as in [`super::cell`].

use crate::model::config::RnnKind;
use caprl_kernels::real::Real;

/// One row of gate values ([`gru_gates`] or [`lstm_gates`]), compiled for the level in use.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gates<T: Real>(
    kind: RnnKind,
    h: usize,
    gx: &[T],
    gh: &[T],
    hp: &[T],
    o: &mut [T],
    sv: &mut [T],
) {
    caprl_kernels::fastmath::vectorised!(match kind {
        RnnKind::Gru => gru_gates(h, gx, gh, hp, o, sv),
        RnnKind::Lstm => lstm_gates(h, gx, gh, hp, o, sv),
    })
}

/// One row of gate gradients ([`gru_grads`], which also writes `dgh`, or [`lstm_grads`], which
/// takes an empty `dgh`), compiled for the level in use.
#[allow(clippy::too_many_arguments)]
pub(crate) fn grads<T: Real>(
    kind: RnnKind,
    h: usize,
    sv: &[T],
    ds: &[T],
    hp: &[T],
    dp: &mut [T],
    dx: &mut [T],
    dgh: &mut [T],
) {
    caprl_kernels::fastmath::vectorised!(match kind {
        RnnKind::Gru => gru_grads(h, sv, ds, hp, dp, dx, dgh),
        RnnKind::Lstm => lstm_grads(h, sv, ds, hp, dp, dx),
    })
}

/// One row of GRU gates: `o = h'` `[H]`, `sv = [r, z, n, gh_n]`.
#[inline(always)]
fn gru_gates<T: Real>(h: usize, gx: &[T], gh: &[T], hp: &[T], o: &mut [T], sv: &mut [T]) {
    let [gxr, gxz, gxn] = parts(gx, h);
    let [ghr, ghz, ghn] = parts(gh, h);
    let hp = &hp[..h];
    let o = &mut o[..h];
    let [sr, sz, sn, sg] = parts_mut(sv, h);
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
    let [gxi, gxf, gxg, gxo] = parts(gx, h);
    let [ghi, ghf, ghg, gho] = parts(gh, h);
    let cp = &hp[h..2 * h];
    let [oh, oc] = parts_mut(o, h);
    let [si, sf, sg, so, st] = parts_mut(sv, h);
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
    let [r, z, n, ghn] = parts(sv, h);
    let (dh, hp, dp) = (&ds[..h], &hp[..h], &mut dp[..h]);
    let [dxr, dxz, dxn] = parts_mut(dx, h);
    let [dhr, dhz, dhn] = parts_mut(dgh, h);
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
    let [ig, fg, gg, og, tc] = parts(sv, h);
    let [dh, dcn] = parts(ds, h);
    let cp = &hp[h..2 * h];
    let [dph, dpc] = parts_mut(dp, h);
    let [dxi, dxf, dxg, dxo] = parts_mut(dx, h);
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

/// The first `N` consecutive `h`-long parts of a row (its gates, one a part).
#[inline(always)]
fn parts<const N: usize, T>(row: &[T], h: usize) -> [&[T]; N] {
    std::array::from_fn(|i| &row[i * h..(i + 1) * h])
}

/// [`parts`], writable.
#[inline(always)]
fn parts_mut<const N: usize, T>(row: &mut [T], h: usize) -> [&mut [T]; N] {
    let mut rest = row;
    std::array::from_fn(|_| {
        let (part, tail) = std::mem::take(&mut rest).split_at_mut(h);
        rest = tail;
        part
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row kernels give the same bits at every level this CPU runs (Rust does not fuse
    /// multiply-adds on its own), so a run does not depend on the level it runs at.
    #[test]
    fn row_kernels_agree_bit_for_bit_at_every_level() {
        use caprl_kernels::fastmath::{dispatch::run_at, Simd};
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
            let gates_at = |level: Simd| {
                let (mut o, mut sv) = (vec![0f32; s], vec![0f32; sw]);
                run_at(
                    level,
                    #[inline(always)]
                    || match kind {
                        RnnKind::Gru => gru_gates(h, &gx, &gh, &hp, &mut o, &mut sv),
                        RnnKind::Lstm => lstm_gates(h, &gx, &gh, &hp, &mut o, &mut sv),
                    },
                );
                (o, sv)
            };
            let (o, sv) = gates_at(Simd::Baseline);
            let ds = val(s, 4);
            let grads_at = |level: Simd| {
                let (mut dp, mut dx) = (vec![0f32; s], vec![0f32; g]);
                let mut dgh = vec![0f32; if kind == RnnKind::Gru { g } else { 0 }];
                run_at(
                    level,
                    #[inline(always)]
                    || match kind {
                        RnnKind::Gru => gru_grads(h, &sv, &ds, &hp, &mut dp, &mut dx, &mut dgh),
                        RnnKind::Lstm => lstm_grads(h, &sv, &ds, &hp, &mut dp, &mut dx),
                    },
                );
                (dp, dx, dgh)
            };
            let want = grads_at(Simd::Baseline);
            for level in Simd::available() {
                assert_eq!(
                    gates_at(level),
                    (o.clone(), sv.clone()),
                    "{kind:?} gates, {level}"
                );
                assert_eq!(grads_at(level), want, "{kind:?} gradients, {level}");
            }
            // The dispatching entry points give the same.
            let (mut o2, mut sv2) = (vec![0f32; s], vec![0f32; sw]);
            gates(kind, h, &gx, &gh, &hp, &mut o2, &mut sv2);
            assert_eq!((o2, sv2), (o.clone(), sv.clone()));
        }
    }
}
