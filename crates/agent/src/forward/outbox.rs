//! The frames one side of a forward sends, queued for its outgoing
//! transfer, which reads them as its input ([`OutboxInput`]): no pipe and
//! no thread between the connections and the hop.
//!
//! Two queues: *control* frames (`Open`, `Reset`, `Credit`: small, never
//! waited for, so the demultiplexer that produces some of them never
//! blocks) go first; *data* frames (`Data`, `Eof`, in each connection's
//! order) wait behind them, and a connection's reader that finds the data
//! queue over [`DATA_QUEUE`] waits for room. Every connection's bytes in
//! flight are bounded by its flow-control window anyway; this bounds what
//! sits here.
//!
//! The input's descriptor is an eventfd that polls readable exactly while a
//! frame is queued or the outbox has ended, which is what the send loop
//! asks before it adds more to a chunk (`fill_available`): a lone 64-byte
//! request goes out at once in a chunk of its own.

use rdpipe_transport::replay::Input;
use rustix::event::{eventfd, EventfdFlags};
use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The data bytes queued at most before a connection's reader waits.
pub const DATA_QUEUE: usize = 4 << 20;

#[derive(Default)]
struct Queues {
    control: VecDeque<Vec<u8>>,
    data: VecDeque<Vec<u8>>,
    data_bytes: usize,
    /// The frame being read out, and how far.
    cur: Vec<u8>,
    at: usize,
    /// No more frames: the stream ends after the queued ones.
    closed: bool,
    /// The stream is abandoned: the transfer fails.
    failed: Option<String>,
    /// The eventfd holds a count (polls readable).
    armed: bool,
}

/// The queues, shared by the connections and the input.
pub struct Outbox {
    q: Mutex<Queues>,
    ready: Condvar,
    room: Condvar,
    efd: OwnedFd,
}

/// The outgoing transfer's input.
pub struct OutboxInput(Arc<Outbox>);

impl Outbox {
    /// An empty outbox and the input that reads it.
    pub fn new() -> io::Result<(Arc<Outbox>, OutboxInput)> {
        let efd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        let o = Arc::new(Outbox {
            q: Mutex::default(),
            ready: Condvar::new(),
            room: Condvar::new(),
            efd,
        });
        Ok((o.clone(), OutboxInput(o)))
    }

    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn arm(&self, q: &mut Queues) {
        if !q.armed {
            let _ = rustix::io::write(&self.efd, &1u64.to_ne_bytes());
            q.armed = true;
        }
        self.ready.notify_one();
    }

    /// Queues a control frame (never waits).
    pub fn control(&self, frame: Vec<u8>) {
        let mut q = self.lock();
        if q.closed || q.failed.is_some() {
            return;
        }
        q.control.push_back(frame);
        self.arm(&mut q);
    }

    /// Queues a data frame, waiting while the data queue is full; false
    /// when the outbox has ended (the frame is dropped).
    pub fn data(&self, frame: Vec<u8>) -> bool {
        let mut q = self.lock();
        while q.data_bytes >= DATA_QUEUE && !q.closed && q.failed.is_none() {
            q = self.room.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        if q.closed || q.failed.is_some() {
            return false;
        }
        q.data_bytes += frame.len();
        q.data.push_back(frame);
        self.arm(&mut q);
        true
    }

    /// No more frames: the stream ends cleanly after the queued ones.
    pub fn close(&self) {
        let mut q = self.lock();
        q.closed = true;
        self.arm(&mut q);
        self.room.notify_all();
    }

    /// The stream is abandoned: the transfer's next read fails with `why`.
    pub fn fail(&self, why: String) {
        let mut q = self.lock();
        if q.failed.is_none() {
            q.failed = Some(why);
        }
        self.arm(&mut q);
        self.room.notify_all();
    }
}

impl Read for OutboxInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let o = &*self.0;
        let mut q = o.lock();
        let mut n = 0;
        loop {
            if let Some(why) = &q.failed {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, why.clone()));
            }
            if q.at == q.cur.len() {
                let next = match q.control.pop_front() {
                    Some(f) => Some(f),
                    None => q.data.pop_front().inspect(|f| {
                        q.data_bytes -= f.len();
                        o.room.notify_all();
                    }),
                };
                match next {
                    Some(f) => {
                        q.cur = f;
                        q.at = 0;
                    }
                    None if n > 0 || q.closed => break,
                    None => {
                        q = o.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                        continue;
                    }
                }
            }
            let take = (q.cur.len() - q.at).min(buf.len() - n);
            let at = q.at;
            buf[n..n + take].copy_from_slice(&q.cur[at..at + take]);
            q.at += take;
            n += take;
            if n == buf.len() {
                break;
            }
        }
        // Nothing left: poll no longer says readable (unless at the end).
        if q.armed && q.at == q.cur.len() && q.control.is_empty() && q.data.is_empty() && !q.closed
        {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&o.efd, &mut b);
            q.armed = false;
        }
        Ok(n)
    }
}

impl AsFd for OutboxInput {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.efd.as_fd()
    }
}

impl Input for OutboxInput {}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::event::{poll, PollFd, PollFlags};

    fn readable(i: &OutboxInput) -> bool {
        let mut fds = [PollFd::new(i, PollFlags::IN)];
        poll(&mut fds, 0).unwrap() > 0
    }

    #[test]
    fn control_goes_first_and_readiness_follows_the_queues() {
        let (o, mut i) = Outbox::new().unwrap();
        assert!(!readable(&i));
        assert!(o.data(b"data".to_vec()));
        o.control(b"ctl".to_vec());
        assert!(readable(&i));
        let mut b = [0u8; 16];
        assert_eq!(i.read(&mut b).unwrap(), 7);
        assert_eq!(&b[..7], b"ctldata");
        assert!(!readable(&i));
        o.close();
        assert!(readable(&i));
        assert_eq!(i.read(&mut b).unwrap(), 0);
        assert!(!o.data(b"late".to_vec()));
    }

    #[test]
    fn a_frame_is_read_across_small_buffers_and_failure_is_an_error() {
        let (o, mut i) = Outbox::new().unwrap();
        o.data(b"abcdef".to_vec());
        let mut b = [0u8; 4];
        assert_eq!(i.read(&mut b).unwrap(), 4);
        assert!(readable(&i));
        assert_eq!(i.read(&mut b).unwrap(), 2);
        assert_eq!(&b[..2], b"ef");
        o.fail("gone".into());
        assert!(i.read(&mut b).is_err());
    }
}
