//! `O_DIRECT` writing of an output file (`rdrecv --direct FILE`, rdpipe's
//! `--direct` for `> FILE` and `>> FILE`): big sequential writes go from the
//! page-aligned buffers to the device without passing through the page cache.
//!
//! `O_DIRECT` needs the memory, the file offset and the length aligned (here to
//! [`BLOCK`], a multiple of every common logical block size). A stream's chunks
//! usually are: the receiver's buffers are page-aligned and a file input fills
//! whole chunks. Those are written as they come; anything else (a short chunk from
//! a pipe input, what follows it) is gathered in an aligned staging buffer and
//! written from there when it is full. The unaligned tail of the stream is written
//! through the page cache at the end ([`Direct::finish`], with `O_DIRECT` turned
//! off again), so the file has exactly the stream's length.
//!
//! A filesystem that refuses `O_DIRECT` (ramfs, some FUSE and network
//! filesystems) refuses it when the flag is set ([`Fallback::Refused`]); a write
//! that the device refuses later (`EINVAL`: a stricter alignment than [`BLOCK`])
//! turns `O_DIRECT` off for the rest of the stream. Either way the bytes are the
//! same, only the page cache is used.

use crate::buf::PageBuf;
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use std::fs::File;
use std::io::{self, Write};

/// The alignment of every `O_DIRECT` write: memory, offset and length.
pub const BLOCK: usize = crate::buf::ALIGN;

/// The staging buffer for data that does not arrive aligned.
const STAGE: usize = 1 << 20;

/// Why an output file is written through the page cache although `--direct`
/// asked otherwise.
#[derive(Debug, thiserror::Error)]
pub enum Fallback {
    /// The filesystem refuses `O_DIRECT`.
    #[error("its filesystem refuses O_DIRECT ({0})")]
    Refused(io::Error),
    /// `>> FILE` whose length is not a multiple of the block size.
    #[error("appending at offset {0}, which is not a multiple of {BLOCK}")]
    UnalignedStart(u64),
    /// Not a regular file (a device, a FIFO): written directly anyway.
    #[error("it is not a regular file")]
    NotRegular,
}

/// The `O_DIRECT` state of one output file (see the module doc).
pub struct Direct {
    stage: PageBuf,
    staged: usize,
    /// Whether the file descriptor has `O_DIRECT` set.
    on: bool,
}

/// Turns `O_DIRECT` on or off for `file` (also rdcp's, `rdpipe_copy::direct`).
pub fn set_direct(file: &File, on: bool) -> io::Result<()> {
    let flags = fcntl_getfl(file)?;
    let flags = if on {
        flags | OFlags::DIRECT
    } else {
        flags - OFlags::DIRECT
    };
    fcntl_setfl(file, flags)?;
    Ok(())
}

impl Direct {
    /// Turns `O_DIRECT` on for `file`, whose offset is `at`.
    pub fn enable(file: &File, at: u64) -> Result<Direct, Fallback> {
        if at % BLOCK as u64 != 0 {
            return Err(Fallback::UnalignedStart(at));
        }
        set_direct(file, true).map_err(Fallback::Refused)?;
        Ok(Direct {
            stage: PageBuf::new(STAGE),
            staged: 0,
            on: true,
        })
    }

    /// Takes some of `buf` (see [`Write::write`]).
    pub fn write(&mut self, file: &mut File, buf: &[u8]) -> io::Result<usize> {
        if !self.on {
            if self.staged > 0 {
                put(&mut self.on, file, &self.stage[..self.staged])?;
                self.staged = 0;
            }
            return file.write(buf);
        }
        if self.staged == 0 && buf.as_ptr() as usize % BLOCK == 0 && buf.len() >= BLOCK {
            let n = buf.len() - buf.len() % BLOCK;
            put(&mut self.on, file, &buf[..n])?;
            return Ok(n);
        }
        let k = buf.len().min(self.stage.len() - self.staged);
        self.stage[self.staged..self.staged + k].copy_from_slice(&buf[..k]);
        self.staged += k;
        if self.staged == self.stage.len() {
            put(&mut self.on, file, &self.stage[..self.staged])?;
            self.staged = 0;
        }
        Ok(k)
    }

    /// Writes what is staged: its aligned part directly, the tail through the page
    /// cache (`O_DIRECT` off from here on).
    pub fn finish(&mut self, file: &mut File) -> io::Result<()> {
        let mut from = 0;
        if self.on {
            from = self.staged - self.staged % BLOCK;
            if from > 0 {
                put(&mut self.on, file, &self.stage[..from])?;
            }
            if self.on {
                self.on = false;
                set_direct(file, false)?;
            }
        }
        let r = file.write_all(&self.stage[from..self.staged]);
        self.staged = 0;
        r
    }
}

/// Writes all of `data` (aligned, while `O_DIRECT` is `on`); a write the kernel
/// refuses with `EINVAL` turns `O_DIRECT` off and goes on from where it stopped.
fn put(on: &mut bool, file: &mut File, data: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match file.write(&data[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if *on && e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                tracing::debug!("O_DIRECT write refused ({e}): writing through the page cache");
                *on = false;
                set_direct(file, false)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_in(dir: &str) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
        let d = tempfile::tempdir_in(dir).ok()?;
        let p = d.path().join("out");
        Some((d, p))
    }

    /// Odd pieces, aligned and unaligned, on tmpfs and a disk-backed directory.
    #[test]
    fn any_sequence_of_pieces_comes_out_byte_exact() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 977) as u8).collect();
        let mut aligned = PageBuf::new(data.len());
        aligned.copy_from_slice(&data);
        for dir in ["/var/tmp", "/dev/shm"] {
            let Some((_d, p)) = file_in(dir) else {
                continue;
            };
            for pieces in [
                vec![1 << 20, 1 << 20, 3_000_000 - (2 << 20)],
                vec![65536, 1000, 1 << 20, 4096, 12345, 1 << 20],
                vec![4095, 4097, 300_000],
            ] {
                let mut f = File::create(&p).unwrap();
                let Ok(mut d) = Direct::enable(&f, 0) else {
                    continue;
                };
                let mut at = 0;
                for len in pieces.iter().cycle() {
                    if at == data.len() {
                        break;
                    }
                    let end = (at + len).min(data.len());
                    let mut piece = &aligned[at..end];
                    while !piece.is_empty() {
                        let n = d.write(&mut f, piece).unwrap();
                        piece = &piece[n..];
                    }
                    at = end;
                }
                d.finish(&mut f).unwrap();
                drop(f);
                assert!(std::fs::read(&p).unwrap() == data, "{dir} {pieces:?}");
            }
        }
    }

    #[test]
    fn an_unaligned_append_start_is_refused_before_anything_is_written() {
        let Some((_d, p)) = file_in("/var/tmp") else {
            return;
        };
        let f = File::create(&p).unwrap();
        assert!(matches!(
            Direct::enable(&f, 100),
            Err(Fallback::UnalignedStart(100))
        ));
    }
}
