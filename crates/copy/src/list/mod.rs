//! `rdcp --resume`: what the destination already holds, listed on its host
//! ([`list`]) and read back on the sending side ([`Manifest`]).
//!
//! Before the copy, the destination's host lists, beneath where the sources
//! will land, every regular file (path, size, mtime: [`Entry::Have`]) and
//! every temporary file an interrupted copy left (`.NAME.rdcp-PID-N`, see
//! [`crate::names`]: its size and the xxh3-64 of what it holds,
//! [`Entry::Partial`]; the largest one per NAME, even an empty one, so that
//! it is reused rather than left; older smaller ones are removed). The
//! listing travels to the sources' host as an ordinary transfer; there the
//! packer ([`crate::pack`](mod@crate::pack)) skips each file whose size and
//! mtime are the listed ones, and continues a file from its partial copy
//! when the first bytes of the source hash to the same value: only the rest
//! crosses the wire ([`Entry::Resume`]), and the receiver checks the prefix
//! again before it appends.
//!
//! With `checksum` (`rdcp --checksum`) each complete file's entry also
//! carries the xxh3-64 of its content, and the packer skips it only when its
//! source hashes the same: a copy with the right size and mtime but other
//! bytes (damaged, or changed with its mtime put back) is sent again.
//!
//! The listing's start says how its paths map to the stream's: `0` when the
//! destination is a directory (paths as the stream names them), `1` when the
//! one source lands as the destination itself (the first component is the
//! destination's name, not the source's).

use crate::glob::Pattern;
use crate::names::{self, Name};
use crate::warn;
use rdpipe_wire::entry::{encode_start, Entry, RelPath};
use rustix::fs::{AtFlags, Mode, OFlags};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

mod manifest;
pub use manifest::{Have, Manifest, Partial, StripedCopy};

/// Writes the listing of `dest` for sources whose top-level names match
/// the patterns `tops` ([`crate::glob`]: a remote source's wildcards are
/// expanded on the other host, so only the pattern of its name is known
/// here; a literal name is one escaped), and the partial copies of such
/// names directly in `dest` (see the module doc). The walk goes through directory descriptors,
/// each opened without following links ([`crate::beneath`]), and looks at
/// every name with `fstatat(AT_SYMLINK_NOFOLLOW)`: a directory swapped for a
/// link while it runs cannot make it list, size or hash anything outside.
pub fn list<W: Write>(
    dest: &Path,
    must_be_dir: bool,
    tops: &[Vec<u8>],
    checksum: bool,
    out: &mut W,
) -> io::Result<()> {
    list_landing(dest, must_be_dir, tops, checksum, false, out)
}

/// [`list`] for a mirror (`rdcp --delete`, [`crate::mirror`]): the one
/// source lands as DEST itself, resolved as the unpacker resolves it.
pub fn list_mirror<W: Write>(dest: &Path, checksum: bool, out: &mut W) -> io::Result<()> {
    let real = crate::mirror::resolve(dest).unwrap_or_else(|_| dest.to_path_buf());
    list_landing(&real, false, &[], checksum, true, out)
}

/// [`list`]; with `mirror`, the one source lands as `dest` whatever it is.
fn list_landing<W: Write>(
    dest: &Path,
    must_be_dir: bool,
    tops: &[Vec<u8>],
    checksum: bool,
    mirror: bool,
    out: &mut W,
) -> io::Result<()> {
    let mut head = Vec::new();
    let tops: Vec<Pattern> = tops
        .iter()
        .map(|t| Pattern::new(&String::from_utf8_lossy(t)))
        .collect();
    let resumed_as = mirror
        || match tops.as_slice() {
            [t] => t
                .literal()
                .is_some_and(|t| crate::unpack::is_resumed_as(dest, must_be_dir, &t)),
            _ => false,
        };
    let is_dir = !resumed_as && std::fs::metadata(dest).is_ok_and(|m| m.is_dir());
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    // (directory holding the name, the name, its path in the stream)
    let mut roots: Vec<(Arc<OwnedFd>, Vec<u8>, Vec<u8>)> = vec![];
    if is_dir {
        encode_start(0, &mut head);
        // DEST itself is followed, as the user named it (cp does too).
        if let Ok(d) = rustix::fs::open(dest, dir_flags, Mode::empty()) {
            crate::stripe::remove_stale_markers(&d);
            let d = Arc::new(d);
            roots.extend(
                top_roots(&d, &tops)
                    .into_iter()
                    .map(|t| (d.clone(), t.clone(), t)),
            );
        }
    } else if !must_be_dir {
        // (A mirror of `/`, which has no name, lists nothing: all is sent.)
        encode_start(1, &mut head);
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if let (Some(n), Ok(pd)) = (
            dest.file_name(),
            rustix::fs::open(parent, dir_flags, Mode::empty()),
        ) {
            crate::stripe::remove_stale_markers(&pd);
            let (pd, n) = (Arc::new(pd), n.as_bytes().to_vec());
            // DEST itself, and beside it the partial copies of DEST (the one
            // source being a file cut short).
            for e in dir_names(&pd) {
                if names::tmp_target(&e) == Some(&n[..]) {
                    roots.push((pd.clone(), e.clone(), e));
                }
            }
            roots.push((pd, n.clone(), n));
        }
    } else {
        encode_start(0, &mut head);
    }
    out.write_all(&head)?;
    let mut entries = 0u64;
    let mut partials: HashMap<Vec<u8>, Vec<Candidate>> = HashMap::new();
    let mut stack = roots;
    while let Some((dir, name, rel)) = stack.pop() {
        let Ok(st) = rustix::fs::statat(
            &*dir,
            crate::beneath::name(&name),
            AtFlags::SYMLINK_NOFOLLOW,
        ) else {
            continue;
        };
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        if kind == rustix::fs::FileType::Directory {
            let Ok(sub) = crate::beneath::open_dir(dir.as_fd(), &[&name], false) else {
                continue;
            };
            let sub = Arc::new(sub);
            for e in dir_names(&sub) {
                let mut r = rel.clone();
                r.push(b'/');
                r.extend_from_slice(&e);
                stack.push((sub.clone(), e, r));
            }
        } else if kind == rustix::fs::FileType::RegularFile {
            let parent_rel = match rel.iter().rposition(|&b| b == b'/') {
                Some(i) => &rel[..=i],
                None => &rel[..0],
            };
            let ours = names::parse(&name);
            if let Some(target) = ours.and_then(|n| n.target()) {
                let Ok(path_rel) = RelPath::new([parent_rel, target].concat()) else {
                    continue;
                };
                if let Some(Name::Ledger { .. }) = ours {
                    continue;
                }
                if let Some(Name::Striped { .. }) = ours {
                    // A striped copy: the pieces its ledger has as done.
                    entries += pieces_of(&dir, &name, path_rel, &mut head, out)?;
                    continue;
                }
                if st.st_nlink == 1 {
                    partials
                        .entry(path_rel.as_bytes().to_vec())
                        .or_default()
                        .push(Candidate {
                            dir: dir.clone(),
                            name: name.clone(),
                            rel: path_rel,
                            size: st.st_size as u64,
                            mtime: st.st_mtime as i64,
                        });
                }
                continue;
            }
            let Ok(path_rel) = RelPath::new(rel) else {
                continue;
            };
            let size = st.st_size as u64;
            let hash = if checksum {
                // A file that cannot be read, or whose size moved while it
                // was hashed, is not listed: it is sent again.
                match hash_at(&dir, &name) {
                    Ok((n, h)) if n == size => Some(h),
                    _ => continue,
                }
            } else {
                None
            };
            head.clear();
            Entry::Have {
                path: path_rel,
                size,
                mtime: st.st_mtime as i64,
                mtime_ns: st.st_mtime_nsec.min(999_999_999) as u32,
                hash,
            }
            .encode(&mut head);
            out.write_all(&head)?;
            entries += 1;
        }
    }
    // Per file, the largest partial copy is offered; older, smaller ones of
    // earlier interruptions (untouched for a minute: not a copy running now)
    // are removed.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    for mut cands in partials.into_values() {
        cands.sort_by_key(|c| std::cmp::Reverse(c.size));
        let best = cands.remove(0);
        for stale in cands.iter().filter(|c| now - c.mtime > 60) {
            let _ = rustix::fs::unlinkat(
                &*stale.dir,
                crate::beneath::name(&stale.name),
                AtFlags::empty(),
            );
        }
        match hash_at(&best.dir, &best.name) {
            Ok((size, hash)) => {
                head.clear();
                Entry::Partial {
                    path: best.rel,
                    tmp: best.name,
                    size,
                    hash,
                }
                .encode(&mut head);
                out.write_all(&head)?;
                entries += 1;
            }
            Err(e) => warn(format_args!(
                "cannot read a partial copy of {}: {e}",
                crate::shown(best.rel.as_bytes())
            )),
        }
    }
    head.clear();
    Entry::End { entries, failed: 0 }.encode(&mut head);
    out.write_all(&head)?;
    out.flush()
}

/// The `Pieces` entries of the striped temporary file `tmp` (none without
/// a readable ledger: then it is not offered); how many.
fn pieces_of<W: Write>(
    dir: &OwnedFd,
    tmp: &[u8],
    path: RelPath,
    head: &mut Vec<u8>,
    out: &mut W,
) -> io::Result<u64> {
    let Ok(Some((ledger, size, meta))) = crate::stripe::Ledger::existing(dir, tmp) else {
        return Ok(0);
    };
    let Ok(states) = ledger.states() else {
        return Ok(0);
    };
    let mut n = 0;
    // Bits per entry: as many as the header has room for beside the names.
    let room = rdpipe_wire::entry::MAX_HEADER_LEN - (37 + path.as_bytes().len() + tmp.len());
    let per_entry = 8 * room.min(rdpipe_wire::entry::MAX_XATTR_VALUE);
    for (k, part) in states.chunks(per_entry).enumerate() {
        let mut bits = vec![0u8; part.len().div_ceil(8)];
        for (j, s) in part.iter().enumerate() {
            if *s != crate::stripe::PieceState::Missing {
                bits[j / 8] |= 1 << (j % 8);
            }
        }
        head.clear();
        Entry::Pieces {
            path: path.clone(),
            tmp: tmp.to_vec(),
            size,
            mtime: meta.mtime,
            mtime_ns: meta.mtime_ns,
            first: (k * per_entry) as u64,
            bits,
        }
        .encode(head);
        out.write_all(head)?;
        n += 1;
    }
    Ok(n)
}

/// What the listing starts from in the destination directory `d`: the names
/// there that match `tops`, and rdcp's temporary files of such names beside
/// them (a partial copy of a source that is a file; [`crate::names`] says
/// which names are ours). Each name once.
fn top_roots(d: &OwnedFd, tops: &[Pattern]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = tops.iter().filter_map(Pattern::literal).collect();
    let cut = |n: &[u8]| n[..n.len().min(names::CUT)].to_vec();
    let literal_cut: Vec<Vec<u8>> = out.iter().map(|n| cut(n)).collect();
    let wild: Vec<&Pattern> = tops.iter().filter(|t| t.literal().is_none()).collect();
    for e in dir_names(d) {
        let ours =
            |n: &[u8]| literal_cut.iter().any(|l| l == n) || wild.iter().any(|p| p.matches(n));
        let wanted = match names::tmp_target(&e) {
            Some(target) => ours(target),
            None => wild.iter().any(|p| p.matches(&e)),
        };
        if wanted {
            out.push(e);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The names in directory `d` (not `.` and `..`).
fn dir_names(d: &OwnedFd) -> Vec<Vec<u8>> {
    let Ok(dir) = rustix::fs::Dir::read_from(d) else {
        return vec![];
    };
    dir.filter_map(Result::ok)
        .map(|e| e.file_name().to_bytes().to_vec())
        .filter(|n| n != b"." && n != b"..")
        .collect()
}

/// A temporary file found while listing.
struct Candidate {
    dir: Arc<OwnedFd>,
    name: Vec<u8>,
    rel: RelPath,
    size: u64,
    mtime: i64,
}

/// Size and xxh3-64 of the regular file `name` in `dir`, opened without
/// following a link or blocking on a FIFO.
fn hash_at(dir: &OwnedFd, name: &[u8]) -> io::Result<(u64, u64)> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let f = File::from(rustix::fs::openat(
        dir,
        crate::beneath::name(name),
        flags,
        Mode::empty(),
    )?);
    if !f.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    crate::hash_file(&f, u64::MAX)
}
