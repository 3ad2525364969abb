//! Opening and creating names beneath a directory without leaving it.
//!
//! The receiver holds a descriptor of the destination directory and reaches
//! everything through it, one component at a time, each opened with
//! `O_NOFOLLOW | O_DIRECTORY`: a symbolic link in the destination (planted
//! there before or during the copy) is refused, never followed, so no entry
//! of a stream can make rdcp write outside the destination. The components
//! themselves were checked by the decoder ([`rdpipe_wire::entry::RelPath`]:
//! no `..`, no absolute path).

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// A component as a path argument.
pub fn name(c: &[u8]) -> &OsStr {
    OsStr::from_bytes(c)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens the directory at `comps` beneath `base`; with `create`, missing
/// directories are made (mode 0700 until their own metadata is applied).
/// A component that is a symbolic link or not a directory is an error.
pub fn open_dir(base: BorrowedFd<'_>, comps: &[&[u8]], create: bool) -> io::Result<OwnedFd> {
    open_dir_made(base, comps, create).map(|(fd, _)| fd)
}

/// [`open_dir`], and whether this call created the directory itself.
pub fn open_dir_made(
    base: BorrowedFd<'_>,
    comps: &[&[u8]],
    create: bool,
) -> io::Result<(OwnedFd, bool)> {
    let mut cur: Option<OwnedFd> = None;
    let mut made = false;
    for c in comps {
        let at = cur.as_ref().map_or(base, |f| f.as_fd());
        made = false;
        let next = match rustix::fs::openat(at, name(c), dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(at, name(c), Mode::from_raw_mode(0o700)) {
                    Ok(()) => made = true,
                    Err(Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                rustix::fs::openat(at, name(c), dir_flags(), Mode::empty()).map_err(refused)?
            }
            Err(e) => return Err(refused(e)),
        };
        cur = Some(next);
    }
    match cur {
        Some(fd) => Ok((fd, made)),
        None => rustix::fs::openat(base, ".", dir_flags(), Mode::empty())
            .map(|fd| (fd, false))
            .map_err(Into::into),
    }
}

/// `ELOOP`/`ENOTDIR` from a `O_NOFOLLOW | O_DIRECTORY` open: say what it means.
fn refused(e: Errno) -> io::Error {
    match e {
        Errno::LOOP | Errno::NOTDIR => io::Error::other(
            "a path component in the destination is a symbolic link or not a directory (not followed)",
        ),
        e => e.into(),
    }
}

/// The process's umask, read without changing it (`/proc/self/status`);
/// 022 where that is not available. One reader for both: output files
/// need it too.
pub use rdpipe_transport::output::umask;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_in_the_destination_is_not_followed() {
        let d = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(outside.path(), d.path().join("evil")).expect("symlink");
        let base = rustix::fs::open(d.path(), dir_flags(), Mode::empty()).expect("open");
        let err = open_dir(base.as_fd(), &[b"evil", b"x"], true).expect_err("refused");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!outside.path().join("x").exists());
        // Missing directories are created beneath the base.
        open_dir(base.as_fd(), &[b"a", b"b"], true).expect("created");
        assert!(d.path().join("a/b").is_dir());
    }
}
