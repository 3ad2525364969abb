//! What the agent tells rdpipe: [`Say`] writes whole control lines (never
//! interleaved, nothing after `END`), and [`Meter`] turns the transfers' byte
//! counts into `SIZE` and `BYTES` lines once rdpipe asked for `PROGRESS`.

use rdpipe_control::{Direction, FromAgent, PROGRESS_EVERY};
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
#[derive(Clone)]
pub struct Say(Arc<Mutex<(Box<dyn Write + Send>, bool)>>);

impl Say {
    /// Lines on stdout (the SSH channel).
    pub fn stdout() -> Say {
        Say::to(Box::new(io::stdout()))
    }

    /// Lines into `w`.
    pub fn to(w: Box<dyn Write + Send>) -> Say {
        Say(Arc::new(Mutex::new((w, false))))
    }

    /// Sends one message (dropped after `END`).
    pub fn send(&self, m: &FromAgent) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (o, ended) = &mut *g;
        if *ended {
            return;
        }
        *ended = matches!(m, FromAgent::End { .. });
        // rdpipe gone: nothing to tell, stdin EOF ends us.
        let _ = o.write_all(format!("{m}\n").as_bytes());
        let _ = o.flush();
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
