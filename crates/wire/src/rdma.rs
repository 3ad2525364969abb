//! The RDMA transport's wire formats, with no I/O: the messages that travel as
//! SENDs on the queue pair ([`RdmaMsg`]), the immediate data of a WRITE_WITH_IMM
//! ([`encode_imm`]/[`decode_imm`]), the ring description in the receiver's rdma_cm
//! accept ([`RingInfo`]) and the sender's connect private data ([`connect_data`]/
//! [`check_connect_data`]).
//!
//! All little endian. Every decoder takes the bytes as received (rdma_cm may pad
//! private data, a receive buffer is [`RDMA_MSG_LEN`] bytes whatever it holds)
//! and validates slot numbers and lengths against [`MAX_SLOTS`] and
//! [`MAX_CHUNK_SIZE`] before anything is indexed with them.

use crate::frame::{StreamEnd, RDMA_TOKEN_LEN, STREAM_END_LEN};
use crate::{WireError, MAX_CHUNK_SIZE, MAX_SLOTS, MIN_CHUNK_SIZE};
use subtle::ConstantTimeEq;

/// Bytes per message buffer (credits, End, Done, slot notices).
pub const RDMA_MSG_LEN: usize = 64;
/// Bytes of an [`RdmaMsg`] that carry information: `tag:u32 slot:u32` and up to
/// a [`StreamEnd`].
const RDMA_MSG_USED: usize = 8 + STREAM_END_LEN;

/// Bits of the immediate data that carry `len - 1`; the slot takes the rest.
pub const IMM_LEN_BITS: u32 = 26;

// The immediate data can name every slot and every chunk length an endpoint accepts.
const _: () = assert!(1u64 << (32 - IMM_LEN_BITS) == MAX_SLOTS as u64);
const _: () = assert!(1u64 << IMM_LEN_BITS == MAX_CHUNK_SIZE as u64);

/// A message carried by a SEND on the RDMA queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaMsg {
    /// Sender: slot `slot` holds `len` new bytes (the WRITE + SEND path).
    Data {
        /// The ring slot, below [`MAX_SLOTS`].
        slot: u32,
        /// Bytes written into it, 1..=[`MAX_CHUNK_SIZE`].
        len: u32,
    },
    /// Sender: end of stream.
    End(StreamEnd),
    /// Receiver: slot `slot` is free again.
    Credit {
        /// The ring slot, below [`MAX_SLOTS`].
        slot: u32,
    },
    /// Receiver: the stream was verified and flushed.
    Done(StreamEnd),
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

fn stream_end(b: &[u8]) -> StreamEnd {
    // The caller checked that `b` holds RDMA_MSG_USED bytes.
    StreamEnd::decode(&b[8..8 + STREAM_END_LEN]).expect("a StreamEnd's length")
}

fn check_slot(slot: u32) -> Result<u32, WireError> {
    if slot < MAX_SLOTS {
        Ok(slot)
    } else {
        Err(WireError::BadSlot(slot))
    }
}

impl RdmaMsg {
    /// Encodes the message into one message buffer: `tag:u32 slot:u32` then
    /// `len:u64` (Data) or a [`StreamEnd`] (End, Done), zero-padded.
    pub fn encode(self) -> [u8; RDMA_MSG_LEN] {
        let mut b = [0u8; RDMA_MSG_LEN];
        let (tag, a) = match self {
            RdmaMsg::Data { slot, len } => {
                b[8..16].copy_from_slice(&u64::from(len).to_le_bytes());
                (1u32, slot)
            }
            RdmaMsg::End(e) => {
                b[8..8 + STREAM_END_LEN].copy_from_slice(&e.encode());
                (2, 0)
            }
            RdmaMsg::Credit { slot } => (3, slot),
            RdmaMsg::Done(e) => {
                b[8..8 + STREAM_END_LEN].copy_from_slice(&e.encode());
                (4, 0)
            }
        };
        b[0..4].copy_from_slice(&tag.to_le_bytes());
        b[4..8].copy_from_slice(&a.to_le_bytes());
        b
    }

    /// Decodes a received message buffer; trailing bytes are ignored.
    pub fn decode(b: &[u8]) -> Result<RdmaMsg, WireError> {
        if b.len() < RDMA_MSG_USED {
            return Err(WireError::ShortRdmaMsg(b.len()));
        }
        Ok(match u32_at(b, 0) {
            1 => {
                let len = u64_at(b, 8);
                if !(1..=u64::from(MAX_CHUNK_SIZE)).contains(&len) {
                    return Err(WireError::BadSlotLen(len));
                }
                RdmaMsg::Data {
                    slot: check_slot(u32_at(b, 4))?,
                    len: len as u32,
                }
            }
            2 => RdmaMsg::End(stream_end(b)),
            3 => RdmaMsg::Credit {
                slot: check_slot(u32_at(b, 4))?,
            },
            4 => RdmaMsg::Done(stream_end(b)),
            tag => return Err(WireError::UnknownRdmaMsg(tag)),
        })
    }
}

/// Immediate data for a WRITE_WITH_IMM: `slot` in the top 6 bits, `len - 1`
/// below. `slot` must be below [`MAX_SLOTS`] and `len` in 1..=[`MAX_CHUNK_SIZE`]
/// (the negotiated values always are).
pub fn encode_imm(slot: u32, len: u32) -> u32 {
    debug_assert!(slot < MAX_SLOTS && (1..=MAX_CHUNK_SIZE).contains(&len));
    (slot << IMM_LEN_BITS) | (len - 1)
}

/// The `(slot, len)` an immediate data value names. Every value decodes (to a
/// slot below [`MAX_SLOTS`] and a length in 1..=[`MAX_CHUNK_SIZE`]); whether that
/// slot and length fit the negotiated ring is for the receiver to check.
pub fn decode_imm(imm: u32) -> (u32, u32) {
    (imm >> IMM_LEN_BITS, (imm & ((1 << IMM_LEN_BITS) - 1)) + 1)
}

const RING_MAGIC: &[u8; 4] = b"RDPR";
const RING_VERSION: u8 = 1;
/// Length of an encoded [`RingInfo`].
pub const RING_INFO_LEN: usize = 28;

/// What the receiver's accept carries: where its ring is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingInfo {
    /// The ring's address in the receiver's registered memory.
    pub addr: u64,
    /// The remote key for RDMA WRITEs into it.
    pub rkey: u32,
    /// Slots in the ring, 1..=[`MAX_SLOTS`].
    pub slots: u32,
    /// Bytes per slot, [`MIN_CHUNK_SIZE`]..=[`MAX_CHUNK_SIZE`].
    pub chunk: u32,
}

impl RingInfo {
    /// Encodes: `"RDPR" version:u8 pad[3] addr:u64 rkey:u32 slots:u32 chunk:u32`.
    pub fn encode(self) -> [u8; RING_INFO_LEN] {
        let mut b = [0u8; RING_INFO_LEN];
        b[0..4].copy_from_slice(RING_MAGIC);
        b[4] = RING_VERSION;
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b[20..24].copy_from_slice(&self.slots.to_le_bytes());
        b[24..28].copy_from_slice(&self.chunk.to_le_bytes());
        b
    }

    /// Decodes the accept's private data; rdma_cm may pad it, so trailing bytes
    /// are ignored.
    pub fn decode(b: &[u8]) -> Result<RingInfo, WireError> {
        if b.len() < RING_INFO_LEN {
            return Err(WireError::ShortRingInfo(b.len()));
        }
        if &b[0..4] != RING_MAGIC || b[4] != RING_VERSION {
            return Err(WireError::BadRingMagic([b[0], b[1], b[2], b[3], b[4]]));
        }
        let (slots, chunk) = (u32_at(b, 20), u32_at(b, 24));
        if !(1..=MAX_SLOTS).contains(&slots) {
            return Err(WireError::BadSlots(slots));
        }
        if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk) {
            return Err(WireError::BadChunkSize(chunk));
        }
        Ok(RingInfo {
            addr: u64_at(b, 8),
            rkey: u32_at(b, 16),
            slots,
            chunk,
        })
    }
}

/// Length of the sender's connect private data.
pub const CONNECT_DATA_LEN: usize = RDMA_TOKEN_LEN + 1;

/// The sender's connect private data: the one-time token, then flags (bit 0: the
/// sender uses WRITE_WITH_IMM).
pub fn connect_data(token: &[u8; RDMA_TOKEN_LEN], imm: bool) -> [u8; CONNECT_DATA_LEN] {
    let mut b = [0u8; CONNECT_DATA_LEN];
    b[..RDMA_TOKEN_LEN].copy_from_slice(token);
    b[RDMA_TOKEN_LEN] = u8::from(imm);
    b
}

/// Checks a connect request's private data against the token, in constant time
/// (trailing padding is ignored); returns whether the sender uses WRITE_WITH_IMM.
pub fn check_connect_data(data: &[u8], token: &[u8; RDMA_TOKEN_LEN]) -> Result<bool, WireError> {
    if data.len() < CONNECT_DATA_LEN {
        return Err(WireError::ShortConnectData(data.len()));
    }
    if !bool::from(data[..RDMA_TOKEN_LEN].ct_eq(token)) {
        return Err(WireError::WrongToken);
    }
    Ok(data[RDMA_TOKEN_LEN] & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imm_round_trip() {
        for (slot, len) in [(0, 1), (1, 1 << 20), (63, 1 << 26), (5, 12345)] {
            assert_eq!(decode_imm(encode_imm(slot, len)), (slot, len));
        }
    }

    #[test]
    fn msgs_round_trip() {
        for m in [
            RdmaMsg::Data { slot: 3, len: 4096 },
            RdmaMsg::End(StreamEnd {
                bytes: u64::MAX,
                checksum: 7,
                tag: [9; 32],
            }),
            RdmaMsg::Credit { slot: 63 },
            RdmaMsg::Done(StreamEnd {
                bytes: 0,
                checksum: u64::MAX,
                tag: [0xff; 32],
            }),
        ] {
            assert_eq!(RdmaMsg::decode(&m.encode()), Ok(m));
        }
        assert_eq!(
            RdmaMsg::decode(&[0u8; RDMA_MSG_LEN]),
            Err(WireError::UnknownRdmaMsg(0))
        );
        assert_eq!(RdmaMsg::decode(&[1u8; 8]), Err(WireError::ShortRdmaMsg(8)));
    }

    #[test]
    fn ring_info_round_trip() {
        let i = RingInfo {
            addr: 0x7fff_0000_1000,
            rkey: 0xdead_beef,
            slots: 2,
            chunk: 1 << 20,
        };
        // rdma_cm may pad private data: trailing bytes are ignored.
        let mut padded = i.encode().to_vec();
        padded.resize(196, 0);
        assert_eq!(RingInfo::decode(&padded), Ok(i));
        padded[0] = b'X';
        assert!(matches!(
            RingInfo::decode(&padded),
            Err(WireError::BadRingMagic(_))
        ));
    }

    #[test]
    fn token_check() {
        let t = [7u8; RDMA_TOKEN_LEN];
        let mut d = connect_data(&t, true).to_vec();
        d.resize(56, 0);
        assert_eq!(check_connect_data(&d, &t), Ok(true));
        assert_eq!(check_connect_data(&connect_data(&t, false), &t), Ok(false));
        d[3] ^= 1;
        assert_eq!(check_connect_data(&d, &t), Err(WireError::WrongToken));
        assert_eq!(
            check_connect_data(&[], &t),
            Err(WireError::ShortConnectData(0))
        );
    }
}
