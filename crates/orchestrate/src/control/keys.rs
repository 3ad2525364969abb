//! The first line rdpipe sends an agent: the keys of the segment's two hops
//! ([`KeyLine`]), as hex, never on argv or in the environment.

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
}

impl fmt::Display for KeyLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = |k: &Option<Vec<u8>>| k.as_deref().map(encode_hex).unwrap_or("-".into());
        write!(f, "{} {}", word(&self.input), word(&self.output))
    }
}

impl FromStr for KeyLine {
    type Err = ParseError;
    fn from_str(l: &str) -> Result<Self, ParseError> {
        let word = |w: &str| -> Result<Option<Vec<u8>>, ParseError> {
            match w {
                "-" => Ok(None),
                hex => match decode_hex(hex) {
                    Some(k) if !k.is_empty() => Ok(Some(k)),
                    _ => Err(ParseError::Field("key")),
                },
            }
        };
        match l.split_whitespace().collect::<Vec<_>>()[..] {
            [i, o] => Ok(KeyLine {
                input: word(i)?,
                output: word(o)?,
            }),
            _ => Err(ParseError::Field("key line")),
        }
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
