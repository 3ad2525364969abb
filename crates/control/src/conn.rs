//! `rdpipe forward`'s report of one TCP connection (`CONN ...`, from the
//! listening side's agent when the connection is over).

use crate::{one_line, ParseError};
use std::fmt;
use std::str::FromStr;

/// How a forwarded connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEnd {
    /// Both directions ended with a half-close each.
    Closed,
    /// The client reset it (or its socket failed).
    ClientReset,
    /// The target reset it (or its socket failed).
    TargetReset,
    /// Nothing listened at the target's address.
    Refused,
    /// The target could not be reached at all.
    Unreachable,
    /// The forward stopped with the connection open.
    Cut,
}

impl ConnEnd {
    /// The word on the `CONN` line and in `--json`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnEnd::Closed => "closed",
            ConnEnd::ClientReset => "client-reset",
            ConnEnd::TargetReset => "target-reset",
            ConnEnd::Refused => "refused",
            ConnEnd::Unreachable => "unreachable",
            ConnEnd::Cut => "cut",
        }
    }
}

impl FromStr for ConnEnd {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s {
            "closed" => ConnEnd::Closed,
            "client-reset" => ConnEnd::ClientReset,
            "target-reset" => ConnEnd::TargetReset,
            "refused" => ConnEnd::Refused,
            "unreachable" => ConnEnd::Unreachable,
            "cut" => ConnEnd::Cut,
            _ => return Err(ParseError::Field("connection end")),
        })
    }
}

/// `CONN ID SECS UP DOWN END PEER`: connection ID (from 1) lasted SECS,
/// carried UP bytes from the client to the target and DOWN back, and
/// ended as END; PEER is the client's address.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnReport {
    /// The connection's number.
    pub id: u32,
    /// From accept to the end.
    pub secs: f64,
    /// Client → target bytes.
    pub up: u64,
    /// Target → client bytes.
    pub down: u64,
    /// How it ended.
    pub end: ConnEnd,
    /// The client's address.
    pub peer: String,
}

impl fmt::Display for ConnReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:.6} {} {} {} {}",
            self.id,
            self.secs,
            self.up,
            self.down,
            self.end.as_str(),
            one_line(&self.peer).replace(' ', "_")
        )
    }
}

impl FromStr for ConnReport {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let w: Vec<&str> = s.split(' ').collect();
        let [id, secs, up, down, end, peer] = w[..] else {
            return Err(ParseError::Field("connection report"));
        };
        let secs: f64 = secs.parse().map_err(|_| ParseError::Field("seconds"))?;
        if !secs.is_finite() || !(0.0..1e9).contains(&secs) {
            return Err(ParseError::Field("seconds"));
        }
        Ok(ConnReport {
            id: id.parse().map_err(|_| ParseError::Field("connection"))?,
            secs,
            up: up.parse().map_err(|_| ParseError::Field("bytes"))?,
            down: down.parse().map_err(|_| ParseError::Field("bytes"))?,
            end: end.parse()?,
            peer: peer.to_string(),
        })
    }
}
