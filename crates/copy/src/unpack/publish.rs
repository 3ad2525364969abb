//! Publishing: a received entry, made under its temporary name, takes its
//! target's name by one rename ([`publish`]), so that nothing partial is
//! ever seen under the final name and an existing entry is replaced only by
//! a complete one. A file's end ([`Unpacker::file_end`]) publishes it, with
//! its metadata and extended attributes, only when its checksum matched;
//! links, nodes, striped files and the pool's small files are published
//! through [`publish`] too.

use super::current::Sink;
use super::meta::set_meta;
use super::Unpacker;
use crate::beneath::name;
use crate::warn;
use rdpipe_wire::entry::{FileEnd, RelPath};
use rustix::fs::AtFlags;
use std::io;
use std::os::fd::OwnedFd;

/// Renames `tmp` (a new inode: a file, symbolic link or node made under it)
/// over `leaf` in `dir`; removes `tmp` if that fails.
pub(super) fn publish(dir: &OwnedFd, tmp: &[u8], leaf: &[u8]) -> io::Result<()> {
    let r = rustix::fs::renameat(dir, name(tmp), dir, name(leaf));
    if r.is_err() {
        let _ = rustix::fs::unlinkat(dir, name(tmp), AtFlags::empty());
    }
    r.map_err(io::Error::from)
}

impl Unpacker {
    /// The end of the current file (or piece): checked against the
    /// sender's trailer, then published, handed to the pool, or removed.
    pub(super) fn file_end(&mut self, end: FileEnd) {
        let Some(mut cur) = self.current.take() else {
            return;
        };
        if let Some(p) = cur.piece.take() {
            return match std::mem::replace(&mut cur.sink, Sink::Discard) {
                Sink::Temp(t) => self.piece_end(cur, t, p, end),
                Sink::Straight(_) => self.piece_straight_end(&cur, end),
                Sink::Discard | Sink::Held(_) => {}
            };
        }
        let mut t = match std::mem::replace(&mut cur.sink, Sink::Discard) {
            Sink::Discard => return,
            Sink::Held(data) => return self.end_buffered(cur, data, end),
            Sink::Straight(_) => {
                // Written into the destination itself (`device.rs`).
                if end.unreadable {
                    return;
                }
                let result = if cur.pos == cur.size && cur.hash.digest() == end.checksum {
                    Ok(())
                } else {
                    Err(io::Error::other(
                        "its checksum does not match the sender's (its bytes were written)",
                    ))
                };
                return self.counted(&cur.rel, cur.size, end.changed, result);
            }
            Sink::Temp(t) => t,
        };
        let Some(dir) = &cur.dir else {
            return;
        };
        let discard = |why: Option<String>, me: &mut Unpacker| {
            cur.unlink_tmp();
            if let Some(w) = why {
                me.failed(&cur.rel, w);
            }
        };
        if end.unreadable {
            // The sender reported it; nothing of it is kept.
            return discard(None, self);
        }
        if cur.pos != cur.size || cur.hash.digest() != end.checksum {
            return discard(
                Some("its checksum does not match the sender's".into()),
                self,
            );
        }
        let r = (|| -> io::Result<()> {
            t.flush(cur.pos)?;
            if t.end < cur.size {
                // It ends in a hole.
                t.file.set_len(cur.size)?;
            }
            set_meta(&t.file, &cur.meta, &cur.xattrs, self.policy(), cur.owner)
        })();
        if let Err(e) = r {
            return discard(Some(e.to_string()), self);
        }
        let result = publish(dir, &cur.tmp, &cur.name);
        self.counted(&cur.rel, cur.size, end.changed, result);
    }

    /// Counts a file published (`result` Ok) or not.
    pub(super) fn counted(
        &mut self,
        rel: &RelPath,
        size: u64,
        changed: bool,
        result: io::Result<()>,
    ) {
        match result {
            Ok(()) => {
                self.stats.created += 1;
                self.stats.bytes += size;
                self.unstale(rel);
                if changed {
                    warn(format_args!(
                        "{}: copied while it changed on the sending side",
                        self.target(rel)
                    ));
                    self.stats.changed += 1;
                }
            }
            Err(e) => self.failed(rel, e),
        }
    }
}
