//! Striped files on the receiving side (`rdcp --streams N`, see
//! [`crate::stripe`]): every stream writes its pieces into the file's one
//! temporary file and marks each verified piece in its ledger; the first
//! stream, which announced the file, publishes it at its end once the other
//! streams have ended and every piece is done.

use super::current::{Current, PieceOf, Start, Temp};
use super::meta::set_meta;
use super::publish::publish;
use super::{Dest, Unpacker};
use crate::names;
use crate::stripe::{self, Ledger, PieceState};
use crate::xattr::Attr;
use rdpipe_wire::entry::{piece_span, FileEnd, Meta, RelPath};
use rustix::fs::AtFlags;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// A striped file the first stream announced, published at its end.
pub(super) struct Announced {
    rel: RelPath,
    /// Its directory's components, opened again to publish it (not held
    /// open: a tree with many striped files' directories must not run out
    /// of descriptors).
    comps: Vec<Vec<u8>>,
    leaf: Vec<u8>,
    tmp: Vec<u8>,
    meta: Meta,
    size: u64,
    xattrs: Vec<Attr>,
}

/// The device a striped copy may go into (`rdcp --streams N big h:/dev/null`):
/// only `/dev/null`, where the order of the pieces does not matter.
fn is_dev_null(f: &std::fs::File) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    f.metadata()
        .is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == rustix::fs::makedev(1, 3))
}

/// The temporary name a striped file `leaf` gets here, from the one its
/// stream gave ([`names::dest_tmp`]).
fn local_tmp(tmp: &[u8], leaf: &[u8]) -> io::Result<Vec<u8>> {
    names::dest_tmp(tmp, leaf).ok_or_else(|| {
        io::Error::other("the sender named a striped copy's temporary file as rdcp does not")
    })
}

impl Unpacker {
    /// The directory the run's markers live in (none for a device).
    pub(super) fn base(&self) -> Option<&OwnedFd> {
        match &self.dest {
            Dest::Into(fd) => Some(fd),
            Dest::As { parent, .. } => Some(parent),
            Dest::Device(_) => None,
        }
    }

    fn not_striped(&self) -> io::Result<()> {
        match &self.dest {
            _ if self.stripe.is_none() => Err(io::Error::other(
                "a striped file in a stream that is not one of several (--streams)",
            )),
            Dest::Device(d) if !is_dev_null(d) => Err(io::Error::other(format!(
                "{} is not a directory or a regular file: a copy over several streams cannot go into it (use --streams 1)",
                self.label
            ))),
            _ => Ok(()),
        }
    }

    /// [`Entry::Striped`](rdpipe_wire::entry::Entry::Striped): remembered
    /// for [`Unpacker::publish_striped`].
    pub(super) fn striped_entry(
        &mut self,
        rel: RelPath,
        meta: Meta,
        size: u64,
        tmp: Vec<u8>,
        xattrs: Vec<Attr>,
    ) -> io::Result<()> {
        self.not_striped()?;
        if let Dest::Device(_) = self.dest {
            return Ok(());
        }
        let (comps, leaf) = self.place(&rel)?;
        let tmp = local_tmp(&tmp, &leaf)?;
        match self.dir(&comps) {
            Ok(_) => self.announced.push(Announced {
                rel,
                comps,
                leaf,
                tmp,
                meta,
                size,
                xattrs,
            }),
            Err(e) => self.failed(&rel, e),
        }
        Ok(())
    }

    /// [`Entry::Piece`](rdpipe_wire::entry::Entry::Piece): its data goes
    /// into the shared temporary file at the piece's place.
    pub(super) fn piece_entry(
        &mut self,
        rel: RelPath,
        meta: Meta,
        size: u64,
        index: u64,
        tmp: Vec<u8>,
    ) -> io::Result<()> {
        self.not_striped()?;
        let (start, len) = piece_span(size, index).expect("checked by the decoder");
        if let Dest::Device(d) = &self.dest {
            let file = d.try_clone()?;
            let mut cur = Current::straight(rel, file, meta, start, start + len);
            cur.piece = Some(PieceOf {
                index,
                ledger: None,
            });
            self.current = Some(cur);
            return Ok(());
        }
        let (comps, leaf) = self.place(&rel)?;
        let tmp = local_tmp(&tmp, &leaf)?;
        let mut ledger = None;
        let opened = self.dir(&comps).and_then(|dir| {
            let file = stripe::open_tmp(&dir, &leaf, &tmp)?;
            ledger = Some(Ledger::open(&dir, &tmp, size, &meta)?);
            Ok(Start::Opened(dir, file, Vec::new(), None))
        });
        self.start_file(rel, leaf, tmp, meta, start + len, start, opened, Vec::new());
        if let Some(cur) = &mut self.current {
            cur.piece = Some(PieceOf { index, ledger });
        }
        Ok(())
    }

    /// A piece's end: written out and marked in the ledger when its
    /// checksum matched; a piece that failed leaves the shared temporary
    /// file as it is (the other pieces stay) and fails the file.
    pub(super) fn piece_end(&mut self, cur: Current, mut t: Temp, p: PieceOf, end: FileEnd) {
        if end.unreadable {
            return;
        }
        let r = if cur.hash.digest() != end.checksum || cur.pos != cur.size {
            Err(io::Error::other(
                "a piece's checksum does not match the sender's",
            ))
        } else {
            t.flush(cur.pos).and_then(|()| match &p.ledger {
                Some(l) => l.mark(p.index, end.changed),
                None => Ok(()),
            })
        };
        match r {
            Ok(()) => self.stats.bytes += cur.hash.bytes(),
            Err(e) => self.failed(&cur.rel, e),
        }
    }

    /// The end of a piece written straight into `/dev/null`.
    pub(super) fn piece_straight_end(&mut self, cur: &Current, end: FileEnd) {
        if end.unreadable {
            return;
        }
        if cur.pos != cur.size || cur.hash.digest() != end.checksum {
            self.failed(&cur.rel, "a piece's checksum does not match the sender's");
        } else {
            self.stats.bytes += cur.hash.bytes();
        }
    }

    /// The first stream's end: waits for the others, then publishes every
    /// announced file whose pieces all arrived; the others stay under
    /// their temporary names with their ledgers (`--resume`).
    pub(super) fn publish_striped(&mut self) {
        let Some(s) = self.stripe else { return };
        if s.index != 0 {
            return;
        }
        let failed = match self.base() {
            Some(base) => {
                let base = base.try_clone();
                base.map(|b| stripe::wait_others(&b, &s))
                    .unwrap_or_default()
            }
            None => Vec::new(),
        };
        if !failed.is_empty() {
            let list: Vec<String> = failed.iter().map(u32::to_string).collect();
            crate::warn(format_args!(
                "stream {} of {} did not end whole; files with pieces on it stay under their temporary names for --resume",
                list.join(", "),
                s.count
            ));
        }
        // Per directory, the files published there and their temporary names.
        let mut published: Vec<(Vec<Vec<u8>>, Vec<stripe::Published>)> = Vec::new();
        for a in std::mem::take(&mut self.announced) {
            let r = self.publish_one(&a);
            match r {
                // Its bytes were counted piece by piece.
                Ok(changed) => {
                    self.counted(&a.rel, 0, changed, Ok(()));
                    let at = match published.iter().position(|(c, _)| *c == a.comps) {
                        Some(i) => i,
                        None => {
                            published.push((a.comps.clone(), Vec::new()));
                            published.len() - 1
                        }
                    };
                    published[at].1.push(stripe::Published {
                        leaf: a.leaf,
                        tmp: a.tmp,
                    });
                }
                Err(e) => self.failed(&a.rel, e),
            }
        }
        let Some(base) = self.base().and_then(|b| b.try_clone().ok()) else {
            return;
        };
        // What interrupted runs left of older versions of these files goes.
        for (comps, done) in published {
            if let Ok(dir) = self.dir(&comps) {
                stripe::remove_superseded(&dir, &base, &done);
            }
        }
        stripe::release(&base, &s);
    }

    /// Publishes one striped file; `Ok(true)` when a piece was read while
    /// the source changed.
    fn publish_one(&mut self, a: &Announced) -> io::Result<bool> {
        let dir = self.dir(&a.comps)?;
        let Some((ledger, size, lmeta)) = Ledger::existing(&dir, &a.tmp)? else {
            return Err(io::Error::other("none of its pieces arrived"));
        };
        if size != a.size || (lmeta.mtime, lmeta.mtime_ns) != (a.meta.mtime, a.meta.mtime_ns) {
            return Err(io::Error::other(
                "it changed on the sending side while the streams read it",
            ));
        }
        let states = ledger.states()?;
        let missing = states.iter().filter(|&&s| s == PieceState::Missing).count();
        if missing > 0 {
            return Err(io::Error::other(format!(
                "{missing} of its {} pieces did not arrive; what did stays in {} for --resume",
                states.len(),
                crate::shown(&a.tmp)
            )));
        }
        let file = stripe::open_tmp(&dir, &a.leaf, &a.tmp)?;
        file.set_len(a.size)?;
        set_meta(&file, &a.meta, &a.xattrs, self.policy(), None)?;
        publish(&dir, &a.tmp, &a.leaf)?;
        let _ = rustix::fs::unlinkat(
            dir.as_fd(),
            crate::beneath::name(&names::ledger_name(&a.tmp)),
            AtFlags::empty(),
        );
        Ok(states.contains(&PieceState::Changed))
    }

    /// The end of a stream other than the first: its marker says it was
    /// verified whole.
    pub(super) fn end_marker(&mut self) -> io::Result<()> {
        match &self.marker {
            Some(m) => m.ended(),
            None => Ok(()),
        }
    }
}
