//! A received entry's metadata as `-p` (or its absence) says: owner (as
//! root), mode and times, and extended attributes, set through a
//! descriptor of the file itself once its data is written and verified.

use super::Owner;
use crate::xattr::Attr;
use rdpipe_wire::entry::Meta;
use rustix::fs::{Mode, Timespec, Timestamps};
use std::fs::File;
use std::io;

/// An entry's access and modification times: both its mtime.
pub(super) fn times(m: &Meta) -> Timestamps {
    let t = Timespec {
        tv_sec: m.mtime,
        tv_nsec: m.mtime_ns as _,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// How a file's metadata is set.
#[derive(Debug, Clone, Copy)]
pub(super) struct Policy {
    /// `-p`: owner (as root), mode and times as sent; else the permission
    /// bits less the umask.
    pub preserve: bool,
    pub root: bool,
    pub umask: u32,
}

/// Sets a written file's owner, mode, times and extended attributes;
/// `owner`: the owner and group it has now, where known (a file this run
/// created: [`super::Unpacker::new_owner`]), so that one already owned as
/// sent is not chowned (a tree of root's files copied as root: one system
/// call a file fewer).
pub(super) fn set_meta(
    file: &File,
    meta: &Meta,
    xattrs: &[Attr],
    p: Policy,
    owner: Option<Owner>,
) -> io::Result<()> {
    if p.preserve {
        if p.root && owner != Some((meta.uid, meta.gid)) {
            std::os::unix::fs::fchown(file, Some(meta.uid), Some(meta.gid))?;
        }
        rustix::fs::fchmod(file, Mode::from_raw_mode(meta.mode as _))?;
        rustix::fs::futimens(file, &times(meta))?;
    } else {
        let mode = meta.mode & 0o777 & !p.umask;
        rustix::fs::fchmod(file, Mode::from_raw_mode(mode as _))?;
    }
    // After the mode: an ACL's mask entry is the group bits.
    crate::xattr::apply(file, xattrs)
}
