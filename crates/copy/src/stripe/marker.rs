//! The streams' markers in the destination (which stream runs, which ended
//! verified) and what stream 0 removes once it has published: the markers,
//! and striped copies that other versions of the published files left.

use super::shared::check_ours;
use super::{Stripe, ARRIVAL};
use crate::beneath::name;
use crate::names::{self, Name};
use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// A stream's marker in the destination, locked while the stream runs.
/// The first stream's (`.rdcp-s<RUN>.0`) says where the copy goes: the
/// others look for it in DEST (DEST is a directory the copy goes into) or
/// beside DEST (the copy is DEST), so that all follow the first stream's
/// reading of DEST however their starts interleave with its creating it
/// (`Dest::open_stream`). Another stream's tells the first whether it has
/// ended ([`wait_others`]); [`Marker::ended`] records that it was verified
/// whole.
pub struct Marker {
    file: File,
}

impl Marker {
    /// Makes and locks stream `s.index`'s marker in `base`. It is created
    /// under another name and renamed into place already locked, so stream
    /// 0 never finds it unlocked before this stream ended.
    pub fn hold(base: &OwnedFd, s: &Stripe) -> io::Result<Marker> {
        let real = s.marker(s.index);
        let new = Name::Marker {
            run: s.run,
            stream: s.index,
            new: true,
        }
        .format();
        let flags =
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let file = File::from(rustix::fs::openat(
            base,
            name(&new),
            flags,
            Mode::from_raw_mode(0o600),
        )?);
        rustix::fs::flock(&file, FlockOperation::LockExclusive)?;
        rustix::fs::renameat(base, name(&new), base, name(&real))?;
        Ok(Marker { file })
    }

    /// This stream was verified whole.
    pub fn ended(&self) -> io::Result<()> {
        self.file.write_all_at(&[1], 0)
    }
}

/// Stream 0 at its end: waits until every other stream has ended; the
/// streams that did not end verified (failed, killed, or never came within
/// a minute) by index. Removes their markers; its own stays, held, until
/// it has published ([`release`]), so that another run sees it running.
pub fn wait_others(base: &OwnedFd, s: &Stripe) -> Vec<u32> {
    wait_each(base, s)
}

/// Stream 0's last step: its marker goes.
pub fn release(base: &OwnedFd, s: &Stripe) {
    let _ = rustix::fs::unlinkat(base, name(&s.marker(0)), AtFlags::empty());
}

/// Whether run `run`'s first stream is running in `base`: its marker there
/// is ours and held locked.
fn running(base: &OwnedFd, run: u64) -> bool {
    let m = names::marker(run, 0);
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(f) = rustix::fs::openat(base, name(&m), flags, Mode::empty()) else {
        return false;
    };
    let f = File::from(f);
    check_ours(&f).is_ok() && rustix::fs::flock(&f, FlockOperation::NonBlockingLockShared).is_err()
}

/// A striped file just published: its name, and the temporary file it was.
pub struct Published {
    pub leaf: Vec<u8>,
    pub tmp: Vec<u8>,
}

/// After striped files were published in `dir` (`done`), removes the other striped copies of
/// the same files there, with their ledgers: those an interrupted run left
/// of another version of a file (`--resume` found it changed and sent it
/// whole under a new name), which no running copy (its first stream's
/// marker in `base` held) is writing.
pub fn remove_superseded(dir: &OwnedFd, base: &OwnedFd, done: &[Published]) {
    let Ok(list) = rustix::fs::Dir::read_from(dir) else {
        return;
    };
    let shorts: Vec<(std::borrow::Cow<'_, [u8]>, &[u8])> = done
        .iter()
        .map(|p| (names::short(&p.leaf), &p.tmp[..]))
        .collect();
    for e in list.flatten() {
        let n = e.file_name().to_bytes();
        // A striped file, or its ledger.
        let (target, run) = match names::parse(n) {
            Some(Name::Striped { target, run } | Name::Ledger { target, run }) => (target, run),
            _ => continue,
        };
        let tmp = n.strip_suffix(b".pieces").unwrap_or(n);
        let ours = shorts
            .iter()
            .any(|(s, kept)| target == &s[..] && tmp != *kept);
        if ours && !running(base, run) {
            let _ = rustix::fs::unlinkat(dir, name(n), AtFlags::empty());
        }
    }
}

fn wait_each(base: &OwnedFd, s: &Stripe) -> Vec<u32> {
    let mut failed = Vec::new();
    for k in 1..s.count {
        let m = s.marker(k);
        let start = Instant::now();
        // Non-blocking: a FIFO planted under the name must not hold us; it
        // is then refused as not ours.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file = loop {
            match rustix::fs::openat(base, name(&m), flags, Mode::empty()) {
                Ok(f) => break Some(File::from(f)),
                Err(rustix::io::Errno::NOENT) if start.elapsed() < ARRIVAL => {
                    // It has not started yet: its marker appears, locked,
                    // as soon as its stream is authenticated.
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(_) => break None,
            }
        };
        let ours = file.filter(|f| check_ours(f).is_ok());
        let ok = ours.as_ref().is_some_and(|f| {
            rustix::fs::flock(f.as_fd(), FlockOperation::LockShared).is_ok() && {
                let mut b = [0u8; 1];
                matches!(f.read_at(&mut b, 0), Ok(1)) && b[0] == 1
            }
        });
        if ours.is_some() {
            let _ = rustix::fs::unlinkat(base, name(&m), AtFlags::empty());
        }
        if !ok {
            failed.push(k);
        }
    }
    failed
}

/// Removes the markers interrupted copies left in `base` (`rdcp --resume`'s
/// listing does): those no running stream holds locked.
pub fn remove_stale_markers(base: &OwnedFd) {
    let Ok(dir) = rustix::fs::Dir::read_from(base) else {
        return;
    };
    for e in dir.flatten() {
        let n = e.file_name().to_bytes();
        if !names::is_marker(n) {
            continue;
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let Ok(f) = rustix::fs::openat(base, name(n), flags, Mode::empty()) else {
            continue;
        };
        // Only ours: never someone else's file (or FIFO) of that name.
        let f = File::from(f);
        if check_ours(&f).is_err() {
            continue;
        }
        if rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok() {
            let _ = rustix::fs::unlinkat(base, name(n), AtFlags::empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::ledger_name;

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
