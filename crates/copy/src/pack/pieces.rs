//! A striped file on the sending side (`rdcp --streams N`, see
//! [`crate::stripe`]): the first stream announces it, and every stream
//! sends the pieces it carries, each with its own checksum; `--resume`
//! skips the pieces the destination's ledger has as done.

use super::{PackOut, Packer};
use crate::stripe::Stripe;
use rdpipe_wire::entry::{piece_count, piece_span, Entry, FileEnd, Meta, RelPath};
use std::fs::{File, Metadata};
use std::io::{self, Seek};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

impl<O: PackOut> Packer<'_, O> {
    /// A stream other than the first: only pieces.
    pub(super) fn pieces_only(&self) -> bool {
        self.opts.stripe.is_some_and(|s| s.index > 0)
    }

    pub(super) fn pieces(
        &mut self,
        f: &File,
        path: &Path,
        rel: RelPath,
        meta: Meta,
        s: Stripe,
        before: &Metadata,
    ) -> io::Result<()> {
        let size = before.len();
        let leaf = rel.components().last().expect("a path has a component");
        // A striped copy an interrupted run left, of this very version of
        // the file: its temporary file, and the pieces it holds verified.
        let (tmp, done) = match self.manifest.and_then(|m| m.striped(&rel)) {
            Some(p) if p.size == size && p.mtime == (meta.mtime, meta.mtime_ns) => {
                (p.tmp.clone(), p.done.clone())
            }
            _ => (s.tmp_name(leaf), Vec::new()),
        };
        if s.index == 0 {
            if !done.is_empty() {
                self.stats.resumed += 1;
            }
            self.attrs(f, path)?;
            self.entry(&Entry::Striped {
                path: rel.clone(),
                meta,
                size,
                tmp: tmp.clone(),
            })?;
        }
        let mut changed = false;
        for i in (0..piece_count(size)).filter(|&i| s.carries(i)) {
            let (start, len) = piece_span(size, i).expect("below the count");
            if done.binary_search(&i).is_ok() {
                self.stats.skipped_bytes += len;
                continue;
            }
            self.entry(&Entry::Piece {
                path: rel.clone(),
                meta,
                size,
                index: i,
                tmp: tmp.clone(),
            })?;
            let mut src = f;
            src.seek(io::SeekFrom::Start(start))?;
            let r = self.out.data(f, len, self.opts.direct)?;
            let after = f.metadata().ok();
            let moved = r.short
                || after.as_ref().is_none_or(|a| {
                    a.len() != size
                        || a.mtime() != before.mtime()
                        || a.mtime_nsec() != before.mtime_nsec()
                });
            let unreadable = r.error.is_some();
            self.head.clear();
            FileEnd {
                checksum: r.hash,
                changed: moved && !unreadable,
                unreadable,
            }
            .encode(&mut self.head);
            self.out.put(&self.head)?;
            self.stats.bytes += len;
            if let Some(e) = r.error {
                // The receiver lacks this piece: the file is not published.
                self.failed(format_args!("cannot read {}: {e}", path.display()));
                return Ok(());
            }
            changed |= moved;
        }
        if changed {
            self.stats.changed += 1;
            crate::warn(format_args!(
                "{} changed while it was read; its copy is not one state of it",
                path.display()
            ));
        }
        Ok(())
    }
}
