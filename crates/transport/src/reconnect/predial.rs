//! A receiver that dials its sender (rdpipe's own stdout, fed by an agent
//! that listens) learns that its connection was lost only when its stream
//! loop reads again. A consumer that stops reading (`zfs recv` committing)
//! keeps that loop blocked on the output for as long as it does not read,
//! possibly past the sender's `--reconnect-timeout`: the sender's acceptor
//! would wait for a dial that comes too late. So while the stream runs, a
//! thread watches the connection; once it fails (an error or a reset, not
//! the sender's clean close), the thread dials again at once, authenticates
//! the new connection, sends the hold that tells the sender so
//! ([`rdpipe_wire::resume::Resuming::Hold`], bound to the stream) and keeps
//! it. The sender then waits on that connection for the resume request
//! (`super::await_request`); the stream loop, once it reads again and finds
//! the old connection gone, takes the kept one ([`Predial::finish`]) and asks.
//!
//! Only one end dials at a time: the stream loop dials itself only after
//! [`Predial::finish`] has stopped the thread and taken what it had.

use super::Redial;
use crate::handshake::Negotiated;
use rdpipe_wire::resume::Resuming;
use rustix::event::{poll, PollFd, PollFlags};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the watching thread looks at its stop flag.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// The most one dial retries a refused connection before the stop flag is
/// looked at again.
const DIAL_SLICE: Duration = Duration::from_secs(1);

/// What the thread brings back: when it saw the loss, and the connection it
/// authenticated since, if any.
type Found = Option<(Instant, Option<(TcpStream, Negotiated)>)>;

/// Where to dial, and what to authenticate with.
pub(crate) struct Dial {
    pub(crate) redial: Redial,
    pub(crate) reconnect_timeout: Duration,
    /// The stream's binding, for the hold sent on the new connection.
    pub(crate) binding: Vec<u8>,
}

/// The watching (and, after a loss, dialing) thread of one connection.
pub(crate) struct Predial {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Found>>,
}

impl Predial {
    /// Watches `conn` (a second handle on it, dropped the moment the loss is
    /// seen, so that it does not keep the dead socket open) and dials `dial`
    /// once it fails. `None` when the handle cannot be had: the stream loop
    /// then notices the loss itself, as any listening receiver's does.
    pub(crate) fn start(conn: &TcpStream, dial: Dial) -> Option<Predial> {
        let watched = conn.try_clone().ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rdpipe-predial".into())
            .spawn(move || watch_then_dial(watched, &dial, &flag))
            .ok()?;
        Some(Predial {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and takes what it found: when it saw the loss (the
    /// reconnect's deadline counts from then) and the connection it
    /// authenticated, if any. Waits for the dial in progress, if one is
    /// (at most a slice of connecting and one handshake).
    pub(crate) fn finish(mut self) -> Found {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().and_then(|t| t.join().ok()).flatten()
    }
}

impl Drop for Predial {
    /// A stream that ended (or failed for good) stops the thread; it ends at
    /// its next look at the flag, holding nothing.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn watch_then_dial(watched: TcpStream, dial: &Dial, stop: &AtomicBool) -> Found {
    // No events asked for: only an error or a hang-up wakes the poll; the
    // peer's bytes and its clean close (its end of the stream) do not. Only
    // an error is a loss (a reset, `ss -K`, a timeout: the socket holds it
    // until the stream loop reads it); a hang-up without one is our own end
    // shutting the connection down (the stream confirmed or aborted), or an
    // error the stream loop took already (it reconnects itself).
    loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let mut fds = [PollFd::new(&watched, PollFlags::empty())];
        match poll(&mut fds, CHECK_EVERY.as_millis() as i32) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) if fds[0].revents().contains(PollFlags::ERR) => break,
            Ok(_) | Err(_) => return None,
        }
    }
    drop(watched);
    let lost_at = Instant::now();
    let (host, port) = (&dial.redial.host, dial.redial.port);
    tracing::debug!(
        "{host}:{port}: the connection failed while the output was busy; dialing again"
    );
    let deadline = lost_at + dial.reconnect_timeout;
    loop {
        match dial.redial.until(deadline, DIAL_SLICE, stop) {
            Ok(Some((mut s, n))) => {
                // Ours is the stream's other end, alive: the sender waits
                // for our request until the stream loop sends it.
                if let Err(e) = s.write_all(&Resuming::hold(&n.keys, &dial.binding)) {
                    tracing::debug!("{host}:{port}: {e}");
                    continue;
                }
                return Some((lost_at, Some((s, n))));
            }
            Ok(None) => return Some((lost_at, None)),
            Err(e) => {
                tracing::debug!("{host}:{port}: {e}");
                return Some((lost_at, None));
            }
        }
    }
}
