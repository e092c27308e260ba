//! The `device` key and flag: `cpu` or `cuda:N`, one grammar for both.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where tensors live. Written in TOML as `"cpu"` or `"cuda:N"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum DeviceSpec {
    Cpu,
    /// CUDA device ordinal.
    Cuda(usize),
}

/// A device name that is neither `cpu` nor `cuda:N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("device `{value}` is not valid; expected \"cpu\" or \"cuda:N\" (N = 0, 1, ...)")]
pub struct BadDevice {
    pub value: String,
}

impl FromStr for DeviceSpec {
    type Err = BadDevice;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let bad = || BadDevice {
            value: s.to_string(),
        };
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ => {
                let ordinal = s.strip_prefix("cuda:").ok_or_else(bad)?;
                // `usize::from_str` accepts a leading '+'; a device name should not.
                if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                ordinal.parse().map(DeviceSpec::Cuda).map_err(|_| bad())
            }
        }
    }
}

impl TryFrom<String> for DeviceSpec {
    type Error = BadDevice;

    fn try_from(s: String) -> std::result::Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<DeviceSpec> for String {
    fn from(d: DeviceSpec) -> String {
        d.to_string()
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_cuda_ordinals() {
        assert_eq!("cpu".parse::<DeviceSpec>().ok(), Some(DeviceSpec::Cpu));
        assert_eq!(
            "cuda:0".parse::<DeviceSpec>().ok(),
            Some(DeviceSpec::Cuda(0))
        );
        assert_eq!(
            "cuda:3".parse::<DeviceSpec>().ok(),
            Some(DeviceSpec::Cuda(3))
        );
        assert_eq!("cuda".parse::<DeviceSpec>().ok(), Some(DeviceSpec::Cuda(0)));
    }

    #[test]
    fn refuses_other_device_names() {
        for bad in [
            "gpu", "cuda:", "cuda:x", "cuda:+1", "cuda:-1", "CPU", "metal",
        ] {
            let err = bad.parse::<DeviceSpec>().err().map(|e| e.to_string());
            let msg = err.unwrap_or_default();
            assert!(msg.contains("cuda:N"), "{bad}: {msg}");
        }
    }

    #[test]
    fn display_round_trips() {
        for d in [DeviceSpec::Cpu, DeviceSpec::Cuda(7)] {
            assert_eq!(d.to_string().parse::<DeviceSpec>().ok(), Some(d));
        }
    }
}
