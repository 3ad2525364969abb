//! The live progress line (`--progress`, or by default when stderr is a terminal
//! and `-q` is not given), in the manner of `pv`: bytes, rate, elapsed, and for a
//! source of known size the percentage and ETA. Always on stderr, never stdout, and
//! redrawn at most five times a second so it costs nothing on the data path.

use std::io::{IsTerminal, Write};
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

/// A progress line for one stream.
pub struct Progress {
    tool: &'static str,
    total: Option<u64>,
    start: Instant,
    last: Instant,
    drawn: bool,
}

impl Progress {
    /// A line for `tool`; `total` is the source's size when known (a file).
    pub fn new(tool: &'static str, total: Option<u64>) -> Progress {
        let now = Instant::now();
        Progress {
            tool,
            total,
            start: now,
            last: now - Duration::from_secs(1),
            drawn: false,
        }
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

    /// Called after every chunk; redraws at most every 200 ms.
    pub fn update(&mut self, bytes: u64) {
        let now = Instant::now();
        if now.duration_since(self.last) < Duration::from_millis(200) {
            return;
        }
        self.last = now;
        let l = self.line(bytes, now.duration_since(self.start));
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("\r{l}\x1b[K").as_bytes());
        self.drawn = true;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.drawn {
            // Leave the terminal clean for the final messages.
            let _ = std::io::stderr().lock().write_all(b"\r\x1b[K");
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
