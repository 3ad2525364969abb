//! The end of each file and of the stream: a file is published (metadata,
//! extended attributes, rename over its target) only when its checksum
//! matched; at the stream's end the directories get their metadata and the
//! run its verdict.

use super::{times, Unpacker};
use crate::warn;
use crate::write::write_sparse;
use rdpipe_wire::entry::FileEnd;
use rustix::fs::Mode;
use std::io;

impl Unpacker {
    pub(super) fn file_end(&mut self, end: FileEnd) {
        let Some(cur) = self.current.take() else {
            return;
        };
        let (Some(file), Some(dir)) = (&cur.file, &cur.dir) else {
            return;
        };
        let discard = |why: Option<String>, me: &mut Unpacker| {
            cur.remove_tmp();
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
            let end = write_sparse(file, &cur.pend, cur.pos - cur.pend.len() as u64)?;
            if cur.end.max(end) < cur.size {
                // It ends in a hole.
                file.set_len(cur.size)?;
            }
            if self.preserve {
                if self.root {
                    std::os::unix::fs::fchown(file, Some(cur.meta.uid), Some(cur.meta.gid))?;
                }
                rustix::fs::fchmod(file, Mode::from_raw_mode(cur.meta.mode as _))?;
                rustix::fs::futimens(file, &times(&cur.meta))?;
            } else {
                let mode = cur.meta.mode & 0o777 & !self.umask;
                rustix::fs::fchmod(file, Mode::from_raw_mode(mode as _))?;
            }
            // After the mode: an ACL's mask entry is the group bits.
            crate::xattr::apply(file, &cur.xattrs)?;
            Ok(())
        })();
        if let Err(e) = r {
            return discard(Some(e.to_string()), self);
        }
        match self.publish(dir, &cur.tmp, &cur.name) {
            Ok(()) => {
                self.stats.created += 1;
                self.stats.bytes += cur.size;
                if end.changed {
                    warn(format_args!(
                        "{}: copied while it changed on the sending side",
                        self.target(&cur.rel)
                    ));
                    self.stats.changed += 1;
                }
            }
            Err(e) => self.failed(&cur.rel, e),
        }
    }

    /// The end of a verified stream: directories' metadata, then the verdict.
    pub(super) fn finish(&mut self) -> io::Result<()> {
        if !self.decoder.finished() {
            return Err(io::Error::other(
                "the rdcp stream ended before its end entry",
            ));
        }
        if !self.xattrs.is_empty() {
            return Err(io::Error::other(
                "extended attributes at the end of the stream",
            ));
        }
        let dirs = std::mem::take(&mut self.dirs);
        self.dir_index.clear();
        for (rel, meta) in dirs.iter().rev() {
            let (mut comps, leaf) = self.place(rel)?;
            comps.push(leaf);
            let r = self.dir(&comps).and_then(|fd| {
                let mode = if self.preserve {
                    meta.mode
                } else {
                    meta.mode & 0o777 & !self.umask
                };
                if self.preserve && self.root {
                    std::os::unix::fs::fchown(&fd, Some(meta.uid), Some(meta.gid))?;
                }
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode as _))?;
                if let Some(x) = self.dir_xattrs.get(rel) {
                    crate::xattr::apply(&fd, x)?;
                }
                if self.preserve {
                    rustix::fs::futimens(&fd, &times(meta))?;
                }
                Ok(())
            });
            if let Err(e) = r {
                self.failed(rel, e);
            }
        }
        self.last_dir = None;
        let s = self.stats;
        let bad = s.failed + s.sender_failed + s.changed;
        if bad > 0 {
            let mut parts = vec![];
            if s.failed > 0 {
                parts.push(format!("{} not written here", s.failed));
            }
            if s.sender_failed > 0 {
                parts.push(format!(
                    "{} skipped or unreadable on the sending side",
                    s.sender_failed
                ));
            }
            if s.changed > 0 {
                parts.push(format!("{} copied while they changed", s.changed));
            }
            return Err(io::Error::other(format!(
                "not all copied: {} (see the lines above); {} entries copied whole",
                parts.join(", "),
                s.created - s.changed
            )));
        }
        Ok(())
    }
}
