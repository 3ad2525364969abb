//! `rdcp --resume` on the receiving side: a partial copy an interrupted
//! run left ([`Entry::Resume`](rdpipe_wire::entry::Entry::Resume) names it)
//! is continued only when it is what the listing saw: one of this file's
//! temporary names, a regular file with one name, ours and writable by
//! nobody else, and its first bytes hashing to the listed value. Only then
//! is it cut there and appended to; anything else is refused, never
//! followed or written.

use crate::beneath::name;
use crate::write::BLOCK;
use rustix::fs::{Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

/// [`reopen_partial`], and the start of the block the resumed data goes on
/// in, as far as it is written, so that blocks stay aligned for the hole
/// check.
pub(super) fn reopen(
    dir: &OwnedFd,
    leaf: &[u8],
    tmp: &[u8],
    offset: u64,
    prefix: u64,
) -> io::Result<(File, Vec<u8>)> {
    let file = reopen_partial(dir, leaf, tmp, offset, prefix)?;
    let start = offset - offset % BLOCK as u64;
    let mut pend = vec![0; (offset - start) as usize];
    file.read_exact_at(&mut pend, start)?;
    Ok((file, pend))
}

/// Opens the partial copy `tmp` of `leaf` in `dir` to continue it after its
/// first `offset` bytes, which must hash to `prefix`; cuts it there.
pub(super) fn reopen_partial(
    dir: &OwnedFd,
    leaf: &[u8],
    tmp: &[u8],
    offset: u64,
    prefix: u64,
) -> io::Result<File> {
    if crate::names::temp_target(tmp) != Some(leaf) {
        return Err(io::Error::other(
            "the partial copy's name is not one of this file's",
        ));
    }
    let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::openat(dir, name(tmp), flags, Mode::empty())?);
    let md = file.metadata()?;
    if !md.is_file() || md.len() < offset {
        return Err(io::Error::other(
            "its partial copy is gone or shorter than listed",
        ));
    }
    // One name only: a hard link planted under a temporary name must not
    // let the copy write into a file elsewhere.
    use std::os::unix::fs::MetadataExt;
    if md.nlink() != 1 {
        return Err(io::Error::other(
            "its partial copy has other names (hard links); not continued",
        ));
    }
    // Ours and writable by nobody else: no other user can hold it open for
    // writing and change the verified prefix before it is published.
    if md.uid() != rustix::process::geteuid().as_raw() || md.mode() & 0o022 != 0 {
        return Err(io::Error::other(
            "its partial copy belongs to another user or others may write it; not continued",
        ));
    }
    let (got, hash) = crate::hash_file(&file, offset)?;
    if got < offset {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    if hash != prefix {
        return Err(io::Error::other(
            "its partial copy changed since it was listed",
        ));
    }
    file.set_len(offset)?;
    Ok(file)
}
