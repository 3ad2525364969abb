//! A relay-only segment (`HOST:`, an empty command): the agent forwards the
//! stream it receives straight to its outgoing transfer, with no shell, no
//! command and no pipe. The receiving thread hands each verified-as-it-goes
//! buffer to the sending thread through a short in-process queue
//! ([`DEPTH`] buffers, recycled), so the relay costs one copy in and one copy out
//! of the queue and no system call of its own beyond an eventfd doorbell.
//!
//! The doorbell is an eventfd in semaphore mode counting the queued buffers: it
//! is what the sender polls ([`rdpipe_transport::pump::fill_available`]) to tell
//! whether more input is ready right now, exactly as it would poll a pipe.
//!
//! Between two RDMA connections on one device the queue is not used: the
//! transport forwards from its receive ring ([`rdpipe_transport::relay`]), and
//! the output only stops taking buffers ([`RelayOutput::forwarding`]).
//!
//! As for a `--to` sink's relay ([`super::relay`]), the outgoing stream ends
//! cleanly only once the incoming one verified (the receiver's flush): an
//! incoming stream that fails, is cut short or altered ends the queue
//! unverified, and the outgoing transfer turns that into an abort
//! ([`CmdEnd::Poisoned`]), so nothing downstream ever takes a partial stream for
//! a whole one (no `> FILE` is published). A downstream that goes away makes the
//! incoming transfer fail in turn (the queue is closed, "output closed").

use super::command::CmdEnd;
use super::segment::Segment;
use super::transfers::Transfers;
use rdpipe_control::{Direction, Part};
use rdpipe_transport::relay::RelayOutput;
use rustix::event::{eventfd, EventfdFlags};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;

/// Buffers queued between the receiving and the sending thread.
pub const DEPTH: usize = 4;

/// The sending thread's side: the outgoing transfer's input.
pub struct ForwardInput {
    queue: Receiver<Vec<u8>>,
    /// Emptied buffers go back to the receiving side.
    spent: SyncSender<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
    bell: Arc<OwnedFd>,
    verified: Arc<AtomicBool>,
}

impl Read for ForwardInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.pos == self.current.len() {
            match self.queue.recv() {
                Ok(next) => {
                    let done = std::mem::replace(&mut self.current, next);
                    let _ = self.spent.try_send(done);
                    self.pos = 0;
                }
                Err(_) if self.verified.load(Ordering::SeqCst) => return Ok(0),
                // The incoming stream did not verify: abort downstream.
                Err(_) => return Err(io::Error::other(CmdEnd::Poisoned)),
            }
        }
        let n = buf.len().min(self.current.len() - self.pos);
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        if self.pos == self.current.len() {
            // The buffer is used up: count it off the doorbell (rung right
            // after it was queued, so this never waits long).
            let mut n = [0u8; 8];
            rustix::io::read(&*self.bell, &mut n)?;
        }
        Ok(n)
    }
}

/// Its descriptor is the bell (an eventfd): the window copies what it gives.
impl rdpipe_transport::replay::Input for ForwardInput {}

impl AsFd for ForwardInput {
    /// The doorbell: readable while a buffer is queued or partly read, and
    /// once the receiving side is gone (a read then ends or fails at once),
    /// as [`rdpipe_transport::replay::Input`] asks.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.bell.as_fd()
    }
}

/// The receiving thread's side: the incoming transfer's output.
pub struct ForwardOutput {
    /// None once the transport forwards by itself (zero-copy).
    queue: Option<SyncSender<Vec<u8>>>,
    spent: Receiver<Vec<u8>>,
    bell: Arc<OwnedFd>,
    verified: Arc<AtomicBool>,
}

impl Write for ForwardOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(queue) = self.queue.as_ref() else {
            // Zero-copy: no local copy on a relay-only segment.
            return Ok(buf.len());
        };
        if buf.is_empty() {
            return Ok(0);
        }
        let mut v = self.spent.try_recv().unwrap_or_default();
        v.clear();
        v.extend_from_slice(buf);
        queue.send(v).map_err(|_| gone())?;
        rustix::io::write(&*self.bell, &1u64.to_ne_bytes())?;
        Ok(buf.len())
    }

    /// Called once the incoming stream verified whole: the outgoing stream may
    /// now end cleanly.
    fn flush(&mut self) -> io::Result<()> {
        self.verified.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for ForwardOutput {
    /// The end of the queue shows on the doorbell: a sender waiting for its
    /// input to become readable reads the end (or the poisoning) at once.
    fn drop(&mut self) {
        let _ = rustix::io::write(&*self.bell, &1u64.to_ne_bytes());
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the outgoing transfer ended before the stream did",
    )
}

impl RelayOutput for ForwardOutput {
    fn forwarding(&mut self) {
        self.queue = None;
    }

    /// A relay-only segment has nothing to go on for.
    fn forward_broke(&mut self) -> io::Result<()> {
        Err(gone())
    }

    fn unverified(&self) -> io::Error {
        io::Error::other(CmdEnd::Poisoned)
    }
}

/// The two ends of the forwarding queue.
pub fn forward_queue() -> io::Result<(ForwardOutput, ForwardInput)> {
    let bell = Arc::new(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::SEMAPHORE)?);
    let (qtx, qrx) = mpsc::sync_channel(DEPTH);
    let (stx, srx) = mpsc::sync_channel(DEPTH + 1);
    let verified = Arc::new(AtomicBool::new(false));
    Ok((
        ForwardOutput {
            queue: Some(qtx),
            spent: srx,
            bell: bell.clone(),
            verified: verified.clone(),
        },
        ForwardInput {
            queue: qrx,
            spent: stx,
            current: Vec::new(),
            pos: 0,
            bell,
            verified,
        },
    ))
}

/// Starts a relay-only segment: the outgoing transfer from the queue, and the
/// incoming transfer into it; together ([`Transfers::spawn_relay`],
/// zero-copy where it can) when its hops do not reconnect, else as two
/// reconnecting transfers.
pub fn start(seg: &mut Segment, t: &mut Transfers) {
    let (output, input) = match forward_queue() {
        Ok(q) => q,
        Err(e) => {
            for dir in [Direction::In, Direction::Out] {
                seg.drop_transfer(dir);
            }
            seg.setup_failed(Part::Agent, format!("cannot create the relay queue: {e}"));
            return;
        }
    };
    match (seg.pending(Direction::In), seg.pending(Direction::Out)) {
        (true, true) if !t.reconnecting() => {
            t.spawn_relay(input, Box::new(move || Ok(Box::new(output) as _)), None)
        }
        (true, true) => {
            t.spawn_send(input);
            t.spawn_recv(Box::new(move || Ok(Box::new(output) as _)), None)
        }
        (false, true) => t.spawn_send(input),
        (true, false) => t.spawn_recv(Box::new(move || Ok(Box::new(output) as _)), None),
        (false, false) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(i: &ForwardInput) -> bool {
        let mut fds = [rustix::event::PollFd::new(i, rustix::event::PollFlags::IN)];
        rustix::event::poll(&mut fds, 0).unwrap() > 0
    }

    #[test]
    fn forwards_in_order_and_ends_only_when_verified() {
        let (mut out, mut input) = forward_queue().unwrap();
        assert!(!ready(&input));
        let writer = std::thread::spawn(move || {
            for k in 0..100u32 {
                out.write_all(&vec![k as u8; 1000 + k as usize]).unwrap();
            }
            out.flush().unwrap();
        });
        let mut got = Vec::new();
        input.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        let want: Vec<u8> = (0..100u32)
            .flat_map(|k| vec![k as u8; 1000 + k as usize])
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_doorbell_counts_queued_buffers() {
        let (mut out, mut input) = forward_queue().unwrap();
        out.write_all(b"abc").unwrap();
        out.write_all(b"de").unwrap();
        assert!(ready(&input));
        let mut b = [0u8; 2];
        assert_eq!(input.read(&mut b).unwrap(), 2);
        assert!(ready(&input), "one buffer still queued");
        assert_eq!(input.read(&mut b).unwrap(), 1);
        assert_eq!(input.read(&mut b).unwrap(), 2);
        assert!(!ready(&input));
        out.write_all(b"fgh").unwrap();
        assert_eq!(input.read(&mut b).unwrap(), 2);
        assert!(ready(&input), "a buffer partly read");
        assert_eq!(input.read(&mut b).unwrap(), 1);
        assert!(!ready(&input));
        out.flush().unwrap();
        drop(out);
        assert!(ready(&input), "the end shows");
        assert_eq!(input.read(&mut b).unwrap(), 0);
    }

    #[test]
    fn an_unverified_end_poisons_the_outgoing_stream() {
        let (mut out, mut input) = forward_queue().unwrap();
        out.write_all(b"partial").unwrap();
        drop(out); // the incoming transfer failed: no flush
        let mut got = Vec::new();
        let e = input.read_to_end(&mut got).unwrap_err();
        assert!(CmdEnd::is_poisoned(&e), "{e}");
        assert_eq!(got, b"partial");
    }

    #[test]
    fn a_gone_sender_fails_the_incoming_stream() {
        let (mut out, input) = forward_queue().unwrap();
        drop(input);
        let e = out.write_all(b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}
