//! The compressed-chunk format (see the module above): the encoder that
//! writes it and the decoder that checks and reads it.

use super::tuning::INCOMPRESSIBLE;
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx, DParameter};

/// Bytes after the body: `raw_len: u32 LE, kind: u8`.
pub const TRAILER_LEN: usize = 5;
/// The body is the chunk as it is.
pub const KIND_STORED: u8 = 0;
/// The body is one zstd frame.
pub const KIND_ZSTD: u8 = 1;

/// Bytes in each slice [`Encoder::worth_trying`] compresses.
pub const SAMPLE: usize = 4096;
/// Slices [`Encoder::worth_trying`] compresses, at least.
pub const SAMPLES: usize = 4;
/// Bytes of a chunk per slice [`Encoder::worth_trying`] compresses (past
/// [`SAMPLES`] of them): the samples cost 1/16 of trying the whole chunk
/// whatever its size, and cover a 1 MiB chunk as densely as a 256 KiB one.
/// With four slices of each 1 MiB chunk of a tar of /usr/share `auto`
/// stored 29 chunks of 193 (7 by its decisions) where `zstd:3` stored 1;
/// with one per 64 KiB, 17.
pub const SAMPLED_PER: usize = 16 * SAMPLE;

/// Under `auto`, a chunk is sampled ([`Encoder::worth_trying`]) unless the
/// last chunk tried shrank below this share of its size: sampling saves
/// trying incompressible data, and costs chunks whose 4 KiB slices do not
/// shrink but whose whole does (long matches across the chunk: a tar that
/// holds one compressed file twice). In 1 MiB chunks of 192 MiB of a tar of
/// /usr/share at a 300 Mb/s link on two cores, sampling every chunk stored
/// 15 of 193 chunks and compressed 2.12-2.15 ×; with this rule 5 and
/// 2.17-2.19 × (`zstd:3` 2.21 ×), and the sender spent less CPU (no samples
/// of data that compresses). The first chunk is sampled, and random data's
/// every chunk.
pub const TRY_WHOLE_BELOW: f64 = 0.9;

/// zstd's frame magic number, little endian on the wire.
const ZSTD_MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();

/// Why a compressed chunk was refused. Every check runs before anything is
/// written to the output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressError {
    /// Shorter than the trailer.
    #[error("compressed chunk of {0} bytes is shorter than its trailer")]
    Short(usize),
    /// A kind byte other than stored or zstd.
    #[error("unknown compressed-chunk kind {0}")]
    UnknownKind(u8),
    /// A chunk that would be larger than the negotiated chunk size.
    #[error("chunk claims {raw_len} bytes uncompressed, above the chunk size {limit}")]
    TooLarge {
        /// What the trailer says.
        raw_len: u64,
        /// The largest chunk allowed.
        limit: usize,
    },
    /// A stored chunk whose trailer disagrees with its body.
    #[error("stored chunk of {body} bytes claims {raw_len}")]
    StoredLength {
        /// The body's length.
        body: usize,
        /// What the trailer says.
        raw_len: usize,
    },
    /// The body is not exactly one zstd frame (wrong magic, trailing bytes,
    /// several frames, a dictionary, a cut frame).
    #[error("compressed chunk is not exactly one zstd frame")]
    NotOneFrame,
    /// The frame's declared content size is missing or not the trailer's.
    #[error("zstd frame declares {declared:?} bytes, the chunk {raw_len}")]
    ContentSize {
        /// The frame header's content size, if any.
        declared: Option<u64>,
        /// The trailer's.
        raw_len: usize,
    },
    /// The frame carries no content checksum.
    #[error("zstd frame without a content checksum")]
    NoChecksum,
    /// The frame asks for a larger window than any chunk needs.
    #[error("zstd frame asks for a {window}-byte window, above the chunk size {limit}")]
    Window {
        /// The frame header's window size.
        window: u64,
        /// The largest chunk allowed.
        limit: usize,
    },
    /// zstd refused the frame (corrupt, or expanding past its declared size).
    #[error("zstd frame does not decompress: {0}")]
    Corrupt(&'static str),
    /// The frame decompressed to fewer bytes than it declared.
    #[error("zstd frame gave {got} bytes, declared {raw_len}")]
    ShortOutput {
        /// Bytes decompressed.
        got: usize,
        /// What the frame and trailer declared.
        raw_len: usize,
    },
}

/// How [`Encoder::compress`] left a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packed {
    /// It did not shrink: send it stored.
    Stored,
    /// The zstd frame is this many bytes.
    Zstd(usize),
}

/// Writes the trailer for a body of `body` bytes (of a chunk of `raw_len`
/// bytes) after it in `buf`; returns the chunk's length with the trailer.
/// `buf` must hold `body + TRAILER_LEN` bytes.
pub fn put_trailer(buf: &mut [u8], body: usize, raw_len: usize, kind: u8) -> usize {
    let t = &mut buf[body..body + TRAILER_LEN];
    t[..4].copy_from_slice(&(raw_len as u32).to_le_bytes());
    t[4] = kind;
    body + TRAILER_LEN
}

/// A zstd compression context, reused chunk after chunk.
pub struct Encoder {
    cctx: CCtx<'static>,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    /// A fresh context; its frames carry zstd's content checksum (xxh64 of
    /// the chunk), which [`Decoder`] requires.
    pub fn new() -> Encoder {
        let mut cctx = CCtx::create();
        // Setting a flag on a fresh context does not fail; were it to, the
        // decoder would refuse the frames, never take them for good.
        let _ = cctx.set_parameter(CParameter::ChecksumFlag(true));
        Encoder { cctx }
    }

    /// Compresses `raw` at `level` into `out` as one zstd frame that declares
    /// its content size. [`Packed::Stored`] when the frame would not be
    /// shorter than `raw` (or `out` cannot hold it, or zstd fails: the chunk
    /// then goes stored, which is always correct).
    pub fn compress(&mut self, raw: &[u8], level: i32, out: &mut [u8]) -> Packed {
        if raw.is_empty() {
            return Packed::Stored;
        }
        let room = out.len().min(raw.len() - 1);
        if self
            .cctx
            .set_parameter(CParameter::CompressionLevel(level))
            .is_err()
        {
            return Packed::Stored;
        }
        match self.cctx.compress2(&mut out[..room], raw) {
            Ok(n) if n < raw.len() => Packed::Zstd(n),
            _ => Packed::Stored,
        }
    }

    /// Whether `raw` is worth compressing: a slice of [`SAMPLE`] bytes per
    /// [`SAMPLED_PER`] (at least [`SAMPLES`]) spread over it, each compressed at level 1 into
    /// `scratch`, shrink together below [`INCOMPRESSIBLE`] of their size (as
    /// btrfs samples a range before it compresses). A chunk no larger than
    /// the samples is always worth trying. Trying a 256 KiB chunk of random
    /// bytes at level 1 costs as much as the rest of its way out (read, seal,
    /// send); the samples cost 1/16 of that.
    pub fn worth_trying(&mut self, raw: &[u8], scratch: &mut [u8]) -> bool {
        if raw.len() <= SAMPLES * SAMPLE * 2 || scratch.len() < SAMPLE {
            return true;
        }
        if self
            .cctx
            .set_parameter(CParameter::CompressionLevel(1))
            .is_err()
        {
            return true;
        }
        // A slice that does not fit in this room did not shrink enough.
        let room = (SAMPLE as f64 * INCOMPRESSIBLE) as usize;
        let samples = (raw.len() / SAMPLED_PER).max(SAMPLES);
        let stride = (raw.len() - SAMPLE) / (samples - 1);
        let mut packed = 0;
        for i in 0..samples {
            let slice = &raw[i * stride..i * stride + SAMPLE];
            packed += match self.cctx.compress2(&mut scratch[..room], slice) {
                Ok(n) => n,
                Err(_) => SAMPLE,
            };
        }
        (packed as f64) < INCOMPRESSIBLE * (samples * SAMPLE) as f64
    }
}

impl Encoder {
    /// The whole chunk for `raw` into `out` (which must hold `raw.len() +`
    /// [`TRAILER_LEN`] bytes): compressed at `level` if that shrinks it,
    /// else stored (`level` `None`: stored without trying). Returns the
    /// chunk's length and how it went.
    pub fn pack(&mut self, raw: &[u8], level: Option<i32>, out: &mut [u8]) -> (usize, Packed) {
        let p = match level {
            Some(l) => self.compress(raw, l, &mut out[..raw.len()]),
            None => Packed::Stored,
        };
        let len = match p {
            Packed::Zstd(n) => put_trailer(out, n, raw.len(), KIND_ZSTD),
            Packed::Stored => {
                out[..raw.len()].copy_from_slice(raw);
                put_trailer(out, raw.len(), raw.len(), KIND_STORED)
            }
        };
        (len, p)
    }
}

/// Checks and decompresses chunks of at most `limit` bytes.
pub struct Decoder {
    dctx: DCtx<'static>,
    limit: usize,
    /// The output, `limit` bytes, allocated on the first zstd chunk.
    out: Vec<u8>,
}

/// The base-2 log of the smallest power of two at or above `limit` (at least
/// zstd's minimum window, 2^10).
fn window_log(limit: usize) -> u32 {
    limit.next_power_of_two().trailing_zeros().max(10)
}

impl Decoder {
    /// A decoder for chunks of at most `limit` bytes uncompressed.
    pub fn new(limit: usize) -> Decoder {
        let mut dctx = DCtx::create();
        // Bulk decompression into a fixed buffer never grows a window buffer;
        // the limit refuses an oversized window all the same.
        let _ = dctx.set_parameter(DParameter::WindowLogMax(window_log(limit)));
        Decoder {
            dctx,
            limit,
            out: Vec::new(),
        }
    }

    /// The largest chunk this decoder accepts.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Checks `chunk` (body and trailer) and returns its uncompressed bytes:
    /// a stored body as it is, a zstd body decompressed into this decoder's
    /// buffer of `limit` bytes. Never panics, never gives more than `limit`
    /// bytes, and gives nothing from a chunk it refuses.
    pub fn decode<'a>(&'a mut self, chunk: &'a [u8]) -> Result<&'a [u8], CompressError> {
        let Some(body_len) = chunk.len().checked_sub(TRAILER_LEN) else {
            return Err(CompressError::Short(chunk.len()));
        };
        let (body, t) = chunk.split_at(body_len);
        let raw_len = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        let kind = t[4];
        if raw_len as usize > self.limit {
            return Err(CompressError::TooLarge {
                raw_len: raw_len.into(),
                limit: self.limit,
            });
        }
        let raw_len = raw_len as usize;
        match kind {
            KIND_STORED if body.len() == raw_len => Ok(body),
            KIND_STORED => Err(CompressError::StoredLength {
                body: body.len(),
                raw_len,
            }),
            KIND_ZSTD => {
                self.check_frame(body, raw_len)?;
                // Grown to what this chunk needs (checked against the limit
                // above): a decoder per chunk in flight stays as small as the
                // chunks it sees.
                if self.out.len() < raw_len {
                    self.out.resize(raw_len, 0);
                }
                let out = &mut self.out[..raw_len];
                let got = self
                    .dctx
                    .decompress(out, body)
                    .map_err(|code| CompressError::Corrupt(zstd_safe::get_error_name(code)))?;
                if got != raw_len {
                    return Err(CompressError::ShortOutput { got, raw_len });
                }
                Ok(&self.out[..raw_len])
            }
            other => Err(CompressError::UnknownKind(other)),
        }
    }

    /// The first `len` bytes of the last zstd chunk [`Decoder::decode`]
    /// decompressed (what it returned for it), for a caller that keeps the
    /// decoder but not the borrow.
    pub fn decompressed(&self, len: usize) -> &[u8] {
        &self.out[..len.min(self.out.len())]
    }

    /// The frame checks that come before any decompression.
    fn check_frame(&self, body: &[u8], raw_len: usize) -> Result<(), CompressError> {
        if raw_len == 0 || body.len() < 6 || body[..4] != ZSTD_MAGIC {
            return Err(CompressError::NotOneFrame);
        }
        match zstd_safe::find_frame_compressed_size(body) {
            Ok(n) if n == body.len() => {}
            _ => return Err(CompressError::NotOneFrame),
        }
        let declared =
            zstd_safe::get_frame_content_size(body).map_err(|_| CompressError::NotOneFrame)?;
        if declared != Some(raw_len as u64) {
            return Err(CompressError::ContentSize { declared, raw_len });
        }
        // The frame header descriptor: a content checksum (a changed byte
        // fails this chunk, whatever the stream's protection), no
        // dictionary; the window is the
        // content size for a single-segment frame, else the window byte's.
        let fhd = body[4];
        if fhd & 0x04 == 0 {
            return Err(CompressError::NoChecksum);
        }
        if fhd & 0x03 != 0 {
            return Err(CompressError::NotOneFrame);
        }
        if fhd & 0x20 == 0 {
            let wd = body[5];
            let base = 1u64 << (10 + u32::from(wd >> 3));
            let window = base + (base / 8) * u64::from(wd & 7);
            if window > 1u64 << window_log(self.limit) {
                return Err(CompressError::Window {
                    window,
                    limit: self.limit,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(raw: &[u8], level: i32) -> Vec<u8> {
        let mut out = vec![0u8; raw.len() + TRAILER_LEN];
        let (len, _) = Encoder::new().pack(raw, Some(level), &mut out);
        out.truncate(len);
        out
    }

    /// `n` bytes from a xorshift generator.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn samples_tell_noise_from_text_and_small_chunks_are_always_tried() {
        let mut e = Encoder::new();
        let mut scratch = vec![0u8; 1 << 16];
        assert!(!e.worth_trying(&noise(256 << 10, 7), &mut scratch));
        let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog 0123456789\n"
            .iter()
            .copied()
            .cycle()
            .take(256 << 10)
            .collect();
        assert!(e.worth_trying(&text, &mut scratch));
        // Noise with text in one of the sampled places still shrinks enough.
        let mut mixed = noise(256 << 10, 9);
        mixed[..SAMPLE].copy_from_slice(&text[..SAMPLE]);
        assert!(e.worth_trying(&mixed, &mut scratch));
        // Too small to sample: tried whole.
        assert!(e.worth_trying(&noise(SAMPLES * SAMPLE, 3), &mut scratch));
        // The context still compresses at the level asked for afterwards.
        let z = vec![0u8; 100_000];
        assert!(matches!(e.compress(&z, 19, &mut scratch), Packed::Zstd(_)));
    }

    #[test]
    fn a_larger_chunk_gets_more_samples() {
        let mut e = Encoder::new();
        let mut scratch = vec![0u8; 1 << 16];
        let mib = 1 << 20;
        assert!(!e.worth_trying(&noise(mib, 5), &mut scratch));
        // Text between the places four samples would take (0, 340, 680 and
        // 1020 KiB): one slice per 64 KiB finds it.
        let mut chunk = noise(mib, 6);
        let text = b"a line of text in a tar of documents\n";
        for (i, b) in chunk[16 << 10..336 << 10].iter_mut().enumerate() {
            *b = text[i % text.len()];
        }
        assert!(e.worth_trying(&chunk, &mut scratch));
    }

    #[test]
    fn zeros_compress_and_come_back() {
        let raw = vec![0u8; 256 << 10];
        let c = pack(&raw, 3);
        assert!(c.len() < 1000, "{}", c.len());
        assert_eq!(c[c.len() - 1], KIND_ZSTD);
        assert_eq!(Decoder::new(256 << 10).decode(&c).unwrap(), &raw[..]);
    }

    #[test]
    fn a_chunk_above_the_limit_is_refused_before_decompressing() {
        let raw = vec![0u8; 64 << 10];
        let c = pack(&raw, 3);
        let e = Decoder::new(32 << 10).decode(&c).unwrap_err();
        assert!(matches!(e, CompressError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn a_bomb_that_lies_about_its_size_is_refused() {
        // A 1 MiB frame whose trailer claims 4 KiB (within the limit).
        let raw = vec![0u8; 1 << 20];
        let mut c = pack(&raw, 3);
        let t = c.len() - TRAILER_LEN;
        c[t..t + 4].copy_from_slice(&4096u32.to_le_bytes());
        let e = Decoder::new(64 << 10).decode(&c).unwrap_err();
        assert!(matches!(e, CompressError::ContentSize { .. }), "{e}");
    }

    #[test]
    fn a_frame_without_a_content_size_is_refused() {
        let raw = vec![1u8; 8192];
        let mut cctx = CCtx::create();
        cctx.set_parameter(CParameter::ContentSizeFlag(false))
            .unwrap();
        cctx.set_parameter(CParameter::ChecksumFlag(true)).unwrap();
        let mut out = vec![0u8; 8192];
        let n = cctx.compress2(&mut out[..], &raw).unwrap();
        let len = put_trailer(&mut out, n, raw.len(), KIND_ZSTD);
        let e = Decoder::new(1 << 20).decode(&out[..len]).unwrap_err();
        assert!(
            matches!(e, CompressError::ContentSize { declared: None, .. }),
            "{e}"
        );
    }

    #[test]
    fn a_huge_window_is_refused() {
        // A real frame with a window byte (1 KiB window, not single-segment),
        // patched to announce a 1 GiB window.
        let raw: Vec<u8> = b"abcdefgh".repeat(8192);
        let mut cctx = CCtx::create();
        cctx.set_parameter(CParameter::WindowLog(10)).unwrap();
        cctx.set_parameter(CParameter::ChecksumFlag(true)).unwrap();
        let mut out = vec![0u8; raw.len()];
        let n = cctx.compress2(&mut out[..], &raw).unwrap();
        assert_eq!(out[4] & 0x20, 0, "not single-segment");
        let mut d = Decoder::new(1 << 20);
        let len = put_trailer(&mut out, n, raw.len(), KIND_ZSTD);
        assert_eq!(d.decode(&out[..len]).unwrap(), &raw[..]);
        out[5] = 20 << 3;
        let e = d.decode(&out[..len]).unwrap_err();
        assert!(
            matches!(e, CompressError::Window { window, .. } if window == 1 << 30),
            "{e}"
        );
    }

    #[test]
    fn stored_and_corrupt_and_short() {
        let raw = noise(5000, 0x9E37_79B9_7F4A_7C15);
        let c = pack(&raw, 3);
        assert_eq!(c[c.len() - 1], KIND_STORED);
        let mut d = Decoder::new(1 << 20);
        assert_eq!(d.decode(&c).unwrap(), &raw[..]);
        assert!(matches!(d.decode(&[1, 2]), Err(CompressError::Short(2))));
        let mut bad = c.clone();
        *bad.last_mut().unwrap() = 9;
        assert!(matches!(d.decode(&bad), Err(CompressError::UnknownKind(9))));
        let text = b"hello hello hello hello hello hello hello hello".repeat(100);
        let mut z = pack(&text, 3);
        assert_eq!(z[z.len() - 1], KIND_ZSTD);
        let mid = z.len() / 2;
        z[mid] ^= 0xff;
        assert!(d.decode(&z).is_err());
        // Every byte of a frame matters: its checksum covers the content.
        let good = pack(&text, 3);
        for i in 0..good.len() - TRAILER_LEN {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            assert!(d.decode(&bad).is_err(), "byte {i} flipped decoded");
        }
        let mut cctx = CCtx::create();
        let mut out = vec![0u8; text.len()];
        let n = cctx.compress2(&mut out[..], &text).unwrap();
        let len = put_trailer(&mut out, n, text.len(), KIND_ZSTD);
        assert_eq!(d.decode(&out[..len]), Err(CompressError::NoChecksum));
    }
}
