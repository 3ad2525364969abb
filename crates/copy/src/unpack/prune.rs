//! `rdcp --delete`'s removal pass ([`crate::mirror`]): every path the stream
//! named is recorded as it comes ([`Named`]); at the end of a verified
//! stream, once every file was published and only when nothing failed on
//! either side, what DEST holds that no entry named is removed.
//!
//! The walk goes through directory descriptors from DEST down, each opened
//! with `O_NOFOLLOW | O_DIRECTORY` ([`crate::beneath`]), and removes with
//! `unlinkat` in the directory that holds the name: a symbolic link is
//! removed as a link (its target, inside DEST or not, is untouched), a
//! directory swapped for a link while it runs is refused, not followed, and
//! nothing outside DEST is ever reached. A directory's contents go before it.
//! rdcp's own names ([`crate::names`]: a file being received, a partial
//! copy `--resume` continues, a stream's marker) are never removed, and a
//! directory holding one stays; only a stale temporary (`stale.rs`: its
//! writer is no longer running) goes, where the pass walks and with a
//! directory it removes.

use super::stale::stale_target;
use super::Unpacker;
use crate::beneath::{name, open_dir};
use crate::mirror::Mirror;
use crate::names;
use rdpipe_term::{escaped, escaped_bytes};
use rdpipe_wire::entry::Entry;
use rustix::fs::{AtFlags, FileType};
use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// What a mirror's stream named so far.
pub(super) struct Named {
    /// The setting.
    pub(super) mirror: Mirror,
    /// `HOST:` for messages (empty on this machine).
    host: String,
    /// Each path beneath DEST an entry named (the stream's first component,
    /// the source's name, dropped; DEST itself is the empty path).
    paths: HashSet<Vec<u8>>,
}

impl Named {
    /// Nothing named yet.
    pub(super) fn new(mirror: Mirror, host: String) -> Named {
        Named {
            mirror,
            host,
            paths: HashSet::new(),
        }
    }

    /// Records the path `e` names; `Ok(true)` when a dry run consumed it (a
    /// dry run's stream carries names only: anything else is refused).
    pub(super) fn take(&mut self, e: &Entry) -> io::Result<bool> {
        let path = match e {
            Entry::Dir { path, .. }
            | Entry::File { path, .. }
            | Entry::Resume { path, .. }
            | Entry::Striped { path, .. }
            | Entry::Piece { path, .. }
            | Entry::Symlink { path, .. }
            | Entry::HardLink { path, .. }
            | Entry::Special { path, .. }
            | Entry::Kept { path } => Some(path),
            _ => None,
        };
        if let Some(p) = path {
            self.paths.insert(beneath_top(p.as_bytes()).to_vec());
        }
        match e {
            _ if !self.mirror.dry_run => Ok(false),
            Entry::Kept { .. } => Ok(true),
            Entry::End { .. } => Ok(false),
            _ => Err(io::Error::other(
                "a dry run's stream (rdcp --delete -n) carries names only",
            )),
        }
    }
}

/// A stream path beneath its top-level component (empty for the top).
fn beneath_top(p: &[u8]) -> &[u8] {
    match p.iter().position(|&b| b == b'/') {
        Some(i) => &p[i + 1..],
        None => &[],
    }
}

/// `rel/leaf`.
fn join(rel: &[u8], leaf: &[u8]) -> Vec<u8> {
    if rel.is_empty() {
        return leaf.to_vec();
    }
    [rel, b"/", leaf].concat()
}

/// The names in directory `d` (not `.` and `..`).
fn names_in(d: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    let mut v = Vec::new();
    for e in rustix::fs::Dir::read_from(d)? {
        let n = e?.file_name().to_bytes().to_vec();
        if n != b"." && n != b".." {
            v.push(n);
        }
    }
    v.sort_unstable();
    Ok(v)
}

/// One removal pass's work.
struct Pass<'a> {
    named: &'a HashSet<Vec<u8>>,
    dry_run: bool,
    verbose: bool,
    /// `HOST:DEST` as messages show it.
    shown: String,
    removed: u64,
    failed: u64,
}

impl Pass<'_> {
    fn shown(&self, rel: &[u8]) -> String {
        format!("{}/{}", self.shown, escaped_bytes(rel))
    }

    fn cannot(&mut self, rel: &[u8], e: impl std::fmt::Display) {
        crate::warn(format_args!(
            "--delete: cannot remove {}: {e}",
            self.shown(rel)
        ));
        self.failed += 1;
    }

    /// Beneath the directory `dir` (at `rel`), which the source has too:
    /// each name the stream did not name is removed, each directory it did
    /// is walked.
    fn walk(&mut self, dir: &OwnedFd, rel: &[u8]) {
        let names = match names_in(dir) {
            Ok(n) => n,
            Err(e) => return self.cannot(rel, e),
        };
        for leaf in names {
            if names::parse(&leaf).is_some() {
                if !self.dry_run && stale_target(&leaf).is_some() {
                    let _ = rustix::fs::unlinkat(dir, name(&leaf), AtFlags::empty());
                }
                continue;
            }
            let r = join(rel, &leaf);
            if !self.named.contains(&r) {
                self.remove(dir.as_fd(), &leaf, &r);
                continue;
            }
            let is_dir = rustix::fs::statat(dir, name(&leaf), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
            if is_dir {
                match open_dir(dir.as_fd(), &[&leaf], false) {
                    Ok(sub) => self.walk(&sub, &r),
                    Err(e) => self.cannot(&r, e),
                }
            }
        }
    }

    /// Removes `leaf` of `dir` (at `rel`), a directory with what it holds;
    /// whether it went.
    fn remove(&mut self, dir: BorrowedFd<'_>, leaf: &[u8], rel: &[u8]) -> bool {
        let st = match rustix::fs::statat(dir, name(leaf), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) => {
                self.cannot(rel, io::Error::from(e));
                return false;
            }
        };
        let flags = if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            let sub = match open_dir(dir, &[leaf], false) {
                Ok(s) => s,
                Err(e) => {
                    self.cannot(rel, e);
                    return false;
                }
            };
            let names = match names_in(&sub) {
                Ok(n) => n,
                Err(e) => {
                    self.cannot(rel, e);
                    return false;
                }
            };
            let (mut emptied, mut held) = (true, false);
            for child in names {
                if stale_target(&child).is_some() {
                    // No copy writes it any more: it goes with the directory.
                    let gone = self.dry_run
                        || rustix::fs::unlinkat(&sub, name(&child), AtFlags::empty()).is_ok();
                    emptied &= gone;
                    continue;
                }
                if names::parse(&child).is_some() {
                    held = true;
                    continue;
                }
                emptied &= self.remove(sub.as_fd(), &child, &join(rel, &child));
            }
            if held {
                crate::warn(format_args!(
                    "--delete: kept {}: it holds a temporary file of an rdcp copy (running, or interrupted: --resume continues it)",
                    self.shown(rel)
                ));
            }
            if !emptied || held {
                return false;
            }
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        if !self.dry_run {
            if let Err(e) = rustix::fs::unlinkat(dir, name(leaf), flags) {
                self.cannot(rel, io::Error::from(e));
                return false;
            }
        }
        self.removed += 1;
        if self.dry_run || self.verbose {
            let verb = if self.dry_run {
                "would delete"
            } else {
                "deleted"
            };
            eprintln!("rdcp: {verb} {}", self.shown(rel));
        }
        true
    }
}

impl Unpacker {
    /// The mirror's removal pass (see the module doc), before the
    /// directories get their metadata (removing changes their mtimes).
    pub(super) fn prune(&mut self) {
        let Some(named) = self.mirror.take() else {
            return;
        };
        let s = self.stats;
        let dry = named.mirror.dry_run;
        if s.failed + s.sender_failed + s.changed > 0 {
            crate::warn(format_args!(
                "--delete: {} nothing from {}: not everything was copied (see the lines above)",
                if dry { "a run would remove" } else { "removed" },
                self.label
            ));
            return;
        }
        let super::Dest::As { parent, name: top } = &self.dest else {
            return;
        };
        let is_dir = rustix::fs::statat(parent, name(top), AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
        if !is_dir {
            // A file's copy: nothing beneath it.
            return;
        }
        let mut pass = Pass {
            named: &named.paths,
            dry_run: dry,
            verbose: named.mirror.verbose,
            shown: format!("{}{}", named.host, escaped(&self.label)),
            removed: 0,
            failed: 0,
        };
        match open_dir(parent.as_fd(), &[top], false) {
            Ok(d) => pass.walk(&d, b""),
            Err(e) => pass.cannot(b"", e),
        }
        self.stats.deleted = pass.removed;
        self.stats.not_deleted = pass.failed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_recorded_beneath_the_top() {
        assert_eq!(beneath_top(b"src"), b"");
        assert_eq!(beneath_top(b"src/a/b"), b"a/b");
        assert_eq!(join(b"", b"x"), b"x");
        assert_eq!(join(b"a", b"x"), b"a/x");
        let p = |s: &str| rdpipe_wire::entry::RelPath::new(s.into()).unwrap();
        let mut n = Named::new(Mirror::default(), String::new());
        assert!(!n.take(&Entry::Kept { path: p("s/k") }).unwrap());
        assert!(!n
            .take(&Entry::Dir {
                path: p("s"),
                meta: Default::default()
            })
            .unwrap());
        assert!(n.paths.contains(&b"k"[..]) && n.paths.contains(&b""[..]));
        let mut dry = Named::new(
            Mirror {
                dry_run: true,
                ..Mirror::default()
            },
            String::new(),
        );
        assert!(dry.take(&Entry::Kept { path: p("s/k") }).unwrap());
        assert!(dry
            .take(&Entry::File {
                path: p("s/f"),
                meta: Default::default(),
                size: 1
            })
            .is_err());
        assert!(!dry
            .take(&Entry::End {
                entries: 0,
                failed: 0
            })
            .unwrap());
    }
}
