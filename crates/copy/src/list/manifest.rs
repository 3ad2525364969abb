//! A destination's listing read back on the sending side ([`Manifest`]):
//! per stream path, the complete file, the partial copy or the striped copy
//! the destination has, for the packer to skip a file, continue it, or send
//! only the pieces it lacks.

use rdpipe_wire::entry::{Decoder, Entry, Event, RelPath};
use rustix::fs::OFlags;
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

fn libc_nofollow() -> i32 {
    OFlags::NOFOLLOW.bits() as i32
}

/// A complete file at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Have {
    /// Its size.
    pub size: u64,
    /// Its mtime (seconds, nanoseconds).
    pub mtime: (i64, u32),
    /// The xxh3-64 of its content (a `--checksum` listing).
    pub hash: Option<u64>,
}

/// A partial copy at the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    /// Its name beside the target.
    pub tmp: Vec<u8>,
    /// Bytes it holds.
    pub size: u64,
    /// Their xxh3-64.
    pub hash: u64,
}

/// A striped copy at the destination (`rdcp --streams`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripedCopy {
    /// Its temporary file's name beside the target.
    pub tmp: Vec<u8>,
    /// The size of the file it is a copy of.
    pub size: u64,
    /// That file's mtime.
    pub mtime: (i64, u32),
    /// The pieces it holds verified, in order.
    pub done: Vec<u64>,
}

/// A destination's listing, read back on the sending side.
#[derive(Debug, Default)]
pub struct Manifest {
    /// The first component of every path stands for the one source's name.
    renamed_top: bool,
    have: HashMap<Vec<u8>, Have>,
    partial: HashMap<Vec<u8>, Partial>,
    striped: HashMap<Vec<u8>, StripedCopy>,
}

impl Manifest {
    /// [`Manifest::read`] by one of `readers` streams of a copy
    /// (`--streams`): the last of them to read it removes it (a count of
    /// readers so far, under a lock, in `PATH.readers`).
    pub fn read_shared(path: &Path, readers: u32) -> io::Result<Manifest> {
        let m = Manifest::read(path);
        let mut count = path.as_os_str().to_owned();
        count.push(".readers");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc_nofollow() | OFlags::NONBLOCK.bits() as i32)
            .open(&count)?;
        // Ours, one name, a regular file: another user's file planted under
        // the name must neither hold nor steer us.
        {
            use std::os::unix::fs::MetadataExt;
            let md = f.metadata()?;
            if !md.is_file() || md.nlink() != 1 || md.uid() != rustix::process::geteuid().as_raw() {
                return Err(io::Error::other(format!(
                    "{} is not this copy's own file",
                    Path::new(&count).display()
                )));
            }
        }
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)?;
        let n = f.metadata()?.len() + 1;
        std::os::unix::fs::FileExt::write_all_at(&f, &[1], n - 1)?;
        if n >= u64::from(readers) {
            let _ = std::fs::remove_file(path);
            let _ = std::fs::remove_file(&count);
        }
        m
    }

    /// Reads a listing written by [`list`](super::list).
    pub fn read(path: &Path) -> io::Result<Manifest> {
        let bytes = std::fs::read(path)?;
        let mut m = Manifest::default();
        let mut d = Decoder::new();
        d.feed(&bytes, |ev| -> io::Result<()> {
            match ev {
                Event::Start { sources } => m.renamed_top = sources == 1,
                Event::Entry(Entry::Have {
                    path,
                    size,
                    mtime,
                    mtime_ns,
                    hash,
                }) => {
                    let k = m.key(path.as_bytes());
                    m.have.insert(
                        k,
                        Have {
                            size,
                            mtime: (mtime, mtime_ns),
                            hash,
                        },
                    );
                }
                Event::Entry(Entry::Partial {
                    path,
                    tmp,
                    size,
                    hash,
                }) => {
                    let k = m.key(path.as_bytes());
                    m.partial.insert(k, Partial { tmp, size, hash });
                }
                Event::Entry(Entry::Pieces {
                    path,
                    tmp,
                    size,
                    mtime,
                    mtime_ns,
                    first,
                    bits,
                }) => {
                    let k = m.key(path.as_bytes());
                    let c = m.striped.entry(k).or_insert_with(|| StripedCopy {
                        tmp: tmp.clone(),
                        size,
                        mtime: (mtime, mtime_ns),
                        done: Vec::new(),
                    });
                    if c.tmp == tmp && c.size == size {
                        let count = rdpipe_wire::entry::piece_count(size);
                        c.done.extend(
                            (0..bits.len() as u64 * 8)
                                .filter(|j| bits[(j / 8) as usize] >> (j % 8) & 1 == 1)
                                .map(|j| first + j)
                                .filter(|&i| i < count),
                        );
                        c.done.sort_unstable();
                        c.done.dedup();
                    }
                }
                _ => {}
            }
            Ok(())
        })?;
        if !d.finished() {
            return Err(io::Error::other("the destination's listing is incomplete"));
        }
        Ok(m)
    }

    /// The lookup key of a stream path.
    fn key(&self, p: &[u8]) -> Vec<u8> {
        if !self.renamed_top {
            return p.to_vec();
        }
        match p.iter().position(|&b| b == b'/') {
            Some(i) => [b"\0", &p[i..]].concat(),
            None => b"\0".to_vec(),
        }
    }

    /// The complete file the destination has at stream path `p`.
    pub fn have(&self, p: &RelPath) -> Option<Have> {
        self.have.get(&self.key(p.as_bytes())).copied()
    }

    /// The striped copy (`--streams`) an interrupted run left of stream
    /// path `p`, if any.
    pub fn striped(&self, p: &RelPath) -> Option<&StripedCopy> {
        self.striped.get(&self.key(p.as_bytes()))
    }

    /// The partial copy of `p` an interrupted run left, if any.
    pub fn partial(&self, p: &RelPath) -> Option<&Partial> {
        self.partial.get(&self.key(p.as_bytes()))
    }
}
