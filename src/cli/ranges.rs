//! Value parsers for flags with a range: clap refuses a value outside it as a usage error
//! (exit code 2, the flag named), as a `--set` key out of its range is refused.

/// A count of at least 1 (`--beam`, `--limit`).
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a whole number")),
    }
}

/// A probability mass in (0, 1] (`--top-p`; 1 = off).
pub fn mass(s: &str) -> Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        Ok(_) => Err("must be in (0, 1] (1 = off)".into()),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}

/// A weight in [0, 1] (`--lookahead`).
pub fn weight(s: &str) -> Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(w) if (0.0..=1.0).contains(&w) => Ok(w),
        Ok(_) => Err("must be in [0, 1]".into()),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_refuse_values_outside_them_and_say_which_range() {
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").unwrap_err().contains("at least 1"));
        assert!(at_least_one("x").is_err());
        assert_eq!(mass("1"), Ok(1.0));
        assert!(mass("0").unwrap_err().contains("(0, 1]"));
        assert!(mass("2").is_err());
        assert_eq!(weight("0"), Ok(0.0));
        assert!(weight("1.5").unwrap_err().contains("[0, 1]"));
    }
}
