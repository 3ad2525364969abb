//! The file being received: where its data goes (a temporary file written
//! as it comes, or memory for a small file the pool creates), and its data.

use super::Unpacker;
use crate::beneath::name;
use crate::write::put;
use crate::xattr::Attr;
use rdpipe_wire::entry::{Meta, RelPath};
use rdpipe_wire::StreamHasher;
use rustix::fs::AtFlags;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// The file being received.
pub(super) struct Current {
    pub(super) rel: RelPath,
    /// Its directory (`None` when it could not be opened).
    pub(super) dir: Option<Arc<OwnedFd>>,
    pub(super) name: Vec<u8>,
    pub(super) tmp: Vec<u8>,
    /// `None`: its data is discarded (it could not be created or written),
    /// or held in `buffered`.
    pub(super) file: Option<File>,
    /// A small file's data, held until its end entry ([`super::pool`]).
    pub(super) buffered: Option<Vec<u8>>,
    /// `file` is the destination itself ([`super::Dest::Device`]): written
    /// in order, no holes, no metadata, no rename.
    pub(super) straight: bool,
    pub(super) meta: Meta,
    pub(super) size: u64,
    pub(super) pos: u64,
    /// The start of a block not yet complete (it begins at a multiple of
    /// 4 KiB in the file, so zero blocks are found however the data is cut).
    pub(super) pend: Vec<u8>,
    /// The file's length: the end of what is written to it (holes past it
    /// need the length set).
    pub(super) end: u64,
    pub(super) hash: StreamHasher,
    /// Extended attributes to set before it is published.
    pub(super) xattrs: Vec<Attr>,
}

impl Current {
    pub(super) fn remove_tmp(&self) {
        if let (Some(_), Some(dir)) = (&self.file, &self.dir) {
            let _ = rustix::fs::unlinkat(dir, name(&self.tmp), AtFlags::empty());
        }
    }
}

/// How a file's data is taken.
pub(super) enum Start {
    /// Written as it comes, by the decoding thread: its directory, the
    /// file, and the start of its incomplete last block.
    Opened(Arc<OwnedFd>, File, Vec<u8>),
    /// A small file held in memory for the pool: its directory.
    Held(Arc<OwnedFd>),
}

impl Unpacker {
    /// Makes the file being received current (or, when it could not be
    /// opened, a failure whose data is read and discarded).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_file(
        &mut self,
        rel: RelPath,
        name: Vec<u8>,
        tmp: Vec<u8>,
        meta: Meta,
        size: u64,
        pos: u64,
        opened: io::Result<Start>,
        xattrs: Vec<Attr>,
    ) {
        let (dir, file, pend, buffered) = match opened {
            Ok(Start::Opened(d, f, p)) => (Some(d), Some(f), p, None),
            Ok(Start::Held(d)) => (
                Some(d),
                None,
                Vec::new(),
                Some(Vec::with_capacity(size as usize)),
            ),
            Err(e) => {
                self.failed(&rel, e);
                (None, None, Vec::new(), None)
            }
        };
        self.current = Some(Current {
            rel,
            dir,
            name,
            tmp,
            file,
            buffered,
            straight: false,
            meta,
            size,
            pos,
            pend,
            end: pos,
            hash: StreamHasher::new(),
            xattrs,
        });
    }

    /// Writes `b` at the current file's position, leaving whole zero blocks as holes.
    pub(super) fn data(&mut self, b: &[u8]) {
        let Some(cur) = &mut self.current else { return };
        cur.hash.update(b);
        if let Some(v) = &mut cur.buffered {
            v.extend_from_slice(b);
            cur.pos += b.len() as u64;
            return;
        }
        if cur.straight {
            cur.pos += b.len() as u64;
            let Some(mut file) = cur.file.as_ref() else {
                return;
            };
            if let Err(e) = io::Write::write_all(&mut file, b) {
                cur.file = None;
                let rel = cur.rel.clone();
                self.failed(&rel, e);
            }
            return;
        }
        let Some(file) = &cur.file else {
            cur.pos += b.len() as u64;
            return;
        };
        let last = cur.pos + b.len() as u64 >= cur.size;
        let r = put(file, &mut cur.pend, b, cur.pos, last);
        cur.pos += b.len() as u64;
        if let Ok(end) = r {
            cur.end = cur.end.max(end);
        }
        if let Err(e) = r {
            let cur = self.current.as_mut().expect("current");
            cur.remove_tmp();
            cur.file = None;
            let rel = cur.rel.clone();
            self.failed(&rel, e);
        }
    }
}
