//! `--spool SIZE[:DIR]`: how much of each `--from` source's stream its
//! receiving end may hold when the sink stalls (in memory, or with `:DIR` in
//! a file there), so that the source's writer is not slowed by a sink's
//! short stall; the agent's side is `rdpipe_agent::spool`.

use std::fmt;
use std::str::FromStr;

/// The smallest spool (a receiver's chunks larger than the spool go in
/// spool-sized pieces).
pub const MIN_SPOOL: u64 = 1 << 20;

/// `--spool SIZE[:DIR]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolSpec {
    /// Bytes held at most, per source.
    pub size: u64,
    /// A directory on the sink's host for a spool file (unlinked at once);
    /// memory without.
    pub dir: Option<String>,
}

/// Parses a byte count such as `0`, `65536`, `64K`, `1M`, `1GiB` (binary
/// units).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (examples: 65536, 64K, 1M)"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("unknown unit in '{s}' (use K, M or G)")),
    };
    Ok(n.saturating_mul(mult))
}

impl FromStr for SpoolSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (size, dir) = match s.split_once(':') {
            Some((size, dir)) if !dir.is_empty() => (size, Some(dir.to_string())),
            Some(_) => return Err(format!("'{s}': no directory after ':' (SIZE or SIZE:DIR)")),
            None => (s, None),
        };
        let size = parse_bytes(size)?;
        if size < MIN_SPOOL {
            return Err(format!("'{s}': a spool holds at least 1M"));
        }
        Ok(SpoolSpec { size, dir })
    }
}

impl fmt::Display for SpoolSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.size)?;
        match &self.dir {
            Some(d) => write!(f, ":{d}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        let s: SpoolSpec = "64M".parse().unwrap();
        assert_eq!(
            s,
            SpoolSpec {
                size: 64 << 20,
                dir: None
            }
        );
        let s: SpoolSpec = "1G:/var/tmp/my spool".parse().unwrap();
        assert_eq!(s.dir.as_deref(), Some("/var/tmp/my spool"));
        assert_eq!(s.to_string().parse::<SpoolSpec>(), Ok(s));
        for bad in ["", "64X", "100K", "64M:", ":/tmp", "x:/tmp"] {
            assert!(bad.parse::<SpoolSpec>().is_err(), "{bad}");
        }
        assert_eq!(parse_bytes("2KiB"), Ok(2048));
    }
}
