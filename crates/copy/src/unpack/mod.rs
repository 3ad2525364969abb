//! The receiving side of rdcp: an `io::Write` that decodes an entry stream
//! and creates what it describes beneath the destination ([`Dest`]).
//!
//! - Each file is written into a temporary name in its own directory
//!   (`.NAME.rdcp-PID-N`, [`crate::names`]; created exclusively) and renamed
//!   over NAME only when its length and xxh3 match the trailer: no partial
//!   file is ever visible under its final name, and an existing file is
//!   replaced only by a complete one (`publish.rs`). Whole blocks of zeros
//!   are not written (the file gets holes there), so a sparse file stays
//!   sparse.
//! - Small files can be created on a few threads (`pool.rs`): held in
//!   memory until their checksum matched, then written, given their metadata
//!   and renamed by a worker; an entry at or beneath a path a worker has not
//!   finished waits for it, so the stream's order still decides.
//! - Symbolic links and hard links are made under a temporary name and
//!   renamed too (`links.rs`).
//! - FIFOs, sockets and device nodes (`--specials`) are made under a
//!   temporary name and renamed too (`special.rs`).
//! - Directories are created as they come (0700) and get their mode and
//!   times at the end, deepest first, so that a read-only directory can be
//!   filled and its mtime is not disturbed by what is created inside.
//! - A file that cannot be written (no permission, disk full, a directory in
//!   the way) is a warning naming it; its temporary file is removed and the
//!   copy goes on. [`Unpacker`]'s `flush`, which the transfer calls once the
//!   stream was verified whole, applies the directories' metadata and then
//!   fails if any file was not copied whole (here, or unreadable on the
//!   sending side, or changed while it was read), so the run's exit status
//!   says so (`finish.rs`).
//! - A malformed stream is a write error at once (the transfer fails). A
//!   stream cut part way leaves the file in progress under its temporary name
//!   with what had arrived, which `rdcp --resume` continues
//!   ([`Entry::Resume`]: the partial copy is reopened without following
//!   links, its prefix hashed again, and only then appended to:
//!   `resume.rs`).
//! - Earlier runs' temporaries of a name whose writer no longer runs are
//!   removed once the name is published, or the sender says the copy here
//!   is current (`stale.rs`).
//!
//! With `preserve` (`-p`, the default with `-r`) modes and mtimes are kept,
//! and owner and group when running as root; without it new files get the
//! sender's permission bits less the umask, as `cp` does (`meta.rs`).

mod current;
mod dest;
mod device;
mod finish;
mod links;
mod meta;
mod pool;
mod prune;
mod publish;
mod resume;
mod special;
mod stale;
mod striped;

pub use dest::{is_resumed_as, Dest, DestError};

use crate::beneath::{name, open_dir_made, umask};
use crate::names::new_tmp;
use crate::xattr::Attr;
use crate::{shown, warn};
use current::{Current, Sink, Start};
use rdpipe_wire::entry::{Decoder, Entry, Event, Meta, RelPath};
use rustix::fs::{Mode, OFlags};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// What an unpack did, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnpackStats {
    /// Entries created (files, directories, links).
    pub created: u64,
    /// Entries that failed here.
    pub failed: u64,
    /// Files copied that changed while the sender read them.
    pub changed: u64,
    /// Files the sender could not read.
    pub sender_failed: u64,
    /// File data bytes written.
    pub bytes: u64,
    /// Files whose set-uid or set-gid bits were dropped (`--no-setid`).
    pub setid_dropped: u64,
    /// Entries removed from the mirror (`--delete`), or that would be (`-n`).
    pub deleted: u64,
    /// Entries of the mirror that could not be removed.
    pub not_deleted: u64,
}

/// The receiving side; see the module doc.
pub struct Unpacker {
    dest: Dest,
    /// The destination operand, for messages.
    label: String,
    preserve: bool,
    /// `--no-setid`: with `preserve`, files keep their mode less the set-uid
    /// and set-gid bits.
    no_setid: bool,
    /// `--specials`: FIFOs, sockets and device nodes are created; without
    /// it a stream that carries one is refused.
    specials: bool,
    root: bool,
    umask: u32,
    decoder: Decoder,
    /// The top-level name of a [`Dest::As`] copy (only one may come).
    top: Option<Vec<u8>>,
    current: Option<Current>,
    /// Directories whose metadata is applied at the end, in stream order.
    dirs: Vec<(RelPath, Meta)>,
    /// Where each directory is in `dirs`: a path sent again updates its
    /// metadata instead of growing the list.
    dir_index: std::collections::HashMap<RelPath, usize>,
    /// Extended attributes of directories, applied with their metadata.
    dir_xattrs: std::collections::HashMap<RelPath, Vec<Attr>>,
    /// Extended attributes received for the next entry.
    xattrs: Vec<Attr>,
    /// The last directory opened (entries of a tree come grouped by
    /// directory), and the owner and group a file created in it gets where
    /// `-p` as root needs them ([`Unpacker::new_owner`]).
    last_dir: Option<(Vec<u8>, Arc<OwnedFd>, Option<Owner>)>,
    stats: UnpackStats,
    /// The threads creating small files (started with the first one).
    pool: Option<pool::Pool>,
    /// How many ([`pool::threads`]); below 2, none.
    create_threads: usize,
    /// The paths of the files handed to the pool and not yet counted: an
    /// entry at or beneath one of them waits for the pool first, so that
    /// the stream's order still decides (a file, then a directory of the
    /// same name; a hard link to a file just sent).
    pending: std::collections::HashSet<Vec<u8>>,
    /// `--direct`: big files written with `O_DIRECT` ([`crate::direct`]).
    direct: bool,
    /// `--streams`: which stream this is ([`crate::stripe`]).
    stripe: Option<crate::stripe::Stripe>,
    /// `--streams`: its marker, locked while it runs.
    marker: Option<crate::stripe::Marker>,
    /// The first stream: the striped files it announced, published at its end.
    announced: Vec<striped::Announced>,
    /// `--delete`: what the stream named, for the removal pass (`prune.rs`).
    mirror: Option<prune::Named>,
    /// Earlier runs' temporaries, removed once their file is published
    /// (`stale.rs`).
    stale: stale::Stale,
}

/// A file's owner and group (uid, gid).
pub(super) type Owner = (u32, u32);

impl Unpacker {
    /// An unpacker into `dest` (`label`: the destination as the user named it).
    pub fn new(dest: Dest, label: &str, preserve: bool) -> Unpacker {
        Unpacker {
            dest,
            label: label.trim_end_matches('/').to_string(),
            preserve,
            no_setid: false,
            specials: false,
            root: rustix::process::geteuid().is_root(),
            umask: umask(),
            decoder: Decoder::new(),
            top: None,
            current: None,
            dirs: Vec::new(),
            dir_index: std::collections::HashMap::new(),
            dir_xattrs: std::collections::HashMap::new(),
            xattrs: Vec::new(),
            last_dir: None,
            stats: UnpackStats::default(),
            pool: None,
            create_threads: pool::threads(),
            pending: std::collections::HashSet::new(),
            direct: false,
            stripe: None,
            marker: None,
            announced: Vec::new(),
            mirror: None,
            stale: stale::Stale::default(),
        }
    }

    /// A mirror (`rdcp --delete`, [`crate::mirror`]): once the stream was
    /// verified and everything in it copied, what `dest` (opened by
    /// [`Dest::mirror`]) holds that the stream did not name is
    /// removed (`host`: `HOST:` in each message line, or empty).
    pub fn with_mirror(mut self, m: crate::mirror::Mirror, host: String) -> Unpacker {
        self.mirror = Some(prune::Named::new(m, host));
        self
    }

    /// One of several streams of a copy (`rdcp --streams`), holding its
    /// marker ([`Dest::open_stream`] made both).
    pub fn with_stripe(
        mut self,
        s: crate::stripe::Stripe,
        marker: Option<crate::stripe::Marker>,
    ) -> Unpacker {
        self.stripe = Some(s);
        self.marker = marker;
        self
    }

    /// With `yes` (`rdcp --no-setid`), files, nodes and resumed copies
    /// lose the set-uid and set-gid bits the sender gave them (directories
    /// keep set-gid: it only makes new entries inherit the group); each one
    /// is counted in [`UnpackStats::setid_dropped`]. Without `preserve`
    /// those bits are never kept anyway.
    pub fn with_no_setid(mut self, yes: bool) -> Unpacker {
        self.no_setid = yes;
        self
    }

    /// `--no-setid`'s rule for one entry's metadata.
    fn drop_setid(&mut self, e: &mut Entry) {
        const SETID: u32 = 0o6000;
        if !(self.no_setid && self.preserve) {
            return;
        }
        if let Entry::File { meta, .. }
        | Entry::Resume { meta, .. }
        | Entry::Striped { meta, .. }
        | Entry::Special { meta, .. } = e
        {
            if meta.mode & SETID != 0 {
                meta.mode &= !SETID;
                self.stats.setid_dropped += 1;
            }
        }
    }

    fn policy(&self) -> meta::Policy {
        meta::Policy {
            preserve: self.preserve,
            root: self.root,
            umask: self.umask,
        }
    }

    /// With `yes`, FIFOs, sockets and device nodes in the stream are
    /// created (device nodes only where this process may: as root);
    /// otherwise a stream that carries one is refused.
    pub fn with_specials(mut self, yes: bool) -> Unpacker {
        self.specials = yes;
        self
    }

    /// Creates small files on `n` threads (below 2: on the decoding
    /// thread) instead of [`pool::threads`]'s choice.
    pub fn with_create_threads(mut self, n: usize) -> Unpacker {
        self.create_threads = n;
        self
    }

    /// With `yes`, files of [`crate::direct::DIRECT_MIN`] bytes or more are
    /// written with `O_DIRECT` where the filesystem allows it (`--direct`).
    pub fn with_direct(mut self, yes: bool) -> Unpacker {
        self.direct = yes;
        self
    }

    /// The destination as the user named it, for messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// What it did so far.
    pub fn stats(&self) -> UnpackStats {
        self.stats
    }

    /// Maps an entry's path to the directory components (beneath the base)
    /// and its name; checks the single-top rule of [`Dest::As`].
    fn place(&mut self, rel: &RelPath) -> io::Result<(Vec<Vec<u8>>, Vec<u8>)> {
        let mut comps: Vec<Vec<u8>> = rel.components().map(<[u8]>::to_vec).collect();
        if let Dest::As { name, .. } = &self.dest {
            match &self.top {
                None => self.top = Some(comps[0].clone()),
                Some(t) if *t == comps[0] => {}
                Some(_) => {
                    return Err(io::Error::other(
                        "the stream has several top-level entries but the destination is not a directory",
                    ))
                }
            }
            comps[0] = name.clone();
        }
        let leaf = comps.pop().expect("a path has a component");
        Ok((comps, leaf))
    }

    /// Opens (creating) the directory `comps` beneath the base; the last
    /// one opened is shared by the entries after it in the same directory
    /// (no descriptor duplicated and closed per file).
    fn dir(&mut self, comps: &[Vec<u8>]) -> io::Result<Arc<OwnedFd>> {
        let key = comps.join(&b'/');
        if let Some((k, fd, _)) = &self.last_dir {
            if *k == key {
                return Ok(fd.clone());
            }
        }
        let base = match &self.dest {
            Dest::Into(fd) => fd.as_fd(),
            Dest::As { parent, .. } => parent.as_fd(),
            Dest::Device(_) => return Err(io::Error::other("the destination is not a directory")),
        };
        let refs: Vec<&[u8]> = comps.iter().map(Vec::as_slice).collect();
        let (fd, made) = open_dir_made(base, &refs, true)?;
        let fd = Arc::new(fd);
        self.stale.scan(&key, &fd, made);
        let owner = (self.preserve && self.root)
            .then(|| rustix::fs::fstat(&*fd).ok())
            .flatten()
            .map(|st| {
                // A set-group-ID directory gives its group to what is
                // created in it.
                let gid = if st.st_mode & 0o2000 != 0 {
                    st.st_gid
                } else {
                    rustix::process::getegid().as_raw()
                };
                (rustix::process::geteuid().as_raw(), gid)
            });
        self.last_dir = Some((key, fd.clone(), owner));
        Ok(fd)
    }

    /// The owner and group of a file this process creates in the directory
    /// [`Unpacker::dir`] opened last, where `-p` as root asks for them.
    fn new_owner(&self) -> Option<Owner> {
        self.last_dir.as_ref().and_then(|d| d.2)
    }

    /// Whether `rel`, or a directory on its way, is a file the pool has not
    /// finished.
    fn is_pending(&self, rel: &RelPath) -> bool {
        let b = rel.as_bytes();
        self.pending.contains(b)
            || b.iter()
                .enumerate()
                .any(|(i, &c)| c == b'/' && self.pending.contains(&b[..i]))
    }

    /// Where `rel` goes, as the user would name it.
    fn target(&self, rel: &RelPath) -> String {
        let rel = shown(rel.as_bytes());
        match &self.dest {
            Dest::Into(_) => format!("{}/{rel}", self.label),
            Dest::As { .. } => match rel.split_once('/') {
                Some((_, rest)) => format!("{}/{rest}", self.label),
                None => self.label.clone(),
            },
            Dest::Device(_) => self.label.clone(),
        }
    }

    fn failed(&mut self, rel: &RelPath, why: impl std::fmt::Display) {
        warn(format_args!("cannot write {}: {why}", self.target(rel)));
        self.stats.failed += 1;
    }

    fn event(&mut self, ev: Event<'_>) -> io::Result<()> {
        match ev {
            // Several sources (a remote pattern's matches: the sender
            // alone knows how many) go into a directory only, refused
            // before anything is created.
            Event::Start { sources } if sources > 1 && !matches!(self.dest, Dest::Into(_)) => {
                Err(io::Error::other(format!(
                    "{} is not a directory, and {sources} sources match: name an existing directory",
                    self.label
                )))
            }
            Event::Start { .. } => Ok(()),
            Event::Entry(e) => self.entry(e),
            Event::Data(b) => {
                self.data(b);
                Ok(())
            }
            Event::FileEnd(end) => {
                self.file_end(end);
                Ok(())
            }
        }
    }

    fn entry(&mut self, e: Entry) -> io::Result<()> {
        if let Some(m) = &mut self.mirror {
            if m.take(&e)? {
                return Ok(());
            }
        }
        let xattrs = match e {
            Entry::Xattr { name, value } => {
                if !crate::xattr::copied(&name) {
                    return Err(io::Error::other(format!(
                        "the sender sent extended attribute {}, which rdcp does not copy",
                        shown(&name)
                    )));
                }
                if self.xattrs.len() >= crate::xattr::MAX_PER_ENTRY {
                    return Err(io::Error::other(
                        "more extended attributes for one entry than rdcp sends",
                    ));
                }
                self.xattrs.push((name, value));
                return Ok(());
            }
            Entry::Dir { .. }
            | Entry::File { .. }
            | Entry::Resume { .. }
            | Entry::Striped { .. } => std::mem::take(&mut self.xattrs),
            _ if !self.xattrs.is_empty() => {
                return Err(io::Error::other(
                    "extended attributes before an entry that has none",
                ))
            }
            _ => Vec::new(),
        };
        let mut e = e;
        self.drop_setid(&mut e);
        if let Dest::Device(_) = self.dest {
            return self.device_entry(e);
        }
        if !self.pending.is_empty() {
            let touched = match &e {
                Entry::Dir { path, .. }
                | Entry::File { path, .. }
                | Entry::Resume { path, .. }
                | Entry::Striped { path, .. }
                | Entry::Piece { path, .. }
                | Entry::Symlink { path, .. }
                | Entry::Special { path, .. } => [Some(path), None],
                Entry::HardLink { path, target } => [Some(path), Some(target)],
                _ => [None, None],
            };
            if touched.into_iter().flatten().any(|p| self.is_pending(p)) {
                self.wait_pool();
            }
        }
        match e {
            Entry::Xattr { .. } => unreachable!("handled above"),
            Entry::Dir { path, meta } => {
                let (mut comps, leaf) = self.place(&path)?;
                comps.push(leaf);
                match self.dir(&comps) {
                    Ok(_) => {
                        self.stats.created += 1;
                        if !xattrs.is_empty() {
                            self.dir_xattrs.insert(path.clone(), xattrs);
                        }
                        match self.dir_index.get(&path) {
                            Some(&i) => self.dirs[i].1 = meta,
                            None => {
                                self.dir_index.insert(path.clone(), self.dirs.len());
                                self.dirs.push((path, meta));
                            }
                        }
                    }
                    Err(e) => self.failed(&path, e),
                }
            }
            Entry::File { path, meta, size } => {
                let (comps, leaf) = self.place(&path)?;
                let tmp = new_tmp(&leaf);
                if size <= pool::POOLED_MAX && self.create_threads >= 2 {
                    let dir = self.dir(&comps).map(|d| Start::Held(d, self.new_owner()));
                    self.start_file(path, leaf, tmp, meta, size, 0, dir, xattrs);
                    return Ok(());
                }
                let opened = self.dir(&comps).and_then(|dir| {
                    let f = create_tmp(&dir, &tmp)?;
                    Ok(Start::Opened(dir, f, Vec::new(), self.new_owner()))
                });
                self.start_file(path, leaf, tmp, meta, size, 0, opened, xattrs);
            }
            Entry::Resume {
                path,
                meta,
                size,
                offset,
                prefix,
                tmp,
            } => {
                let (comps, leaf) = self.place(&path)?;
                let mut tmp = tmp;
                let opened = self.dir(&comps).and_then(|dir| {
                    match resume::reopen(&dir, &leaf, &tmp, offset, prefix) {
                        // Made by an earlier run: whose it is, is not known.
                        Ok((file, pend)) => Ok(Start::Opened(dir, file, pend, None)),
                        // A partial copy only to be reused from its start
                        // (the sender's file no longer begins so) that cannot
                        // be: the file is written anew, as without it.
                        Err(_) if offset == 0 => {
                            tmp = new_tmp(&leaf);
                            let f = create_tmp(&dir, &tmp)?;
                            Ok(Start::Opened(dir, f, Vec::new(), self.new_owner()))
                        }
                        Err(e) => Err(e),
                    }
                });
                self.start_file(path, leaf, tmp, meta, size, offset, opened, xattrs);
            }
            Entry::Symlink { path, meta, target } => self.symlink(path, meta, target)?,
            Entry::HardLink { path, target } => self.hard_link(path, target)?,
            Entry::Special {
                path,
                meta,
                kind,
                rdev,
            } => self.special(path, meta, kind, rdev)?,
            Entry::Striped {
                path,
                meta,
                size,
                tmp,
            } => self.striped_entry(path, meta, size, tmp, xattrs)?,
            Entry::Piece {
                path,
                meta,
                size,
                index,
                tmp,
            } => self.piece_entry(path, meta, size, index, tmp)?,
            // A name the copy at the destination is current for (and the
            // mirror keeps: recorded above).
            Entry::Kept { path } => self.unstale(&path),
            Entry::End { failed, .. } => self.stats.sender_failed = failed,
            Entry::Have { .. } | Entry::Partial { .. } | Entry::Pieces { .. } => {
                return Err(io::Error::other(
                    "a destination listing's entry in a copy stream",
                ))
            }
        }
        Ok(())
    }
}

/// Creates the temporary file `tmp` in `dir`: exclusively, not through a
/// link, private until published (the final mode is set then).
fn create_tmp(dir: &OwnedFd, tmp: &[u8]) -> io::Result<File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let f = rustix::fs::openat(dir, name(tmp), flags, Mode::from_raw_mode(0o600))?;
    Ok(File::from(f))
}

impl Write for Unpacker {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut d = std::mem::take(&mut self.decoder);
        let r = d.feed(buf, |ev| self.event(ev));
        self.decoder = d;
        r.map(|()| buf.len())
    }

    /// Called once, after the transfer verified the whole stream.
    fn flush(&mut self) -> io::Result<()> {
        self.finish()
    }
}

impl Drop for Unpacker {
    fn drop(&mut self) {
        // A mirror whose stream did not end verified: nothing was removed.
        if self.mirror.take().is_some_and(|m| !m.mirror.dry_run) {
            warn(format_args!(
                "--delete: removed nothing from {}: the copy did not complete",
                self.label
            ));
        }
        // A stream cut part way: the file in progress stays under its
        // temporary name (never its own), for `rdcp --resume` to continue,
        // with what was written of it flushed out of the pending block.
        if let Some(mut cur) = self.current.take() {
            if let Sink::Temp(t) = &mut cur.sink {
                let _ = t.flush(cur.pos);
            }
        }
    }
}
