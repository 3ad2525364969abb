//! FIFOs, sockets and device nodes (`rdcp --specials`): made with `mknodat`
//! under a temporary name, given their metadata through a descriptor of that
//! very node, and renamed into place like every other entry.
//!
//! A node cannot be opened for writing like a file (opening a FIFO blocks,
//! opening a device reaches the device), so its metadata is set through an
//! `O_PATH | O_NOFOLLOW` descriptor taken right after it was made and
//! checked to be a node of the kind made: the changes go through
//! `/proc/self/fd/N`, which names that inode and no other, so a name swapped
//! in the destination meanwhile cannot redirect a `chown` or `chmod`.

use super::meta::times;
use super::publish::publish;
use super::Unpacker;
use crate::beneath::name;
use rdpipe_wire::entry::{Meta, RelPath, SpecialKind};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;

fn file_type(kind: SpecialKind) -> FileType {
    match kind {
        SpecialKind::Fifo => FileType::Fifo,
        SpecialKind::Socket => FileType::Socket,
        SpecialKind::Char => FileType::CharacterDevice,
        SpecialKind::Block => FileType::BlockDevice,
    }
}

impl Unpacker {
    /// Creates the node `path` describes; a failure is a warning and a count.
    pub(super) fn special(
        &mut self,
        path: RelPath,
        meta: Meta,
        kind: SpecialKind,
        rdev: u64,
    ) -> io::Result<()> {
        if !self.specials {
            // The sender was not asked for nodes: this stream is not the
            // copy that was started.
            return Err(io::Error::other(format!(
                "the sender sent a {} but this copy does not create them (no --specials)",
                kind.name()
            )));
        }
        let (comps, leaf) = self.place(&path)?;
        let tmp = crate::names::new_tmp(&leaf);
        let r = self.dir(&comps).and_then(|dir| {
            let made = rustix::fs::mknodat(
                &dir,
                name(&tmp),
                file_type(kind),
                Mode::from_raw_mode(0o600),
                rdev,
            );
            match made {
                Ok(()) => {}
                Err(rustix::io::Errno::PERM) if kind.is_device() && !self.root => {
                    return Err(io::Error::other(format!(
                        "creating a {} needs root on this host",
                        kind.name()
                    )))
                }
                Err(e) => return Err(e.into()),
            }
            let r = self.node_meta(&dir, &tmp, kind, &meta);
            match r {
                Ok(()) => publish(&dir, &tmp, &leaf),
                Err(e) => {
                    let _ = rustix::fs::unlinkat(&dir, name(&tmp), AtFlags::empty());
                    Err(e)
                }
            }
        });
        match r {
            Ok(()) => {
                self.stats.created += 1;
                self.unstale(&path);
            }
            Err(e) => self.failed(&path, e),
        }
        Ok(())
    }

    /// Owner (as root, with `-p`), mode and times of the node just made as
    /// `tmp` in `dir`.
    fn node_meta(
        &self,
        dir: &OwnedFd,
        tmp: &[u8],
        kind: SpecialKind,
        meta: &Meta,
    ) -> io::Result<()> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(dir, name(tmp), flags, Mode::empty())?;
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != file_type(kind) {
            return Err(io::Error::other(
                "its temporary node was replaced while it was made",
            ));
        }
        let by_fd = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let mode = if self.preserve {
            if self.root {
                std::os::unix::fs::chown(&by_fd, Some(meta.uid), Some(meta.gid))?;
            }
            meta.mode
        } else {
            meta.mode & 0o777 & !self.umask
        };
        std::fs::set_permissions(&by_fd, std::fs::Permissions::from_mode(mode))?;
        if self.preserve {
            rustix::fs::utimensat(CWD, by_fd.as_str(), &times(meta), AtFlags::empty())?;
        }
        Ok(())
    }
}
