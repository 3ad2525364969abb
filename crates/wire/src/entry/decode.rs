//! Decoding an entry stream ([`super`]): headers checked as they are
//! parsed, data passed through, in pieces of any size.

use super::{
    piece_span, Entry, FileEnd, Meta, RelPath, SpecialKind, ENTRY_MAGIC, MAX_HEADER_LEN,
    MAX_PATH_LEN, MAX_XATTR_NAME, MAX_XATTR_VALUE, TRAILER_LEN,
};
use crate::WireError;

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
        t @ (5 | 10) => {
            let path = need!(c.path()?);
            let (size, mtime, mtime_ns) = (need!(c.u64()), need!(c.u64()), need!(c.u32()));
            if mtime_ns >= 1_000_000_000 {
                return Err(WireError::Entry("mode or mtime out of range"));
            }
            let hash = if t == 10 { Some(need!(c.u64())) } else { None };
            Entry::Have {
                path,
                size,
                mtime: mtime as i64,
                mtime_ns,
                hash,
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
        8 => {
            let name = need!(c.bytes()?);
            if name.len() > MAX_XATTR_NAME || name.contains(&0) || !name.contains(&b'.') {
                return Err(WireError::Entry("not an extended attribute name"));
            }
            let n = need!(c.u16()) as usize;
            if n > MAX_XATTR_VALUE {
                return Err(WireError::Entry("extended attribute value too long"));
            }
            Entry::Xattr {
                name: name.to_vec(),
                value: need!(c.take(n)).to_vec(),
            }
        }
        9 => {
            let path = need!(c.path()?);
            let meta = need!(c.meta()?);
            let kind = need!(c.take(1))[0];
            let rdev = need!(c.u64());
            let kind = SpecialKind::from_code(kind)
                .ok_or(WireError::Entry("unknown kind of special file"))?;
            if !kind.is_device() && rdev != 0 {
                return Err(WireError::Entry("a device number on a FIFO or socket"));
            }
            Entry::Special {
                path,
                meta,
                kind,
                rdev,
            }
        }
        11 => {
            let path = need!(c.path()?);
            let meta = need!(c.meta()?);
            let size = need!(c.u64());
            let tmp = need!(c.name()?);
            if size > super::MAX_STRIPED {
                return Err(WireError::Entry("a striped file larger than rdcp stripes"));
            }
            Entry::Striped {
                path,
                meta,
                size,
                tmp,
            }
        }
        12 => {
            let path = need!(c.path()?);
            let meta = need!(c.meta()?);
            let (size, index) = (need!(c.u64()), need!(c.u64()));
            let tmp = need!(c.name()?);
            if piece_span(size, index).is_none() || size > super::MAX_STRIPED {
                return Err(WireError::Entry("a piece past the file's end"));
            }
            Entry::Piece {
                path,
                meta,
                size,
                index,
                tmp,
            }
        }
        13 => {
            let path = need!(c.path()?);
            let tmp = need!(c.name()?);
            let (size, mtime, mtime_ns) = (need!(c.u64()), need!(c.u64()), need!(c.u32()));
            let first = need!(c.u64());
            let n = need!(c.u16()) as usize;
            if mtime_ns >= 1_000_000_000 {
                return Err(WireError::Entry("mode or mtime out of range"));
            }
            if n > MAX_XATTR_VALUE
                || first % 8 != 0
                || first >= super::piece_count(size)
                || size > super::MAX_STRIPED
            {
                return Err(WireError::Entry("a striped copy's pieces out of range"));
            }
            Entry::Pieces {
                path,
                tmp,
                size,
                mtime: mtime as i64,
                mtime_ns,
                first,
                bits: need!(c.take(n)).to_vec(),
            }
        }
        14 => Entry::Kept {
            path: need!(c.path()?),
        },
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
                        Entry::Piece { size, index, .. } => {
                            State::Data(piece_span(*size, *index).expect("checked").1)
                        }
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
