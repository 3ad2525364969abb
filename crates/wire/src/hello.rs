//! The fixed-size greeting both ends send first.
//!
//! Layout (little endian, 56 bytes):
//! `magic[4] version:u16 role:u8 transport:u8 caps:u8 compress:u8 level:u8 caps_hi:u8
//! chunk_size:u32 slots:u32 nonce[32] integrity:u8 rate_limit[3]`.
//! `compress` and `level` (once the second and third bytes of a `caps:u32` that
//! earlier builds always sent as zero, and still read as capability bits they
//! ignore) are the end's `--compress` wish ([`Compress`]); an end that reads
//! compressed chunks sets [`Caps::COMPRESS`], one that takes them in larger TCP
//! frames [`Caps::WIDE_COMPRESSED`] and [`Caps::LARGE_COMPRESSED`].
//! `rate_limit` (once `reserved[3]=0`, so a hello without a limit is what earlier
//! builds send) is the end's `--rate-limit` in bytes per second as `shift:u8
//! mantissa:u16`, value `mantissa << shift`, all zero for none: see [`encode_rate`].
//! The magic and version sit in the first six bytes so a reader can check them with
//! [`Hello::check_prefix`] before it trusts anything else: a future version may change
//! the rest of the layout, but never those six bytes.

use crate::{Compress, WireError, MAX_CHUNK_SIZE, MAX_SLOTS, MIN_CHUNK_SIZE};
use std::num::NonZeroU64;

/// The four bytes every rdma-pipe connection starts with.
pub const MAGIC: [u8; 4] = *b"RDPP";
/// The protocol version this build speaks. 3: `--encrypt` seals a chunk in
/// 256 KiB pieces, one tag each ([`crate::seal`]); a chunk of more than one
/// piece (RDMA's 1 MiB default) differs from version 2's single tag, so the
/// two never talk (a version 2 peer gets the clear version error, not a
/// "tampered" chunk). 4: a reconnecting hop's receiver may send a hold
/// before its resume request ([`crate::resume::Resuming`]), which a version 3
/// sender takes for a forged request (it would never resume), and rdcp's
/// streams carry striped entries ([`crate::entry::Entry::Piece`]) that a
/// version 3 unpacker refuses: the two never talk. 5: a reconnecting hop's
/// sender opens every new connection with a message bound to the stream
/// ([`crate::resume::Returning`]), which a listening receiver checks before
/// the connection may replace its live one, and which a version 4 receiver
/// would take for a bad resume answer: the two never talk.
pub const PROTOCOL_VERSION: u16 = 5;
/// Length of an encoded [`Hello`].
pub const HELLO_LEN: usize = 56;
/// Length of the part of the hello that every version keeps: magic and version.
pub const HELLO_PREFIX_LEN: usize = 6;
/// Length of the nonce in a hello.
pub const NONCE_LEN: usize = 32;

/// Which end of the stream a peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Reads its input and sends it (rdsend).
    Sender,
    /// Receives and writes its output (rdrecv).
    Receiver,
}

impl Role {
    fn to_byte(self) -> u8 {
        match self {
            Role::Sender => 1,
            Role::Receiver => 2,
        }
    }
    fn from_byte(b: u8) -> Result<Self, WireError> {
        match b {
            1 => Ok(Role::Sender),
            2 => Ok(Role::Receiver),
            other => Err(WireError::BadRole(other)),
        }
    }
    /// The other end's role.
    pub fn peer(self) -> Role {
        match self {
            Role::Sender => Role::Receiver,
            Role::Receiver => Role::Sender,
        }
    }
}

/// What transport an end asks for (`--transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportPref {
    /// RDMA where both ends can, else TCP.
    #[default]
    Auto,
    /// TCP only.
    Tcp,
    /// RDMA or fail.
    Rdma,
}

impl TransportPref {
    fn to_byte(self) -> u8 {
        match self {
            TransportPref::Auto => 0,
            TransportPref::Tcp => 1,
            TransportPref::Rdma => 2,
        }
    }
    fn from_byte(b: u8) -> Result<Self, WireError> {
        match b {
            0 => Ok(TransportPref::Auto),
            1 => Ok(TransportPref::Tcp),
            2 => Ok(TransportPref::Rdma),
            other => Err(WireError::BadTransportPref(other)),
        }
    }
}

/// How the stream is protected (`--integrity`, `--encrypt`). Each end says what
/// it wants in its hello; the stronger of the two is used. The default is
/// [`Integrity::preferred`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Integrity {
    /// xxh3-64 checksum only: catches accidents, not an attacker who can change
    /// the data (End and Done are still authenticated).
    Checksum,
    /// A keyed BLAKE3 MAC over the whole stream, checked before the receiver
    /// declares the stream good (the default on CPUs without AES instructions).
    Mac,
    /// Every chunk sealed with AES-256-GCM: confidentiality and integrity (the
    /// MAC is then not needed). The default where the CPU has AES instructions.
    Encrypt,
}

impl Integrity {
    fn to_byte(self) -> u8 {
        match self {
            Integrity::Checksum => 0,
            Integrity::Mac => 1,
            Integrity::Encrypt => 2,
        }
    }
    fn from_byte(b: u8) -> Result<Self, WireError> {
        match b {
            0 => Ok(Integrity::Checksum),
            1 => Ok(Integrity::Mac),
            2 => Ok(Integrity::Encrypt),
            other => Err(WireError::BadIntegrity(other)),
        }
    }
    /// The default protection on this CPU: [`Integrity::Encrypt`] where it has
    /// AES and carry-less multiply instructions (AES-256-GCM then costs less
    /// CPU per byte than the BLAKE3 MAC: docs/performance.md), else
    /// [`Integrity::Mac`] (software AES is several times slower than BLAKE3).
    pub fn preferred() -> Integrity {
        if crate::seal::aes_in_hardware() {
            Integrity::Encrypt
        } else {
            Integrity::Mac
        }
    }
    /// What two ends that asked for `a` and `b` use: the stronger.
    pub fn negotiate(a: Integrity, b: Integrity) -> Integrity {
        a.max(b)
    }
    /// The name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Integrity::Checksum => "checksum",
            Integrity::Mac => "mac",
            Integrity::Encrypt => "encrypt",
        }
    }
}

/// Capability bits announced in the hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Caps(pub u32);

impl Caps {
    /// This end has an active RDMA device and was built with RDMA support.
    pub const RDMA: Caps = Caps(1);
    /// This end can use RDMA WRITE_WITH_IMM (else WRITE followed by SEND).
    pub const WRITE_WITH_IMM: Caps = Caps(2);
    /// This end reads compressed chunks ([`crate::compress`]); builds from
    /// before compression never set it.
    pub const COMPRESS: Caps = Caps(4);
    /// This end takes the TCP data frames of a compressed stream up to 1 MiB
    /// (within the negotiated chunk size; the transport's
    /// `COMPRESSED_TCP_BUF`); builds without it take at most 256 KiB, so a
    /// stream uses the larger frames only when both ends set it.
    pub const WIDE_COMPRESSED: Caps = Caps(8);
    /// This end takes the TCP data frames of a compressed stream up to 4 MiB
    /// where the negotiated chunk size is 1 MiB (the default) or more (the
    /// transport's `LARGE_COMPRESSED_TCP_BUF`): each frame is a chunk
    /// compressed on its own, and a larger one compresses better. Builds
    /// without it take at most 1 MiB ([`Caps::WIDE_COMPRESSED`]).
    pub const LARGE_COMPRESSED: Caps = Caps(16);
    /// The bits of the hello's `caps:u32` that carry the compression wish,
    /// not capabilities.
    const WISH_BITS: u32 = 0x00FF_FF00;

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Caps) -> bool {
        self.0 & other.0 == other.0
    }
    /// Both sets together.
    pub fn union(self, other: Caps) -> Caps {
        Caps(self.0 | other.0)
    }
}

/// The greeting. Both ends send one as soon as the connection is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version ([`PROTOCOL_VERSION`] when we build it).
    pub version: u16,
    /// The sender's role.
    pub role: Role,
    /// The transport the sender asks for.
    pub transport: TransportPref,
    /// The sender's capabilities.
    pub caps: Caps,
    /// The chunk size the sender wants to use.
    pub chunk_size: u32,
    /// The number of buffers (slots) the sender wants in flight.
    pub slots: u32,
    /// Fresh random bytes, never reused: they make every authentication unique.
    pub nonce: [u8; NONCE_LEN],
    /// The protection this end wants.
    pub integrity: Integrity,
    /// This end's `--rate-limit` in bytes per second, if any (as [`encode_rate`]
    /// carries it: at most 16 significant bits, rounded down). The sender paces
    /// the stream to the lower of the two ends' limits.
    pub rate_limit: Option<NonZeroU64>,
    /// This end's `--compress` wish.
    pub compress: Compress,
}

/// The largest shift a rate may have on the wire (`0xFFFF << 48` still fits a u64).
const MAX_RATE_SHIFT: u8 = 48;

/// A rate limit (bytes per second) in its three hello bytes: `[shift, mantissa
/// (u16, little endian)]`, value `mantissa << shift` with the smallest shift that
/// fits, so rates up to 65535 B/s are exact and larger ones are rounded down by
/// less than 1/32768 (never above what was asked). `None` is all zero.
pub fn encode_rate(rate: Option<NonZeroU64>) -> [u8; 3] {
    let Some(r) = rate else { return [0; 3] };
    let r = r.get();
    let shift = (64 - r.leading_zeros()).saturating_sub(16) as u8;
    let m = ((r >> shift) as u16).to_le_bytes();
    [shift, m[0], m[1]]
}

/// Reads [`encode_rate`]'s three bytes; a zero mantissa with a non-zero shift, or
/// a shift past 48, is malformed.
pub fn decode_rate(b: [u8; 3]) -> Result<Option<NonZeroU64>, WireError> {
    let (shift, m) = (b[0], u16::from_le_bytes([b[1], b[2]]));
    match (shift, m) {
        (0, 0) => Ok(None),
        (s, m) if s <= MAX_RATE_SHIFT && m != 0 => Ok(NonZeroU64::new(u64::from(m) << s)),
        _ => Err(WireError::BadRateLimit(b)),
    }
}

impl Hello {
    /// Encodes the hello into its fixed wire form.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6] = self.role.to_byte();
        b[7] = self.transport.to_byte();
        b[8..12].copy_from_slice(&(self.caps.0 & !Caps::WISH_BITS).to_le_bytes());
        b[9..11].copy_from_slice(&self.compress.to_bytes());
        b[12..16].copy_from_slice(&self.chunk_size.to_le_bytes());
        b[16..20].copy_from_slice(&self.slots.to_le_bytes());
        b[20..52].copy_from_slice(&self.nonce);
        b[52] = self.integrity.to_byte();
        b[53..56].copy_from_slice(&encode_rate(self.rate_limit));
        b
    }

    /// Checks magic and version, the only part of the hello every version shares.
    /// Read these six bytes first and call this before reading the rest.
    pub fn check_prefix(prefix: &[u8; HELLO_PREFIX_LEN]) -> Result<(), WireError> {
        let magic = [prefix[0], prefix[1], prefix[2], prefix[3]];
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([prefix[4], prefix[5]]);
        if version != PROTOCOL_VERSION {
            return Err(WireError::VersionMismatch {
                peer: version,
                ours: PROTOCOL_VERSION,
            });
        }
        Ok(())
    }

    /// Decodes and validates a hello.
    pub fn decode(b: &[u8; HELLO_LEN]) -> Result<Hello, WireError> {
        let mut prefix = [0u8; HELLO_PREFIX_LEN];
        prefix.copy_from_slice(&b[..HELLO_PREFIX_LEN]);
        Self::check_prefix(&prefix)?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let chunk_size = u32_at(12);
        if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size) {
            return Err(WireError::BadChunkSize(chunk_size));
        }
        let slots = u32_at(16);
        if !(1..=MAX_SLOTS).contains(&slots) {
            return Err(WireError::BadSlots(slots));
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&b[20..52]);
        let rate_limit = decode_rate([b[53], b[54], b[55]])?;
        let compress =
            Compress::from_bytes([b[9], b[10]]).ok_or(WireError::BadCompress([b[9], b[10]]))?;
        Ok(Hello {
            version: PROTOCOL_VERSION,
            role: Role::from_byte(b[6])?,
            transport: TransportPref::from_byte(b[7])?,
            caps: Caps(u32_at(8) & !Caps::WISH_BITS),
            chunk_size,
            slots,
            nonce,
            integrity: Integrity::from_byte(b[52])?,
            rate_limit,
            compress,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            role: Role::Sender,
            transport: TransportPref::Auto,
            caps: Caps::RDMA,
            chunk_size: 1 << 20,
            slots: 2,
            nonce: [7; NONCE_LEN],
            integrity: Integrity::Mac,
            rate_limit: None,
            compress: Compress::None,
        }
    }

    #[test]
    fn preferred_follows_the_cpu_and_the_stronger_mode_wins() {
        let want = if crate::seal::aes_in_hardware() {
            Integrity::Encrypt
        } else {
            Integrity::Mac
        };
        assert_eq!(Integrity::preferred(), want);
        use Integrity::*;
        assert_eq!(Integrity::negotiate(Mac, Encrypt), Encrypt);
        assert_eq!(Integrity::negotiate(Checksum, Mac), Mac);
        assert_eq!(Integrity::negotiate(Checksum, Checksum), Checksum);
    }

    #[test]
    fn rates_are_exact_up_to_16_bits_and_rounded_down_beyond() {
        let rt = |v: u64| decode_rate(encode_rate(NonZeroU64::new(v))).unwrap();
        assert_eq!(encode_rate(None), [0; 3]);
        assert_eq!(decode_rate([0; 3]).unwrap(), None);
        for v in [1u64, 2, 1000, 0xFFFF, 0x10000, 16 << 20, 500 << 20, 3 << 40] {
            assert_eq!(rt(v), NonZeroU64::new(v), "{v}");
        }
        let v = (16 << 20) + 12345;
        let got = rt(v).unwrap().get();
        assert!(got <= v && v - got < v >> 15, "{v} -> {got}");
        let max = rt(u64::MAX).unwrap().get();
        assert_eq!(max, 0xFFFF << 48);
        assert!(decode_rate([1, 0, 0]).is_err());
        assert!(decode_rate([49, 1, 0]).is_err());
    }

    #[test]
    fn a_hello_without_a_limit_is_what_earlier_builds_send() {
        let b = sample().encode();
        assert_eq!(b[53..56], [0, 0, 0]);
        let mut h = sample();
        h.rate_limit = NonZeroU64::new(500 << 20);
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn the_stronger_protection_wins() {
        use Integrity::*;
        assert_eq!(Integrity::negotiate(Checksum, Mac), Mac);
        assert_eq!(Integrity::negotiate(Encrypt, Checksum), Encrypt);
        assert_eq!(Integrity::negotiate(Checksum, Checksum), Checksum);
    }

    #[test]
    fn the_compression_wish_sits_where_earlier_builds_sent_zero_caps_bits() {
        let mut h = sample();
        assert_eq!(h.encode()[9..11], [0, 0]);
        h.caps = h.caps.union(Caps::COMPRESS);
        h.compress = Compress::Zstd(7);
        let b = h.encode();
        assert_eq!(b[8], 1 | 4);
        assert_eq!(b[9..11], [2, 7]);
        assert_eq!(Hello::decode(&b).unwrap(), h);
        let mut bad = b;
        bad[9] = 9;
        assert_eq!(Hello::decode(&bad), Err(WireError::BadCompress([9, 7])));
        // The larger compressed TCP frames' bit sits beside it.
        h.caps = h.caps.union(Caps::WIDE_COMPRESSED);
        assert_eq!(h.encode()[8], 1 | 4 | 8);
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        h.caps = h.caps.union(Caps::LARGE_COMPRESSED);
        assert_eq!(h.encode()[8], 1 | 4 | 8 | 16);
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn roundtrip() {
        let h = sample();
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn version_mismatch_is_named() {
        let mut b = sample().encode();
        b[4..6].copy_from_slice(&7u16.to_le_bytes());
        let e = Hello::decode(&b).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("peer speaks protocol 7, we speak {PROTOCOL_VERSION}")
        );
    }

    #[test]
    fn bad_magic() {
        let mut b = sample().encode();
        b[0] = b'X';
        assert!(matches!(Hello::decode(&b), Err(WireError::BadMagic(_))));
    }

    #[test]
    fn limits_enforced() {
        let mut h = sample();
        h.chunk_size = MAX_CHUNK_SIZE + 1;
        assert!(matches!(
            Hello::decode(&h.encode()),
            Err(WireError::BadChunkSize(_))
        ));
        h.chunk_size = 1 << 20;
        h.slots = 0;
        assert!(matches!(
            Hello::decode(&h.encode()),
            Err(WireError::BadSlots(0))
        ));
    }
}
