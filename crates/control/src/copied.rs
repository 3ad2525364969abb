//! rdcp's counts, reported once by each side of a copy right before `USAGE`:
//! `COPIED pack SENT BYTES UNREADABLE CHANGED SKIPPED RESUMED SKIPPED_BYTES`
//! from the sources' host, `COPIED unpack CREATED BYTES FAILED CHANGED
//! DELETED` from the destination's (DELETED: what `rdcp --delete` removed,
//! or would remove with `-n`; a line without it counts none). rdcp puts them in `--json` (each segment's `copy`).

use super::ParseError;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// What one side of a copy counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "side", rename_all = "snake_case")]
pub enum CopyCounts {
    /// The sources' host.
    Pack {
        /// Entries sent (files, directories, links, nodes).
        sent: u64,
        /// Bytes of file data sent.
        bytes: u64,
        /// Files, directories and operands that could not be read.
        unreadable: u64,
        /// Files sent that changed while they were read.
        changed: u64,
        /// Files not sent: complete at the destination (`--resume`).
        skipped: u64,
        /// Files continued from a partial copy at the destination.
        resumed: u64,
        /// Bytes not sent because the destination had them.
        skipped_bytes: u64,
    },
    /// The destination's host.
    Unpack {
        /// Entries created whole (files, directories, links, nodes).
        created: u64,
        /// Bytes of file data written.
        bytes: u64,
        /// Entries that could not be written there (or, with `--delete`,
        /// removed).
        failed: u64,
        /// Files copied that changed while they were read.
        changed: u64,
        /// Entries removed from the mirror (`--delete`), or that would be
        /// (`--delete -n`).
        deleted: u64,
    },
}

impl fmt::Display for CopyCounts {
    /// The fields after `COPIED`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyCounts::Pack {
                sent,
                bytes,
                unreadable,
                changed,
                skipped,
                resumed,
                skipped_bytes,
            } => write!(
                f,
                "pack {sent} {bytes} {unreadable} {changed} {skipped} {resumed} {skipped_bytes}"
            ),
            CopyCounts::Unpack {
                created,
                bytes,
                failed,
                changed,
                deleted,
            } => write!(f, "unpack {created} {bytes} {failed} {changed} {deleted}"),
        }
    }
}

impl FromStr for CopyCounts {
    type Err = ParseError;
    /// The fields after `COPIED`.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let bad = ParseError::Field("copied");
        let mut w = s.split(' ');
        let side = w.next().ok_or(bad.clone())?;
        let v: Vec<u64> = w
            .map(|x| x.parse().map_err(|_| bad.clone()))
            .collect::<Result<_, _>>()?;
        match (side, &v[..]) {
            ("pack", &[sent, bytes, unreadable, changed, skipped, resumed, skipped_bytes]) => {
                Ok(CopyCounts::Pack {
                    sent,
                    bytes,
                    unreadable,
                    changed,
                    skipped,
                    resumed,
                    skipped_bytes,
                })
            }
            ("unpack", &[created, bytes, failed, changed]) => Ok(CopyCounts::Unpack {
                created,
                bytes,
                failed,
                changed,
                deleted: 0,
            }),
            ("unpack", &[created, bytes, failed, changed, deleted]) => Ok(CopyCounts::Unpack {
                created,
                bytes,
                failed,
                changed,
                deleted,
            }),
            _ => Err(bad),
        }
    }
}
