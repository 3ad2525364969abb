//! The files the streams of one run share in the destination (a striped
//! file's temporary file and ledger, the streams' markers): opened without
//! following links, and used only when each is a regular file with one
//! name, ours, that nobody else may write, so that a file someone planted
//! under the name is refused rather than written or trusted.

use crate::beneath::name;
use crate::names::is_striped_tmp;
use rustix::fs::{Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;

/// Opens (creating) a file this run shares between its streams, without
/// following links; it must be a regular file with one name, ours, that
/// nobody else may write (a file planted under the name is refused).
pub(super) fn open_shared(dir: &OwnedFd, file: &[u8]) -> io::Result<File> {
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let f = File::from(rustix::fs::openat(
        dir,
        name(file),
        flags,
        Mode::from_raw_mode(0o600),
    )?);
    check_ours(&f)?;
    Ok(f)
}

pub(super) fn check_ours(f: &File) -> io::Result<()> {
    let md = f.metadata()?;
    if !md.is_file()
        || md.nlink() != 1
        || md.uid() != rustix::process::geteuid().as_raw()
        || md.mode() & 0o022 != 0
    {
        return Err(io::Error::other(
            "a file is in the way of the striped copy's temporary file (not a private regular file of ours); not written",
        ));
    }
    Ok(())
}

/// Opens the striped temporary file `tmp` of `leaf` in `dir` (every stream
/// writing into it opens it so).
pub fn open_tmp(dir: &OwnedFd, leaf: &[u8], tmp: &[u8]) -> io::Result<File> {
    if !is_striped_tmp(tmp, leaf) {
        return Err(io::Error::other(
            "the striped copy's temporary name is not one of this file's",
        ));
    }
    open_shared(dir, tmp)
}
