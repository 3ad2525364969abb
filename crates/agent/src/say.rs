//! What the agent tells rdpipe: [`Say`] writes whole control lines (never
//! interleaved, nothing after `END`), and [`Meter`] turns the transfers' byte
//! counts into `SIZE` and `BYTES` lines once rdpipe asked for `PROGRESS`.

use rdpipe_control::{Direction, FromAgent, PROGRESS_EVERY};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// `m`, about a line merge's lane K when `lane` is `Some(K)` (`LANE K ...`,
/// [`super::gather`]).
pub fn lane_line(lane: Option<usize>, m: FromAgent) -> FromAgent {
    match lane {
        Some(lane) => FromAgent::Lane {
            lane,
            msg: Box::new(m),
        },
        None => m,
    }
}

/// Control-channel output, shared by the threads: each line is written whole
/// under the lock, and nothing after `END`.
///
/// With a log ([`Say::keep_log`], `--reattach`), every line is also kept
/// (the last [`LOG_LINES`]) with its number, so that a new channel gets the
/// lines rdpipe did not read from the lost one ([`Say::reattach`]).
#[derive(Clone)]
pub struct Say(Arc<(Mutex<Out>, Condvar)>);

/// The most lines kept for a re-attach.
pub const LOG_LINES: usize = 65536;

struct Out {
    w: Box<dyn Write + Send>,
    ended: bool,
    /// A write failed: the channel is gone (until a re-attach).
    broken: bool,
    /// No re-attach can come any more (the agent stopped waiting for one).
    given_up: bool,
    /// Kept lines, the first one numbered `first` (0-based).
    log: Option<(u64, VecDeque<String>)>,
}

impl Out {
    /// Writes `line` unless the channel is known lost; a failed write marks
    /// it lost (rdpipe gone: nothing to tell, the channel's end says so).
    fn write(&mut self, line: &str) {
        if !self.broken
            && self
                .w
                .write_all(line.as_bytes())
                .and_then(|_| self.w.flush())
                .is_err()
        {
            self.broken = true;
        }
    }
}

/// Why [`Say::reattach`] could not bring a new channel up to date.
#[derive(Debug, thiserror::Error)]
#[error("rdpipe has {has} of this agent's lines; the oldest still kept is line {first}")]
pub struct LogGap {
    has: u64,
    first: u64,
}

impl Say {
    /// Lines on stdout (the SSH channel).
    pub fn stdout() -> Say {
        // Unbuffered, through a descriptor of its own: a failed write leaves
        // nothing half-buffered behind to reach a later channel.
        match io::stdout().as_fd().try_clone_to_owned() {
            Ok(fd) => Say::to(Box::new(std::fs::File::from(fd))),
            Err(_) => Say::to(Box::new(io::stdout())),
        }
    }

    /// Lines into `w`.
    pub fn to(w: Box<dyn Write + Send>) -> Say {
        Say(Arc::new((
            Mutex::new(Out {
                w,
                ended: false,
                broken: false,
                given_up: false,
                log: None,
            }),
            Condvar::new(),
        )))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Out> {
        self.0 .0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps every line from now on for a re-attach.
    pub fn keep_log(&self) {
        let mut o = self.lock();
        if o.log.is_none() {
            o.log = Some((0, VecDeque::new()));
        }
    }

    /// Sends one message (dropped after `END`).
    pub fn send(&self, m: &FromAgent) {
        let mut g = self.lock();
        if g.ended {
            return;
        }
        g.ended = matches!(m, FromAgent::End { .. });
        let line = format!("{m}\n");
        if let Some((first, log)) = g.log.as_mut() {
            log.push_back(line.clone());
            if log.len() > LOG_LINES {
                log.pop_front();
                *first += 1;
            }
        }
        g.write(&line);
    }

    /// `PONG`, outside the log: a sign of life, never sent again.
    pub fn pong(&self) {
        // Never waits: a line being written (into a channel that may be
        // stalled) says as much.
        let Ok(mut g) = self.0 .0.try_lock() else {
            return;
        };
        if !g.ended {
            g.write(&format!("{}\n", FromAgent::Pong));
        }
    }

    /// No re-attach will come: [`Say::linger`] stops waiting.
    pub fn give_up(&self) {
        self.lock().given_up = true;
        self.0 .1.notify_all();
    }

    /// The channel was found lost (its end of file, or silence).
    pub fn lost(&self) {
        self.lock().broken = true;
    }

    /// A new channel `w`: `ATTACHED received`, then every kept line from
    /// the `has`-th on.
    pub fn reattach(
        &self,
        w: Box<dyn Write + Send>,
        received: u64,
        has: u64,
    ) -> Result<(), LogGap> {
        let mut g = self.lock();
        let Out {
            w: out,
            log,
            broken,
            ..
        } = &mut *g;
        let Some((first, lines)) = log.as_ref() else {
            return Err(LogGap { has, first: 0 });
        };
        let end = first + lines.len() as u64;
        if has < *first || has > end {
            return Err(LogGap { has, first: *first });
        }
        *out = w;
        let mut text = format!("{}\n", FromAgent::Attached(received));
        lines
            .iter()
            .skip((has - first) as usize)
            .for_each(|l| text.push_str(l));
        *broken = out
            .write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .is_err();
        self.0 .1.notify_all();
        Ok(())
    }

    /// Before the agent exits: if its last lines went to a lost channel,
    /// waits up to `limit` for a re-attach to deliver them.
    pub fn linger(&self, limit: std::time::Duration) {
        let mut g = self.lock();
        if g.log.is_none() {
            return;
        }
        let deadline = std::time::Instant::now() + limit;
        while g.broken && !g.given_up {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            g = self
                .0
                 .1
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// The byte counts behind `SIZE` and `BYTES`: stored by the transfers' progress
/// callbacks (one relaxed store per chunk), read by the reporter thread that
/// `PROGRESS` starts.
pub struct Meter {
    bytes: [AtomicU64; 2],
    /// The `< FILE` size; `u64::MAX` while unknown.
    size: AtomicU64,
    /// `PROGRESS` was heard, `SIZE` was sent.
    started: AtomicBool,
    size_sent: AtomicBool,
    say: Say,
}

impl Meter {
    /// A meter reporting through `say`.
    pub fn new(say: &Say) -> Meter {
        Meter {
            bytes: [AtomicU64::new(0), AtomicU64::new(0)],
            size: AtomicU64::new(u64::MAX),
            started: AtomicBool::new(false),
            size_sent: AtomicBool::new(false),
            say: say.clone(),
        }
    }

    /// `SIZE`, once, as soon as both the size and `PROGRESS` are known (whichever
    /// comes second sends it).
    fn send_size(&self) {
        let size = self.size.load(Ordering::SeqCst);
        if size != u64::MAX
            && self.started.load(Ordering::SeqCst)
            && !self.size_sent.swap(true, Ordering::SeqCst)
        {
            self.say.send(&FromAgent::Size(size));
        }
    }

    /// The `< FILE` is a regular file of `n` bytes.
    pub fn set_size(&self, n: u64) {
        self.size.store(n, Ordering::SeqCst);
        self.send_size();
    }

    /// The progress callback for one direction's transfer.
    pub fn callback(self: &Arc<Meter>, dir: Direction) -> Box<dyn FnMut(u64) + Send> {
        let m = self.clone();
        Box::new(move |n| m.bytes[dir.index()].store(n, Ordering::Relaxed))
    }

    /// Starts reporting (once): `SIZE` when known, and a thread sending `BYTES`
    /// lines every [`PROGRESS_EVERY`] while a count changes, until the process ends.
    pub fn start(self: &Arc<Meter>) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        self.send_size();
        let m = self.clone();
        let spawned = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                let mut sent = [0u64; 2];
                loop {
                    std::thread::sleep(PROGRESS_EVERY);
                    for dir in [Direction::In, Direction::Out] {
                        let n = m.bytes[dir.index()].load(Ordering::Relaxed);
                        if n != sent[dir.index()] {
                            sent[dir.index()] = n;
                            m.say.send(&FromAgent::Bytes { dir, bytes: n });
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the progress reporter: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_and_nothing_after_end() {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let say = Say::to(Box::new(buf.clone()));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let say = say.clone();
                std::thread::spawn(move || {
                    for n in 0..200 {
                        say.send(&FromAgent::Bytes {
                            dir: Direction::Out,
                            bytes: t * 1000 + n,
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        say.send(&FromAgent::End { ok: true });
        // A BYTES line due after END is dropped.
        say.send(&FromAgent::Bytes {
            dir: Direction::Out,
            bytes: 5,
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 801);
        assert_eq!(*lines.last().unwrap(), "END ok");
        assert!(lines[..800].iter().all(|l| matches!(
            l.parse::<FromAgent>(),
            Ok(FromAgent::Bytes {
                dir: Direction::Out,
                ..
            })
        )));
    }
}
