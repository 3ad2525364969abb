//! rdcp's entry stream: the files, directories and links of a copy, in one
//! byte stream that travels inside an ordinary rdma-pipe transfer (so it is
//! authenticated, encrypted and checksummed like any other stream).
//!
//! ```text
//! stream  = MAGIC(8) sources:u32 entry* end
//! entry   = tag:u8 body
//!   dir     (1) path meta
//!   file    (2) path meta size:u64  DATA(size)  xxh3:u64 flags:u8
//!   symlink (3) path meta target:bytes
//!   link    (4) path target:path          (a hard link to an earlier file)
//!   resume  (7) path meta size:u64 offset:u64 prefix:u64 tmp:bytes
//!               DATA(size - offset)  xxh3:u64 flags:u8
//!   xattr   (8) name:bytes value:value  (an extended attribute of the next
//!               dir, file or resume entry; `rdcp --xattrs`)
//!   special (9) path meta kind:u8 rdev:u64  (a FIFO, socket or device node;
//!               `rdcp --specials`)
//!   striped (11) path meta size:u64 tmp:bytes  (a file that travels in
//!               pieces over several streams, `rdcp --streams N`: the first
//!               stream announces it and publishes it; no data follows)
//!   piece   (12) path meta size:u64 index:u64 tmp:bytes
//!               DATA(piece_len(size, index))  xxh3:u64 flags:u8
//!               (bytes index*PIECE_SIZE.. of a striped file, on any stream)
//!   kept    (14) path  (`rdcp --delete`: a name the source has that is not
//!               sent, its copy at the destination being current, or the
//!               names of a dry run; the receiver removes only what no entry
//!               named)
//! end     = (0) entries:u64 failed:u64
//!
//! A destination's listing for `rdcp --resume` (sent the other way, before
//! the copy) uses the same framing:
//!   have    (5) path size:u64 mtime:i64 mtime_ns:u32   (a complete file)
//!   partial (6) path tmp:bytes size:u64 xxh3:u64        (a temporary file of
//!               an interrupted copy, and the hash of what it holds)
//!   pieces  (13) path tmp:bytes size:u64 mtime:i64 mtime_ns:u32 first:u64
//!               bits:value              (a striped copy's temporary file:
//!               bit j of `bits`, lowest first, says piece first+j is done)
//! path    = len:u16 bytes                 (relative, see [`RelPath`])
//! bytes   = len:u16 bytes                 (1..=4096, no NUL)
//! value   = len:u16 bytes                 (0..=4096, any bytes)
//! meta    = mode:u32 uid:u32 gid:u32 mtime:i64 mtime_ns:u32
//! ```
//!
//! Integers are big-endian. A file's data follows its header directly, so a
//! writer streams it without buffering, and its trailer carries the xxh3-64 of
//! the data and flags ([`FileEnd`]): the receiver publishes the file only when
//! the trailer matches what it wrote. `end` says how many entries the sender
//! emitted and how many files it could not read; a stream without it is
//! truncated.
//!
//! Every path is checked as it is decoded: relative, no empty, `.` or `..`
//! component, no NUL, at most [`MAX_PATH_LEN`] bytes; a hostile sender cannot
//! name anything outside the destination. (The receiver still opens each
//! component without following symbolic links: a link already in the
//! destination must not lead out either.)
//!
//! Why a format of our own and not tar: a tar reader must trust sizes and names
//! it cannot check until the whole header block is read, pax extensions add
//! a second parser, and a per-file checksum has no standard place; this format
//! is small enough to property-test whole. `rdcp` streams are read by `rdcp`.

use crate::WireError;

/// The first bytes of an entry stream.
pub const ENTRY_MAGIC: [u8; 8] = *b"RDCP\x00\x00\x00\x01";
/// Longest path or symlink target accepted (Linux's `PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;
/// Longest extended attribute name (Linux's `XATTR_NAME_MAX`).
pub const MAX_XATTR_NAME: usize = 255;
/// Longest extended attribute value a stream carries (larger ones, rare, are
/// skipped by the sender with a warning).
pub const MAX_XATTR_VALUE: usize = 4096;
/// Longest entry header (tag, two length-prefixed names, metadata, size).
pub const MAX_HEADER_LEN: usize = 1 + 2 * (2 + MAX_PATH_LEN) + META_LEN + 3 * 8;
const META_LEN: usize = 4 + 4 + 4 + 8 + 4;

/// The bytes of a striped file one [`Entry::Piece`] carries (the last piece
/// of a file may be shorter). A multiple of every block size a writer aligns
/// to (4 KiB holes, 1 MiB `O_DIRECT` stages).
pub const PIECE_SIZE: u64 = 16 << 20;

/// The largest file that travels striped (64 TiB: 4 Mi pieces, so that a
/// receiver's record of them stays small); a larger one goes whole.
pub const MAX_STRIPED: u64 = PIECE_SIZE << 22;

/// How many pieces a striped file of `size` bytes has.
pub fn piece_count(size: u64) -> u64 {
    size.div_ceil(PIECE_SIZE)
}

/// Where piece `index` of a striped file of `size` bytes starts, and its
/// length; `None` past the file's last piece.
pub fn piece_span(size: u64, index: u64) -> Option<(u64, u64)> {
    (index < piece_count(size)).then(|| {
        let start = index * PIECE_SIZE;
        (start, (size - start).min(PIECE_SIZE))
    })
}
pub(crate) const TRAILER_LEN: usize = 9;

/// A relative path inside the copy: `/`-separated components, none empty,
/// `.` or `..`, no NUL, 1..=[`MAX_PATH_LEN`] bytes. Bytes, not UTF-8: Unix
/// names are bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelPath(Vec<u8>);

impl RelPath {
    /// Checks `bytes` as a relative path.
    pub fn new(bytes: Vec<u8>) -> Result<RelPath, WireError> {
        let bad = |why: &'static str| Err(WireError::Entry(why));
        if bytes.is_empty() || bytes.len() > MAX_PATH_LEN {
            return bad("path length out of range");
        }
        if bytes.contains(&0) {
            return bad("NUL in a path");
        }
        if bytes[0] == b'/' {
            return bad("absolute path");
        }
        for c in bytes.split(|&b| b == b'/') {
            if c.is_empty() || c == b"." || c == b".." {
                return bad("empty, '.' or '..' path component");
            }
        }
        Ok(RelPath(bytes))
    }

    /// The path's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Its components, in order.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/')
    }
}

/// What a copy keeps of a file's inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Nanoseconds of the modification time (< 10^9).
    pub mtime_ns: u32,
}

/// One entry of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory (created before what is inside; its metadata applied at the end).
    Dir {
        /// Where.
        path: RelPath,
        /// Mode and times.
        meta: Meta,
    },
    /// A regular file; `size` bytes of data and a [`FileEnd`] follow.
    File {
        /// Where.
        path: RelPath,
        /// Mode and times.
        meta: Meta,
        /// Bytes of data that follow.
        size: u64,
    },
    /// A symbolic link, copied as a link (its target is not checked: it is
    /// never followed by the receiver).
    Symlink {
        /// Where.
        path: RelPath,
        /// Times (the mode of a link means nothing on Linux).
        meta: Meta,
        /// What it points to, as stored.
        target: Vec<u8>,
    },
    /// A hard link to a file sent earlier in the same stream.
    HardLink {
        /// Where.
        path: RelPath,
        /// The earlier file.
        target: RelPath,
    },
    /// A file continued from the partial copy `tmp` (a temporary file beside
    /// `path`) that holds its first `offset` bytes, whose xxh3-64 is `prefix`;
    /// `size - offset` bytes of data and a [`FileEnd`] over them follow.
    Resume {
        /// Where.
        path: RelPath,
        /// Mode and times.
        meta: Meta,
        /// The whole file's size.
        size: u64,
        /// Bytes the partial copy already holds (not sent).
        offset: u64,
        /// xxh3-64 of those bytes, as the sender read them.
        prefix: u64,
        /// The partial copy's name in the file's directory.
        tmp: Vec<u8>,
    },
    /// A file sent in pieces over several streams (`rdcp --streams`): the
    /// first stream's announcement, which the receiving side of that
    /// stream publishes once every piece arrived; no data follows (the
    /// pieces are [`Entry::Piece`]s, on this stream and the others).
    Striped {
        /// Where.
        path: RelPath,
        /// Mode and times.
        meta: Meta,
        /// The whole file's size.
        size: u64,
        /// The temporary file every stream writes its pieces into (a name
        /// in the file's directory).
        tmp: Vec<u8>,
    },
    /// Piece `index` of a striped file ([`piece_span`] bytes of data and a
    /// [`FileEnd`] over them follow).
    Piece {
        /// The file it belongs to.
        path: RelPath,
        /// The file's mode and times as this stream's sender saw them.
        meta: Meta,
        /// The whole file's size.
        size: u64,
        /// Which piece.
        index: u64,
        /// The temporary file it goes into.
        tmp: Vec<u8>,
    },
    /// In a listing: a complete file at the destination.
    Have {
        /// Where.
        path: RelPath,
        /// Its size.
        size: u64,
        /// Its mtime, seconds.
        mtime: i64,
        /// Its mtime's nanoseconds.
        mtime_ns: u32,
        /// The xxh3-64 of its content, in a listing made for
        /// `rdcp --checksum` (tag 10 instead of 5).
        hash: Option<u64>,
    },
    /// In a listing: a partial copy of `path` left by an interrupted copy.
    Partial {
        /// The file it is a copy of.
        path: RelPath,
        /// Its own name (in the same directory).
        tmp: Vec<u8>,
        /// Bytes it holds.
        size: u64,
        /// Their xxh3-64.
        hash: u64,
    },
    /// In a listing: the temporary file of a striped copy an interrupted
    /// `rdcp --streams` left, and which of its pieces it holds verified
    /// (one entry per 32768 pieces).
    Pieces {
        /// The file it is a copy of.
        path: RelPath,
        /// Its own name (in the same directory).
        tmp: Vec<u8>,
        /// The whole file's size, as its ledger names it.
        size: u64,
        /// The file's mtime, seconds, as its ledger names it.
        mtime: i64,
        /// The mtime's nanoseconds.
        mtime_ns: u32,
        /// The first piece `bits` speaks of (a multiple of 8).
        first: u64,
        /// Bit j (lowest first in each byte) is piece `first + j`: done.
        bits: Vec<u8>,
    },
    /// An extended attribute (`user.*`, or an ACL's `system.posix_acl_*`)
    /// of the next directory, file or resumed file in the stream.
    Xattr {
        /// Its name, with its namespace (`user.origin`).
        name: Vec<u8>,
        /// Its value (at most [`MAX_XATTR_VALUE`] bytes).
        value: Vec<u8>,
    },
    /// A FIFO, socket or device node (`rdcp --specials`).
    Special {
        /// Where.
        path: RelPath,
        /// Mode, owner and times.
        meta: Meta,
        /// Which kind of node.
        kind: SpecialKind,
        /// The device number of a device node (`st_rdev`); 0 otherwise.
        rdev: u64,
    },
    /// A name the source has that the stream does not carry: its copy at
    /// the destination is current (or, in a dry run of `rdcp --delete`, no
    /// entry carries data), so a mirror keeps it, and an earlier run's
    /// temporary of it there goes (`rdcp --resume`).
    Kept {
        /// Where.
        path: RelPath,
    },
    /// The end of the stream.
    End {
        /// Entries sent before this one.
        entries: u64,
        /// Files the sender could not read (reported on its side).
        failed: u64,
    },
}

/// The kinds of [`Entry::Special`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialKind {
    /// A named pipe.
    Fifo,
    /// A Unix socket's name (the socket itself is not copied: nothing listens).
    Socket,
    /// A character device.
    Char,
    /// A block device.
    Block,
}

impl SpecialKind {
    /// Its byte in the stream.
    pub fn code(self) -> u8 {
        match self {
            SpecialKind::Fifo => 1,
            SpecialKind::Socket => 2,
            SpecialKind::Char => 3,
            SpecialKind::Block => 4,
        }
    }

    /// The kind a byte of the stream names.
    pub fn from_code(b: u8) -> Option<SpecialKind> {
        Some(match b {
            1 => SpecialKind::Fifo,
            2 => SpecialKind::Socket,
            3 => SpecialKind::Char,
            4 => SpecialKind::Block,
            _ => return None,
        })
    }

    /// Whether it is a device node (creating one needs `CAP_MKNOD`).
    pub fn is_device(self) -> bool {
        matches!(self, SpecialKind::Char | SpecialKind::Block)
    }

    /// How messages name it.
    pub fn name(self) -> &'static str {
        match self {
            SpecialKind::Fifo => "FIFO",
            SpecialKind::Socket => "socket",
            SpecialKind::Char => "character device",
            SpecialKind::Block => "block device",
        }
    }
}

/// A file's trailer, after its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileEnd {
    /// xxh3-64 of the data as sent.
    pub checksum: u64,
    /// The file changed while it was read (size or mtime differ before and
    /// after): what was sent is not one state of it.
    pub changed: bool,
    /// Reading failed part way; the data is padding and must be discarded
    /// (the sender reported it and counts it in `failed`).
    pub unreadable: bool,
}

impl FileEnd {
    /// Appends the trailer's bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.checksum.to_be_bytes());
        out.push(u8::from(self.changed) | u8::from(self.unreadable) << 1);
    }

    pub(crate) fn decode(b: &[u8; TRAILER_LEN]) -> Result<FileEnd, WireError> {
        let flags = b[8];
        if flags & !3 != 0 {
            return Err(WireError::Entry("unknown file trailer flags"));
        }
        Ok(FileEnd {
            checksum: u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            changed: flags & 1 != 0,
            unreadable: flags & 2 != 0,
        })
    }
}

/// Appends the stream's start (magic and the number of source operands).
pub fn encode_start(sources: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&ENTRY_MAGIC);
    out.extend_from_slice(&sources.to_be_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    debug_assert!(b.len() <= MAX_PATH_LEN);
    out.extend_from_slice(&(b.len() as u16).to_be_bytes());
    out.extend_from_slice(b);
}

fn put_meta(out: &mut Vec<u8>, m: &Meta) {
    out.extend_from_slice(&m.mode.to_be_bytes());
    out.extend_from_slice(&m.uid.to_be_bytes());
    out.extend_from_slice(&m.gid.to_be_bytes());
    out.extend_from_slice(&m.mtime.to_be_bytes());
    out.extend_from_slice(&m.mtime_ns.to_be_bytes());
}

impl Entry {
    /// Appends the entry's header bytes (a file's data and trailer are the
    /// caller's to append).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Entry::Dir { path, meta } => {
                out.push(1);
                put_bytes(out, path.as_bytes());
                put_meta(out, meta);
            }
            Entry::File { path, meta, size } => {
                out.push(2);
                put_bytes(out, path.as_bytes());
                put_meta(out, meta);
                out.extend_from_slice(&size.to_be_bytes());
            }
            Entry::Symlink { path, meta, target } => {
                out.push(3);
                put_bytes(out, path.as_bytes());
                put_meta(out, meta);
                put_bytes(out, target);
            }
            Entry::HardLink { path, target } => {
                out.push(4);
                put_bytes(out, path.as_bytes());
                put_bytes(out, target.as_bytes());
            }
            Entry::Resume {
                path,
                meta,
                size,
                offset,
                prefix,
                tmp,
            } => {
                out.push(7);
                put_bytes(out, path.as_bytes());
                put_meta(out, meta);
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&prefix.to_be_bytes());
                put_bytes(out, tmp);
            }
            Entry::Striped {
                path,
                meta,
                size,
                tmp,
            } => {
                out.push(11);
                put_bytes(out, path.as_bytes());
                put_meta(out, meta);
                out.extend_from_slice(&size.to_be_bytes());
                put_bytes(out, tmp);
            }
            Entry::Piece {
                path,
                meta,
                size,
                index,
                tmp,
            } => {
                out.push(12);
                put_bytes(out, path.as_bytes());
                put_meta(out, meta);
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&index.to_be_bytes());
                put_bytes(out, tmp);
            }
            Entry::Have {
                path,
                size,
                mtime,
                mtime_ns,
                hash,
            } => {
                out.push(if hash.is_some() { 10 } else { 5 });
                put_bytes(out, path.as_bytes());
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&mtime.to_be_bytes());
                out.extend_from_slice(&mtime_ns.to_be_bytes());
                if let Some(h) = hash {
                    out.extend_from_slice(&h.to_be_bytes());
                }
            }
            Entry::Partial {
                path,
                tmp,
                size,
                hash,
            } => {
                out.push(6);
                put_bytes(out, path.as_bytes());
                put_bytes(out, tmp);
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&hash.to_be_bytes());
            }
            Entry::Pieces {
                path,
                tmp,
                size,
                mtime,
                mtime_ns,
                first,
                bits,
            } => {
                out.push(13);
                put_bytes(out, path.as_bytes());
                put_bytes(out, tmp);
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&mtime.to_be_bytes());
                out.extend_from_slice(&mtime_ns.to_be_bytes());
                out.extend_from_slice(&first.to_be_bytes());
                debug_assert!(bits.len() <= MAX_XATTR_VALUE);
                out.extend_from_slice(&(bits.len() as u16).to_be_bytes());
                out.extend_from_slice(bits);
            }
            Entry::Xattr { name, value } => {
                out.push(8);
                put_bytes(out, name);
                debug_assert!(value.len() <= MAX_XATTR_VALUE);
                out.extend_from_slice(&(value.len() as u16).to_be_bytes());
                out.extend_from_slice(value);
            }
            Entry::Special {
                path,
                meta,
                kind,
                rdev,
            } => {
                out.push(9);
                put_bytes(out, path.as_bytes());
                put_meta(out, meta);
                out.push(kind.code());
                out.extend_from_slice(&rdev.to_be_bytes());
            }
            Entry::Kept { path } => {
                out.push(14);
                put_bytes(out, path.as_bytes());
            }
            Entry::End { entries, failed } => {
                out.push(0);
                out.extend_from_slice(&entries.to_be_bytes());
                out.extend_from_slice(&failed.to_be_bytes());
            }
        }
    }
}

mod decode;
pub use decode::{Decoder, Event};

#[cfg(test)]
mod tests;
