//! Small files are created on a few threads: creating a file is a handful of
//! metadata system calls (create, write, owner where it differs, mode, times,
//! rename, close),
//! so a tree of small files is bound by how fast one thread can make them,
//! and file systems create files in parallel (across directories, and within
//! one on most). A small file (at most [`POOLED_MAX`] bytes) is held whole
//! in memory while its data arrives, its checksum checked when its end entry
//! comes, and only then handed to a worker that writes it under its
//! temporary name and renames it into place; larger files stream to disk on
//! the decoding thread as before. The queue is bounded ([`QUEUE_PER_THREAD`]
//! files a worker), so memory stays under a few MiB whatever the tree.
//!
//! Whatever waits on a published file (a hard link to it, the directories'
//! metadata at the end, the verdict) first [`Pool::wait`]s for every file
//! handed over.

use super::{times, Owner};
use crate::beneath::name;
use crate::write::write_sparse;
use crate::xattr::Attr;
use rdpipe_wire::entry::{Meta, RelPath};
use rustix::fs::{AtFlags, Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The largest file held in memory and created by a worker.
pub const POOLED_MAX: u64 = 256 << 10;
/// Files queued per worker before the decoding thread waits.
const QUEUE_PER_THREAD: usize = 8;
/// The most workers, whatever the cores.
const MAX_THREADS: usize = 4;

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

/// A verified small file to create.
pub(super) struct Job {
    pub dir: Arc<OwnedFd>,
    pub rel: RelPath,
    pub leaf: Vec<u8>,
    pub tmp: Vec<u8>,
    pub meta: Meta,
    /// The owner and group a file created in `dir` gets, where known.
    pub owner: Option<Owner>,
    pub data: Vec<u8>,
    pub xattrs: Vec<Attr>,
    /// The sender saw it change while reading it.
    pub changed: bool,
}

/// What became of a [`Job`].
pub(super) struct Done {
    pub rel: RelPath,
    pub size: u64,
    pub changed: bool,
    pub result: io::Result<()>,
}

/// Creates `job`'s file under its temporary name, sets its metadata and
/// renames it into place; on failure nothing of it is left.
fn create(job: &Job, p: Policy) -> io::Result<()> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // Private until published: the final mode is set then.
    let fd = rustix::fs::openat(&*job.dir, name(&job.tmp), flags, Mode::from_raw_mode(0o600))?;
    let file = File::from(fd);
    let r = (|| {
        let len = job.data.len() as u64;
        if write_sparse(&file, &job.data, 0)? < len {
            // It ends in a hole.
            file.set_len(len)?;
        }
        set_meta(&file, &job.meta, &job.xattrs, p, job.owner)?;
        rustix::fs::renameat(&*job.dir, name(&job.tmp), &*job.dir, name(&job.leaf))?;
        Ok(())
    })();
    if r.is_err() {
        let _ = rustix::fs::unlinkat(&*job.dir, name(&job.tmp), AtFlags::empty());
    }
    r
}

/// The workers, their queue, and what they report back.
pub(super) struct Pool {
    jobs: Option<SyncSender<Job>>,
    done: Receiver<Done>,
    threads: Vec<JoinHandle<()>>,
    in_flight: usize,
}

/// How many workers: `RDCP_CREATE_THREADS` if set (1 or 0: none, files are
/// created on the decoding thread), else half the cores, at most
/// [`MAX_THREADS`]: the receiving agent's transport (the network, opening
/// the sealed chunks) and the decoding thread keep the other half busy. On
/// 2 cores that is none: there `benches/unpack.rs` gains 9% with 2 workers
/// and nothing else running, but a copy whose sender shares the two cores
/// (rdcp over loopback) loses 8% (docs/performance.md, rdcp).
pub(super) fn threads() -> usize {
    if let Some(n) = std::env::var("RDCP_CREATE_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        return n.min(64);
    }
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).min(MAX_THREADS))
}

impl Pool {
    /// `n` workers (at least 2; fewer is no pool).
    pub fn start(n: usize, p: Policy) -> io::Result<Pool> {
        let (jobs, queue) = sync_channel::<Job>(n * QUEUE_PER_THREAD);
        let queue = Arc::new(Mutex::new(queue));
        let (tell, done) = channel();
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let queue = queue.clone();
            let tell = tell.clone();
            let t = std::thread::Builder::new()
                .name(format!("rdcp-create-{i}"))
                .spawn(move || loop {
                    let job = match queue.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                        Ok(j) => j,
                        Err(_) => return,
                    };
                    let result = create(&job, p);
                    let d = Done {
                        size: job.data.len() as u64,
                        rel: job.rel,
                        changed: job.changed,
                        result,
                    };
                    if tell.send(d).is_err() {
                        return;
                    }
                })?;
            threads.push(t);
        }
        Ok(Pool {
            jobs: Some(jobs),
            done,
            threads,
            in_flight: 0,
        })
    }

    /// Queues `job` (waiting while the queue is full) and returns what the
    /// workers finished meanwhile.
    pub fn submit(&mut self, job: Job) -> Vec<Done> {
        let mut out = Vec::new();
        let sent = match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|e| e.0),
            None => Err(job),
        };
        match sent {
            Ok(()) => self.in_flight += 1,
            // Every worker is gone (only if one panicked).
            Err(job) => out.push(Done {
                size: job.data.len() as u64,
                rel: job.rel,
                changed: job.changed,
                result: Err(io::Error::other("rdcp's file-creating threads ended")),
            }),
        }
        while let Ok(d) = self.done.try_recv() {
            self.in_flight -= 1;
            out.push(d);
        }
        out
    }

    /// Waits for every file handed over; returns what became of them.
    pub fn wait(&mut self) -> Vec<Done> {
        let mut out = Vec::with_capacity(self.in_flight);
        while self.in_flight > 0 {
            match self.done.recv() {
                Ok(d) => {
                    self.in_flight -= 1;
                    out.push(d);
                }
                Err(_) => break,
            }
        }
        out
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing the queue ends the workers once it is empty.
        self.jobs.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
