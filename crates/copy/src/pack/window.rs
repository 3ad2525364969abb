//! The packer's replay window: what a reconnecting hop resends after its
//! connection was lost, kept without copying the stream.
//!
//! A transfer whose input is a pipe or socket copies every byte it reads
//! into a window of its own ([`rdpipe_transport::replay`]). The packer's
//! input ([`super::handoff::Pulled`]) knows where each byte came from, so it
//! keeps that instead: the batches of small pieces it already allocated
//! (held a little longer, not copied) and, for each file handed over, which
//! file and at what offset, read again (`pread`) only for a resend. On the
//! steady path that is a few words per batch or file instead of a copy of
//! every byte.
//!
//! A handed-over file that changed after it was read cannot give its old
//! bytes back: its size, mtime and ctime are taken when it is handed over
//! and checked before and after a resend reads it, and a changed file fails
//! the resend with that reason (the run then fails; `rdcp --resume`
//! continues it). Were a change to slip past that (a write within one tick
//! of the file system's clock), the receiver's per-file and whole-stream
//! checks still refuse the file: never a wrong copy published.
//!
//! Each file in the window keeps a descriptor open; past [`MAX_FILES`] of
//! them (a large `--replay-window` over many big files) the window copies
//! what it reads instead, so it never holds more than that many open.

use rdpipe_transport::replay::{OutOfWindow, OwnWindow, Resend};
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// The most handed-over files the window keeps open at once.
pub const MAX_FILES: usize = 64;

/// Size, mtime and ctime (seconds, nanoseconds).
type Stamp = (u64, i64, i64, i64, i64);

/// A handed-over file, with what it looked like when handed over.
pub struct Handed {
    file: File,
    stamp: Option<Stamp>,
}

impl Handed {
    /// `file`, with its size and times now.
    pub fn new(file: File) -> Handed {
        let stamp = stamp_of(&file);
        Handed { file, stamp }
    }

    /// `file`, never to be read again (no window): nothing taken.
    pub fn unstamped(file: File) -> Handed {
        Handed { file, stamp: None }
    }

    /// The file, to read.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Its bytes `at..at + len`, when it has not changed since handed over.
    fn read_again(&self, at: u64, out: &mut [u8]) -> io::Result<()> {
        let same = || self.stamp.is_some() && stamp_of(&self.file) == self.stamp;
        let changed = || {
            io::Error::other(
                "a file sent in the lost stretch changed after it was read (its size or \
                 times moved), so its bytes cannot be read again; rerun with --resume",
            )
        };
        if !same() {
            return Err(changed());
        }
        self.file.read_exact_at(out, at)?;
        if !same() {
            return Err(changed());
        }
        Ok(())
    }
}

fn stamp_of(f: &File) -> Option<Stamp> {
    let st = rustix::fs::fstat(f).ok()?;
    Some((
        st.st_size as u64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
    ))
}

/// Where a stretch of the stream came from.
enum Source {
    /// A batch of small pieces, from its byte `at`.
    Batch { bytes: Arc<Vec<u8>>, at: usize },
    /// A handed-over file, from its offset `at`.
    File { file: Arc<Handed>, at: u64 },
    /// Zeros: a handed-over file that ended early or failed while read
    /// keeps its announced length with them.
    Zeros,
}

struct Extent {
    /// Stream offset of its first byte.
    start: u64,
    len: u64,
    source: Source,
}

/// The last `capacity` bytes of the stream the packer's input gave, by where
/// they came from.
pub struct Extents {
    cap: u64,
    list: VecDeque<Extent>,
    /// Bytes given so far: the stream offset just past the last one.
    end: u64,
    /// Bytes the list covers (its first extent starts at `end - held`).
    held: u64,
    /// File extents in the list (each holds a descriptor).
    files: usize,
}

impl Extents {
    /// A window keeping the last `capacity` bytes (more than 0).
    pub fn new(capacity: usize) -> Extents {
        Extents {
            cap: capacity as u64,
            list: VecDeque::new(),
            end: 0,
            held: 0,
            files: 0,
        }
    }

    /// `n` bytes given from `bytes[at..]`.
    pub fn batch(&mut self, bytes: &Arc<Vec<u8>>, at: usize, n: usize) {
        let more = matches!(self.list.back(), Some(Extent { source: Source::Batch { bytes: b, at: a }, len, .. })
            if Arc::ptr_eq(b, bytes) && *a as u64 + len == at as u64);
        self.add(n as u64, more, || Source::Batch {
            bytes: bytes.clone(),
            at,
        });
    }

    /// `bytes` given from `file` at its offset `at`.
    pub fn file(&mut self, file: &Arc<Handed>, at: u64, bytes: &[u8]) {
        let more = matches!(self.list.back(), Some(Extent { source: Source::File { file: f, at: a }, len, .. })
            if Arc::ptr_eq(f, file) && a + len == at);
        if !more && self.files >= MAX_FILES {
            let copy = Arc::new(bytes.to_vec());
            self.add(bytes.len() as u64, false, || Source::Batch {
                bytes: copy,
                at: 0,
            });
            return;
        }
        self.add(bytes.len() as u64, more, || Source::File {
            file: file.clone(),
            at,
        });
    }

    /// `n` zeros given.
    pub fn zeros(&mut self, n: usize) {
        let more = matches!(
            self.list.back(),
            Some(Extent {
                source: Source::Zeros,
                ..
            })
        );
        self.add(n as u64, more, || Source::Zeros);
    }

    /// Appends `n` bytes: to the last extent when `more`, else as a new one;
    /// then lets go of the oldest extents the window no longer needs.
    fn add(&mut self, n: u64, more: bool, source: impl FnOnce() -> Source) {
        if n == 0 {
            return;
        }
        match self.list.back_mut() {
            Some(last) if more => last.len += n,
            _ => {
                let source = source();
                self.files += matches!(source, Source::File { .. }) as usize;
                self.list.push_back(Extent {
                    start: self.end,
                    len: n,
                    source,
                })
            }
        }
        self.end += n;
        self.held += n;
        while let Some(first) = self.list.front() {
            if self.held - first.len < self.cap {
                break;
            }
            self.held -= first.len;
            self.files -= matches!(first.source, Source::File { .. }) as usize;
            self.list.pop_front();
        }
    }
}

impl OwnWindow for Extents {
    fn range(&self) -> std::ops::Range<u64> {
        // The extents may reach further back (a big file's is kept whole
        // while any of it is in the window), but what is offered stays
        // within the capacity: a resend is built in memory.
        self.end - self.held.min(self.cap)..self.end
    }

    fn since(&mut self, offset: u64) -> Result<Vec<u8>, Resend> {
        let r = self.range();
        if !r.contains(&offset) && offset != r.end {
            return Err(Resend::OutOfWindow(OutOfWindow {
                offset,
                start: r.start,
                end: r.end,
            }));
        }
        let mut out = vec![0u8; (self.end - offset) as usize];
        for e in &self.list {
            let (from, to) = (e.start.max(offset), e.start + e.len);
            if to <= offset {
                continue;
            }
            let skip = from - e.start;
            let dst = &mut out[(from - offset) as usize..(to - offset) as usize];
            match &e.source {
                Source::Batch { bytes, at } => {
                    let a = at + skip as usize;
                    dst.copy_from_slice(&bytes[a..a + dst.len()]);
                }
                Source::File { file, at } => {
                    file.read_again(at + skip, dst).map_err(Resend::Window)?
                }
                Source::Zeros => {}
            }
        }
        Ok(out)
    }
}
