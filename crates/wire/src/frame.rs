//! Frames: everything after the hellos travels as `header || payload`.
//!
//! Header (8 bytes, little endian): `kind:u8 reserved[3]=0 len:u32`. The length is
//! checked against a per-kind limit by [`FrameHeader::decode`] *before* the payload is
//! read, so a hostile or corrupt peer can never make us allocate or wait for more
//! than one chunk.

use crate::hello::TransportPref;
use crate::session::{PAKE_MSG_LEN, TAG_LEN};
use crate::WireError;

/// Length of an encoded frame header.
pub const FRAME_HEADER_LEN: usize = 8;
/// Longest human-readable message (abort reason, RDMA decline reason).
pub const MAX_MESSAGE_LEN: u32 = 1024;
/// Length of the one-time token that admits the authenticated sender to the
/// receiver's rdma_cm listener.
pub const RDMA_TOKEN_LEN: usize = 16;

/// The type of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// A chunk of stream data.
    Data,
    /// End of stream: byte count and checksum (sender to receiver).
    End,
    /// The receiver verified and flushed the whole stream.
    Done,
    /// The stream is abandoned; carries a reason.
    Abort,
    /// A key-confirmation tag (see [`crate::session`]).
    Confirm,
    /// A SPAKE2 message.
    Pake,
    /// The receiver's decision after authentication: transport, chunk size, slots.
    Accept,
    /// The receiver's rdma_cm listener port and one-time token.
    RdmaOffer,
    /// One end cannot use RDMA after all; carries a reason.
    RdmaDecline,
    /// Nothing; proves the peer is alive.
    Keepalive,
}

impl FrameKind {
    fn to_byte(self) -> u8 {
        match self {
            FrameKind::Data => 1,
            FrameKind::End => 2,
            FrameKind::Done => 3,
            FrameKind::Abort => 4,
            FrameKind::Confirm => 5,
            FrameKind::Accept => 6,
            FrameKind::RdmaOffer => 7,
            FrameKind::RdmaDecline => 8,
            FrameKind::Keepalive => 9,
            FrameKind::Pake => 10,
        }
    }
    fn from_byte(b: u8) -> Result<Self, WireError> {
        Ok(match b {
            1 => FrameKind::Data,
            2 => FrameKind::End,
            3 => FrameKind::Done,
            4 => FrameKind::Abort,
            5 => FrameKind::Confirm,
            6 => FrameKind::Accept,
            7 => FrameKind::RdmaOffer,
            8 => FrameKind::RdmaDecline,
            9 => FrameKind::Keepalive,
            10 => FrameKind::Pake,
            other => return Err(WireError::UnknownFrame(other)),
        })
    }
    /// The largest payload this kind may carry; `max_data` bounds data frames.
    fn limit(self, max_data: u32) -> u32 {
        match self {
            FrameKind::Data => max_data,
            FrameKind::End | FrameKind::Done => STREAM_END_LEN as u32,
            FrameKind::Pake => PAKE_MSG_LEN as u32,
            FrameKind::Abort | FrameKind::RdmaDecline => MAX_MESSAGE_LEN,
            FrameKind::Confirm => TAG_LEN as u32,
            FrameKind::Accept => ACCEPT_LEN as u32,
            FrameKind::RdmaOffer => RDMA_OFFER_LEN as u32,
            FrameKind::Keepalive => 0,
        }
    }
}

/// A decoded, validated frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The frame's type.
    pub kind: FrameKind,
    /// The payload length that follows, already checked against the kind's limit.
    pub len: u32,
}

impl FrameHeader {
    /// Encodes a header.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut b = [0u8; FRAME_HEADER_LEN];
        b[0] = self.kind.to_byte();
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes a header and checks its length against the limit of its kind;
    /// `max_data` is the negotiated chunk size, the limit for data frames.
    pub fn decode(b: &[u8; FRAME_HEADER_LEN], max_data: u32) -> Result<FrameHeader, WireError> {
        let kind = FrameKind::from_byte(b[0])?;
        if b[1..4] != [0, 0, 0] {
            return Err(WireError::BadReserved);
        }
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let limit = kind.limit(max_data);
        if len > limit {
            return Err(WireError::FrameTooLarge { kind, len, limit });
        }
        if kind == FrameKind::Data && len == 0 {
            return Err(WireError::BadPayload { kind, len: 0 });
        }
        Ok(FrameHeader { kind, len })
    }

    /// The header of a data frame of `len` bytes.
    pub fn data(len: u32) -> FrameHeader {
        FrameHeader {
            kind: FrameKind::Data,
            len,
        }
    }
}

/// The transport the receiver chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chosen {
    /// No transport both ends accept (`--transport tcp` against `rdma`, or `rdma`
    /// without RDMA on both ends): the handshake ends, authenticated, with the
    /// reason each end works out from the two hellos.
    Refused,
    /// Data frames on the TCP connection.
    Tcp,
    /// RDMA; an [`Control::RdmaOffer`] follows.
    Rdma,
}

/// Why an [`Control::Abort`] was sent, so the other end can decide on it without
/// reading the message.
///
/// On the wire the code is the payload's first byte, below 0x20, followed by the
/// message. A payload that starts with any other byte (or is empty) is a bare
/// message from a build before reason codes: [`AbortReason::Unspecified`]. So the
/// protocol version did not change, and an older peer still reads the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AbortReason {
    /// No code given (or the bare message of an older build).
    Unspecified,
    /// The stream is abandoned: input, output or verification failed.
    Stream,
    /// The peer's authentication tag was wrong: the keys differ.
    AuthFailed,
    /// The two ends' `--transport` choices cannot be reconciled.
    TransportMismatch,
}

impl AbortReason {
    fn to_byte(self) -> u8 {
        match self {
            AbortReason::Unspecified => 0,
            AbortReason::Stream => 1,
            AbortReason::AuthFailed => 2,
            AbortReason::TransportMismatch => 3,
        }
    }
    /// The code byte's reason; `None` for a code this build does not know.
    fn from_byte(b: u8) -> Option<AbortReason> {
        Some(match b {
            0 => AbortReason::Unspecified,
            1 => AbortReason::Stream,
            2 => AbortReason::AuthFailed,
            3 => AbortReason::TransportMismatch,
            _ => return None,
        })
    }
}

/// What End (sender) and Done (receiver) carry: the stream's byte count, its
/// xxh3-64 checksum, and a tag under the session's End or Done key over both and
/// the stream MAC ([`crate::session::SessionKeys::end_tag`]), so neither can be
/// forged, replayed or echoed by anyone without the session keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamEnd {
    /// Bytes in the whole stream.
    pub bytes: u64,
    /// xxh3-64 of the whole stream.
    pub checksum: u64,
    /// The End or Done tag.
    pub tag: [u8; TAG_LEN],
}

/// Length of an encoded [`StreamEnd`].
pub const STREAM_END_LEN: usize = 16 + TAG_LEN;

impl StreamEnd {
    /// `bytes:u64 checksum:u64 tag[32]`, little endian.
    pub fn encode(&self) -> [u8; STREAM_END_LEN] {
        let mut b = [0u8; STREAM_END_LEN];
        b[0..8].copy_from_slice(&self.bytes.to_le_bytes());
        b[8..16].copy_from_slice(&self.checksum.to_le_bytes());
        b[16..].copy_from_slice(&self.tag);
        b
    }

    /// Decodes exactly [`STREAM_END_LEN`] bytes; `None` for any other length.
    pub fn decode(b: &[u8]) -> Option<StreamEnd> {
        if b.len() != STREAM_END_LEN {
            return None;
        }
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[0..8]);
        let bytes = u64::from_le_bytes(x);
        x.copy_from_slice(&b[8..16]);
        let checksum = u64::from_le_bytes(x);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&b[16..]);
        Some(StreamEnd {
            bytes,
            checksum,
            tag,
        })
    }
}

/// A peer's text made safe to print: every control character (escape sequences
/// included) becomes a space.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Bytes below this value at the start of an Abort payload are reason codes.
const ABORT_CODE_LIMIT: u8 = 0x20;

const ACCEPT_LEN: usize = 12;
const RDMA_OFFER_LEN: usize = 2 + 1 + RDMA_TOKEN_LEN;

/// Every frame other than data, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// End of stream.
    End(StreamEnd),
    /// The receiver confirms the stream, with what it verified.
    Done(StreamEnd),
    /// This end's SPAKE2 message.
    Pake([u8; PAKE_MSG_LEN]),
    /// The stream (or the handshake) is abandoned.
    Abort {
        /// Why, for the other end's decisions.
        reason: AbortReason,
        /// Why, for people.
        message: String,
    },
    /// A key-confirmation tag.
    Confirm([u8; TAG_LEN]),
    /// The receiver's decision.
    Accept {
        /// The transport to use.
        transport: Chosen,
        /// Chunk size both ends use.
        chunk_size: u32,
        /// Slots in the receiver's ring.
        slots: u32,
    },
    /// Where and how to connect over rdma_cm.
    RdmaOffer {
        /// The receiver's rdma_cm listener port.
        port: u16,
        /// Whether the receiver accepts WRITE_WITH_IMM (else WRITE + SEND).
        write_with_imm: bool,
        /// The one-time token to put in the connect request's private data.
        token: [u8; RDMA_TOKEN_LEN],
    },
    /// One end cannot use RDMA; carries the reason.
    RdmaDecline(String),
    /// Liveness.
    Keepalive,
}

fn message_bytes(s: &str, limit: usize) -> &[u8] {
    // Truncate at a char boundary so the limit holds and the text stays valid UTF-8.
    let mut end = s.len().min(limit);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s.as_bytes()[..end]
}

impl Control {
    /// The frame kind that carries this message.
    pub fn kind(&self) -> FrameKind {
        match self {
            Control::End(_) => FrameKind::End,
            Control::Done(_) => FrameKind::Done,
            Control::Pake(_) => FrameKind::Pake,
            Control::Abort { .. } => FrameKind::Abort,
            Control::Confirm(_) => FrameKind::Confirm,
            Control::Accept { .. } => FrameKind::Accept,
            Control::RdmaOffer { .. } => FrameKind::RdmaOffer,
            Control::RdmaDecline(_) => FrameKind::RdmaDecline,
            Control::Keepalive => FrameKind::Keepalive,
        }
    }

    /// Encodes the whole frame, header included.
    pub fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        match self {
            Control::End(e) | Control::Done(e) => payload.extend_from_slice(&e.encode()),
            Control::Pake(m) => payload.extend_from_slice(m),
            Control::Abort { reason, message } => {
                payload.push(reason.to_byte());
                payload.extend_from_slice(message_bytes(message, MAX_MESSAGE_LEN as usize - 1));
            }
            Control::RdmaDecline(msg) => {
                payload.extend_from_slice(message_bytes(msg, MAX_MESSAGE_LEN as usize))
            }
            Control::Confirm(tag) => payload.extend_from_slice(tag),
            Control::Accept {
                transport,
                chunk_size,
                slots,
            } => {
                let t: u32 = match transport {
                    Chosen::Refused => 0,
                    Chosen::Tcp => 1,
                    Chosen::Rdma => 2,
                };
                payload.extend_from_slice(&t.to_le_bytes());
                payload.extend_from_slice(&chunk_size.to_le_bytes());
                payload.extend_from_slice(&slots.to_le_bytes());
            }
            Control::RdmaOffer {
                port,
                write_with_imm,
                token,
            } => {
                payload.extend_from_slice(&port.to_le_bytes());
                payload.push(u8::from(*write_with_imm));
                payload.extend_from_slice(token);
            }
            Control::Keepalive => {}
        }
        let header = FrameHeader {
            kind: self.kind(),
            len: payload.len() as u32,
        };
        let mut out = header.encode().to_vec();
        out.extend_from_slice(&payload);
        out
    }

    /// Decodes the payload of a non-data frame whose header was already validated.
    pub fn decode(kind: FrameKind, p: &[u8]) -> Result<Control, WireError> {
        let bad = || WireError::BadPayload { kind, len: p.len() };
        let u32_at = |i: usize| u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
        Ok(match kind {
            FrameKind::Data => return Err(WireError::Unexpected(kind)),
            FrameKind::End | FrameKind::Done => {
                let e = StreamEnd::decode(p).ok_or_else(bad)?;
                if kind == FrameKind::End {
                    Control::End(e)
                } else {
                    Control::Done(e)
                }
            }
            FrameKind::Pake => Control::Pake(p.try_into().map_err(|_| bad())?),
            FrameKind::Abort | FrameKind::RdmaDecline => {
                if p.len() > MAX_MESSAGE_LEN as usize {
                    return Err(bad());
                }
                if kind == FrameKind::RdmaDecline {
                    return Ok(Control::RdmaDecline(printable(&String::from_utf8_lossy(p))));
                }
                let (reason, msg) = match p.first() {
                    Some(&b) if b < ABORT_CODE_LIMIT => {
                        (AbortReason::from_byte(b).ok_or_else(bad)?, &p[1..])
                    }
                    _ => (AbortReason::Unspecified, p),
                };
                Control::Abort {
                    reason,
                    message: printable(&String::from_utf8_lossy(msg)),
                }
            }
            FrameKind::Confirm => Control::Confirm(p.try_into().map_err(|_| bad())?),
            FrameKind::Accept => {
                if p.len() != ACCEPT_LEN {
                    return Err(bad());
                }
                let transport = match u32_at(0) {
                    0 => Chosen::Refused,
                    1 => Chosen::Tcp,
                    2 => Chosen::Rdma,
                    _ => return Err(bad()),
                };
                let chunk_size = u32_at(4);
                if !(crate::MIN_CHUNK_SIZE..=crate::MAX_CHUNK_SIZE).contains(&chunk_size) {
                    return Err(WireError::BadChunkSize(chunk_size));
                }
                let slots = u32_at(8);
                if !(1..=crate::MAX_SLOTS).contains(&slots) {
                    return Err(WireError::BadSlots(slots));
                }
                Control::Accept {
                    transport,
                    chunk_size,
                    slots,
                }
            }
            FrameKind::RdmaOffer => {
                if p.len() != RDMA_OFFER_LEN || p[2] > 1 {
                    return Err(bad());
                }
                let mut token = [0u8; RDMA_TOKEN_LEN];
                token.copy_from_slice(&p[3..]);
                Control::RdmaOffer {
                    port: u16::from_le_bytes([p[0], p[1]]),
                    write_with_imm: p[2] == 1,
                    token,
                }
            }
            FrameKind::Keepalive => {
                if !p.is_empty() {
                    return Err(bad());
                }
                Control::Keepalive
            }
        })
    }

    /// Decodes a complete encoded control frame (header and payload), as produced by
    /// [`Control::encode`]. Convenient for tests and fuzzing; streaming readers use
    /// [`FrameHeader::decode`] and [`Control::decode`] separately.
    pub fn decode_frame(b: &[u8]) -> Result<Control, WireError> {
        let head: &[u8; FRAME_HEADER_LEN] = b
            .get(..FRAME_HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(WireError::BadPayload {
                kind: FrameKind::Keepalive,
                len: b.len(),
            })?;
        let h = FrameHeader::decode(head, 0)?;
        let p = &b[FRAME_HEADER_LEN..];
        if p.len() != h.len as usize {
            return Err(WireError::BadPayload {
                kind: h.kind,
                len: p.len(),
            });
        }
        Control::decode(h.kind, p)
    }
}

/// What the sender asked for and what the receiver can do decide the transport.
pub fn choose_transport(
    sender: TransportPref,
    receiver: TransportPref,
    both_rdma: bool,
) -> Option<Chosen> {
    use TransportPref::*;
    match (sender, receiver) {
        (Tcp, Rdma) | (Rdma, Tcp) => None,
        (Tcp, _) | (_, Tcp) => Some(Chosen::Tcp),
        (Rdma, _) | (_, Rdma) => both_rdma.then_some(Chosen::Rdma),
        (Auto, Auto) => Some(if both_rdma { Chosen::Rdma } else { Chosen::Tcp }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_limits() {
        let h = FrameHeader::data(10).encode();
        assert_eq!(FrameHeader::decode(&h, 10).unwrap().len, 10);
        assert!(matches!(
            FrameHeader::decode(&h, 9),
            Err(WireError::FrameTooLarge { .. })
        ));
        let mut big = FrameHeader {
            kind: FrameKind::End,
            len: STREAM_END_LEN as u32 + 1,
        }
        .encode();
        assert!(FrameHeader::decode(&big, 1 << 20).is_err());
        big[0] = 200;
        assert_eq!(
            FrameHeader::decode(&big, 1 << 20),
            Err(WireError::UnknownFrame(200))
        );
    }

    #[test]
    fn abort_reasons() {
        let a = Control::Abort {
            reason: AbortReason::AuthFailed,
            message: "authentication failed".into(),
        };
        let frame = a.encode();
        assert_eq!(frame[FRAME_HEADER_LEN], 2);
        assert_eq!(Control::decode_frame(&frame), Ok(a));
        // A bare message (no code byte) is read as it always was.
        assert_eq!(
            Control::decode(FrameKind::Abort, b"gone"),
            Ok(Control::Abort {
                reason: AbortReason::Unspecified,
                message: "gone".into()
            })
        );
        assert!(Control::decode(FrameKind::Abort, &[0x1f, b'x']).is_err());
        // The code byte counts against the message limit.
        let long = Control::Abort {
            reason: AbortReason::Stream,
            message: "x".repeat(5000),
        };
        assert_eq!(
            long.encode().len(),
            FRAME_HEADER_LEN + MAX_MESSAGE_LEN as usize
        );
    }

    #[test]
    fn transport_choice() {
        use TransportPref::*;
        assert_eq!(choose_transport(Auto, Auto, false), Some(Chosen::Tcp));
        assert_eq!(choose_transport(Auto, Auto, true), Some(Chosen::Rdma));
        assert_eq!(choose_transport(Rdma, Auto, false), None);
        assert_eq!(choose_transport(Tcp, Rdma, true), None);
        assert_eq!(choose_transport(Tcp, Auto, true), Some(Chosen::Tcp));
    }
}
