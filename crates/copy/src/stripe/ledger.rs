//! A striped file's ledger (`TMP.pieces` beside its temporary file): a
//! header naming the file's size and mtime, then one byte per piece, set
//! once the piece was written and verified. Every stream marks its own
//! pieces in it; the first stream publishes the file once all are done, and
//! `rdcp --resume` sends only those that are not.

use super::shared::{check_ours, open_shared};
use crate::beneath::name;
use crate::names::ledger_name;
use rdpipe_wire::entry::{piece_count, Meta};
use rustix::fs::{FlockOperation, Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

const MAGIC: &[u8; 8] = b"RDCPPCS1";
const HEAD: u64 = 32;

/// A piece's state in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceState {
    /// Not (yet) verified.
    Missing,
    /// Written and verified.
    Done,
    /// Written and verified, but read while the source changed.
    Changed,
}

/// A striped file's ledger: which pieces are written and verified.
pub struct Ledger {
    file: File,
    pieces: u64,
}

fn header(size: u64, meta: &Meta) -> [u8; HEAD as usize] {
    let mut h = [0u8; HEAD as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&size.to_be_bytes());
    h[16..24].copy_from_slice(&meta.mtime.to_be_bytes());
    h[24..28].copy_from_slice(&meta.mtime_ns.to_be_bytes());
    h
}

impl Ledger {
    /// Opens (creating) the ledger of `tmp` for a file of `size` bytes and
    /// `meta`'s mtime; a ledger made for another size or mtime (the source
    /// changed between two streams' reads, or since an interrupted run) is
    /// an error.
    pub fn open(dir: &OwnedFd, tmp: &[u8], size: u64, meta: &Meta) -> io::Result<Ledger> {
        let file = open_shared(dir, &ledger_name(tmp))?;
        let want = header(size, meta);
        // The first stream to get here writes the header, under a lock: one
        // that read another version of the file then finds it different.
        rustix::fs::flock(&file, FlockOperation::LockExclusive)?;
        if file.metadata()?.len() < HEAD {
            file.write_all_at(&want, 0)?;
        }
        let mut got = [0u8; HEAD as usize];
        file.read_exact_at(&mut got, 0)?;
        rustix::fs::flock(&file, FlockOperation::Unlock)?;
        if got != want {
            return Err(io::Error::other(
                "the file changed on the sending side while the streams read it (their sizes or mtimes differ)",
            ));
        }
        Ok(Ledger {
            file,
            pieces: piece_count(size),
        })
    }

    /// Reopens the ledger of `tmp` as it is, if there is one.
    pub fn existing(dir: &OwnedFd, tmp: &[u8]) -> io::Result<Option<(Ledger, u64, Meta)>> {
        let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let file = match rustix::fs::openat(dir, name(&ledger_name(tmp)), flags, Mode::empty()) {
            Ok(f) => File::from(f),
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        check_ours(&file)?;
        let mut h = [0u8; HEAD as usize];
        file.read_exact_at(&mut h, 0)?;
        if &h[..8] != MAGIC {
            return Err(io::Error::other("not a striped copy's ledger"));
        }
        let size = u64::from_be_bytes(h[8..16].try_into().expect("8"));
        if size > rdpipe_wire::entry::MAX_STRIPED {
            return Err(io::Error::other("not a striped copy's ledger"));
        }
        let meta = Meta {
            mtime: i64::from_be_bytes(h[16..24].try_into().expect("8")),
            mtime_ns: u32::from_be_bytes(h[24..28].try_into().expect("4")),
            ..Meta::default()
        };
        let pieces = piece_count(size);
        Ok(Some((Ledger { file, pieces }, size, meta)))
    }

    /// Records piece `i` as verified.
    pub fn mark(&self, i: u64, changed: bool) -> io::Result<()> {
        debug_assert!(i < self.pieces);
        self.file
            .write_all_at(&[if changed { 2 } else { 1 }], HEAD + i)
    }

    /// Every piece's state.
    pub fn states(&self) -> io::Result<Vec<PieceState>> {
        let mut b = vec![0u8; self.pieces as usize];
        let n = read_at_most(&self.file, &mut b, HEAD)?;
        Ok(b[..n]
            .iter()
            .map(|&s| match s {
                1 => PieceState::Done,
                2 => PieceState::Changed,
                _ => PieceState::Missing,
            })
            .chain(std::iter::repeat(PieceState::Missing))
            .take(self.pieces as usize)
            .collect())
    }
}

fn read_at_most(f: &File, b: &mut [u8], at: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < b.len() {
        match f.read_at(&mut b[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stripe::Stripe;
    use rdpipe_wire::entry::PIECE_SIZE;

    #[test]
    fn a_ledger_counts_pieces_and_refuses_another_version_of_the_file() {
        let d = tempfile::tempdir().unwrap();
        let dir: OwnedFd = File::open(d.path()).unwrap().into();
        let s = Stripe::parse("0/2/1").unwrap();
        let tmp = s.tmp_name(b"f");
        let meta = Meta {
            mtime: 5,
            ..Meta::default()
        };
        let size = 3 * PIECE_SIZE - 1;
        let l = Ledger::open(&dir, &tmp, size, &meta).unwrap();
        l.mark(2, false).unwrap();
        let again = Ledger::open(&dir, &tmp, size, &meta).unwrap();
        again.mark(0, true).unwrap();
        use PieceState::*;
        assert_eq!(l.states().unwrap(), [Changed, Missing, Done]);
        let other = Meta {
            mtime: 6,
            ..Meta::default()
        };
        assert!(Ledger::open(&dir, &tmp, size, &other).is_err());
        assert!(Ledger::open(&dir, &tmp, size + 1, &meta).is_err());
        let (e, esize, emeta) = Ledger::existing(&dir, &tmp).unwrap().unwrap();
        assert_eq!((esize, emeta.mtime), (size, 5));
        assert_eq!(e.states().unwrap(), [Changed, Missing, Done]);
    }
}
