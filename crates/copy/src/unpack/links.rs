//! Symbolic links and hard links: made under a temporary name beside their
//! target and published over it by a rename like every other entry, so a
//! link never replaces an existing name until it is whole.

use super::meta::times;
use super::publish::publish;
use super::Unpacker;
use crate::beneath::name;
use crate::names::new_tmp;
use rdpipe_wire::entry::{Meta, RelPath};
use rustix::fs::AtFlags;
use std::io;

impl Unpacker {
    /// Creates the symbolic link `path` to `target`; a failure is a warning
    /// and a count.
    pub(super) fn symlink(&mut self, path: RelPath, meta: Meta, target: Vec<u8>) -> io::Result<()> {
        let (comps, leaf) = self.place(&path)?;
        let tmp = new_tmp(&leaf);
        let r = self.dir(&comps).and_then(|dir| {
            rustix::fs::symlinkat(name(&target), &dir, name(&tmp))?;
            if self.preserve {
                // The link's own times, set on its temporary name (the
                // rename keeps them): by its final name, a link swapped
                // in meanwhile would get them. Failure is not worth a
                // warning.
                let _ = rustix::fs::utimensat(
                    &dir,
                    name(&tmp),
                    &times(&meta),
                    AtFlags::SYMLINK_NOFOLLOW,
                );
            }
            publish(&dir, &tmp, &leaf)
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

    /// Creates `path` as another name of the file `target` the stream sent
    /// before; a failure is a warning and a count.
    pub(super) fn hard_link(&mut self, path: RelPath, target: RelPath) -> io::Result<()> {
        let (comps, leaf) = self.place(&path)?;
        let (tcomps, tleaf) = self.place(&target)?;
        let tmp = new_tmp(&leaf);
        let r = self.dir(&tcomps).and_then(|tdir| {
            let dir = self.dir(&comps)?;
            rustix::fs::linkat(&tdir, name(&tleaf), &dir, name(&tmp), AtFlags::empty())?;
            let r = publish(&dir, &tmp, &leaf);
            // Renaming a link over another link to the same inode
            // succeeds and does nothing (rename(2)): `tmp` stays.
            let _ = rustix::fs::unlinkat(&dir, name(&tmp), AtFlags::empty());
            r
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
}
