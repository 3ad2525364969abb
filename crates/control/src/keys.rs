//! The first line rdpipe sends an agent: the keys of the segment's two hops
//! and, for a fan-out sink, the chain's secret ([`KeyLine`]), as hex, never on
//! argv or in the environment.

use super::ParseError;
use std::fmt;
use std::str::FromStr;

/// The first line rdpipe sends an agent: the keys of its incoming and outgoing
/// hops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLine {
    /// The incoming hop's key.
    pub input: Option<Vec<u8>>,
    /// The outgoing hop's key.
    pub output: Option<Vec<u8>>,
    /// A fan-out sink's chain secret (the same on every sink): keys the stream
    /// MAC of the hops between sinks (`rdpipe_transport::chain`). A third word
    /// on the line, absent otherwise.
    pub chain: Option<Vec<u8>>,
    /// A line merge's lanes' keys, in lane order (`--lane`): after a `-`
    /// third word (no chain), one word each.
    pub lanes: Vec<Vec<u8>>,
}

impl fmt::Display for KeyLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = |k: &Option<Vec<u8>>| k.as_deref().map(encode_hex).unwrap_or("-".into());
        write!(f, "{} {}", word(&self.input), word(&self.output))?;
        match (&self.chain, self.lanes.is_empty()) {
            (Some(c), _) => write!(f, " {}", encode_hex(c))?,
            (None, false) => f.write_str(" -")?,
            (None, true) => {}
        }
        self.lanes
            .iter()
            .try_for_each(|k| write!(f, " {}", encode_hex(k)))
    }
}

impl FromStr for KeyLine {
    type Err = ParseError;
    fn from_str(l: &str) -> Result<Self, ParseError> {
        let word = |w: &str| -> Result<Option<Vec<u8>>, ParseError> {
            match w {
                "-" => Ok(None),
                hex => parse_key(hex).map(Some),
            }
        };
        match l.split_whitespace().collect::<Vec<_>>()[..] {
            [i, o] => Ok(KeyLine {
                input: word(i)?,
                output: word(o)?,
                chain: None,
                lanes: vec![],
            }),
            [i, o, c, ref lanes @ ..] => Ok(KeyLine {
                input: word(i)?,
                output: word(o)?,
                chain: word(c)?,
                lanes: lanes
                    .iter()
                    .map(|k| parse_key(k))
                    .collect::<Result<_, _>>()?,
            }),
            _ => Err(ParseError::Field("key line")),
        }
    }
}

/// A key as hex: not empty.
pub fn parse_key(hex: &str) -> Result<Vec<u8>, ParseError> {
    match decode_hex(hex) {
        Some(k) if !k.is_empty() => Ok(k),
        _ => Err(ParseError::Field("key")),
    }
}

/// Decodes lowercase or uppercase hex (the key line).
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Encodes bytes as lowercase hex (the key line).
pub fn encode_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
