//! The live progress line (`--progress`, or by default when stderr is a terminal
//! and `-q` is not given), in the manner of `pv`: bytes, rate, elapsed, and for a
//! source of known size the percentage and ETA. Always on stderr, never stdout, and
//! drawn by its own thread so it costs nothing on the data path (which only stores
//! a byte count).
//!
//! On a terminal the line is redrawn four times a second at the bottom (messages
//! printed meanwhile through [`crate::line`] appear above it) and, once anything
//! was drawn, the final line stays when the transfer ends. Elsewhere (stderr
//! redirected, `--progress` asked for) a plain line is printed at most once a
//! second while the count moves, and a final one at the end: no control characters
//! in a log file.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often the line is redrawn on a terminal.
pub const REDRAW_EVERY: Duration = Duration::from_millis(250);

/// How often a line is printed when stderr is not a terminal.
pub const LOG_EVERY: Duration = Duration::from_secs(1);

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

/// The line: `tool: BYTES RATE/s H:MM:SS`, and with a known `total` (> 0)
/// ` PCT% ETA H:MM:SS`. `done` is how much of the `total` is through; with a
/// known total the whole line (bytes, rate, percentage, ETA) is about `done`, so
/// its figures always agree with each other, as in `pv`. `bytes` is what the line
/// counts when there is no total (the same number for a single transfer; rdpipe
/// counts what reached furthest down the pipeline, as a command there may change
/// the data's size, but measures a known-size source where it is read).
pub fn render(tool: &str, bytes: u64, done: u64, total: Option<u64>, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-3);
    let total = total.filter(|t| *t > 0);
    let bytes = counted(bytes, done, total);
    let rate = bytes as f64 / secs;
    let mut s = format!(
        "{tool}: {} {}/s {}",
        human_bytes(bytes),
        human_bytes(rate as u64),
        hms(elapsed)
    );
    if let Some(total) = total {
        let pct = (done as f64 / total as f64 * 100.0).min(100.0);
        let eta = if rate > 0.0 && total > done {
            hms(Duration::from_secs_f64(
                ((total - done) as f64 / rate).min(1e9),
            ))
        } else {
            hms(Duration::ZERO)
        };
        s.push_str(&format!(" {pct:5.1}% ETA {eta}"));
    }
    s
}

/// The count a line shows: `done` when there is a total, else `bytes`.
fn counted(bytes: u64, done: u64, total: Option<u64>) -> u64 {
    if total.is_some_and(|t| t > 0) {
        done
    } else {
        bytes
    }
}

/// A progress line for one stream (see the module documentation).
pub struct Progress {
    tool: String,
    total: Option<u64>,
}

/// What the data path and the drawing thread share.
struct State {
    /// The count the line shows when there is no total.
    bytes: AtomicU64,
    /// How much of `total` is through.
    done: AtomicU64,
    /// The source's size; 0 when unknown.
    total: AtomicU64,
    /// Elapsed time counts from here: the first byte, or [`Ticker::start_clock`].
    clock: OnceLock<Instant>,
    /// Said after the figures while set (`reconnecting…`).
    note: Mutex<Option<String>>,
    stop: Mutex<bool>,
    cv: Condvar,
}

impl State {
    /// The count the line shows (see [`render`]).
    fn shown(&self) -> u64 {
        counted(
            self.bytes.load(Ordering::Relaxed),
            self.done.load(Ordering::Relaxed),
            Some(self.total.load(Ordering::Relaxed)),
        )
    }

    fn line(&self, tool: &str) -> String {
        let bytes = self.bytes.load(Ordering::Relaxed);
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let elapsed = self.clock.get().map(Instant::elapsed).unwrap_or_default();
        let line = render(tool, bytes, done, Some(total), elapsed);
        match self.note.lock().ok().and_then(|n| n.clone()) {
            Some(n) => format!("{line}  {n}"),
            None => line,
        }
    }
}

/// The running line: the counts the data path updates, and the thread drawing it.
/// Dropping it (or [`Ticker::finish`]) stops the thread and prints the final line.
pub struct Ticker {
    state: Arc<State>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// A line for `tool`; `total` is the source's size when known (a file).
    pub fn new(tool: &str, total: Option<u64>) -> Progress {
        Progress {
            tool: tool.to_string(),
            total,
        }
    }

    /// The line for `bytes` so far (exposed for tests).
    pub fn line(&self, bytes: u64, elapsed: Duration) -> String {
        render(&self.tool, bytes, bytes, self.total, elapsed)
    }

    /// Starts drawing.
    pub fn start(self) -> Ticker {
        let state = Arc::new(State {
            bytes: AtomicU64::new(0),
            done: AtomicU64::new(0),
            total: AtomicU64::new(self.total.unwrap_or(0)),
            clock: OnceLock::new(),
            note: Mutex::new(None),
            stop: Mutex::new(false),
            cv: Condvar::new(),
        });
        let st = state.clone();
        let tool = self.tool;
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || draw(&st, &tool))
            .ok();
        Ticker { state, thread }
    }
}

/// The drawing thread: until stopped, then the final line.
fn draw(st: &State, tool: &str) {
    let tty = crate::stderr_is_terminal();
    let every = if tty { REDRAW_EVERY } else { LOG_EVERY };
    let mut stopped = st.stop.lock().unwrap_or_else(|e| e.into_inner());
    let mut drawn = false;
    let mut last = 0;
    while !*stopped {
        let (g, _) = st
            .cv
            .wait_timeout(stopped, every)
            .unwrap_or_else(|e| e.into_inner());
        stopped = g;
        if *stopped {
            break;
        }
        // What the line shows: with a total, the source's count.
        let bytes = st.shown();
        if bytes == 0 {
            continue;
        }
        if tty {
            crate::draw_status(&st.line(tool));
        } else if bytes != last {
            crate::line(&format!("{}\n", st.line(tool)));
        }
        last = bytes;
        drawn = true;
    }
    drop(stopped);
    let l = st.line(tool);
    if tty {
        if drawn {
            // Like pv: the final figures stay on the terminal.
            crate::finish_status(&l);
        }
    } else {
        crate::line(&format!("{l}\n"));
    }
}

impl Ticker {
    /// Called after every chunk with the running total: the line's count and the
    /// percentage both follow it. The clock starts at the first byte.
    pub fn update(&self, bytes: u64) {
        self.update_shown(bytes);
        self.update_source(bytes);
    }

    /// Sets the count the line shows (the clock starts at the first byte).
    pub fn update_shown(&self, bytes: u64) {
        if bytes > 0 {
            self.start_clock();
        }
        self.state.bytes.store(bytes, Ordering::Relaxed);
    }

    /// Sets how much of the total is through (percentage and ETA).
    pub fn update_source(&self, done: u64) {
        if done > 0 {
            self.start_clock();
        }
        self.state.done.store(done, Ordering::Relaxed);
    }

    /// Sets the source's size, once known.
    pub fn set_total(&self, total: u64) {
        self.state.total.store(total, Ordering::Relaxed);
    }

    /// Shows `note` after the figures until it is cleared (`None`), and
    /// redraws at once.
    pub fn set_note(&self, note: Option<&str>) {
        if let Ok(mut n) = self.state.note.lock() {
            *n = note.map(str::to_string);
        }
        self.state.cv.notify_all();
    }

    /// Starts the clock now, unless the first byte already did.
    pub fn start_clock(&self) {
        self.state.clock.get_or_init(Instant::now);
    }

    /// Stops drawing and prints the final line (see the module documentation).
    pub fn finish(self) {}
}

impl Drop for Ticker {
    fn drop(&mut self) {
        *self.state.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.state.cv.notify_all();
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

    #[test]
    fn with_a_total_the_whole_line_follows_the_source() {
        // 1 MiB arrived at the end, half of the 4 MiB source read after 2 s:
        // bytes, rate, percentage and ETA all about the source, so they agree.
        let l = render(
            "rdpipe",
            1 << 20,
            2 << 20,
            Some(4 << 20),
            Duration::from_secs(2),
        );
        assert_eq!(l, "rdpipe: 2.00 MiB 1.00 MiB/s 0:00:02  50.0% ETA 0:00:02");
        // Without a total, the count is the one given for the line.
        assert_eq!(
            render("rdpipe", 1 << 20, 2 << 20, None, Duration::from_secs(2)),
            "rdpipe: 1.00 MiB 512.00 KiB/s 0:00:02"
        );
        // Unknown or empty total: no percentage; never above 100%.
        assert_eq!(
            render("rdpipe", 10, 10, Some(0), Duration::from_secs(1)),
            "rdpipe: 10 B 10 B/s 0:00:01"
        );
        assert!(
            render("x", 20, 20, Some(10), Duration::from_secs(1)).contains("100.0% ETA 0:00:00")
        );
    }

    #[test]
    fn ticker_counts_from_the_first_byte() {
        let t = Progress::new("t", None).start();
        assert!(t.state.clock.get().is_none());
        t.update(0);
        assert!(t.state.clock.get().is_none());
        t.update(5);
        assert!(t.state.clock.get().is_some());
        assert_eq!(t.state.bytes.load(Ordering::Relaxed), 5);
        t.set_total(10);
        assert!(t.state.line("t").contains("50.0%"));
    }
}
