//! Writing a received file: positioned writes that leave whole blocks of
//! zeros as holes, and reopening a partial copy to continue it
//! (`rdcp --resume`).

use crate::beneath::name;
use rdpipe_wire::StreamHasher;
use rustix::fs::{Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

/// The block size of the hole check (and of the alignment it keeps).
pub const BLOCK: usize = 4096;

fn all_zero(b: &[u8]) -> bool {
    b.chunks_exact(16)
        .all(|c| u128::from_ne_bytes(c.try_into().expect("16 bytes")) == 0)
        && b.chunks_exact(16).remainder().iter().all(|&x| x == 0)
}

/// Opens the partial copy `tmp` of `leaf` in `dir` to continue it after its
/// first `offset` bytes, which must hash to `prefix`; cuts it there.
pub fn reopen_partial(
    dir: &OwnedFd,
    leaf: &[u8],
    tmp: &[u8],
    offset: u64,
    prefix: u64,
) -> io::Result<File> {
    if crate::list::tmp_target(tmp) != Some(leaf) {
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
    let mut h = StreamHasher::new();
    let mut buf = vec![0; 1 << 20];
    while h.bytes() < offset {
        let want = (offset - h.bytes()).min(buf.len() as u64) as usize;
        let n = std::os::unix::fs::FileExt::read_at(&file, &mut buf[..want], h.bytes())?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        h.update(&buf[..n]);
    }
    if h.digest() != prefix {
        return Err(io::Error::other(
            "its partial copy changed since it was listed",
        ));
    }
    file.set_len(offset)?;
    Ok(file)
}

/// Adds `b` (which belongs at `at`) to the file: whole blocks are written
/// (or left as holes), the rest waits in `pend`.
pub fn put(file: &File, pend: &mut Vec<u8>, mut b: &[u8], mut at: u64) -> io::Result<()> {
    if !pend.is_empty() {
        let n = (BLOCK - pend.len()).min(b.len());
        pend.extend_from_slice(&b[..n]);
        b = &b[n..];
        at += n as u64;
        if pend.len() < BLOCK {
            return Ok(());
        }
        write_sparse(file, pend, at - BLOCK as u64)?;
        pend.clear();
    }
    let whole = b.len() / BLOCK * BLOCK;
    write_sparse(file, &b[..whole], at)?;
    pend.extend_from_slice(&b[whole..]);
    Ok(())
}

/// `pwrite`s `b` at `at`, skipping 4 KiB blocks (aligned in the file) that are all zeros.
pub fn write_sparse(file: &File, b: &[u8], at: u64) -> io::Result<()> {
    let mut i = 0;
    let mut run = 0; // start of the pending non-zero run
    while i < b.len() {
        let off = at + i as u64;
        let to_boundary = BLOCK - (off % BLOCK as u64) as usize;
        let end = (i + to_boundary).min(b.len());
        let whole = end - i == BLOCK;
        if whole && all_zero(&b[i..end]) {
            write_all_at(file, &b[run..i], at + run as u64)?;
            run = end;
        }
        i = end;
    }
    write_all_at(file, &b[run..], at + run as u64)
}

fn write_all_at(file: &File, mut b: &[u8], mut at: u64) -> io::Result<()> {
    while !b.is_empty() {
        match rustix::io::pwrite(file, b, at) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                b = &b[n..];
                at += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
