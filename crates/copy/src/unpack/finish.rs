//! The end of a verified stream: the pool's files counted, striped files
//! published, then the directories' metadata (deepest first, so that what
//! was created inside does not disturb it), and the run's verdict.

use super::meta::times;
use super::Unpacker;
use rustix::fs::Mode;
use std::io;

impl Unpacker {
    /// The end of a verified stream: directories' metadata, then the verdict.
    pub(super) fn finish(&mut self) -> io::Result<()> {
        self.wait_pool();
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
        // Striped files go into their directories before those get their
        // metadata.
        self.publish_striped();
        // `--delete`: what the source lacks goes, before the directories
        // get their times (removing changes them).
        self.prune();
        self.stale.finish();
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
        if s.failed + s.sender_failed == 0 {
            self.end_marker()?;
        }
        let bad = s.failed + s.sender_failed + s.changed + s.not_deleted;
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
            if s.not_deleted > 0 {
                parts.push(format!("{} not removed (--delete)", s.not_deleted));
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
