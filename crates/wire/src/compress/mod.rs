//! `--compress`: each data chunk compressed on its own with zstd, before the
//! keyed protection, or stored when it does not shrink.
//!
//! # What is negotiated
//!
//! Each end says in its hello what it wants ([`Compress`]: `none`, `auto`, or
//! `zstd:LEVEL`) and sets [`crate::Caps::COMPRESS`], which says it reads
//! compressed chunks. Compression is on when either end asks for it; where
//! both ask, the sender's wish is used ([`Compress::negotiate`]). An end that
//! asks for compression refuses a peer without the capability (a build that
//! predates compression: it would take the compressed chunks for data).
//!
//! # Chunk format
//!
//! With compression on, every data chunk (before sealing under `--encrypt`)
//! is a body followed by a [`TRAILER_LEN`]-byte trailer:
//!
//! ```text
//! body || raw_len: u32 LE || kind: u8
//! ```
//!
//! `kind` 0 (stored): the body is the chunk's `raw_len` bytes as they are.
//! `kind` 1 (zstd): the body is exactly one zstd frame that declares a content
//! size of `raw_len` bytes and carries zstd's content checksum (so a changed
//! byte fails its chunk at once, whatever the stream's protection). The trailer sits after the body so that a stored
//! chunk is read from the input straight into the transport's (page-aligned)
//! buffer. The byte count, the checksum and the stream MAC are those of the
//! uncompressed stream: the receiver hashes what [`Decoder::decode`] gives.
//!
//! # Bad input
//!
//! [`Decoder::decode`] refuses, before it allocates or writes anything: a
//! `raw_len` above its limit (the negotiated chunk size), a frame whose
//! declared content size is missing or differs from `raw_len`, a frame
//! without a content checksum, anything but
//! exactly one zstd frame in the body, and a frame whose window is larger than
//! the limit needs. It decompresses into the caller's fixed buffer of `raw_len`
//! bytes, so a frame that expands further fails instead of growing anything.

mod adapt;
mod codec;
mod decision;
mod tuning;

pub use adapt::{Adapt, Binding, Decision, Why};
pub use codec::{
    put_trailer, CompressError, Decoder, Encoder, Packed, KIND_STORED, KIND_ZSTD, TRAILER_LEN,
    TRY_WHOLE_BELOW,
};
pub use tuning::{
    ADAPT_MAX, ADAPT_MIN, ADAPT_START, INCOMPRESSIBLE, LARGE_FROM_LEVEL, LARGE_LINK_SHARE,
    SMALL_CHUNK,
};

use std::fmt;
use std::str::FromStr;

/// The zstd level `--compress zstd` uses without one.
pub const DEFAULT_LEVEL: i32 = 3;
/// The highest level `--compress zstd:LEVEL` takes (20 and up need windows
/// larger than any chunk).
pub const MAX_LEVEL: i32 = 19;

/// What an end asks for (`--compress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compress {
    /// No compression.
    #[default]
    None,
    /// zstd, the level adapted per chunk to what binds ([`Adapt`]).
    Auto,
    /// zstd at this fixed level (1..=[`MAX_LEVEL`]).
    Zstd(i32),
}

/// A `--compress` value that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--compress {0:?}: expected none, auto, zstd, zstd:adapt or zstd:LEVEL (LEVEL 1..={MAX_LEVEL})"
)]
pub struct BadCompress(pub String);

impl FromStr for Compress {
    type Err = BadCompress;
    fn from_str(s: &str) -> Result<Compress, BadCompress> {
        let bad = || BadCompress(s.to_string());
        match s {
            "none" | "off" => Ok(Compress::None),
            "auto" | "zstd:adapt" => Ok(Compress::Auto),
            "zstd" => Ok(Compress::Zstd(DEFAULT_LEVEL)),
            _ => {
                let level = s.strip_prefix("zstd:").ok_or_else(bad)?;
                match level.parse::<i32>() {
                    Ok(l) if (1..=MAX_LEVEL).contains(&l) => Ok(Compress::Zstd(l)),
                    _ => Err(bad()),
                }
            }
        }
    }
}

impl fmt::Display for Compress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compress::None => f.write_str("none"),
            Compress::Auto => f.write_str("auto"),
            Compress::Zstd(l) => write!(f, "zstd:{l}"),
        }
    }
}

impl Compress {
    /// Whether chunks carry the compressed-chunk trailer.
    pub fn is_on(self) -> bool {
        self != Compress::None
    }

    /// What a sender that asked for `sender` and a receiver that asked for
    /// `receiver` use: the sender's wish, or the receiver's when the sender
    /// asked for none.
    pub fn negotiate(sender: Compress, receiver: Compress) -> Compress {
        if sender.is_on() {
            sender
        } else {
            receiver
        }
    }

    /// The two hello bytes: mode (0 none, 1 auto, 2 zstd) and level.
    pub(crate) fn to_bytes(self) -> [u8; 2] {
        match self {
            Compress::None => [0, 0],
            Compress::Auto => [1, 0],
            Compress::Zstd(l) => [2, l.clamp(1, MAX_LEVEL) as u8],
        }
    }

    /// Reads [`Compress::to_bytes`]'s two bytes.
    pub(crate) fn from_bytes(b: [u8; 2]) -> Option<Compress> {
        match b {
            [0, 0] => Some(Compress::None),
            [1, 0] => Some(Compress::Auto),
            [2, l] if (1..=MAX_LEVEL).contains(&i32::from(l)) => Some(Compress::Zstd(l.into())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_spelling_and_refuses_the_rest() {
        assert_eq!("none".parse(), Ok(Compress::None));
        assert_eq!("auto".parse(), Ok(Compress::Auto));
        assert_eq!("zstd:adapt".parse(), Ok(Compress::Auto));
        assert_eq!("zstd".parse(), Ok(Compress::Zstd(DEFAULT_LEVEL)));
        assert_eq!("zstd:1".parse(), Ok(Compress::Zstd(1)));
        assert_eq!("zstd:19".parse(), Ok(Compress::Zstd(19)));
        for bad in [
            "", "zstd:0", "zstd:20", "zstd:-1", "gzip", "zstd:x", "zstd:",
        ] {
            let e = bad.parse::<Compress>().unwrap_err();
            assert!(e.to_string().contains("--compress"), "{bad}: {e}");
        }
        for c in [Compress::None, Compress::Auto, Compress::Zstd(7)] {
            assert_eq!(c.to_string().parse(), Ok(c));
            assert_eq!(Compress::from_bytes(c.to_bytes()), Some(c));
        }
        assert_eq!(Compress::from_bytes([2, 0]), None);
        assert_eq!(Compress::from_bytes([3, 0]), None);
        assert_eq!(Compress::from_bytes([0, 1]), None);
    }

    #[test]
    fn the_sender_decides_unless_it_asked_for_none() {
        use Compress::*;
        assert_eq!(Compress::negotiate(Zstd(5), Auto), Zstd(5));
        assert_eq!(Compress::negotiate(None, Auto), Auto);
        assert_eq!(Compress::negotiate(Auto, None), Auto);
        assert_eq!(Compress::negotiate(None, None), None);
    }
}
