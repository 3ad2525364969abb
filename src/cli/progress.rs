//! The live progress line (`--progress`, or by default when stderr is a terminal
//! and `-q` is not given), in the manner of `pv`: bytes, rate, elapsed, and for a
//! source of known size the percentage and ETA. Always on stderr, never stdout, and
//! drawn by its own thread four times a second so it costs nothing on the data path.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Whether to show progress: asked for, or stderr is a terminal and not `-q`.
pub fn wanted(progress: bool, quiet: bool) -> bool {
    progress || (!quiet && std::io::stderr().is_terminal())
}

/// Formats a byte count with binary units (`1.50 GiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

fn hms(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// A progress line for one stream. The data path only stores the byte count; a
/// ticker thread redraws the line four times a second, so the rate and elapsed time
/// stay current while the stream idles (a producer pausing, a slow consumer).
pub struct Progress {
    tool: &'static str,
    total: Option<u64>,
}

/// The running line: the byte count the data path updates, and the ticker drawing it.
pub struct Ticker {
    bytes: Arc<AtomicU64>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// A line for `tool`; `total` is the source's size when known (a file).
    pub fn new(tool: &'static str, total: Option<u64>) -> Progress {
        Progress { tool, total }
    }

    /// The line for `bytes` so far (exposed for tests).
    pub fn line(&self, bytes: u64, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64().max(1e-6);
        let rate = bytes as f64 / secs;
        let mut s = format!(
            "{}: {} {}/s {}",
            self.tool,
            human_bytes(bytes),
            human_bytes(rate as u64),
            hms(elapsed)
        );
        if let Some(total) = self.total.filter(|t| *t > 0) {
            let pct = (bytes as f64 / total as f64 * 100.0).min(100.0);
            let eta = if rate > 0.0 && total > bytes {
                hms(Duration::from_secs_f64((total - bytes) as f64 / rate))
            } else {
                hms(Duration::ZERO)
            };
            s.push_str(&format!(" {pct:5.1}% ETA {eta}"));
        }
        s
    }

    /// Starts drawing; the line is cleared when the returned ticker is dropped.
    pub fn start(self) -> Ticker {
        let bytes = Arc::new(AtomicU64::new(0));
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (b, st) = (bytes.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                let (lock, cv) = &*st;
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                let mut drawn = false;
                // Time counts from the first byte, not from waiting for the peer.
                let mut first: Option<Instant> = None;
                while !*stopped {
                    let (g, _) = cv
                        .wait_timeout(stopped, Duration::from_millis(250))
                        .unwrap_or_else(|e| e.into_inner());
                    stopped = g;
                    if *stopped {
                        break;
                    }
                    let n = b.load(Ordering::Relaxed);
                    if n == 0 {
                        continue;
                    }
                    let t0 = *first.get_or_insert_with(Instant::now);
                    let l = self.line(n, t0.elapsed());
                    let _ = std::io::stderr()
                        .lock()
                        .write_all(format!("\r{l}\x1b[K").as_bytes());
                    drawn = true;
                }
                if drawn {
                    // Leave the terminal clean for the final messages.
                    let _ = std::io::stderr().lock().write_all(b"\r\x1b[K");
                }
            })
            .ok();
        Ticker {
            bytes,
            stop,
            thread,
        }
    }
}

impl Ticker {
    /// Called after every chunk with the running total: one atomic store.
    pub fn update(&self, bytes: u64) {
        self.bytes.store(bytes, Ordering::Relaxed);
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shows_rate_percentage_and_eta() {
        let p = Progress::new("rdsend", Some(4 << 30));
        let l = p.line(1 << 30, Duration::from_secs(2));
        assert_eq!(
            l,
            "rdsend: 1.00 GiB 512.00 MiB/s 0:00:02  25.0% ETA 0:00:06"
        );
        let p = Progress::new("rdrecv", None);
        assert_eq!(
            p.line(512, Duration::from_secs(1)),
            "rdrecv: 512 B 512 B/s 0:00:01"
        );
    }
}
