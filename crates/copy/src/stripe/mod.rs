//! `rdcp --streams N`: big files striped over N streams.
//!
//! rdcp then runs N copies side by side between the same two hosts, each a
//! whole transfer of its own (connection, keys, send and receive loop,
//! reconnect), so that the CPU of keyed protection spreads over N cores on
//! each end. Stream 0 carries the tree as without `--streams`; a regular
//! file of [`STRIPE_MIN`] bytes or more (with one link) is cut into pieces
//! of [`PIECE_SIZE`] bytes, and stream k carries the pieces whose index is
//! k modulo N ([`Stripe::carries`]); the other streams carry nothing else.
//!
//! On the destination every stream writes its pieces into one temporary
//! file beside the target (`.NAME.rdcp-s<RUN>`, the same name on every
//! stream: [`Stripe::tmp_name`]; every such name is made and parsed in
//! [`crate::names`]), each piece verified on its own (xxh3 in its trailer)
//! and then marked done in the file's ledger (`TMP.pieces`, one byte per
//! piece after a header naming the file's size and mtime). Stream
//! 0 announced the file ([`Entry::Striped`](rdpipe_wire::entry::Entry)) and
//! publishes it: at its end it waits for the other streams to end (each
//! holds a lock on its marker file `.rdcp-s<RUN>.K` in the destination
//! while it runs, and writes one byte into it when its stream was verified
//! whole), then renames every striped file whose pieces are all done into
//! place with its metadata, and only then gives the directories theirs.
//! A file with a piece missing stays under its temporary name with its
//! ledger, for `rdcp --resume`, which sends only the pieces not done.

use crate::beneath::name;
use crate::names::{self, is_striped_tmp, ledger_name};
use rdpipe_wire::entry::{piece_count, Meta, PIECE_SIZE};
use rustix::fs::{FlockOperation, Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::time::Duration;

mod marker;
pub use marker::{
    release, remove_stale_markers, remove_superseded, wait_others, Marker, Published,
};

/// Files of at least this many bytes are striped (two pieces).
pub const STRIPE_MIN: u64 = 2 * PIECE_SIZE;

/// Whether a file of `size` bytes with `nlink` names is striped: big (up
/// to [`MAX_STRIPED`](rdpipe_wire::entry::MAX_STRIPED)), and one name (a file with several stays whole on the first stream, where its
/// hard links are made right after it).
pub fn striped(size: u64, nlink: u64) -> bool {
    (STRIPE_MIN..=rdpipe_wire::entry::MAX_STRIPED).contains(&size) && nlink == 1
}

/// How long stream 0, at its end, waits for another stream that has not
/// shown up at all (its agent never started, or its connection never came).
pub(crate) const ARRIVAL: Duration = Duration::from_secs(60);

/// Which of N streams this side is, and the run they belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripe {
    /// This stream, 0..count.
    pub index: u32,
    /// How many streams.
    pub count: u32,
    /// The run's random id: in every temporary and marker name.
    pub run: u64,
}

impl Stripe {
    /// Parses `K/N/RUN` (RUN in hex), as the agents get it.
    pub fn parse(s: &str) -> Option<Stripe> {
        let mut it = s.split('/');
        let index = it.next()?.parse().ok()?;
        let count = it.next()?.parse().ok()?;
        let run = u64::from_str_radix(it.next()?, 16).ok()?;
        (it.next().is_none() && index < count && count >= 2).then_some(Stripe { index, count, run })
    }

    /// Whether this stream carries piece `i`.
    pub fn carries(&self, i: u64) -> bool {
        i % u64::from(self.count) == u64::from(self.index)
    }

    /// The temporary name of `leaf`'s striped copy ([`names::striped`]).
    pub fn tmp_name(&self, leaf: &[u8]) -> Vec<u8> {
        names::striped(leaf, self.run)
    }

    /// The name of stream `k`'s marker in this run ([`names::marker`]).
    pub(crate) fn marker(&self, k: u32) -> Vec<u8> {
        names::marker(self.run, k)
    }
}

impl std::fmt::Display for Stripe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{:x}", self.index, self.count, self.run)
    }
}

/// Opens (creating) a file this run shares between its streams, without
/// following links; it must be a regular file with one name, ours, that
/// nobody else may write (a file planted under the name is refused).
fn open_shared(dir: &OwnedFd, file: &[u8]) -> io::Result<File> {
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

fn check_ours(f: &File) -> io::Result<()> {
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

    #[test]
    fn stripes_parse_and_share_out_the_pieces() {
        let s = Stripe::parse("1/3/ab").unwrap();
        assert_eq!((s.index, s.count, s.run), (1, 3, 0xab));
        assert_eq!(Stripe::parse(&s.to_string()), Some(s));
        assert!(Stripe::parse("3/3/ab").is_none());
        assert!(Stripe::parse("0/1/ab").is_none());
        assert!(Stripe::parse("0/2").is_none());
        assert!(Stripe::parse("0/2/zz").is_none());
        let carried: Vec<u64> = (0..7).filter(|&i| s.carries(i)).collect();
        assert_eq!(carried, [1, 4]);
        let t = s.tmp_name(b"big.img");
        assert!(is_striped_tmp(&t, b"big.img"));
        assert!(!is_striped_tmp(&t, b"other"));
        assert!(!is_striped_tmp(b".big.img.rdcp-12-3", b"big.img"));
        assert_eq!(
            names::dest_tmp(&t, b"copy.img"),
            Some(s.tmp_name(b"copy.img"))
        );
        assert_eq!(names::dest_tmp(b".big.img.rdcp-12-3", b"copy.img"), None);
        assert_eq!(names::dest_tmp(b"big.img", b"copy.img"), None);
    }

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

    #[test]
    fn stream_zero_waits_for_the_others_and_learns_how_they_ended() {
        let d = tempfile::tempdir().unwrap();
        let dir: OwnedFd = File::open(d.path()).unwrap().into();
        let run = 0x77;
        let s = |index| Stripe {
            index,
            count: 3,
            run,
        };
        let m0 = Marker::hold(&dir, &s(0)).unwrap();
        let m1 = Marker::hold(&dir, &s(1)).unwrap();
        let m2 = Marker::hold(&dir, &s(2)).unwrap();
        let t = std::thread::spawn(move || {
            m1.ended().unwrap();
            drop(m1);
            // Stream 2 ends without being verified.
            drop(m2);
        });
        let dir0 = dir.try_clone().unwrap();
        assert_eq!(wait_others(&dir0, &s(0)), [2]);
        t.join().unwrap();
        // Stream 0's own marker stays until it has published.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        release(&dir0, &s(0));
        drop(m0);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);

        // What an interrupted run leaves is removed, a live stream's marker
        // is not.
        let live = Marker::hold(&dir, &s(1)).unwrap();
        let stale = Stripe { run: 0x78, ..s(2) };
        drop(Marker::hold(&dir, &stale).unwrap());
        std::fs::write(d.path().join("other"), b"").unwrap();
        // A FIFO under a marker's name: neither waited on nor removed.
        let fifo = d.path().join(".rdcp-s0000000000000079.1");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        remove_stale_markers(&dir);
        let other = Stripe { run: 0x79, ..s(0) };
        assert_eq!(wait_others(&dir, &Stripe { count: 2, ..other }), [1]);
        assert_eq!(
            listed(d.path()),
            [
                ".rdcp-s0000000000000077.1",
                ".rdcp-s0000000000000079.1",
                "other"
            ]
        );
        drop(live);
    }

    /// The names in `dir`, sorted.
    fn listed(dir: &std::path::Path) -> Vec<String> {
        let mut left: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        left
    }

    #[test]
    fn superseded_striped_copies_go_unless_a_running_copy_writes_them() {
        let d = tempfile::tempdir().unwrap();
        let dir: OwnedFd = File::open(d.path()).unwrap().into();
        let at = |run: u64| Stripe {
            index: 0,
            count: 2,
            run,
        };
        let leaf = b"big.img".to_vec();
        let (stale, live, kept) = (at(0xa1), at(0xa2), at(0xa3));
        for s in [&stale, &live, &kept] {
            let t = s.tmp_name(&leaf);
            std::fs::write(d.path().join(std::str::from_utf8(&t).unwrap()), b"x").unwrap();
            let l = ledger_name(&t);
            std::fs::write(d.path().join(std::str::from_utf8(&l).unwrap()), b"x").unwrap();
        }
        // Another file's striped copy, and a stray file.
        let other = stale.tmp_name(b"other.img");
        std::fs::write(d.path().join(std::str::from_utf8(&other).unwrap()), b"x").unwrap();
        std::fs::write(d.path().join("big.img"), b"published").unwrap();
        // Run a2 is running: its first stream holds its marker.
        let _held = Marker::hold(&dir, &live).unwrap();
        remove_superseded(
            &dir,
            &dir,
            &[Published {
                tmp: kept.tmp_name(&leaf),
                leaf: leaf.clone(),
            }],
        );
        assert_eq!(
            listed(d.path()),
            [
                ".big.img.rdcp-s00000000000000a2",
                ".big.img.rdcp-s00000000000000a2.pieces",
                ".big.img.rdcp-s00000000000000a3",
                ".big.img.rdcp-s00000000000000a3.pieces",
                ".other.img.rdcp-s00000000000000a1",
                ".rdcp-s00000000000000a2.0",
                "big.img",
            ]
        );
    }
}
