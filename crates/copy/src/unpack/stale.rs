//! Temporaries of earlier runs: a `.NAME.rdcp-PID-N` ([`crate::names`])
//! whose writer, process PID on this host, is no longer running is stale: no
//! copy writes it any more. Each existing destination directory is read once,
//! when the unpacker first opens it (one it created in this run cannot hold
//! one), and only the stale temporaries found are kept, by target; once
//! NAME is published, or the sender says the copy at the destination is
//! current ([`Entry::Kept`](rdpipe_wire::entry::Entry::Kept), which
//! `rdcp --resume` sends for a file it skips that has a partial copy), NAME's
//! are removed, each by `unlinkat` in its directory (a link is removed as a
//! link). A temporary of a process still alive (another rdcp writing the same
//! file, or this one) stays, and so do names that only look like ours, and a
//! striped file's temporary, ledger and markers (`crate::stripe` removes
//! those). A NAME cut to [`names::CUT`] bytes in its temporaries' names may
//! share them with another long name still to come, continued by
//! `--resume`: its stale temporaries go at the stream's end instead.
//! `rdcp --delete` removes stale temporaries in what it walks, and with a
//! directory it removes (`prune.rs`).

use super::Unpacker;
use crate::beneath::{name, open_dir};
use crate::names::{self, Name};
use rdpipe_wire::entry::RelPath;
use rustix::fs::AtFlags;
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// Whether process `pid` of this host is running (this one is; one that
/// cannot be signalled for want of permission is).
pub(super) fn alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        // No process has that id.
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(p),
        Err(rustix::io::Errno::SRCH)
    )
}

/// The target (as cut) of `file` if it is a stale temporary.
pub(super) fn stale_target(file: &[u8]) -> Option<&[u8]> {
    match names::parse(file)? {
        Name::Temp { target, pid, .. } if !alive(pid) => Some(target),
        _ => None,
    }
}

/// Removes `file` from `dir` if it is still a stale temporary.
fn remove(dir: &OwnedFd, file: &[u8]) {
    if stale_target(file).is_some() {
        let _ = rustix::fs::unlinkat(dir, name(file), AtFlags::empty());
    }
}

/// A directory's stale temporaries.
struct Found {
    dir: Arc<OwnedFd>,
    /// By target (as cut): their names.
    by_target: HashMap<Vec<u8>, Vec<Vec<u8>>>,
}

/// The stale temporaries of the directories opened so far (see the module
/// doc).
#[derive(Default)]
pub(super) struct Stale {
    /// Directories already read (or created in this run), by their path
    /// beneath the base as [`Unpacker::dir`] keys them.
    seen: HashSet<Vec<u8>>,
    /// Those that hold stale temporaries.
    found: HashMap<Vec<u8>, Found>,
    /// Removals left to the stream's end (cut targets).
    later: Vec<(Arc<OwnedFd>, Vec<u8>)>,
}

impl Stale {
    /// Whether directory `key` was read already.
    pub(super) fn seen(&self, key: &[u8]) -> bool {
        self.seen.contains(key)
    }

    /// Directory `key` is not read.
    pub(super) fn skip(&mut self, key: &[u8]) {
        self.seen.insert(key.to_vec());
    }

    /// Directory `key`, opened as `dir` (`made`: created by this run), is
    /// read for stale temporaries, once.
    pub(super) fn scan(&mut self, key: &[u8], dir: &Arc<OwnedFd>, made: bool) {
        if self.seen.contains(key) {
            return;
        }
        self.seen.insert(key.to_vec());
        if made {
            return;
        }
        let Ok(entries) = rustix::fs::Dir::read_from(&**dir) else {
            return;
        };
        let mut by_target: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::new();
        for e in entries.filter_map(Result::ok) {
            let file = e.file_name().to_bytes();
            if let Some(t) = stale_target(file) {
                by_target.entry(t.to_vec()).or_default().push(file.to_vec());
            }
        }
        if !by_target.is_empty() {
            let dir = dir.clone();
            self.found.insert(key.to_vec(), Found { dir, by_target });
        }
    }

    /// `leaf` in directory `key` was published (or is current): its stale
    /// temporaries go (those of a cut name at [`Stale::finish`]).
    pub(super) fn done(&mut self, key: &[u8], leaf: &[u8]) {
        let Some(f) = self.found.get_mut(key) else {
            return;
        };
        let Some(files) = f.by_target.remove(&leaf[..leaf.len().min(names::CUT)]) else {
            return;
        };
        if leaf.len() >= names::CUT {
            self.later
                .extend(files.into_iter().map(|n| (f.dir.clone(), n)));
        } else {
            for n in files {
                remove(&f.dir, &n);
            }
        }
        if f.by_target.is_empty() {
            self.found.remove(key);
        }
    }

    /// The stream's end: the removals left for it.
    pub(super) fn finish(&mut self) {
        for (dir, n) in self.later.drain(..) {
            remove(&dir, &n);
        }
    }
}

impl Unpacker {
    /// `rel` was published, or is current at the destination: its stale
    /// temporaries go (see the module doc). A directory not opened yet is
    /// opened (never created) and read first.
    pub(super) fn unstale(&mut self, rel: &RelPath) {
        let mut comps: Vec<&[u8]> = rel.components().collect();
        if let super::Dest::As { name, .. } = &self.dest {
            comps[0] = name.as_slice();
        }
        let Some(leaf) = comps.pop() else { return };
        let key = comps.join(&b'/');
        if !self.stale.seen(&key) {
            let base = match &self.dest {
                super::Dest::Into(fd) => fd.as_fd(),
                super::Dest::As { parent, .. } => parent.as_fd(),
                super::Dest::Device(_) => return,
            };
            match open_dir(base, &comps, false) {
                Ok(fd) => self.stale.scan(&key, &Arc::new(fd), false),
                // Not there (nor opened again for each name in it).
                Err(_) => return self.stale.skip(&key),
            }
        }
        self.stale.done(&key, leaf);
    }
}
