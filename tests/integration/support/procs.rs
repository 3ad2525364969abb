//! Processes seen from outside: finding them by command line, waiting for them
//! to appear or to be gone (the readiness signals the tests poll, never a bare
//! sleep), signalling them, and reading what /proc says about them.

use std::fmt::Display;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Polls `probe` every `every` until it gives a value (returned) or `limit`
/// passes (None).
pub fn poll<T>(
    limit: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// [`poll`] every 20 ms that fails the test, naming `what`, past `limit`.
pub fn wait_until<T>(what: impl Display, limit: Duration, probe: impl FnMut() -> Option<T>) -> T {
    poll(limit, Duration::from_millis(20), probe)
        .unwrap_or_else(|| panic!("{what}: not within {limit:?}"))
}

/// `pgrep -f PATTERN` pids (never this test process).
pub fn pgrep(pattern: &str) -> Vec<u32> {
    let me = std::process::id();
    Command::new("pgrep")
        .arg("-f")
        .arg(pattern)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .filter(|p| *p != me)
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until a process matches `pattern`; returns its pids. Fails the test
/// past `limit`.
pub fn wait_for(pattern: &str, limit: Duration) -> Vec<u32> {
    wait_until(format!("a process matching {pattern:?}"), limit, || {
        Some(pgrep(pattern)).filter(|p| !p.is_empty())
    })
}

/// Waits until no process matches `pattern` (true) or `limit` passes (false).
pub fn wait_gone(pattern: &str, limit: Duration) -> bool {
    poll(limit, Duration::from_millis(50), || {
        pgrep(pattern).is_empty().then_some(())
    })
    .is_some()
}

/// Waits for a child at most `limit`, killing it (and failing) past that: a test
/// must never hang.
pub fn wait_bounded(child: &mut Child, limit: Duration, cmdline: &str) -> ExitStatus {
    poll(limit, Duration::from_millis(10), || {
        child.try_wait().unwrap()
    })
    .unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("`{cmdline}` did not exit within {limit:?}")
    })
}

/// `ps` lines of the given pids, for failure messages.
pub fn ps(pids: &[u32]) -> String {
    if pids.is_empty() {
        return String::new();
    }
    let list = pids
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    Command::new("ps")
        .args(["-o", "pid,ppid,pgid,args", "-p", &list])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Sends `sig` (e.g. "-9", "-INT") to `pid`.
pub fn kill(sig: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// VmRSS of a process in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Bytes a process has read so far (`rchar` in /proc/PID/io).
pub fn read_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("rchar: "))?
        .trim()
        .parse()
        .ok()
}

/// The `comm` of a process.
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Makes the processes the tests start get SIGINT, SIGTERM and SIGHUP at their
/// default action, as a foreground job of an interactive shell does, also when
/// this test process inherited them as ignored (`cargo test &` from a script,
/// or under `nohup`). The tools keep a signal inherited as ignored (see
/// `rdpipe_agent::guard::stop_signals`), and the tests that send SIGINT
/// stand for a person's Ctrl-C. Across exec a caught signal goes back to its
/// default action and an ignored one stays ignored, so each ignored one gets a
/// handler here that only sets a flag nobody reads: this process goes on
/// ignoring it in effect. Called before every spawn of a tool; idempotent.
pub fn children_get_default_signals() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let caught = rdpipe_agent::guard::stop_signals();
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            if !caught.contains(&sig) {
                let unread = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                signal_hook::flag::register(sig, unread).expect("a handler for SIGINT/TERM/HUP");
            }
        }
    });
}
