//! `--rate-limit RATE`: the value (bytes per second), how it is written on the
//! command line and how it is shown. The pacing itself is in [`crate::pace`].
//!
//! Units as `pv -L` and `mbuffer -r` take them: a number (decimals allowed) with
//! an optional K, M, G or T, 1024-based (`500M` = 500 × 2^20 bytes per second),
//! then optionally `B` or `iB` and `/s`, in any case: `16M`, `16MB/s`, `16MiB/s`,
//! `1.5g`, `65536` all work. Zero (or anything under 1 byte per second) and
//! anything else are refused.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

/// A rate limit in bytes per second (never zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(NonZeroU64);

/// Why a `--rate-limit` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// Not a number with a unit.
    #[error("'{0}' is not a rate (examples: 500M, 1.5G/s, 64KiB/s, 1000000)")]
    Syntax(String),
    /// Zero, or less than one byte per second.
    #[error("'{0}' is no rate at all: give at least 1 byte per second (or leave the flag out)")]
    Zero(String),
    /// More than fits 64 bits.
    #[error("'{0}' is too large a rate")]
    TooLarge(String),
}

impl Rate {
    /// A rate of `bytes_per_sec` bytes per second.
    pub fn new(bytes_per_sec: NonZeroU64) -> Rate {
        Rate(bytes_per_sec)
    }

    /// Bytes per second.
    pub fn bytes_per_sec(self) -> u64 {
        self.0.get()
    }

    /// As the hello carries it.
    pub fn get(self) -> NonZeroU64 {
        self.0
    }

    /// The lower of two optional limits (a missing one does not limit).
    pub fn lower(a: Option<Rate>, b: Option<Rate>) -> Option<Rate> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(s: &str) -> Result<Rate, RateError> {
        let syntax = || RateError::Syntax(s.to_string());
        let t = s.trim();
        let t = t
            .strip_suffix("/s")
            .or_else(|| t.strip_suffix("/S"))
            .unwrap_or(t);
        let num_end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(num_end);
        if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
            return Err(syntax());
        }
        let value: f64 = num.parse().map_err(|_| syntax())?;
        let unit = unit.to_ascii_lowercase();
        let (prefix, rest) = match unit.chars().next() {
            Some(c @ ('k' | 'm' | 'g' | 't')) => (Some(c), &unit[1..]),
            _ => (None, unit.as_str()),
        };
        let ok_rest = match prefix {
            Some(_) => matches!(rest, "" | "b" | "ib"),
            None => matches!(rest, "" | "b"),
        };
        if !ok_rest {
            return Err(syntax());
        }
        let mult = match prefix {
            None => 1.0,
            Some('k') => 1024.0,
            Some('m') => 1024.0 * 1024.0,
            Some('g') => 1024.0 * 1024.0 * 1024.0,
            _ => 1024.0f64.powi(4),
        };
        let bytes = (value * mult).floor();
        if bytes >= u64::MAX as f64 {
            return Err(RateError::TooLarge(s.to_string()));
        }
        NonZeroU64::new(bytes as u64)
            .map(Rate)
            .ok_or_else(|| RateError::Zero(s.to_string()))
    }
}

/// `16 MiB/s`, `1.50 GiB/s`, `1000 B/s`: binary units, two decimals unless exact.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let v = self.bytes_per_sec();
        let mut u = 0;
        while u < UNITS.len() - 1 && v >= 1 << (10 * (u + 1)) {
            u += 1;
        }
        let div = 1u64 << (10 * u);
        if v % div == 0 {
            write!(f, "{} {}/s", v / div, UNITS[u])
        } else {
            write!(f, "{:.2} {}/s", v as f64 / div as f64, UNITS[u])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> u64 {
        s.parse::<Rate>().unwrap().bytes_per_sec()
    }

    #[test]
    fn units_are_1024_based_like_pv() {
        assert_eq!(r("65536"), 65536);
        assert_eq!(r("100B"), 100);
        assert_eq!(r("64K"), 64 << 10);
        assert_eq!(r("500M"), 500 << 20);
        assert_eq!(r("500m"), 500 << 20);
        assert_eq!(r("2G"), 2 << 30);
        assert_eq!(r("1T"), 1 << 40);
        assert_eq!(r("1.5G"), 3 << 29);
        assert_eq!(r("0.5K"), 512);
    }

    #[test]
    fn a_trailing_b_and_per_second_are_accepted() {
        for s in [
            "16M", "16M/s", "16MB", "16MB/s", "16MiB", "16MiB/s", "16mib/s", " 16M ",
        ] {
            assert_eq!(r(s), 16 << 20, "{s}");
        }
        assert_eq!(r("1000/s"), 1000);
        assert_eq!(r("1000B/s"), 1000);
    }

    #[test]
    fn zero_and_garbage_are_refused() {
        for s in ["0", "0M", "0.0G", "0.1", "0B/s"] {
            assert!(matches!(s.parse::<Rate>(), Err(RateError::Zero(_))), "{s}");
        }
        for s in [
            "", "M", "abc", "16X", "16 M", "16MM", "1e6", "-5M", "16iB", ".5M", "5.M", "16M/",
            "16/s/s", "1.2.3K",
        ] {
            assert!(
                matches!(s.parse::<Rate>(), Err(RateError::Syntax(_))),
                "{s:?}: {:?}",
                s.parse::<Rate>()
            );
        }
        assert!(matches!(
            "99999999999T".parse::<Rate>(),
            Err(RateError::TooLarge(_))
        ));
        let e = "abc".parse::<Rate>().unwrap_err().to_string();
        assert!(e.contains("'abc' is not a rate"), "{e}");
    }

    #[test]
    fn shown_in_binary_units() {
        let show = |s: &str| s.parse::<Rate>().unwrap().to_string();
        assert_eq!(show("16M"), "16 MiB/s");
        assert_eq!(show("1.5G"), "1.50 GiB/s");
        assert_eq!(show("1000"), "1000 B/s");
        assert_eq!(show("1025"), "1.00 KiB/s");
        assert_eq!(show("3T"), "3 TiB/s");
    }

    #[test]
    fn the_lower_limit_wins() {
        let a = Some(r("1M")).map(|v| Rate::new(NonZeroU64::new(v).unwrap()));
        let b = Some(r("2M")).map(|v| Rate::new(NonZeroU64::new(v).unwrap()));
        assert_eq!(Rate::lower(a, b), a);
        assert_eq!(Rate::lower(b, a), a);
        assert_eq!(Rate::lower(None, b), b);
        assert_eq!(Rate::lower(a, None), a);
        assert_eq!(Rate::lower(None, None), None);
    }
}
