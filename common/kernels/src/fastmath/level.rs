//! The vector level the hand-written CPU kernels run at: the widest this CPU has, or the one
//! `CAPRL_SIMD` forces. Every kernel asks [`simd`] (through [`super::vectorised!`] or a tile
//! choice), so one switch moves them all.
//!
//! The level governs the project's own kernels. Candle's matrix products (the `gemm` crate)
//! choose their own level from the CPU and cannot be forced.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};

/// The environment variable that forces a level: `avx512`, `avx2` or `baseline`.
pub const SIMD_ENV: &str = "CAPRL_SIMD";

/// A build of the kernels, widest first.
///
/// - `Avx512`: AVX-512F/VL with FMA (x86-64-v4 without the rest of v4).
/// - `Avx2`: AVX2 with FMA (x86-64-v3), most laptops, desktops and cloud VMs.
/// - `Baseline`: what the target always has: SSE2 on x86-64, NEON on aarch64.
///
/// Loops written as plain Rust give the same bits at every level (Rust never fuses `a * b + c`
/// on its own). The packed-panel product fuses its multiply-adds where the level has FMA, so
/// `Avx512` and `Avx2` agree bit for bit and `Baseline` differs from them by rounding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Simd {
    Avx512,
    Avx2,
    Baseline,
}

impl Simd {
    /// Every level, widest first.
    pub const ALL: [Simd; 3] = [Simd::Avx512, Simd::Avx2, Simd::Baseline];

    /// The name `CAPRL_SIMD` takes.
    pub fn name(self) -> &'static str {
        match self {
            Simd::Avx512 => "avx512",
            Simd::Avx2 => "avx2",
            Simd::Baseline => "baseline",
        }
    }

    /// Whether this CPU runs this level.
    pub fn supported(self) -> bool {
        match self {
            Simd::Baseline => true,
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => {
                use std::arch::is_x86_feature_detected as has;
                has!("avx2") && has!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => {
                use std::arch::is_x86_feature_detected as has;
                has!("avx512f") && has!("avx512vl") && has!("avx2") && has!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Simd::Avx2 | Simd::Avx512 => false,
        }
    }

    /// The widest level this CPU runs.
    pub fn detected() -> Simd {
        Self::ALL
            .into_iter()
            .find(|l| l.supported())
            .unwrap_or(Simd::Baseline)
    }

    /// The levels this CPU runs, widest first.
    pub fn available() -> Vec<Simd> {
        Self::ALL.into_iter().filter(|l| l.supported()).collect()
    }

    fn code(self) -> u8 {
        match self {
            Simd::Avx512 => 1,
            Simd::Avx2 => 2,
            Simd::Baseline => 3,
        }
    }

    fn from_code(code: u8) -> Option<Simd> {
        Self::ALL.into_iter().find(|l| l.code() == code)
    }
}

impl fmt::Display for Simd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Simd {
    type Err = SimdError;

    fn from_str(s: &str) -> Result<Self, SimdError> {
        let wanted = s.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|l| l.name() == wanted)
            .ok_or_else(|| SimdError::Unknown(s.to_owned()))
    }
}

/// A level that cannot be used; the message names what this CPU runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimdError {
    #[error(
        "{SIMD_ENV}=`{0}` is not a level: use avx512, avx2 or baseline (this CPU runs {cpu}), \
         or unset it",
        cpu = names(&Simd::available())
    )]
    Unknown(String),
    #[error(
        "{SIMD_ENV}={0}: this CPU lacks it (it runs {cpu}); choose one of those or unset it",
        cpu = names(&Simd::available())
    )]
    Unsupported(Simd),
}

/// One line for logs and benchmark headers: the level in use and what this CPU runs, e.g.
/// `SIMD level avx2 (this CPU runs avx2, baseline; CAPRL_SIMD forces one)`.
pub fn describe() -> String {
    format!(
        "SIMD level {} (this CPU runs {}; {SIMD_ENV} forces one)",
        simd(),
        names(&Simd::available())
    )
}

fn names(levels: &[Simd]) -> String {
    levels
        .iter()
        .map(|l| l.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The level in use: 0 until first read, else [`Simd::code`].
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// The level the kernels run at: the one [`set_simd`] or `CAPRL_SIMD` chose, else the widest
/// this CPU has. A bad `CAPRL_SIMD` stops the binary at start-up ([`simd_from_env`]); a library
/// user who skips that check gets the detected level.
#[inline(always)]
pub fn simd() -> Simd {
    match Simd::from_code(LEVEL.load(Ordering::Relaxed)) {
        Some(level) => level,
        None => init(),
    }
}

#[cold]
fn init() -> Simd {
    let level = simd_from_env().unwrap_or_else(|_| Simd::detected());
    // A concurrent first read finds the same level.
    LEVEL.store(level.code(), Ordering::Relaxed);
    level
}

/// The level `CAPRL_SIMD` asks for (the detected one when it is unset or empty), checked
/// against this CPU. The binary calls this at start-up so that a misspelt or unsupported value
/// stops it with a message naming what the CPU runs.
pub fn simd_from_env() -> Result<Simd, SimdError> {
    let raw = std::env::var(SIMD_ENV).unwrap_or_default();
    if raw.trim().is_empty() {
        return Ok(Simd::detected());
    }
    let level: Simd = raw.parse()?;
    match level.supported() {
        true => Ok(level),
        false => Err(SimdError::Unsupported(level)),
    }
}

/// Sets the level for the whole process (`None`: back to `CAPRL_SIMD`'s, or the detected
/// one). For `caprl selftest`, which runs one computation at every level in one process; tests
/// running in parallel threads of one process must not call it.
pub fn set_simd(level: Option<Simd>) -> Result<(), SimdError> {
    let level = match level {
        Some(l) if !l.supported() => return Err(SimdError::Unsupported(l)),
        Some(l) => l,
        None => simd_from_env()?,
    };
    LEVEL.store(level.code(), Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_by_name_and_bad_names_list_what_the_cpu_runs() {
        for level in Simd::ALL {
            assert_eq!(level.name().parse::<Simd>(), Ok(level));
        }
        assert_eq!(" AVX2 ".parse::<Simd>(), Ok(Simd::Avx2));
        let err = "sse9".parse::<Simd>().unwrap_err().to_string();
        assert!(err.contains("`sse9`") && err.contains("baseline"), "{err}");
        assert!(Simd::available().contains(&Simd::Baseline));
        assert_eq!(Simd::available()[0], Simd::detected());
    }

    #[test]
    fn an_unsupported_level_is_refused_with_what_the_cpu_runs() {
        match Simd::ALL.into_iter().find(|l| !l.supported()) {
            Some(missing) => {
                let err = set_simd(Some(missing)).unwrap_err();
                assert_eq!(err, SimdError::Unsupported(missing));
                assert!(err.to_string().contains(Simd::detected().name()), "{err}");
            }
            // An AVX-512 machine runs every level.
            None => assert_eq!(Simd::detected(), Simd::Avx512),
        }
    }
}
