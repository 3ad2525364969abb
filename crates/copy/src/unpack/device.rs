//! A destination that is neither a directory nor a regular file
//! ([`Dest::Device`]: `rdcp -v big_file host:/dev/null`, a FIFO, a
//! terminal): the stream's one file is written straight into it, in order,
//! as `cp` and `scp` do. Renaming a temporary file over it would replace the
//! device node itself (as root, `/dev/null` would become a regular file).
//! It gets no holes, no metadata and no rename; a file whose checksum does
//! not match is a failure like any other, though its bytes were written.

use super::current::{Current, Sink};
use super::{Dest, Unpacker};
use rdpipe_wire::entry::{Entry, Meta, RelPath};
use rdpipe_wire::StreamHasher;
use std::fs::File;
use std::io;

impl Current {
    /// Data from `pos` to `end` of the entry `rel` (a file, or a piece of
    /// one), written straight into the device `file`.
    pub(super) fn straight(rel: RelPath, file: File, meta: Meta, pos: u64, end: u64) -> Current {
        Current {
            rel,
            dir: None,
            owner: None,
            name: Vec::new(),
            tmp: Vec::new(),
            sink: Sink::Straight(file),
            meta,
            size: end,
            pos,
            hash: StreamHasher::new(),
            xattrs: Vec::new(),
            piece: None,
        }
    }
}

impl Unpacker {
    pub(super) fn device_entry(&mut self, e: Entry) -> io::Result<()> {
        let Dest::Device(dev) = &self.dest else {
            unreachable!("only for Dest::Device")
        };
        match e {
            Entry::File { path, meta, size }
                if self.top.is_none() && !path.as_bytes().contains(&b'/') =>
            {
                let file = dev.try_clone()?;
                self.top = Some(path.as_bytes().to_vec());
                self.current = Some(Current::straight(path, file, meta, 0, size));
                Ok(())
            }
            Entry::Striped {
                path,
                meta,
                size,
                tmp,
            } => self.striped_entry(path, meta, size, tmp, Vec::new()),
            Entry::Piece {
                path,
                meta,
                size,
                index,
                tmp,
            } => self.piece_entry(path, meta, size, index, tmp),
            // Its extended attributes have nowhere to go.
            Entry::Xattr { .. } => Ok(()),
            Entry::End { failed, .. } => {
                self.stats.sender_failed = failed;
                Ok(())
            }
            _ => Err(io::Error::other(format!(
                "{} is not a directory or a regular file: one file can be copied into it, nothing else",
                self.label
            ))),
        }
    }
}
