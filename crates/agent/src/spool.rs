//! `--spool SIZE[:DIR]` at a gather's sink (`rdpipe --from`): between a
//! source's receiving transfer and where its stream goes (a lane of the line
//! merge, or an `--each` instance's command or file), a queue of up to SIZE
//! bytes, so that a sink that stalls for a moment (a disk flush, a
//! compaction) does not stall the receiver, and through it the source's
//! writer. The receiver only copies into the queue; a thread of its own
//! drains it into the destination. When the queue is full the receiver waits
//! (that is back-pressure reaching the source, as without a spool); nothing
//! is ever dropped.
//!
//! The queue is in memory (the received buffers, as they came), or with
//! `:DIR` in a file created there and unlinked at once, written and read as
//! a ring of SIZE bytes (the memory used is then the page cache's).
//!
//! The stream keeps its guarantees: [`Spool::flush`] (the receiver's
//! verified end) drains everything into the destination before flushing it
//! (which publishes a `> FILE`); a stream that fails drops the spool, and
//! the rest of the queue with it, without a flush (no `> FILE` replaced). A
//! destination that fails (its command stopped reading) fails the next
//! write or the flush with the same error kind.
//!
//! What it measured, the peak backlog and the time the receiver was held
//! back by a full spool, goes to its report callback once, at the end.

use rdpipe_control::SpoolSpec;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Called once with the peak backlog in bytes and the time held back.
pub type SpoolReport = Box<dyn FnOnce(u64, Duration) + Send>;

/// Where the queued bytes are.
enum Store {
    /// The buffers as they came.
    Memory(VecDeque<Vec<u8>>),
    /// A ring of `size` bytes in an unlinked file.
    File(File),
}

struct State {
    store: Store,
    /// Bytes queued so far, and drained so far.
    head: u64,
    tail: u64,
    /// The receiver is done: drain the rest (`true`), or drop it (`false`).
    closed: Option<bool>,
    /// The destination's failure.
    error: Option<(io::ErrorKind, String)>,
    peak: u64,
    held: Duration,
}

struct Shared {
    size: u64,
    state: Mutex<State>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A receiver's output through a spool.
pub struct Spool {
    shared: Arc<Shared>,
    drain: Option<std::thread::JoinHandle<Option<Box<dyn Write + Send>>>>,
    report: Option<SpoolReport>,
}

/// `dest` behind a spool of `spec` when there is one (`--spool`), its
/// figures reported as `SPOOL` on `say` (for lane `lane`, as `LANE K
/// SPOOL`); `dest` itself otherwise.
pub fn wrap(
    spec: Option<&SpoolSpec>,
    dest: Box<dyn Write + Send>,
    say: &super::say::Say,
    lane: Option<usize>,
) -> io::Result<Box<dyn Write + Send>> {
    let Some(spec) = spec else { return Ok(dest) };
    let say = say.clone();
    let report: SpoolReport = Box::new(move |peak, held| {
        let m = rdpipe_control::FromAgent::Spool {
            peak,
            held: held.as_secs_f64(),
        };
        say.send(&super::say::lane_line(lane, m));
    });
    Ok(Box::new(Spool::new(spec, dest, report)?))
}

impl Spool {
    /// A spool of `spec` in front of `dest`.
    pub fn new(
        spec: &SpoolSpec,
        dest: Box<dyn Write + Send>,
        report: SpoolReport,
    ) -> io::Result<Spool> {
        let store = match &spec.dir {
            None => Store::Memory(VecDeque::new()),
            Some(dir) => {
                let dir = super::home::expand_home(dir, std::env::var_os("HOME").as_deref());
                Store::File(spool_file(std::path::Path::new(&dir))?)
            }
        };
        let shared = Arc::new(Shared {
            size: spec.size,
            state: Mutex::new(State {
                store,
                head: 0,
                tail: 0,
                closed: None,
                error: None,
                peak: 0,
                held: Duration::ZERO,
            }),
            cv: Condvar::new(),
        });
        let s = shared.clone();
        let drain = std::thread::Builder::new()
            .name("spool".into())
            .spawn(move || drain(&s, dest))?;
        Ok(Spool {
            shared,
            drain: Some(drain),
            report: Some(report),
        })
    }

    fn error(&self) -> Option<io::Error> {
        self.shared
            .lock()
            .error
            .as_ref()
            .map(|(k, m)| io::Error::new(*k, m.clone()))
    }

    /// Queues `piece` (at most the spool's size), waiting while it is full.
    fn queue(&mut self, piece: &[u8]) -> io::Result<()> {
        let sh = &self.shared;
        let mut st = sh.lock();
        let mut waited: Option<Instant> = None;
        while st.error.is_none() && st.head - st.tail + piece.len() as u64 > sh.size {
            waited.get_or_insert_with(Instant::now);
            st = sh.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(t) = waited {
            st.held += t.elapsed();
        }
        if let Some((k, m)) = &st.error {
            return Err(io::Error::new(*k, m.clone()));
        }
        let at = st.head;
        match &mut st.store {
            Store::Memory(q) => q.push_back(piece.to_vec()),
            Store::File(f) => ring_write(f, sh.size, at, piece)?,
        }
        st.head += piece.len() as u64;
        st.peak = st.peak.max(st.head - st.tail);
        sh.cv.notify_all();
        Ok(())
    }

    /// Ends the drain: the rest written (`drain`) or dropped; returns the
    /// destination when the drain thread hands it back.
    fn close(&mut self, drain: bool) -> Option<Box<dyn Write + Send>> {
        {
            let mut st = self.shared.lock();
            st.closed = Some(drain);
            self.shared.cv.notify_all();
        }
        let dest = self.drain.take().and_then(|h| h.join().ok()).flatten();
        if let Some(report) = self.report.take() {
            let st = self.shared.lock();
            report(st.peak, st.held);
        }
        dest
    }
}

/// The drain thread: writes what is queued into `dest`, in order, until the
/// spool is closed; hands `dest` back when everything was written.
fn drain(sh: &Shared, mut dest: Box<dyn Write + Send>) -> Option<Box<dyn Write + Send>> {
    loop {
        let piece = {
            let mut st = sh.lock();
            loop {
                match st.closed {
                    Some(false) => return None,
                    Some(true) if st.head == st.tail => return Some(dest),
                    _ if st.head > st.tail => break,
                    _ => st = sh.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
                }
            }
            let tail = st.tail;
            let ready = st.head - st.tail;
            match &mut st.store {
                Store::Memory(q) => q.pop_front().unwrap_or_default(),
                Store::File(f) => {
                    let mut buf = vec![0; ready.min(1 << 20) as usize];
                    if let Err(e) = ring_read(f, sh.size, tail, &mut buf) {
                        st.error = Some((e.kind(), format!("reading the spool: {e}")));
                        sh.cv.notify_all();
                        return None;
                    }
                    buf
                }
            }
        };
        if let Err(e) = dest.write_all(&piece) {
            let mut st = sh.lock();
            st.error = Some((e.kind(), e.to_string()));
            sh.cv.notify_all();
            return None;
        }
        let mut st = sh.lock();
        st.tail += piece.len() as u64;
        sh.cv.notify_all();
    }
}

impl Write for Spool {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let size = self.shared.size as usize;
        for piece in buf.chunks(size.max(1)) {
            self.queue(piece)?;
        }
        Ok(buf.len())
    }

    /// The stream verified: everything drained, then the destination flushed.
    fn flush(&mut self) -> io::Result<()> {
        if self.drain.is_none() {
            return Ok(());
        }
        match self.close(true) {
            Some(mut dest) => dest.flush(),
            None => Err(self
                .error()
                .unwrap_or_else(|| io::Error::other("the spool's drain thread ended"))),
        }
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if self.drain.is_some() {
            // A failed stream: the rest is not delivered, nothing published.
            self.close(false);
        }
    }
}

/// A new spool file in `dir`, unlinked at once (O_TMPFILE where the
/// filesystem has it).
fn spool_file(dir: &std::path::Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::TMPFILE.bits() as i32)
        .open(dir);
    match tmp {
        Ok(f) => Ok(f),
        Err(_) => {
            let mut rnd = [0u8; 8];
            getrandom::getrandom(&mut rnd).map_err(|e| io::Error::other(e.to_string()))?;
            let name = dir.join(format!(".rdpipe-spool-{}", u64::from_le_bytes(rnd)));
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&name)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
            std::fs::remove_file(&name)?;
            Ok(f)
        }
    }
}

/// Writes `data` at stream offset `at` of a ring of `size` bytes.
fn ring_write(f: &File, size: u64, at: u64, data: &[u8]) -> io::Result<()> {
    let pos = at % size;
    let first = data.len().min((size - pos) as usize);
    f.write_all_at(&data[..first], pos)?;
    f.write_all_at(&data[first..], 0)
}

/// Reads `buf.len()` bytes at stream offset `at` of a ring of `size` bytes.
fn ring_read(f: &File, size: u64, at: u64, buf: &mut [u8]) -> io::Result<()> {
    let pos = at % size;
    let first = buf.len().min((size - pos) as usize);
    let (a, b) = buf.split_at_mut(first);
    f.read_exact_at(a, pos)?;
    f.read_exact_at(b, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A destination that holds writes until opened, records what it got.
    #[derive(Clone, Default)]
    struct Gate {
        open: Arc<AtomicBool>,
        got: Arc<Mutex<Vec<u8>>>,
        flushed: Arc<AtomicBool>,
    }
    impl Write for Gate {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            while !self.open.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.got.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.flushed.store(true, Ordering::SeqCst);
            Ok(())
        }
    }

    fn spec(size: u64, dir: Option<&std::path::Path>) -> SpoolSpec {
        SpoolSpec {
            size,
            dir: dir.map(|d| d.display().to_string()),
        }
    }

    fn stream(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    fn absorbs_then_delivers_in_order(dir: Option<&std::path::Path>) {
        let gate = Gate::default();
        let report = Arc::new(Mutex::new(None));
        let r = report.clone();
        let mut s = Spool::new(
            &spec(4 << 20, dir),
            Box::new(gate.clone()),
            Box::new(move |peak, held| *r.lock().unwrap() = Some((peak, held))),
        )
        .unwrap();
        let data = stream(3 << 20);
        // The destination is closed: 3 MiB still go in without waiting.
        for c in data.chunks(100_000) {
            s.write_all(c).unwrap();
        }
        gate.open.store(true, Ordering::SeqCst);
        // More than the spool holds: waits for the drain, loses nothing.
        let more = stream(9 << 20);
        for c in more.chunks(300_000) {
            s.write_all(c).unwrap();
        }
        s.flush().unwrap();
        assert!(gate.flushed.load(Ordering::SeqCst));
        let got = gate.got.lock().unwrap().clone();
        assert_eq!(got.len(), data.len() + more.len());
        assert!(got[..data.len()] == data[..] && got[data.len()..] == more[..]);
        let (peak, _) = report.lock().unwrap().expect("reported");
        assert!((3 << 20..=4 << 20).contains(&peak), "{peak}");
    }

    #[test]
    fn a_memory_spool_absorbs_a_stall_and_delivers_everything_in_order() {
        absorbs_then_delivers_in_order(None);
    }

    #[test]
    fn a_file_spool_wraps_its_ring_and_delivers_everything_in_order() {
        let d = std::env::temp_dir().join(format!("spooltest{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        absorbs_then_delivers_in_order(Some(&d));
        // Unlinked: nothing left in DIR.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        std::fs::remove_dir(&d).unwrap();
    }

    #[test]
    fn a_failed_stream_is_not_flushed_and_a_failed_destination_fails_the_stream() {
        let gate = Gate::default();
        let mut s = Spool::new(
            &spec(1 << 20, None),
            Box::new(gate.clone()),
            Box::new(|_, _| {}),
        )
        .unwrap();
        s.write_all(b"abc").unwrap();
        drop(s);
        assert!(!gate.flushed.load(Ordering::SeqCst));
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut s =
            Spool::new(&spec(1 << 20, None), Box::new(Broken), Box::new(|_, _| {})).unwrap();
        let _ = s.write_all(b"abc");
        let e = s.flush().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}
