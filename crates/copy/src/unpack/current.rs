//! The file being received: where its data goes ([`Sink`]: its temporary
//! file written as the data comes, memory for a small file the pool
//! creates, the destination device itself, or nowhere after a failure), and,
//! when it is a piece of a striped file (`--streams`), which piece
//! ([`PieceOf`]; `striped.rs` receives and publishes those files).

use super::{Owner, Unpacker};
use crate::beneath::name;
use crate::direct::{self, Stage, BLOCK, DIRECT_MIN, STAGE};
use crate::stripe::Ledger;
use crate::write::{put, write_sparse};
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
    /// The owner and group its file has, where this run created it and
    /// knows them ([`Unpacker::new_owner`]).
    pub(super) owner: Option<Owner>,
    pub(super) name: Vec<u8>,
    pub(super) tmp: Vec<u8>,
    pub(super) sink: Sink,
    pub(super) meta: Meta,
    pub(super) size: u64,
    pub(super) pos: u64,
    pub(super) hash: StreamHasher,
    /// Extended attributes to set before it is published.
    pub(super) xattrs: Vec<Attr>,
    /// A piece of a striped file (`--streams`): its data goes into the
    /// file's shared temporary file, which is never removed for it.
    pub(super) piece: Option<PieceOf>,
}

/// A piece being received: which one, and the ledger it is marked in.
pub(super) struct PieceOf {
    pub(super) index: u64,
    pub(super) ledger: Option<Ledger>,
}

/// Where the current file's data goes.
pub(super) enum Sink {
    /// Nowhere: it could not be created or written (already counted as
    /// failed); its data is read and discarded.
    Discard,
    /// Its temporary file, written as the data comes.
    Temp(Temp),
    /// Memory: a small file held until its end entry, then created by the
    /// pool ([`super::pool`]).
    Held(Vec<u8>),
    /// The destination itself ([`super::Dest::Device`]): written in order,
    /// no holes, no metadata, no rename.
    Straight(File),
}

/// A temporary file being written.
pub(super) struct Temp {
    pub(super) file: File,
    /// The start of a block not yet complete (it begins at a multiple of
    /// 4 KiB in the file, so zero blocks are found however the data is cut).
    pend: Vec<u8>,
    /// The file's length: the end of what is written to it (holes past it
    /// need the length set).
    pub(super) end: u64,
    /// `--direct`: the data gathered for aligned `O_DIRECT` writes (then
    /// `pend` stays empty).
    stage: Option<Stage>,
}

impl Temp {
    /// Adds `b`, which belongs at `at`; `last` when it ends the file.
    fn put(&mut self, mut b: &[u8], last: bool, at: u64) -> io::Result<()> {
        let Some(st) = &mut self.stage else {
            let end = put(&self.file, &mut self.pend, b, at, last)?;
            self.end = self.end.max(end);
            return Ok(());
        };
        while !b.is_empty() {
            let k = b.len().min(STAGE - st.filled);
            st.buf[st.filled..st.filled + k].copy_from_slice(&b[..k]);
            st.filled += k;
            b = &b[k..];
            if st.filled == STAGE {
                let end = flush_stage(&self.file, st, false)?;
                self.end = self.end.max(end);
            }
        }
        Ok(())
    }

    /// Writes everything still held (at the file's end, or when the stream
    /// was cut: the partial copy then holds all that arrived); `pos` is the
    /// end of the data received.
    pub(super) fn flush(&mut self, pos: u64) -> io::Result<()> {
        if let Some(st) = &mut self.stage {
            let end = flush_stage(&self.file, st, true)?;
            self.end = self.end.max(end);
            self.stage = None;
        }
        let end = write_sparse(&self.file, &self.pend, pos - self.pend.len() as u64)?;
        self.pend.clear();
        self.end = self.end.max(end);
        Ok(())
    }
}

/// Writes the stage (whole blocks, zero ones left as holes) with `O_DIRECT`;
/// when `last`, also its unaligned tail, with `O_DIRECT` turned off first.
/// A write refused for its alignment turns `O_DIRECT` off and goes again
/// through the page cache. Returns the end of the data written, as
/// [`write_sparse`] does.
fn flush_stage(file: &File, st: &mut Stage, last: bool) -> io::Result<u64> {
    let whole = st.filled - st.filled % BLOCK;
    let mut end = match write_sparse(file, &st.buf[..whole], st.at) {
        Err(e) if direct::refused(&e) => {
            direct::note_fallback("a device refused an O_DIRECT write", &e);
            direct::set(file, false)?;
            write_sparse(file, &st.buf[..whole], st.at)?
        }
        r => r?,
    };
    if last {
        direct::set(file, false)?;
        let tail = write_sparse(file, &st.buf[whole..st.filled], st.at + whole as u64)?;
        end = end.max(tail);
        st.at += st.filled as u64;
        st.filled = 0;
    } else {
        st.buf.copy_within(whole..st.filled, 0);
        st.at += whole as u64;
        st.filled -= whole;
    }
    Ok(end)
}

impl Current {
    /// Removes its temporary file, if it has one.
    pub(super) fn remove_tmp(&self) {
        if let (Sink::Temp(_), None) = (&self.sink, &self.piece) {
            self.unlink_tmp();
        }
    }

    /// Removes its temporary name (the caller knows it was made).
    pub(super) fn unlink_tmp(&self) {
        if let Some(dir) = &self.dir {
            let _ = rustix::fs::unlinkat(dir, name(&self.tmp), AtFlags::empty());
        }
    }
}

/// How a file's data is taken.
pub(super) enum Start {
    /// Written as it comes, by the decoding thread: its directory, the
    /// file, the start of its incomplete last block, and the file's owner
    /// and group where known.
    Opened(Arc<OwnedFd>, File, Vec<u8>, Option<Owner>),
    /// A small file held in memory for the pool: its directory, and the
    /// owner and group a file created there gets.
    Held(Arc<OwnedFd>, Option<Owner>),
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
        let (dir, owner, sink) = match opened {
            Ok(Start::Opened(d, file, pend, owner)) => {
                let stage = if self.direct && size - pos >= DIRECT_MIN && pend.is_empty() {
                    Stage::new(pos).filter(|_| match direct::set(&file, true) {
                        Ok(()) => true,
                        Err(e) => {
                            direct::note_fallback("the filesystem refuses O_DIRECT", &e);
                            false
                        }
                    })
                } else {
                    None
                };
                let t = Temp {
                    file,
                    pend,
                    end: pos,
                    stage,
                };
                (Some(d), owner, Sink::Temp(t))
            }
            Ok(Start::Held(d, owner)) => (
                Some(d),
                owner,
                Sink::Held(Vec::with_capacity(size as usize)),
            ),
            Err(e) => {
                self.failed(&rel, e);
                (None, None, Sink::Discard)
            }
        };
        self.current = Some(Current {
            rel,
            dir,
            owner,
            name,
            tmp,
            sink,
            meta,
            size,
            pos,
            hash: StreamHasher::new(),
            xattrs,
            piece: None,
        });
    }

    /// Takes `b`, the current file's next bytes (see [`Sink`]).
    pub(super) fn data(&mut self, b: &[u8]) {
        let Some(cur) = &mut self.current else { return };
        cur.hash.update(b);
        let at = cur.pos;
        cur.pos += b.len() as u64;
        let r = match &mut cur.sink {
            Sink::Discard => return,
            Sink::Held(v) => {
                v.extend_from_slice(b);
                return;
            }
            Sink::Straight(file) => io::Write::write_all(file, b),
            Sink::Temp(t) => t.put(b, cur.pos >= cur.size, at),
        };
        if let Err(e) = r {
            cur.remove_tmp();
            cur.sink = Sink::Discard;
            let rel = cur.rel.clone();
            self.failed(&rel, e);
        }
    }
}
