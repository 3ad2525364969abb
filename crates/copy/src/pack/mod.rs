//! The sending side of rdcp: walks the source operands and writes their
//! entry stream.
//!
//! Each operand becomes a top-level entry named by its last component (`cp`'s
//! rule: `rdcp -r a/b host:dst` makes `dst/b` when `dst` is a directory). A
//! directory is sent only with `recursive` (otherwise it is omitted with a
//! warning, as `cp` does). Inside a tree, names are sent in byte order, so two
//! runs over the same tree send the same stream. Symbolic links are sent as
//! links; a file with more than one link inside the copy is sent once and
//! then as hard links to it; devices, FIFOs and sockets are sent as nodes
//! with `specials` (`rdcp --specials`), else skipped with a warning each.
//!
//! A file is read through one descriptor opened without following links, for
//! exactly the size it had when opened: a file that shrinks is padded with
//! zeros, one that grows is cut there, and either way (or when its mtime moved)
//! its trailer says `changed` and a warning names it. A read error part way is
//! marked `unreadable` (the receiver discards the file) and counted as failed.
//!
//! For a mirror (`rdcp --delete`, [`crate::mirror`], [`pack_mirror_to`]) the
//! stream names every entry the source has: a file the listing shows
//! unchanged, or a node skipped without `specials`, goes as an
//! [`Entry::Kept`]; a dry run sends every entry so, and no data. Without a
//! mirror, a file the listing (`rdcp --resume`) shows unchanged goes as an
//! [`Entry::Kept`] only where the destination also holds a partial copy of
//! it, which the receiver then removes.

use crate::list::Manifest;
use crate::warn;
use rdpipe_wire::entry::{encode_start, Entry, FileEnd, Meta, RelPath, SpecialKind};
use rustix::fs::{Mode, OFlags};
use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

pub mod handoff;
mod out;
mod pieces;
mod window;
pub use out::{DataRead, PackOut, Writing};

/// What a pack sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackStats {
    /// Entries written (before the end entry).
    pub entries: u64,
    /// Files, directories and operands that could not be read.
    pub failed: u64,
    /// Files sent that changed while they were read.
    pub changed: u64,
    /// Bytes of file data sent.
    pub bytes: u64,
    /// Files not sent: complete at the destination (`--resume`).
    pub skipped: u64,
    /// Files continued from a partial copy at the destination.
    pub resumed: u64,
    /// Bytes not sent because the destination had them.
    pub skipped_bytes: u64,
}

/// What a pack sends besides regular files, directories and links.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackOptions {
    /// Directories' contents (`-r`); without it a directory operand is
    /// omitted with a warning.
    pub recursive: bool,
    /// Extended attributes and ACLs (`--xattrs`).
    pub xattrs: bool,
    /// FIFOs, sockets and device nodes (`--specials`).
    pub specials: bool,
    /// Big files read with `O_DIRECT` (`--direct`, [`crate::direct`]).
    pub direct: bool,
    /// One of several streams (`--streams`, [`crate::stripe`]): big files
    /// go in pieces, and a stream other than the first carries only its
    /// pieces.
    pub stripe: Option<crate::stripe::Stripe>,
}

fn meta_of(m: &Metadata) -> Meta {
    Meta {
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime: m.mtime(),
        mtime_ns: m.mtime_nsec().clamp(0, 999_999_999) as u32,
    }
}

struct Packer<'a, O: PackOut> {
    out: &'a mut O,
    manifest: Option<&'a Manifest>,
    head: Vec<u8>,
    links: HashMap<(u64, u64), RelPath>,
    opts: PackOptions,
    stats: PackStats,
    /// `--delete`: names not sent go as [`Entry::Kept`].
    mirror: Option<crate::mirror::Mirror>,
}

/// Writes the entry stream of `sources` into `out`; with a `manifest` (the
/// destination's listing, `--resume`) only what the destination lacks.
/// Errors are those of `out` (the transfer): a source that cannot be read is
/// a warning and a count in the stats and the end entry, not an error.
pub fn pack<W: Write>(
    sources: &[PathBuf],
    opts: PackOptions,
    manifest: Option<&Manifest>,
    out: &mut W,
) -> io::Result<PackStats> {
    pack_to(sources, opts, manifest, &mut Writing::new(out))
}

/// [`pack`] into any [`PackOut`] (the agent's is [`handoff`]'s).
pub fn pack_to<O: PackOut>(
    sources: &[PathBuf],
    opts: PackOptions,
    manifest: Option<&Manifest>,
    out: &mut O,
) -> io::Result<PackStats> {
    pack_mirror_to(sources, opts, manifest, None, out)
}

/// [`pack_to`], for a mirror with `mirror` (`rdcp --delete`, see the module
/// doc).
pub fn pack_mirror_to<O: PackOut>(
    sources: &[PathBuf],
    opts: PackOptions,
    manifest: Option<&Manifest>,
    mirror: Option<crate::mirror::Mirror>,
    out: &mut O,
) -> io::Result<PackStats> {
    let mut p = Packer {
        out,
        manifest,
        head: Vec::with_capacity(256),
        links: HashMap::new(),
        opts,
        stats: PackStats::default(),
        mirror,
    };
    p.head.clear();
    encode_start(sources.len() as u32, &mut p.head);
    p.out.put(&p.head)?;
    for src in sources {
        p.operand(src)?;
    }
    p.entry(&Entry::End {
        entries: p.stats.entries,
        failed: p.stats.failed,
    })?;
    p.out.flush()?;
    Ok(p.stats)
}

/// The name an operand has at the destination: its last component (of the
/// resolved path for `.` and `..`).
fn top_name(src: &Path) -> Option<Vec<u8>> {
    let last = src.file_name().map(|n| n.as_bytes().to_vec());
    match last {
        Some(n) if n != b"." && n != b".." => Some(n),
        _ => std::fs::canonicalize(src)
            .ok()?
            .file_name()
            .map(|n| n.as_bytes().to_vec()),
    }
}

/// xxh3-64 of the first `n` bytes of `f` (read with positioned reads), or
/// `None` when it is shorter.
fn prefix_hash(f: &File, n: u64) -> io::Result<Option<u64>> {
    let (got, hash) = crate::hash_file(f, n)?;
    Ok((got == n).then_some(hash))
}

impl<O: PackOut> Packer<'_, O> {
    fn entry(&mut self, e: &Entry) -> io::Result<()> {
        if self.pieces_only() && !matches!(e, Entry::Piece { .. } | Entry::End { .. }) {
            return Ok(());
        }
        self.head.clear();
        e.encode(&mut self.head);
        self.out.put(&self.head)?;
        if !matches!(e, Entry::End { .. } | Entry::Kept { .. }) {
            self.stats.entries += 1;
        }
        Ok(())
    }

    /// A dry run of a mirror: names only.
    fn names_only(&self) -> bool {
        self.mirror.is_some_and(|m| m.dry_run)
    }

    /// For a mirror, `rel` named without being sent.
    fn kept(&mut self, rel: RelPath) -> io::Result<()> {
        if self.mirror.is_some() {
            self.entry(&Entry::Kept { path: rel })?;
        }
        Ok(())
    }

    /// With `--xattrs`, the copied extended attributes of `fd` (the entry's
    /// file or directory, `path` for messages), as entries before its own.
    fn attrs<F: std::os::fd::AsFd>(&mut self, fd: F, path: &Path) -> io::Result<()> {
        if !self.opts.xattrs || self.names_only() {
            return Ok(());
        }
        match crate::xattr::read(fd) {
            Ok((attrs, skipped)) => {
                for name in skipped {
                    warn(format_args!(
                        "{}: extended attribute {name} is larger than rdcp copies (4 KiB); skipped",
                        path.display()
                    ));
                }
                for (name, value) in attrs.into_iter().take(crate::xattr::MAX_PER_ENTRY) {
                    self.entry(&Entry::Xattr { name, value })?;
                }
            }
            Err(e) => warn(format_args!(
                "{}: cannot read its extended attributes: {e}",
                path.display()
            )),
        }
        Ok(())
    }

    fn failed(&mut self, what: std::fmt::Arguments<'_>) {
        warn(what);
        self.stats.failed += 1;
    }

    fn operand(&mut self, src: &Path) -> io::Result<()> {
        // `dir/` names the directory a link points to, as for `cp`.
        let follow = src.as_os_str().as_bytes().ends_with(b"/");
        let md = if follow {
            std::fs::metadata(src)
        } else {
            std::fs::symlink_metadata(src)
        };
        let md = match md {
            Ok(m) => m,
            Err(e) => {
                self.failed(format_args!("cannot read {}: {e}", src.display()));
                return Ok(());
            }
        };
        let Some(rel) = top_name(src).and_then(|n| RelPath::new(n).ok()) else {
            self.failed(format_args!(
                "cannot copy {}: it has no name to copy to",
                src.display()
            ));
            return Ok(());
        };
        if md.is_dir() && !self.opts.recursive {
            self.failed(format_args!(
                "omitting directory {} (use -r)",
                src.display()
            ));
            return Ok(());
        }
        // Depth first, names in byte order.
        let mut stack = vec![(src.to_path_buf(), rel, Some(md))];
        while let Some((path, rel, md)) = stack.pop() {
            match md {
                Some(md) => self.one(&path, rel, &md, &mut stack)?,
                // A regular file as its directory listed it: its metadata
                // comes from the descriptor it is read through.
                None => self.file(&path, rel)?,
            }
        }
        Ok(())
    }

    fn one(
        &mut self,
        path: &Path,
        rel: RelPath,
        md: &Metadata,
        stack: &mut Vec<(PathBuf, RelPath, Option<Metadata>)>,
    ) -> io::Result<()> {
        let ft = md.file_type();
        if ft.is_dir() {
            let names = match std::fs::read_dir(path) {
                Ok(rd) => {
                    // The listing's file type (`d_type`) says which entries
                    // are regular files: those are not stat-ed here, only
                    // once opened (one `statx` a file fewer).
                    let mut v: Vec<_> = rd
                        .filter_map(|e| e.ok())
                        .map(|e| {
                            let file = e.file_type().is_ok_and(|t| t.is_file());
                            (e.file_name(), file)
                        })
                        .collect();
                    v.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                    v
                }
                Err(e) => {
                    self.failed(format_args!(
                        "cannot read directory {}: {e}",
                        path.display()
                    ));
                    return Ok(());
                }
            };
            if self.opts.xattrs {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                match rustix::fs::open(path, flags, Mode::empty()) {
                    Ok(fd) => self.attrs(&fd, path)?,
                    Err(e) => warn(format_args!(
                        "{}: cannot read its extended attributes: {}",
                        path.display(),
                        io::Error::from(e)
                    )),
                }
            }
            if self.names_only() {
                self.kept(rel.clone())?;
            } else {
                self.entry(&Entry::Dir {
                    path: rel.clone(),
                    meta: meta_of(md),
                })?;
            }
            for (name, file) in names.into_iter().rev() {
                let child = path.join(&name);
                let mut r = rel.as_bytes().to_vec();
                r.push(b'/');
                r.extend_from_slice(name.as_bytes());
                let Ok(r) = RelPath::new(r) else {
                    self.failed(format_args!("{}: path too long to copy", child.display()));
                    continue;
                };
                if file {
                    stack.push((child, r, None));
                    continue;
                }
                match std::fs::symlink_metadata(&child) {
                    Ok(m) => stack.push((child, r, Some(m))),
                    Err(e) => self.failed(format_args!("cannot read {}: {e}", child.display())),
                }
            }
        } else if self.names_only() {
            self.kept(rel)?;
        } else if ft.is_symlink() {
            match std::fs::read_link(path) {
                Ok(t) if !t.as_os_str().is_empty() => self.entry(&Entry::Symlink {
                    path: rel,
                    meta: meta_of(md),
                    target: t.as_os_str().as_bytes().to_vec(),
                })?,
                Ok(_) => self.failed(format_args!("{}: empty link", path.display())),
                Err(e) => self.failed(format_args!("cannot read link {}: {e}", path.display())),
            }
        } else if ft.is_file() {
            self.file(path, rel)?;
        } else {
            let kind = if ft.is_fifo() {
                SpecialKind::Fifo
            } else if ft.is_socket() {
                SpecialKind::Socket
            } else if ft.is_char_device() {
                SpecialKind::Char
            } else {
                SpecialKind::Block
            };
            if !self.opts.specials {
                warn(format_args!(
                    "skipping {} {} (--specials copies it)",
                    kind.name(),
                    path.display()
                ));
                return self.kept(rel);
            }
            let rdev = if kind.is_device() { md.rdev() } else { 0 };
            self.entry(&Entry::Special {
                path: rel,
                meta: meta_of(md),
                kind,
                rdev,
            })?;
        }
        Ok(())
    }

    fn file(&mut self, path: &Path, rel: RelPath) -> io::Result<()> {
        if self.names_only() {
            return self.kept(rel);
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
        let f = match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => File::from(fd),
            Err(e) => {
                self.failed(format_args!(
                    "cannot open {}: {}",
                    path.display(),
                    io::Error::from(e)
                ));
                return Ok(());
            }
        };
        let before = match f.metadata() {
            Ok(m) if m.is_file() => m,
            Ok(_) => {
                warn(format_args!(
                    "skipping {}: no longer a regular file",
                    path.display()
                ));
                return Ok(());
            }
            Err(e) => {
                self.failed(format_args!("cannot read {}: {e}", path.display()));
                return Ok(());
            }
        };
        if before.nlink() > 1 {
            let id = (before.dev(), before.ino());
            if let Some(first) = self.links.get(&id) {
                let target = first.clone();
                return self.entry(&Entry::HardLink { path: rel, target });
            }
            self.links.insert(id, rel.clone());
        }
        let size = before.len();
        let meta = meta_of(&before);
        let striped = self
            .opts
            .stripe
            .filter(|_| crate::stripe::striped(size, before.nlink()));
        if striped.is_none() && self.pieces_only() {
            return Ok(());
        }
        let (mut offset, mut resumed) = (0, false);
        if let Some(m) = self.manifest {
            if let Some(h) = m
                .have(&rel)
                .filter(|h| h.size == size && h.mtime == (meta.mtime, meta.mtime_ns))
            {
                // Complete at the destination, same size and mtime (and, in
                // a `--checksum` listing, same content): not sent.
                let same = match h.hash {
                    None => true,
                    Some(want) => matches!(prefix_hash(&f, size), Ok(Some(h)) if h == want),
                };
                if same {
                    self.stats.skipped += 1;
                    self.stats.skipped_bytes += size;
                    if self.mirror.is_none() && m.partial(&rel).is_some() {
                        // The receiver removes the partial copy an earlier
                        // run left of it (`unpack/stale.rs`).
                        return self.entry(&Entry::Kept { path: rel });
                    }
                    return self.kept(rel);
                }
                if !self.pieces_only() {
                    warn(format_args!(
                        "{}: the destination's copy has its size and mtime but other content; sending it again",
                        path.display()
                    ));
                }
            }
        }
        if let Some(s) = striped {
            return self.pieces(&f, path, rel, meta, s, &before);
        }
        if let Some(p) = self.manifest.and_then(|m| m.partial(&rel)) {
            let continues =
                p.size <= size && matches!(prefix_hash(&f, p.size), Ok(Some(h)) if h == p.hash);
            // A partial copy that does not continue this file is reused from
            // its start (no temporary file of an earlier run stays behind).
            let (at, prefix) = if continues {
                self.stats.resumed += 1;
                self.stats.skipped_bytes += p.size;
                (p.size, p.hash)
            } else {
                (0, rdpipe_wire::StreamHasher::new().digest())
            };
            self.attrs(&f, path)?;
            (offset, resumed) = (at, true);
            self.entry(&Entry::Resume {
                path: rel.clone(),
                meta,
                size,
                offset,
                prefix,
                tmp: p.tmp.clone(),
            })?;
        }
        if !resumed {
            self.attrs(&f, path)?;
            self.entry(&Entry::File {
                path: rel.clone(),
                meta,
                size,
            })?;
        }
        let mut src = &f;
        if offset > 0 {
            use std::io::Seek;
            src.seek(std::io::SeekFrom::Start(offset))?;
        }
        let DataRead { hash, short, error } = self.out.data(&f, size - offset, self.opts.direct)?;
        let after = f.metadata().ok();
        let changed = short
            || after.as_ref().is_none_or(|a| {
                a.len() != size
                    || a.mtime() != before.mtime()
                    || a.mtime_nsec() != before.mtime_nsec()
            });
        let unreadable = error.is_some();
        self.head.clear();
        FileEnd {
            checksum: hash,
            changed: changed && !unreadable,
            unreadable,
        }
        .encode(&mut self.head);
        self.out.put(&self.head)?;
        self.stats.bytes += size - offset;
        if let Some(e) = error {
            self.failed(format_args!("cannot read {}: {e}", path.display()));
        } else if changed {
            self.stats.changed += 1;
            warn(format_args!(
                "{} changed while it was read; its copy is not one state of it",
                path.display()
            ));
        }
        Ok(())
    }
}
