//! The rdpipe binary run under a time bound: stdin fed from a thread, stdout
//! and stderr collected, the exit status and how long it took.

use super::procs::{children_get_default_signals, poll};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The rdpipe binary under test.
pub fn rdpipe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rdpipe"))
}

/// The directory holding rdrecv (for `--remote-bin`).
pub fn bin_dir() -> String {
    Path::new(env!("CARGO_BIN_EXE_rdrecv"))
        .parent()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// `-F CONFIG --remote-bin DIR`: rdpipe's arguments for a generated ssh
/// configuration and the endpoints cargo built.
pub fn base_args(config: &Path) -> Vec<String> {
    vec![
        "-F".into(),
        config.to_string_lossy().into_owned(),
        "--remote-bin".into(),
        bin_dir(),
    ]
}

/// What a finished rdpipe run gave.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub cmdline: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn ok(&self) -> &Self {
        assert!(
            self.status.success(),
            "{} failed ({:?}):\n{}",
            self.cmdline,
            self.status,
            self.stderr
        );
        self
    }
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// A started rdpipe (stdin fed from a thread, outputs collected by threads).
pub struct Started {
    pub child: Child,
    pub cmdline: String,
    start: Instant,
    /// stdout so far (the reading thread appends as it reads).
    out_so_far: Arc<Mutex<Vec<u8>>>,
    out: std::thread::JoinHandle<()>,
    /// stderr so far.
    err_so_far: Arc<Mutex<Vec<u8>>>,
    err: std::thread::JoinHandle<Vec<u8>>,
}

/// The rdcp binary under test.
pub fn rdcp() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rdcp"))
}

/// Starts `prefix... rdpipe args...` with `input` on stdin (None: /dev/null).
pub fn start(prefix: &[&str], args: &[String], input: Option<Vec<u8>>) -> Started {
    start_tool(&rdpipe(), prefix, args, input)
}

/// Runs rdcp to completion within `limit`.
pub fn run_rdcp(args: &[String], input: Option<Vec<u8>>, limit: Duration) -> Run {
    start_tool(&rdcp(), &[], args, input).finish(limit)
}

/// Starts `prefix... TOOL args...` with `input` on stdin (None: /dev/null).
pub fn start_tool(
    tool: &Path,
    prefix: &[&str],
    args: &[String],
    input: Option<Vec<u8>>,
) -> Started {
    let mut cmd = if prefix.is_empty() {
        Command::new(tool)
    } else {
        let mut c = Command::new(prefix[0]);
        c.args(&prefix[1..]).arg(tool);
        c
    };
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let cmdline = format!("{cmd:?}");
    children_get_default_signals();
    let mut child = cmd.spawn().expect("run the tool");
    if let Some(data) = input {
        let mut sin = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let _ = sin.write_all(&data);
        });
    }
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out_so_far = Arc::new(Mutex::new(Vec::new()));
    let sink = out_so_far.clone();
    let out = std::thread::spawn(move || {
        let mut b = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = so.read(&mut b) {
            sink.lock().unwrap().extend_from_slice(&b[..n]);
        }
    });
    let err_so_far = Arc::new(Mutex::new(Vec::new()));
    let err_sink = err_so_far.clone();
    let err = std::thread::spawn(move || {
        let mut b = vec![0u8; 16 << 10];
        while let Ok(n @ 1..) = se.read(&mut b) {
            err_sink.lock().unwrap().extend_from_slice(&b[..n]);
        }
        std::mem::take(&mut *err_sink.lock().unwrap())
    });
    Started {
        child,
        cmdline,
        start: Instant::now(),
        out_so_far,
        out,
        err_so_far,
        err,
    }
}

impl Started {
    /// Waits until rdpipe's stdout so far ends with `tail` (a readiness
    /// signal: the output has reached rdpipe's stdout); false after `limit`.
    pub fn wait_stdout_ends_with(&self, tail: &[u8], limit: Duration) -> bool {
        poll(limit, Duration::from_millis(10), || {
            self.out_so_far
                .lock()
                .unwrap()
                .ends_with(tail)
                .then_some(())
        })
        .is_some()
    }

    /// Waits until rdpipe has written at least `n` bytes to its stdout (a
    /// readiness signal: data flows end to end); false after `limit`.
    pub fn wait_stdout_len(&self, n: usize, limit: Duration) -> bool {
        poll(limit, Duration::from_millis(10), || {
            (self.out_so_far.lock().unwrap().len() >= n).then_some(())
        })
        .is_some()
    }

    /// Waits until a line of stderr so far contains `needle` (a readiness
    /// signal) and returns that line; panics after `limit`, showing stderr.
    pub fn wait_stderr_line(&self, needle: &str, limit: Duration) -> String {
        let found = poll(limit, Duration::from_millis(10), || {
            let e = self.err_so_far.lock().unwrap();
            String::from_utf8_lossy(&e)
                .lines()
                .find(|l| l.contains(needle))
                .map(str::to_string)
        });
        found.unwrap_or_else(|| {
            panic!(
                "no stderr line with {needle:?} within {limit:?}; stderr so far:\n{}",
                String::from_utf8_lossy(&self.err_so_far.lock().unwrap())
            )
        })
    }

    /// Sends `sig` (`-INT`, `-TERM`) to rdpipe.
    pub fn signal(&self, sig: &str) {
        assert!(Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success());
    }

    /// Interrupts rdpipe with SIGINT (as Ctrl-C does) and expects it to stop
    /// promptly with status 130.
    pub fn interrupt(self) -> Run {
        assert!(Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success());
        let r = self.finish(Duration::from_secs(10));
        assert_eq!(r.code(), Some(130), "{}", r.stderr);
        assert!(r.elapsed < Duration::from_secs(20));
        r
    }

    /// Waits at most `limit`, killing rdpipe (and failing the test) past it.
    pub fn finish(mut self, limit: Duration) -> Run {
        let Some(status) = poll(limit, Duration::from_millis(20), || {
            self.child.try_wait().unwrap()
        }) else {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let err = self.err.join().unwrap_or_default();
            panic!(
                "{} did not finish within {limit:?}; stderr:\n{}",
                self.cmdline,
                String::from_utf8_lossy(&err)
            );
        };
        let elapsed = self.start.elapsed();
        Run {
            status,
            stdout: {
                let _ = self.out.join();
                std::mem::take(&mut *self.out_so_far.lock().unwrap())
            },
            stderr: String::from_utf8_lossy(&self.err.join().unwrap_or_default()).into_owned(),
            cmdline: self.cmdline,
            elapsed,
        }
    }
}

/// Runs rdpipe to completion within `limit`.
pub fn run(args: &[String], input: Option<Vec<u8>>, limit: Duration) -> Run {
    start(&[], args, input).finish(limit)
}

/// How many reconnects rdpipe's `--json` report at `path` lists over all
/// hops.
pub fn json_reconnects(path: &std::path::Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    j["hops"]
        .as_array()
        .unwrap_or_else(|| panic!("no hops in {text}"))
        .iter()
        .map(|h| h["reconnects"].as_array().map_or(0, Vec::len))
        .sum()
}
