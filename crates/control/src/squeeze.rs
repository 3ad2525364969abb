//! The compression field of a `DONE` line: `-` for an uncompressed hop, else
//! `MODE/RAW/WIRE/LEVELS` (`auto/1048576/400000/1-4`; LEVELS `LO-HI`, or `-`
//! where the end does not know them: a receiver).

use super::ParseError;
use rdpipe_transport::compress::CompressStats;
use rdpipe_wire::Compress;
use std::fmt;

/// What compression did on a hop, as its end reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressSummary {
    /// The negotiated mode.
    pub mode: Compress,
    /// Bytes before compression.
    pub raw: u64,
    /// Bytes after (chunks with their trailers, before sealing).
    pub wire: u64,
    /// The lowest and highest level used (the sender's report only).
    pub levels: Option<(i32, i32)>,
}

impl CompressSummary {
    /// The summary of a transfer's statistics.
    pub fn of(s: &CompressStats) -> CompressSummary {
        CompressSummary {
            mode: s.mode,
            raw: s.raw,
            wire: s.wire,
            levels: s.level_range(),
        }
    }

    /// Bytes before over bytes after.
    pub fn ratio(&self) -> f64 {
        if self.wire == 0 {
            1.0
        } else {
            self.raw as f64 / self.wire as f64
        }
    }

    /// As `-v` shows it: `zstd auto levels 1-4, 2.10x`.
    pub fn describe(&self) -> String {
        let levels = match self.levels {
            Some((lo, hi)) if lo == hi => format!(" level {lo}"),
            Some((lo, hi)) => format!(" levels {lo}-{hi}"),
            None => String::new(),
        };
        format!("compress {}{levels} {:.2}x", self.mode, self.ratio())
    }

    /// Reads the field ([`fmt::Display`] of `Option<CompressSummary>` is
    /// [`token`]).
    pub fn parse(s: &str) -> Result<Option<CompressSummary>, ParseError> {
        if s == "-" {
            return Ok(None);
        }
        let bad = || ParseError::Field("compression");
        let mut w = s.split('/');
        let mut next = || w.next().ok_or_else(bad);
        let mode: Compress = next()?.parse().map_err(|_| bad())?;
        let raw = next()?.parse().map_err(|_| bad())?;
        let wire = next()?.parse().map_err(|_| bad())?;
        let levels = match next()? {
            "-" => None,
            l => {
                let (lo, hi) = l.split_once('-').ok_or_else(bad)?;
                Some((
                    lo.parse().map_err(|_| bad())?,
                    hi.parse().map_err(|_| bad())?,
                ))
            }
        };
        Ok(Some(CompressSummary {
            mode,
            raw,
            wire,
            levels,
        }))
    }
}

/// The `DONE` line's compression field for `c`.
pub fn token(c: &Option<CompressSummary>) -> impl fmt::Display + '_ {
    struct T<'a>(&'a Option<CompressSummary>);
    impl fmt::Display for T<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self.0 {
                None => f.write_str("-"),
                Some(c) => {
                    write!(f, "{}/{}/{}/", c.mode, c.raw, c.wire)?;
                    match c.levels {
                        Some((lo, hi)) => write!(f, "{lo}-{hi}"),
                        None => f.write_str("-"),
                    }
                }
            }
        }
    }
    T(c)
}
