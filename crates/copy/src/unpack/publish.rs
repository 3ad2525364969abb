//! The end of each file and of the stream: a file is published (metadata,
//! extended attributes, rename over its target) only when its checksum
//! matched; at the stream's end the directories get their metadata and the
//! run its verdict.

use super::current::Sink;
use super::pool::{set_meta, Done, Job, Pool};
use super::{times, Current, Unpacker};
use crate::warn;
use rdpipe_wire::entry::{FileEnd, RelPath};
use rustix::fs::Mode;
use std::io;

impl Unpacker {
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
        let result = self.publish(dir, &cur.tmp, &cur.name);
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

    /// The end of a small file held in memory: checked, then handed to the
    /// pool that creates it.
    fn end_buffered(&mut self, cur: Current, data: Vec<u8>, end: FileEnd) {
        if end.unreadable {
            return;
        }
        let Some(dir) = cur.dir else { return };
        if cur.pos != cur.size || cur.hash.digest() != end.checksum {
            return self.failed(&cur.rel, "its checksum does not match the sender's");
        }
        let job = Job {
            dir,
            rel: cur.rel,
            leaf: cur.name,
            tmp: cur.tmp,
            meta: cur.meta,
            owner: cur.owner,
            data,
            xattrs: cur.xattrs,
            changed: end.changed,
        };
        let policy = self.policy();
        let pool = match &mut self.pool {
            Some(p) => p,
            None => match Pool::start(self.create_threads, policy) {
                Ok(p) => self.pool.insert(p),
                Err(e) => return self.failed(&job.rel, e),
            },
        };
        let rel = job.rel.as_bytes().to_vec();
        let done = pool.submit(job);
        self.pending.insert(rel);
        self.outcomes(done);
    }

    /// Waits for the files handed to the pool, and counts them.
    pub(super) fn wait_pool(&mut self) {
        if let Some(p) = &mut self.pool {
            let done = p.wait();
            self.outcomes(done);
        }
    }

    fn outcomes(&mut self, done: Vec<Done>) {
        for d in done {
            self.pending.remove(d.rel.as_bytes());
            self.counted(&d.rel, d.size, d.changed, d.result);
        }
    }

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
