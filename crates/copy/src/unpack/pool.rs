//! Small files are created on a few threads: creating a file is a handful of
//! metadata system calls (create, write, owner where it differs, mode, times,
//! rename, close), so a tree of small files is bound by how fast one thread
//! can make them, and file systems create files in parallel (across
//! directories, and within one on most). A small file (at most
//! [`POOLED_MAX`] bytes) is held whole in memory while its data arrives, its
//! checksum checked when its end entry comes, and only then handed to a
//! worker ([`Unpacker::end_buffered`]) that writes it under its temporary
//! name and publishes it; larger files stream to disk on the decoding
//! thread. The queue is bounded ([`QUEUE_PER_THREAD`] files a worker), so
//! memory stays under a few MiB whatever the tree.
//!
//! Whatever waits on a published file (a hard link to it, the directories'
//! metadata at the end, the verdict) first waits for every file handed over
//! ([`Unpacker::wait_pool`]).

use super::current::Current;
use super::meta::{set_meta, Policy};
use super::publish::publish;
use super::{Owner, Unpacker};
use crate::beneath::name;
use crate::write::write_sparse;
use crate::xattr::Attr;
use rdpipe_wire::entry::{FileEnd, Meta, RelPath};
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
/// publishes it; on failure nothing of it is left.
fn create(job: &Job, p: Policy) -> io::Result<()> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // Private until published: the final mode is set then.
    let fd = rustix::fs::openat(&*job.dir, name(&job.tmp), flags, Mode::from_raw_mode(0o600))?;
    let file = File::from(fd);
    let written = (|| {
        let len = job.data.len() as u64;
        if write_sparse(&file, &job.data, 0)? < len {
            // It ends in a hole.
            file.set_len(len)?;
        }
        set_meta(&file, &job.meta, &job.xattrs, p, job.owner)
    })();
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(&*job.dir, name(&job.tmp), AtFlags::empty());
        return Err(e);
    }
    publish(&job.dir, &job.tmp, &job.leaf)
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
/// 2 cores that is none: a copy whose sender shares the two cores (rdcp
/// over loopback) is slower with workers than without (docs/performance.md,
/// rdcp).
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

impl Unpacker {
    /// The end of a small file held in memory: checked, then handed to the
    /// pool that creates it.
    pub(super) fn end_buffered(&mut self, cur: Current, data: Vec<u8>, end: FileEnd) {
        if end.unreadable {
            return;
        }
        let Some(dir) = cur.dir else { return };
        if cur.pos != cur.size || cur.hash.digest() != end.checksum {
            return self.failed(&cur.rel, "its checksum does not match the sender's");
        }
        let job = Job {
            dir,
            rel: cur.rel,
            leaf: cur.name,
            tmp: cur.tmp,
            meta: cur.meta,
            owner: cur.owner,
            data,
            xattrs: cur.xattrs,
            changed: end.changed,
        };
        let policy = self.policy();
        let pool = match &mut self.pool {
            Some(p) => p,
            None => match Pool::start(self.create_threads, policy) {
                Ok(p) => self.pool.insert(p),
                Err(e) => return self.failed(&job.rel, e),
            },
        };
        let rel = job.rel.as_bytes().to_vec();
        let done = pool.submit(job);
        self.pending.insert(rel);
        self.outcomes(done);
    }

    /// Waits for the files handed to the pool, and counts them.
    pub(super) fn wait_pool(&mut self) {
        if let Some(p) = &mut self.pool {
            let done = p.wait();
            self.outcomes(done);
        }
    }

    fn outcomes(&mut self, done: Vec<Done>) {
        for d in done {
            self.pending.remove(d.rel.as_bytes());
            self.counted(&d.rel, d.size, d.changed, d.result);
        }
    }
}
