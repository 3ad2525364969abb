//! Writing a received file's data: positioned writes that leave whole
//! blocks of zeros as holes, so that a sparse file stays sparse and a file
//! of zeros costs no disk, whatever sizes the data arrives in.

use std::fs::File;
use std::io;

/// The block size of the hole check (and of the alignment it keeps).
pub const BLOCK: usize = 4096;

fn all_zero(b: &[u8]) -> bool {
    b.chunks_exact(16)
        .all(|c| u128::from_ne_bytes(c.try_into().expect("16 bytes")) == 0)
        && b.chunks_exact(16).remainder().iter().all(|&x| x == 0)
}

/// Adds `b` (which belongs at `at`) to the file: whole blocks are written
/// (or left as holes), the rest waits in `pend`; when `last` (`b` ends the
/// file) the rest is written too, so a small file is one write. Returns the
/// end of the data written (0 when none was), as [`write_sparse`] does.
pub fn put(
    file: &File,
    pend: &mut Vec<u8>,
    mut b: &[u8],
    mut at: u64,
    last: bool,
) -> io::Result<u64> {
    let mut end = 0;
    if !pend.is_empty() {
        let n = (BLOCK - pend.len()).min(b.len());
        pend.extend_from_slice(&b[..n]);
        b = &b[n..];
        at += n as u64;
        if pend.len() < BLOCK && !last {
            return Ok(0);
        }
        end = write_sparse(file, pend, at - pend.len() as u64)?;
        pend.clear();
    }
    let whole = if last {
        b.len()
    } else {
        b.len() / BLOCK * BLOCK
    };
    end = end.max(write_sparse(file, &b[..whole], at)?);
    pend.extend_from_slice(&b[whole..]);
    Ok(end)
}

/// `pwrite`s `b` at `at`, skipping 4 KiB blocks (aligned in the file) that
/// are all zeros, and zeros from the last block boundary to the end of `b`. Returns the end of the last run written (0 when `b` was
/// empty or all holes): the file is shorter than `at + b.len()` when that is
/// less, and needs its length set.
pub fn write_sparse(file: &File, b: &[u8], at: u64) -> io::Result<u64> {
    let mut i = 0;
    let mut run = 0; // start of the pending non-zero run
    let mut end = 0;
    while i < b.len() {
        let off = at + i as u64;
        let to_boundary = BLOCK - (off % BLOCK as u64) as usize;
        let stop = (i + to_boundary).min(b.len());
        // A whole block of zeros, or zeros to the end of `b` (only ever
        // the file's end: `put` passes whole blocks otherwise).
        let hole_able = stop - i == BLOCK || stop == b.len();
        if hole_able && all_zero(&b[i..stop]) {
            if run < i {
                write_all_at(file, &b[run..i], at + run as u64)?;
                end = at + i as u64;
            }
            run = stop;
        }
        i = stop;
    }
    if run < b.len() {
        write_all_at(file, &b[run..], at + run as u64)?;
        end = at + b.len() as u64;
    }
    Ok(end)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Data with zero blocks at the start, the middle and the end, fed to
    /// `put` in pieces of every shape, reads back equal, with the file's
    /// length right once what `put` and the last `write_sparse` returned says
    /// whether it needs setting.
    #[test]
    fn put_in_any_pieces_writes_the_data_and_says_where_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let mut shapes: Vec<Vec<u8>> = vec![Vec::new(), vec![7], vec![1; BLOCK]];
        for (lead, mid, tail) in [(1, 1, 1), (0, 2, 3), (2, 0, 0), (0, 0, 1)] {
            let mut d = vec![0u8; lead * BLOCK];
            d.extend((0..BLOCK + 100).map(|i| (i % 251) as u8 + 1));
            d.extend(vec![0u8; mid * BLOCK]);
            d.extend((0..300).map(|i| (i % 13) as u8 + 1));
            d.extend(vec![0u8; tail * BLOCK + 17 * (tail % 2)]);
            shapes.push(d);
        }
        for (k, data) in shapes.iter().enumerate() {
            for cut in [1, 100, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK, 1 << 20] {
                let p = dir.path().join(format!("f{k}-{cut}"));
                let file = File::create(&p).unwrap();
                let (mut pend, mut end, mut at) = (Vec::new(), 0, 0);
                for piece in data.chunks(cut) {
                    let last = at + piece.len() == data.len();
                    end = end.max(put(&file, &mut pend, piece, at as u64, last).unwrap());
                    at += piece.len();
                }
                let e = write_sparse(&file, &pend, (at - pend.len()) as u64).unwrap();
                end = end.max(e);
                assert_eq!(file.metadata().unwrap().len(), end, "shape {k} cut {cut}");
                if end < data.len() as u64 {
                    file.set_len(data.len() as u64).unwrap();
                }
                assert_eq!(&std::fs::read(&p).unwrap(), data, "shape {k} cut {cut}");
                let m = std::fs::metadata(&p).unwrap();
                let full = data.chunks(BLOCK).filter(|b| !all_zero(b)).count() as u64;
                assert!(
                    m.blocks() * 512 <= full * BLOCK as u64,
                    "shape {k} cut {cut}: zero blocks left as holes ({} blocks, {full} full)",
                    m.blocks()
                );
            }
        }
    }
}
