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
//! end     = (0) entries:u64 failed:u64
//!
//! A destination's listing for `rdcp --resume` (sent the other way, before
//! the copy) uses the same framing:
//!   have    (5) path size:u64 mtime:i64 mtime_ns:u32   (a complete file)
//!   partial (6) path tmp:bytes size:u64 xxh3:u64        (a temporary file of
//!               an interrupted copy, and the hash of what it holds)
//! path    = len:u16 bytes                 (relative, see [`RelPath`])
//! bytes   = len:u16 bytes                 (1..=4096, no NUL)
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
/// Longest entry header (tag, two length-prefixed names, metadata, size).
pub const MAX_HEADER_LEN: usize = 1 + 2 * (2 + MAX_PATH_LEN) + META_LEN + 3 * 8;
const META_LEN: usize = 4 + 4 + 4 + 8 + 4;
const TRAILER_LEN: usize = 9;

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
    /// The end of the stream.
    End {
        /// Entries sent before this one.
        entries: u64,
        /// Files the sender could not read (reported on its side).
        failed: u64,
    },
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

    fn decode(b: &[u8; TRAILER_LEN]) -> Result<FileEnd, WireError> {
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
            Entry::Have {
                path,
                size,
                mtime,
                mtime_ns,
            } => {
                out.push(5);
                put_bytes(out, path.as_bytes());
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&mtime.to_be_bytes());
                out.extend_from_slice(&mtime_ns.to_be_bytes());
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
            Entry::End { entries, failed } => {
                out.push(0);
                out.extend_from_slice(&entries.to_be_bytes());
                out.extend_from_slice(&failed.to_be_bytes());
            }
        }
    }
}

/// A cursor over a header being parsed; `None` from a getter: more bytes needed.
struct Cur<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at + n)?;
        self.at += n;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|s| u32::from_be_bytes(s.try_into().expect("4")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|s| u64::from_be_bytes(s.try_into().expect("8")))
    }
    /// A length-prefixed name; the length is checked before waiting for the bytes.
    fn bytes(&mut self) -> Result<Option<&'a [u8]>, WireError> {
        let Some(n) = self.u16() else { return Ok(None) };
        if n == 0 || n as usize > MAX_PATH_LEN {
            return Err(WireError::Entry("name length out of range"));
        }
        Ok(self.take(n as usize))
    }
    /// One path component (a temporary file's name): no `/`, not `.` or `..`.
    fn name(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        match self.bytes()? {
            None => Ok(None),
            Some(b) if b.contains(&b'/') || b.contains(&0) || b == b"." || b == b".." => {
                Err(WireError::Entry("a name that is not one path component"))
            }
            Some(b) => Ok(Some(b.to_vec())),
        }
    }
    fn path(&mut self) -> Result<Option<RelPath>, WireError> {
        match self.bytes()? {
            None => Ok(None),
            Some(b) => RelPath::new(b.to_vec()).map(Some),
        }
    }
    fn meta(&mut self) -> Result<Option<Meta>, WireError> {
        let (Some(mode), Some(uid), Some(gid), Some(mtime), Some(mtime_ns)) =
            (self.u32(), self.u32(), self.u32(), self.u64(), self.u32())
        else {
            return Ok(None);
        };
        if mode & !0o7777 != 0 || mtime_ns >= 1_000_000_000 {
            return Err(WireError::Entry("mode or mtime out of range"));
        }
        Ok(Some(Meta {
            mode,
            uid,
            gid,
            mtime: mtime as i64,
            mtime_ns,
        }))
    }
}

/// Parses one entry header from the start of `b`: `Ok(None)` when `b` is a
/// prefix of one, else the entry and its length.
fn parse_entry(b: &[u8]) -> Result<Option<(Entry, usize)>, WireError> {
    let mut c = Cur { b, at: 0 };
    let Some(tag) = c.take(1) else {
        return Ok(None);
    };
    macro_rules! need {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    let e = match tag[0] {
        0 => Entry::End {
            entries: need!(c.u64()),
            failed: need!(c.u64()),
        },
        1 => Entry::Dir {
            path: need!(c.path()?),
            meta: need!(c.meta()?),
        },
        2 => Entry::File {
            path: need!(c.path()?),
            meta: need!(c.meta()?),
            size: need!(c.u64()),
        },
        3 => {
            let path = need!(c.path()?);
            let meta = need!(c.meta()?);
            let target = need!(c.bytes()?);
            if target.contains(&0) {
                return Err(WireError::Entry("NUL in a symlink target"));
            }
            Entry::Symlink {
                path,
                meta,
                target: target.to_vec(),
            }
        }
        4 => Entry::HardLink {
            path: need!(c.path()?),
            target: need!(c.path()?),
        },
        5 => {
            let path = need!(c.path()?);
            let (size, mtime, mtime_ns) = (need!(c.u64()), need!(c.u64()), need!(c.u32()));
            if mtime_ns >= 1_000_000_000 {
                return Err(WireError::Entry("mode or mtime out of range"));
            }
            Entry::Have {
                path,
                size,
                mtime: mtime as i64,
                mtime_ns,
            }
        }
        6 => Entry::Partial {
            path: need!(c.path()?),
            tmp: need!(c.name()?),
            size: need!(c.u64()),
            hash: need!(c.u64()),
        },
        7 => {
            let path = need!(c.path()?);
            let meta = need!(c.meta()?);
            let (size, offset, prefix) = (need!(c.u64()), need!(c.u64()), need!(c.u64()));
            let tmp = need!(c.name()?);
            if offset > size {
                return Err(WireError::Entry("resume offset past the file's size"));
            }
            Entry::Resume {
                path,
                meta,
                size,
                offset,
                prefix,
                tmp,
            }
        }
        _ => return Err(WireError::Entry("unknown entry tag")),
    };
    Ok(Some((e, c.at)))
}

/// What the decoder found, in stream order.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// The stream's start: how many source operands the sender was given.
    Start {
        /// Source operands.
        sources: u32,
    },
    /// An entry header (for [`Entry::File`], its data and trailer follow).
    Entry(Entry),
    /// A piece of the current file's data.
    Data(&'a [u8]),
    /// The current file's trailer.
    FileEnd(FileEnd),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Header,
    Data(u64),
    Trailer,
    Done,
}

/// An incremental decoder: feed it the stream in pieces of any size.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    /// A header or trailer split across pieces (bounded by [`MAX_HEADER_LEN`]).
    pending: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Decoder {
        Decoder {
            state: State::Start,
            pending: Vec::new(),
        }
    }

    /// Whether the end entry was decoded (a stream that stops before is truncated).
    pub fn finished(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes `input`, calling `sink` with each event in order. A malformed
    /// stream is an error (of the `E` that `sink` uses too); so are bytes after
    /// the end entry.
    pub fn feed<E: From<WireError>>(
        &mut self,
        mut input: &[u8],
        mut sink: impl FnMut(Event<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        while !input.is_empty() {
            match self.state {
                State::Data(left) => {
                    let n = (left.min(input.len() as u64)) as usize;
                    sink(Event::Data(&input[..n]))?;
                    input = &input[n..];
                    self.state = if left == n as u64 {
                        State::Trailer
                    } else {
                        State::Data(left - n as u64)
                    };
                }
                State::Done => return Err(WireError::Entry("bytes after the end entry").into()),
                State::Start | State::Header | State::Trailer => {
                    // Parse from the pending bytes plus as much input as needed.
                    let had = self.pending.len();
                    let take = input
                        .len()
                        .min(MAX_HEADER_LEN + 1 - had.min(MAX_HEADER_LEN));
                    let buf: std::borrow::Cow<[u8]> = if had == 0 {
                        std::borrow::Cow::Borrowed(&input[..take])
                    } else {
                        let mut v = std::mem::take(&mut self.pending);
                        v.extend_from_slice(&input[..take]);
                        std::borrow::Cow::Owned(v)
                    };
                    match self.parse(&buf, &mut sink)? {
                        Some(used) => {
                            // `used` counts pending bytes first.
                            input = &input[used - had..];
                        }
                        None => {
                            if buf.len() > MAX_HEADER_LEN {
                                return Err(WireError::Entry("entry header too long").into());
                            }
                            self.pending = buf.into_owned();
                            input = &input[take..];
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Parses the structure the state expects at the start of `b`.
    fn parse<E: From<WireError>>(
        &mut self,
        b: &[u8],
        sink: &mut impl FnMut(Event<'_>) -> Result<(), E>,
    ) -> Result<Option<usize>, E> {
        match self.state {
            State::Start => {
                if b.len() < 12 {
                    if !ENTRY_MAGIC.starts_with(&b[..b.len().min(8)]) {
                        return Err(WireError::Entry("not an rdcp stream").into());
                    }
                    return Ok(None);
                }
                if b[..8] != ENTRY_MAGIC {
                    return Err(WireError::Entry("not an rdcp stream").into());
                }
                let sources = u32::from_be_bytes(b[8..12].try_into().expect("4"));
                self.state = State::Header;
                sink(Event::Start { sources })?;
                Ok(Some(12))
            }
            State::Trailer => {
                let Some(t) = b.get(..TRAILER_LEN) else {
                    return Ok(None);
                };
                let end = FileEnd::decode(t.try_into().expect("9"))?;
                self.state = State::Header;
                sink(Event::FileEnd(end))?;
                Ok(Some(TRAILER_LEN))
            }
            State::Header => match parse_entry(b)? {
                None => Ok(None),
                Some((e, n)) => {
                    self.state = match &e {
                        Entry::File { size: 0, .. } => State::Trailer,
                        Entry::File { size, .. } => State::Data(*size),
                        Entry::Resume { size, offset, .. } if size == offset => State::Trailer,
                        Entry::Resume { size, offset, .. } => State::Data(size - offset),
                        Entry::End { .. } => State::Done,
                        _ => State::Header,
                    };
                    sink(Event::Entry(e))?;
                    Ok(Some(n))
                }
            },
            State::Data(_) | State::Done => unreachable!("handled by feed"),
        }
    }
}

#[cfg(test)]
mod tests;
