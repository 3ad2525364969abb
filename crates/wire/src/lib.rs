//! The rdma-pipe wire protocol, with no I/O: everything here turns bytes into values
//! and values into bytes, so it can be fuzzed and property-tested in isolation.
//!
//! A connection goes through three phases, whatever transport carries the data:
//!
//! 1. **Hello** ([`Hello`]): both ends send a fixed-size greeting at once: magic,
//!    protocol version, role, capabilities, chunk size, a fresh 32-byte nonce and
//!    the protection it wants ([`Integrity`]). The magic and version come first so
//!    that an incompatible peer is reported as "peer speaks protocol X, we speak Y"
//!    instead of garbage.
//! 2. **Authentication** ([`session`]): SPAKE2 with the shared key, session keys
//!    by HKDF over the whole transcript, then key confirmation over the receiver's
//!    Accept. The key never crosses the network and nothing sent lets anyone test
//!    key guesses offline; see docs/security.md.
//! 3. **Frames** ([`frame`]): data chunks (sealed with AES-256-GCM under
//!    `--encrypt`, [`seal`]), then an end-of-stream frame carrying the byte count,
//!    the xxh3-64 checksum and a tag over them and the stream's keyed MAC
//!    ([`checksum`]), answered by the receiver's tagged confirmation. Every length
//!    read from the network is validated against limits before anything is
//!    allocated.
//!
//! With `--compress`, each data chunk is a zstd frame or stored, with a
//! trailer, before it is sealed ([`compress`]).
//!
//! Re-linking a fan-out chain around a dead relay (the resume request and its
//! answer) is in [`resume`].
//!
//! rdcp's files and directories travel as an entry stream inside a transfer
//! ([`entry`]).
//!
//! `rdpipe forward`'s connections travel as frames inside a hop pair's
//! streams ([`mux`]).
//!
//! The RDMA transport's own formats (SEND messages, immediate data, the rdma_cm
//! private data of connect and accept) are in [`rdma`].
#![deny(missing_docs)]

pub mod checksum;
pub mod compress;
pub mod entry;
pub mod frame;
pub mod hello;
pub mod mux;
pub mod rdma;
pub mod resume;
pub mod seal;
pub mod session;

pub use checksum::StreamHasher;
pub use compress::Compress;
pub use frame::{AbortReason, Control, FrameHeader, FrameKind, StreamEnd, FRAME_HEADER_LEN};
pub use hello::{Caps, Hello, Integrity, Role, TransportPref, HELLO_LEN, MAGIC, PROTOCOL_VERSION};
pub use rdma::{RdmaMsg, RingInfo};
pub use resume::{ResumeReply, ResumeRequest, ResumeVerdict};
pub use session::{Pake, SessionKeys, TAG_LEN};

/// Largest chunk (data frame payload, RDMA slot) any endpoint accepts. Bounds every
/// allocation that a length from the network could cause.
pub const MAX_CHUNK_SIZE: u32 = 64 << 20;
/// Smallest chunk size; below this the per-frame overhead dominates.
pub const MIN_CHUNK_SIZE: u32 = 4096;
/// Default chunk size: 1 MiB, the original tool's buffer size.
pub const DEFAULT_CHUNK_SIZE: u32 = 1 << 20;
/// Most slots (buffers in flight) an endpoint accepts.
pub const MAX_SLOTS: u32 = 64;

impl From<WireError> for std::io::Error {
    /// Malformed bytes, as an I/O error of the reader that met them.
    fn from(e: WireError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// Everything that can be wrong with bytes received from a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The first bytes are not our magic: not an rdma-pipe endpoint at all.
    #[error("peer is not an rdma-pipe endpoint (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// The peer runs an incompatible protocol version.
    #[error("peer speaks protocol {peer}, we speak {ours}")]
    VersionMismatch {
        /// The peer's version.
        peer: u16,
        /// Ours ([`PROTOCOL_VERSION`]).
        ours: u16,
    },
    /// A role byte other than sender/receiver.
    #[error("invalid role byte {0}")]
    BadRole(u8),
    /// A transport preference byte out of range.
    #[error("invalid transport preference byte {0}")]
    BadTransportPref(u8),
    /// Both ends claim the same role.
    #[error("both ends are {0:?}s: connect an rdsend to an rdrecv")]
    SameRole(Role),
    /// A chunk size outside [`MIN_CHUNK_SIZE`]..=[`MAX_CHUNK_SIZE`].
    #[error("chunk size {0} out of range {MIN_CHUNK_SIZE}..={MAX_CHUNK_SIZE}")]
    BadChunkSize(u32),
    /// A slot count outside 1..=[`MAX_SLOTS`].
    #[error("slot count {0} out of range 1..={MAX_SLOTS}")]
    BadSlots(u32),
    /// A frame type byte we do not know.
    #[error("unknown frame type {0}")]
    UnknownFrame(u8),
    /// A frame longer than its type allows.
    #[error("{kind:?} frame of {len} bytes exceeds the limit of {limit}")]
    FrameTooLarge {
        /// The frame's type.
        kind: FrameKind,
        /// The length the header announced.
        len: u32,
        /// The largest length allowed for that type.
        limit: u32,
    },
    /// A frame whose payload length does not fit its type.
    #[error("{kind:?} frame with malformed payload of {len} bytes")]
    BadPayload {
        /// The frame's type.
        kind: FrameKind,
        /// Its payload length.
        len: usize,
    },
    /// The reserved header bytes were not zero.
    #[error("frame header has non-zero reserved bytes")]
    BadReserved,
    /// A hello's rate limit bytes that are not a rate (see `hello::encode_rate`).
    #[error("malformed rate limit bytes {0:02x?} in the hello")]
    BadRateLimit([u8; 3]),
    /// Compression bytes in a hello that are not a `--compress` wish.
    #[error("invalid compression bytes {0:02x?} in the hello")]
    BadCompress([u8; 2]),
    /// An integrity byte out of range.
    #[error("invalid integrity byte {0}")]
    BadIntegrity(u8),
    /// An rdcp entry stream that breaks its format ([`entry`]).
    #[error("malformed rdcp stream: {0}")]
    Entry(&'static str),
    /// The peer's PAKE message is malformed or our own reflected.
    #[error("malformed key-exchange message")]
    BadPake,
    /// A sealed chunk did not open: altered, forged, dropped or moved.
    #[error(
        "encrypted chunk {0} failed authentication (altered, dropped or reordered on the way)"
    )]
    SealBroken(u64),
    /// A frame arrived where the protocol does not allow it.
    #[error("unexpected {0:?} frame")]
    Unexpected(FrameKind),
    /// An RDMA message buffer shorter than a message.
    #[error("RDMA message of {0} bytes is too short")]
    ShortRdmaMsg(usize),
    /// An RDMA message type we do not know.
    #[error("unknown RDMA message type {0}")]
    UnknownRdmaMsg(u32),
    /// A slot number at or above [`MAX_SLOTS`].
    #[error("slot {0} out of range 0..{MAX_SLOTS}")]
    BadSlot(u32),
    /// A slot notice's length outside 1..=[`MAX_CHUNK_SIZE`].
    #[error("slot length {0} out of range 1..={MAX_CHUNK_SIZE}")]
    BadSlotLen(u64),
    /// An rdma_cm accept whose private data is too short for a ring description.
    #[error("ring description of {0} bytes is too short")]
    ShortRingInfo(usize),
    /// An rdma_cm accept whose private data is not our ring description.
    #[error("not an rdma-pipe ring description (magic and version {0:02x?})")]
    BadRingMagic([u8; 5]),
    /// A connect request whose private data is too short for the token.
    #[error("connect private data of {0} bytes is too short for the token")]
    ShortConnectData(usize),
    /// A connect request without the one-time token.
    #[error("wrong RDMA connect token")]
    WrongToken,
    /// A re-link message without its magic.
    #[error("not a chain re-link message (magic {0:02x?})")]
    BadResumeMagic([u8; 4]),
    /// A re-link message whose tag does not verify: altered, or not from the
    /// authenticated peer of this connection.
    #[error("chain re-link message failed authentication (altered or forged)")]
    ResumeForged,
    /// A re-link answer's verdict byte out of range.
    #[error("invalid re-link verdict byte {0}")]
    BadResumeVerdict(u8),
    /// A re-link answer whose verdict contradicts its own offset and window.
    #[error("re-link answer for offset {offset} contradicts its window {start}..{end}")]
    BadResumeWindow {
        /// The offset it answers.
        offset: u64,
        /// Its window's start.
        start: u64,
        /// Its window's end.
        end: u64,
    },
    /// A re-link answer for another offset than the one asked for.
    #[error("re-link answer resumes at byte {got}, but byte {asked} was asked for")]
    ResumeOffsetMismatch {
        /// The offset asked for.
        asked: u64,
        /// The offset answered.
        got: u64,
    },
}
