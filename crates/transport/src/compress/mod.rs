//! `--compress` in the send and receive loops ([`crate::pump`]).
//!
//! **Sender** ([`Packer`]): chunks are read ahead from the input and
//! compressed on a process-wide pool of `min(cores, 8)` threads named
//! `rdpipe-zstd-N` ([`workers`]), several at once, each into its own buffers; the
//! send loop takes them back in order and copies each (compressed, or stored
//! when it did not shrink: [`rdpipe_wire::compress`]) into the transport's
//! buffer, where it is sealed as any chunk. Reading ahead stops at what the
//! input has ready, so an interactive stream's chunk goes out as soon as it
//! was read; at [`AHEAD_BYTES`]; and under `auto`, during a probe window
//! (the stream's first, or the first after a stretch stored without
//! trying), at the bytes that window still needs
//! ([`rdpipe_wire::compress::Adapt::probe_left`]). Under `auto`, a chunk to be stored
//! without trying (the data does not compress, or compression is what binds)
//! is read straight into the transport's buffer once the chunks ahead of it
//! are out: a pause costs what the stream without compression does. Such a
//! chunk, and one to be sampled (the data looked incompressible), is read no
//! larger than the transport's chunks without compression
//! ([`ChunkSender::plain_chunk`](crate::ChunkSender::plain_chunk)): over TCP a
//! 1 MiB chunk, read, hashed, sealed and copied into the
//! socket, no longer fits the core's cache, so data that does not compress
//! would cost the sender more CPU than a stream without compression, in
//! hashing and in the copy into the socket.
//! A chunk to compress is at most 1 MiB; over TCP, where both ends take 4
//! MiB frames, `auto` compresses chunks of the whole 4 MiB buffer while the
//! link binds ([`Packer::compressed_size`]).
//! With one CPU, each chunk is compressed on the calling thread.
//!
//! The pool is not the seal pool's rayon threads: an idle rayon worker spins
//! (`sched_yield`) before it sleeps, and a stream that wakes the pool for a
//! few chunks at a time (`auto` probing incompressible data) would pay for
//! that spinning in system time. These threads sleep in a blocking receive.
//!
//! The level under `auto` ([`Adapt`]) follows what the send loop waits for:
//! the time outside [`Packer::next`] (the transport has no free buffer: the
//! socket or the receiver's credits are full; `--rate-limit`'s pacing), less
//! the time it sealed the chunk ([`Packer::worked`]), is the link's; the time
//! waiting for the next chunk's worker is compression's. (Counting the seal
//! as the link's raised the level on a fast path with idle cores until
//! compression bound.)
//!
//! **Receiver** ([`crate::unpack`]): each chunk, once opened under
//! `--encrypt`, is checked and decompressed by [`rdpipe_wire::compress::Decoder`]
//! into a buffer of the negotiated chunk size, zstd chunks on this pool
//! several at once, then hashed and written in order.

use rdpipe_wire::compress::{
    put_trailer, Adapt, Encoder, Packed, KIND_STORED, KIND_ZSTD, MAX_LEVEL, SMALL_CHUNK,
    TRAILER_LEN, TRY_WHOLE_BELOW,
};
use rdpipe_wire::Compress;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The most bytes read ahead of the send loop (all jobs' input together,
/// the next chunk counted at the size in use): up to `threads + 1` chunks
/// of 1 MiB, four of 4 MiB ([`crate::tcp::LARGE_COMPRESSED_TCP_BUF`]: those
/// only where the link binds, so four keep up). What is read ahead is read
/// from the input, so a reconnecting hop's replay window (`--replay-window`,
/// 32 MiB by default) must hold it besides what is on the way.
pub const AHEAD_BYTES: usize = 16 << 20;

/// What compression did to a stream, for `-v` and `--json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressStats {
    /// The negotiated mode.
    pub mode: Compress,
    /// Bytes before compression.
    pub raw: u64,
    /// Bytes after (the chunks with their trailers, before sealing).
    pub wire: u64,
    /// Chunks.
    pub chunks: u64,
    /// Chunks sent stored (not smaller compressed, or not tried).
    pub stored: u64,
    /// Chunks compressed at each level (index = level; the sender's only).
    pub levels: [u64; MAX_LEVEL as usize + 1],
}

impl CompressStats {
    /// Nothing yet, under `mode`.
    pub fn new(mode: Compress) -> CompressStats {
        CompressStats {
            mode,
            raw: 0,
            wire: 0,
            chunks: 0,
            stored: 0,
            levels: [0; MAX_LEVEL as usize + 1],
        }
    }

    /// Bytes before over bytes after (1.0 for an empty stream).
    pub fn ratio(&self) -> f64 {
        if self.wire == 0 {
            1.0
        } else {
            self.raw as f64 / self.wire as f64
        }
    }

    /// The lowest and highest level any chunk was compressed at.
    pub fn level_range(&self) -> Option<(i32, i32)> {
        let used = |(l, n): (usize, &u64)| (*n > 0).then_some(l as i32);
        let lo = self.levels.iter().enumerate().find_map(used)?;
        let hi = self.levels.iter().enumerate().rev().find_map(used)?;
        Some((lo, hi))
    }

    /// Counts one chunk received: `raw` bytes from `wire`, stored or not.
    pub(crate) fn received(&mut self, raw: usize, wire: usize, stored: bool) {
        self.raw += raw as u64;
        self.wire += wire as u64;
        self.chunks += 1;
        self.stored += u64::from(stored);
    }

    /// Counts one chunk of `raw` bytes sent as `wire` bytes.
    pub(crate) fn chunk(&mut self, raw: usize, wire: usize, level: Option<i32>) {
        self.raw += raw as u64;
        self.wire += wire as u64;
        self.chunks += 1;
        match level {
            Some(l) => self.levels[l.clamp(0, MAX_LEVEL) as usize] += 1,
            None => self.stored += 1,
        }
    }
}

/// Where the packer reads the stream from.
pub(crate) trait Source {
    /// Reads the next bytes (0: end of input), as [`crate::pump::fill_available`].
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Whether a read would return without waiting.
    fn ready(&mut self) -> bool;
}

/// The most compression threads.
pub const MAX_WORKERS: usize = 8;

type Task = Box<dyn FnOnce() + Send>;

/// The compression threads: each takes the next task from one queue.
pub struct Workers {
    queue: Mutex<Sender<Task>>,
    pub(crate) threads: usize,
}

impl Workers {
    fn spawn(&self, task: Task) {
        let q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let _ = q.send(task);
    }

    /// Runs `work` on `job` on a worker; the job comes back on the receiver.
    /// A pool whose threads are gone drops the task, and with it the sender:
    /// the wait for this job then fails.
    pub(crate) fn submit<J: Send + 'static>(&self, mut job: J, work: fn(&mut J)) -> Receiver<J> {
        let (tx, rx) = sync_channel(1);
        self.spawn(Box::new(move || {
            work(&mut job);
            let _ = tx.send(job);
        }));
        rx
    }
}

/// The process-wide compression pool, started on first use; `None` with a
/// single CPU (or when no thread can be started: then the calling thread
/// compresses).
pub fn workers() -> Option<&'static Workers> {
    static POOL: OnceLock<Option<Workers>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        if cores < 2 {
            return None;
        }
        let (tx, rx) = channel::<Task>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = cores.min(MAX_WORKERS);
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("rdpipe-zstd-{i}"))
                .spawn(move || loop {
                    let task = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    match task {
                        Ok(t) => t(),
                        Err(_) => return,
                    }
                })
                .ok()?;
        }
        Some(Workers {
            queue: Mutex::new(tx),
            threads,
        })
    })
    .as_ref()
}

/// One chunk on its way through a worker.
struct Job {
    raw: Vec<u8>,
    n: usize,
    out: Vec<u8>,
    level: Option<i32>,
    /// Under `auto`: compressed only if [`Encoder::worth_trying`] says so.
    sample: bool,
    packed: Packed,
}

impl Job {
    fn new(room: usize) -> Job {
        Job {
            raw: vec![0; room],
            n: 0,
            out: vec![0; room],
            level: None,
            sample: false,
            packed: Packed::Stored,
        }
    }

    fn run(&mut self) {
        thread_local! {
            static ENCODER: RefCell<Encoder> = RefCell::new(Encoder::new());
        }
        self.packed = match self.level {
            Some(l) => ENCODER.with(|e| {
                let mut e = e.borrow_mut();
                let raw = &self.raw[..self.n];
                if self.sample && !e.worth_trying(raw, &mut self.out) {
                    Packed::Stored
                } else {
                    e.compress(raw, l, &mut self.out[..self.n])
                }
            }),
            None => Packed::Stored,
        };
    }
}

/// The sender's side (see the module docs).
pub(crate) struct Packer {
    mode: Compress,
    adapt: Adapt,
    pool: Option<&'static Workers>,
    inflight: VecDeque<Receiver<Job>>,
    /// [`Adapt`] said to store the next chunk without trying; it is not
    /// read yet (the chunks on the pool go first).
    store_next: bool,
    /// Under `auto`: the last chunk tried did not shrink below
    /// [`TRY_WHOLE_BELOW`], or none was yet: the next is sampled before it
    /// is tried, and no chunk is larger than [`SMALL_CHUNK`] until one
    /// shrinks ([`Packer::compressed_size`]).
    sample: bool,
    free: Vec<Job>,
    /// Raw bytes per chunk, from the first buffer lent.
    room: usize,
    /// The chunk size [`Adapt`] counts windows by now ([`Packer::compressed_size`]).
    counted: usize,
    /// Under `auto`: compress chunks as large as the buffer
    /// ([`rdpipe_wire::compress::Decision::large_chunks`]).
    large: bool,
    /// The most raw bytes of a chunk stored without trying or sampled
    /// ([`Packer::plain_chunk`]).
    plain: Option<usize>,
    /// Chunks on the pool at most (`threads + 1`).
    depth: usize,
    /// Raw bytes of the chunks on the pool.
    ahead: usize,
    eof: bool,
    err: Option<io::Error>,
    /// When [`Packer::next`] last returned and last started.
    left_at: Option<Instant>,
    started_at: Option<Instant>,
    /// Time waiting for workers since the last report to [`Adapt`].
    cpu: Duration,
    /// Time the send loop spent on the last chunk's own work (sealing)
    /// outside [`Packer::next`]: not the link's.
    own: Duration,
    pub(crate) stats: CompressStats,
}

impl Packer {
    /// A packer for a stream compressed as `mode` (which is on).
    /// `paced`: the `--rate-limit` the link is paced to (bytes per second).
    pub(crate) fn new(mode: Compress, paced: Option<u64>) -> Packer {
        Packer {
            mode,
            adapt: Adapt::new().paced(paced.map(|r| r as f64)),
            pool: workers(),
            inflight: VecDeque::new(),
            store_next: false,
            sample: true,
            free: Vec::new(),
            room: 0,
            counted: 0,
            large: false,
            plain: None,
            depth: 1,
            ahead: 0,
            eof: false,
            err: None,
            left_at: None,
            started_at: None,
            cpu: Duration::ZERO,
            own: Duration::ZERO,
            stats: CompressStats::new(mode),
        }
    }

    /// Reads a chunk to be stored without trying, or sampled, no larger
    /// than `bytes` (the transport's chunk without compression).
    pub(crate) fn plain_chunk(mut self, bytes: Option<usize>) -> Packer {
        self.plain = bytes.filter(|b| *b > 0);
        self
    }

    fn level(&mut self) -> Option<i32> {
        match self.mode {
            Compress::None => None,
            Compress::Auto => self.adapt.next_level(),
            Compress::Zstd(l) => Some(l),
        }
    }

    /// Counts a chunk; feeds `auto` what it compressed to.
    fn done(&mut self, raw: usize, body: usize, wire: usize, level: Option<i32>, packed: Packed) {
        if self.mode == Compress::Auto {
            if let Some(level) = level {
                self.sample = match packed {
                    Packed::Zstd(_) => body as f64 >= TRY_WHOLE_BELOW * raw as f64,
                    Packed::Stored => true,
                };
                self.adapt.compressed_at(level, raw, body);
            } else {
                self.adapt.stored(raw);
            }
            // Also a stretch's end decides (`Adapt::next_level`).
            if let Some(d) = self.adapt.take_decision() {
                self.large = d.large_chunks(self.large);
                tracing::debug!("compress auto: {d}");
            }
        }
        let level = match packed {
            Packed::Zstd(_) => level,
            Packed::Stored => None,
        };
        self.stats.chunk(raw, wire, level);
    }

    /// Reads and compresses the next chunk into `buf` (its trailer
    /// included: `buf` must hold [`TRAILER_LEN`] bytes more than the most raw
    /// bytes a chunk takes); returns its length, 0 at the end of the input.
    /// An input error comes after the chunks read before it.
    pub(crate) fn next(&mut self, buf: &mut [u8], src: &mut dyn Source) -> io::Result<usize> {
        let now = Instant::now();
        if let (Some(left), Some(started)) = (self.left_at, self.started_at) {
            let cpu = std::mem::take(&mut self.cpu);
            let own = std::mem::take(&mut self.own);
            self.adapt
                .waited((now - left).saturating_sub(own), cpu, now - started);
        }
        self.started_at = Some(now);
        let r = self.next_chunk(buf, src);
        self.left_at = Some(Instant::now());
        r
    }

    fn next_chunk(&mut self, buf: &mut [u8], src: &mut dyn Source) -> io::Result<usize> {
        let Some(room) = buf.len().checked_sub(TRAILER_LEN).filter(|r| *r > 0) else {
            return Err(io::Error::other("the transport's buffer is too small"));
        };
        if self.room == 0 {
            self.room = room;
            self.counted = room.min(SMALL_CHUNK);
            self.adapt.chunk_size(self.counted);
            let workers = self.pool.map_or(1, |p| p.threads);
            self.depth = workers + 1;
        }
        if room < self.room {
            return Err(io::Error::other("the transport's buffer shrank"));
        }
        while self.inflight.len() < self.depth
            && (self.inflight.is_empty() || self.room_ahead())
            && !self.eof
            && self.err.is_none()
            && (self.inflight.is_empty() || src.ready())
        {
            let level = if std::mem::take(&mut self.store_next) {
                None
            } else {
                self.level()
            };
            if level.is_none() {
                if !self.inflight.is_empty() {
                    // Stored without trying, behind chunks on the pool:
                    // those go first, then this one straight (a pause never
                    // passes through the pool: no wake-up, no copy).
                    self.store_next = true;
                    break;
                }
                let n = src.read(&mut buf[..self.short()])?;
                if n == 0 {
                    self.eof = true;
                    return Ok(0);
                }
                let len = put_trailer(buf, n, n, KIND_STORED);
                self.done(n, n, len, None, Packed::Stored);
                return Ok(len);
            }
            let mut job = self.free.pop().unwrap_or_else(|| Job::new(self.room));
            let sample = self.mode == Compress::Auto && self.sample;
            let want = if sample {
                self.short()
            } else {
                self.compressed_size()
            };
            match src.read(&mut job.raw[..want]) {
                Ok(0) => {
                    self.eof = true;
                    self.free.push(job);
                }
                Ok(n) => {
                    job.n = n;
                    job.level = level;
                    job.sample = sample;
                    self.dispatch(job);
                }
                Err(e) => {
                    self.err = Some(e);
                    self.free.push(job);
                }
            }
        }
        let Some(rx) = self.inflight.pop_front() else {
            return match self.err.take() {
                Some(e) => Err(e),
                None => Ok(0),
            };
        };
        let waited = Instant::now();
        let job = rx
            .recv()
            .map_err(|_| io::Error::other("a compression worker stopped"))?;
        self.cpu += waited.elapsed();
        let n = job.n;
        self.ahead -= n;
        let (len, body) = match job.packed {
            Packed::Zstd(c) => {
                buf[..c].copy_from_slice(&job.out[..c]);
                (put_trailer(buf, c, n, KIND_ZSTD), c)
            }
            Packed::Stored => {
                buf[..n].copy_from_slice(&job.raw[..n]);
                (put_trailer(buf, n, n, KIND_STORED), n)
            }
        };
        self.done(n, body, len, job.level, job.packed);
        self.free.push(job);
        Ok(len)
    }

    /// Whether another chunk may go on the pool beside those on it: within
    /// [`AHEAD_BYTES`], and under `auto` while a probe window is under way,
    /// within the raw bytes it still needs ([`Adapt::probe_left`]: no chunk
    /// beyond them until it decided).
    fn room_ahead(&self) -> bool {
        let probe_left = match self.mode {
            Compress::Auto => self.adapt.probe_left(),
            _ => None,
        };
        self.ahead + self.counted <= AHEAD_BYTES && probe_left.is_none_or(|l| self.ahead < l)
    }

    /// The raw bytes of a chunk stored without trying or sampled.
    fn short(&self) -> usize {
        self.plain.map_or(self.room, |p| p.min(self.room))
    }

    /// The raw bytes of a chunk to compress: at most [`SMALL_CHUNK`], but
    /// under `auto` the whole buffer where the link binds enough to pay for
    /// the larger chunk's CPU
    /// ([`rdpipe_wire::compress::Decision::large_chunks`]; a larger chunk
    /// compresses better) unless the last chunk did not shrink (data that
    /// does not compress costs more to try, copy, hash and seal in chunks
    /// that leave the core's cache: random data in 4 MiB chunks at level 3
    /// cost 1.81 against 1.44-1.52 s/GB sending on the 2-core VM). A fixed
    /// level measures no binding and keeps to [`SMALL_CHUNK`]: in 4 MiB
    /// chunks `zstd:3` spent 10-15 % more CPU on that VM and moved 5-10 %
    /// less where the cores bound. [`Adapt`] counts its windows by the size
    /// in use (two chunks at least).
    fn compressed_size(&mut self) -> usize {
        let size = match self.mode {
            Compress::Auto if self.large && !self.sample => self.room,
            _ => self.room.min(SMALL_CHUNK),
        };
        if self.mode == Compress::Auto && size != self.counted {
            self.counted = size;
            self.adapt.chunk_size(size);
        }
        size
    }

    /// The send loop worked on the last chunk for `t` after [`Packer::next`]
    /// (sealed it): that time is not a wait on the link.
    pub(crate) fn worked(&mut self, t: Duration) {
        self.own += t;
    }

    /// Compresses `job` on the pool (on this thread without one).
    fn dispatch(&mut self, mut job: Job) {
        self.ahead += job.n;
        let rx = match self.pool {
            Some(p) => p.submit(job, Job::run),
            None => {
                let (tx, rx) = sync_channel(1);
                let t = Instant::now();
                job.run();
                self.cpu += t.elapsed();
                let _ = tx.send(job);
                rx
            }
        };
        self.inflight.push_back(rx);
    }

    /// The level compressed chunks get now (for `-v`).
    pub(crate) fn level_now(&self) -> Option<i32> {
        match self.mode {
            Compress::None => None,
            Compress::Auto => Some(self.adapt.level()),
            Compress::Zstd(l) => Some(l),
        }
    }
}

#[cfg(test)]
mod tests;
