//! `rdpipe forward`'s frames: many TCP connections carried inside the two
//! streams of one hop pair (one each way between the listening host and the
//! target host), so a new connection costs one frame, not a handshake.
//!
//! The frames travel inside an ordinary hop's stream: authenticated,
//! protected (`--integrity`) and verified at its end like any other. What
//! they add is which connection a byte belongs to and when it may be sent.
//!
//! Layout (integers big-endian): a 9-byte header — kind (u8), connection id
//! (u32), value (u32) — and, for [`Frame::Data`] only, `value` bytes of
//! payload ([`MAX_DATA`] at most).
//!
//! | kind | frame | value |
//! |---|---|---|
//! | 1 | `Open`: the listening side accepted connection `id` (ids only grow) | 0 |
//! | 3 | `Data` | payload length |
//! | 4 | `Eof`: the sender's socket read its end (a half-close) | 0 |
//! | 5 | `Reset`: the connection is gone on the sender's side | [`ResetKind`] |
//! | 6 | `Credit`: the sender wrote `value` more bytes of `id` to its socket | bytes |
//! | 7 | `Hello`: each side's first frame (id 0): its hop is up | 0 |
//!
//! Flow control is per connection and per direction: a side may have at
//! most the window ([`WINDOW`]) of a connection's bytes sent and not yet
//! credited back, so a slow reader slows its own writer only, and each
//! connection holds at most one window of memory at each end.
//!
//! [`Parser`] takes the stream in pieces of any size, as the transport hands
//! them over, and never allocates more than one payload ([`MAX_DATA`]).

use std::fmt;

/// A frame header's length.
pub const HEADER_LEN: usize = 9;

/// The largest payload of a [`Frame::Data`].
pub const MAX_DATA: u32 = 256 << 10;

/// The flow-control window per connection and direction: bytes sent and
/// not yet credited back.
pub const WINDOW: u32 = 4 << 20;

/// Why a connection was reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetKind {
    /// The local peer reset it (or the socket failed).
    Reset,
    /// The target refused the connection (nothing listens there).
    Refused,
    /// The target could not be reached (no route, timed out, no such name).
    Unreachable,
    /// The forward is stopping (Ctrl-C with the connection open).
    Stopping,
}

impl ResetKind {
    fn code(self) -> u32 {
        match self {
            ResetKind::Reset => 0,
            ResetKind::Refused => 1,
            ResetKind::Unreachable => 2,
            ResetKind::Stopping => 3,
        }
    }

    fn from_code(c: u32) -> Option<ResetKind> {
        Some(match c {
            0 => ResetKind::Reset,
            1 => ResetKind::Refused,
            2 => ResetKind::Unreachable,
            3 => ResetKind::Stopping,
            _ => return None,
        })
    }
}

impl fmt::Display for ResetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResetKind::Reset => "reset",
            ResetKind::Refused => "refused",
            ResetKind::Unreachable => "unreachable",
            ResetKind::Stopping => "cut at exit",
        })
    }
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A new connection.
    Open(u32),
    /// Bytes of a connection.
    Data(u32, Vec<u8>),
    /// The sender's side half-closed.
    Eof(u32),
    /// The connection is gone.
    Reset(u32, ResetKind),
    /// Bytes written out, which the peer may send again.
    Credit(u32, u32),
    /// The side's first frame: its outgoing hop is up.
    Hello,
}

impl Frame {
    /// The connection it is about.
    pub fn id(&self) -> u32 {
        match self {
            Frame::Open(id)
            | Frame::Data(id, _)
            | Frame::Eof(id)
            | Frame::Reset(id, _)
            | Frame::Credit(id, _) => *id,
            Frame::Hello => 0,
        }
    }

    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + self.payload_len());
        let (kind, value) = match self {
            Frame::Open(_) => (1, 0),
            Frame::Data(_, d) => (3, d.len() as u32),
            Frame::Eof(_) => (4, 0),
            Frame::Reset(_, k) => (5, k.code()),
            Frame::Credit(_, n) => (6, *n),
            Frame::Hello => (7, 0),
        };
        v.extend_from_slice(&header(kind, self.id(), value));
        if let Frame::Data(_, d) = self {
            v.extend_from_slice(d);
        }
        v
    }

    fn payload_len(&self) -> usize {
        match self {
            Frame::Data(_, d) => d.len(),
            _ => 0,
        }
    }
}

/// A data frame's header for `len` bytes of connection `id` (the payload
/// follows it), for a sender that reads the payload in place.
pub fn data_header(id: u32, len: u32) -> [u8; HEADER_LEN] {
    header(3, id, len)
}

fn header(kind: u8, id: u32, value: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = kind;
    h[1..5].copy_from_slice(&id.to_be_bytes());
    h[5..9].copy_from_slice(&value.to_be_bytes());
    h
}

/// A malformed frame: the stream is not a forward's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MuxError {
    /// Unknown kind byte.
    #[error("unknown frame kind {0}")]
    Kind(u8),
    /// A data frame longer than [`MAX_DATA`] (or empty).
    #[error("data frame of {0} bytes (1 to {MAX_DATA} allowed)")]
    Length(u32),
    /// A reset with an unknown reason.
    #[error("unknown reset reason {0}")]
    Reason(u32),
    /// A frame other than data with a non-zero value where none belongs.
    #[error("frame kind {0} with a value")]
    Value(u8),
}

/// Turns the stream, in pieces of any size, back into frames.
#[derive(Debug, Default)]
pub struct Parser {
    head: Vec<u8>,
    /// A data frame's id and payload being gathered, and its length.
    data: Option<(u32, Vec<u8>, usize)>,
}

impl Parser {
    /// A parser at the start of a stream.
    pub fn new() -> Parser {
        Parser::default()
    }

    /// Takes `bytes`, calling `each` with every frame they complete, in
    /// order. After an error the stream is unusable.
    pub fn feed(&mut self, mut bytes: &[u8], each: &mut dyn FnMut(Frame)) -> Result<(), MuxError> {
        while !bytes.is_empty() {
            if let Some((id, buf, len)) = &mut self.data {
                let take = (*len - buf.len()).min(bytes.len());
                buf.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if buf.len() == *len {
                    let (id, buf, _) = (*id, std::mem::take(buf), 0);
                    self.data = None;
                    each(Frame::Data(id, buf));
                }
                continue;
            }
            let take = (HEADER_LEN - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.head.len() < HEADER_LEN {
                break;
            }
            let kind = self.head[0];
            let id = u32::from_be_bytes(self.head[1..5].try_into().expect("4 bytes"));
            let value = u32::from_be_bytes(self.head[5..9].try_into().expect("4 bytes"));
            self.head.clear();
            let bare = |f: Frame| {
                if value == 0 {
                    Ok(f)
                } else {
                    Err(MuxError::Value(kind))
                }
            };
            let frame = match kind {
                1 => bare(Frame::Open(id))?,
                3 => {
                    if value == 0 || value > MAX_DATA {
                        return Err(MuxError::Length(value));
                    }
                    self.data = Some((id, Vec::with_capacity(value as usize), value as usize));
                    continue;
                }
                4 => bare(Frame::Eof(id))?,
                5 => Frame::Reset(
                    id,
                    ResetKind::from_code(value).ok_or(MuxError::Reason(value))?,
                ),
                6 => Frame::Credit(id, value),
                7 if id == 0 => bare(Frame::Hello)?,
                7 => return Err(MuxError::Value(7)),
                k => return Err(MuxError::Kind(k)),
            };
            each(frame);
        }
        Ok(())
    }

    /// Whether the stream may end here (no frame begun and not finished).
    pub fn at_boundary(&self) -> bool {
        self.head.is_empty() && self.data.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_one_piece() {
        let frames = vec![
            Frame::Open(1),
            Frame::Data(1, b"hello".to_vec()),
            Frame::Eof(1),
            Frame::Credit(1, 5),
            Frame::Reset(2, ResetKind::Refused),
            Frame::Hello,
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        let mut got = vec![];
        let mut p = Parser::new();
        p.feed(&bytes, &mut |f| got.push(f)).unwrap();
        assert_eq!(got, frames);
        assert!(p.at_boundary());
    }

    #[test]
    fn refuses_oversized_and_empty_data() {
        let mut p = Parser::new();
        let e = p
            .feed(&data_header(1, MAX_DATA + 1), &mut |_| {})
            .unwrap_err();
        assert_eq!(e, MuxError::Length(MAX_DATA + 1));
        let mut p = Parser::new();
        assert!(p.feed(&data_header(1, 0), &mut |_| {}).is_err());
    }

    #[test]
    fn refuses_unknown_kind_and_reason() {
        assert_eq!(
            Parser::new().feed(&header(9, 1, 0), &mut |_| {}),
            Err(MuxError::Kind(9))
        );
        assert_eq!(
            Parser::new().feed(&header(5, 1, 77), &mut |_| {}),
            Err(MuxError::Reason(77))
        );
        assert_eq!(
            Parser::new().feed(&header(1, 1, 3), &mut |_| {}),
            Err(MuxError::Value(1))
        );
    }
}
