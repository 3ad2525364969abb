//! rdsend and rdrecv run directly: spawn the real binaries, find the port an
//! rdrecv announced, collect output, and print the whole command with its output
//! when an expectation fails.

use super::procs::{children_get_default_signals, wait_bounded};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Path of one of the project's binaries, built by cargo for this test run.
pub fn bin(name: &str) -> PathBuf {
    match name {
        "rdsend" => PathBuf::from(env!("CARGO_BIN_EXE_rdsend")),
        "rdrecv" => PathBuf::from(env!("CARGO_BIN_EXE_rdrecv")),
        "rdpipe" => PathBuf::from(env!("CARGO_BIN_EXE_rdpipe")),
        other => panic!("no binary {other}"),
    }
}

/// Describes a command for failure messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// A running rdrecv whose port is known.
pub struct Receiver {
    pub child: Child,
    pub port: u16,
    pub cmdline: String,
    stderr: mpsc::Receiver<String>,
    /// Stderr lines already read by [`Receiver::wait_stderr`].
    seen: Vec<String>,
    stdout: Option<thread::JoinHandle<Vec<u8>>>,
}

/// The end of a process: status, stdout, stderr, and how it was started.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub cmdline: String,
}

impl Finished {
    /// Panics with the whole story unless the exit code is `code`.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.status.code(),
            Some(code),
            "`{}` exited {:?}, expected {code}\nstderr:\n{}",
            self.cmdline,
            self.status,
            self.stderr
        );
        self
    }
    pub fn expect_stderr(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "`{}`: stderr lacks {needle:?}\nstderr:\n{}",
            self.cmdline,
            self.stderr
        );
        assert!(
            !self.stderr.contains("panicked"),
            "`{}` panicked:\n{}",
            self.cmdline,
            self.stderr
        );
        self
    }
}

impl Receiver {
    /// Starts `rdrecv --announce-fd 2 0 ARGS...` and waits for its `PORT n` line on
    /// stderr (the readiness signal). Stdout is captured unless `stdout` is given.
    pub fn start(args: &[&str], env: &[(&str, &str)], stdout: Option<Stdio>) -> Receiver {
        let mut cmd = Command::new(bin("rdrecv"));
        cmd.args(["--announce-fd", "2", "0"]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.env_remove("RDPIPE_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let capture = stdout.is_none();
        cmd.stdout(stdout.unwrap_or(Stdio::piped()))
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        let cmdline = describe(&cmd);
        children_get_default_signals();
        let mut child = cmd.spawn().expect("spawn rdrecv");
        let err = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // The `PORT n` line (warnings, such as a short key's, may come first).
        let mut seen = Vec::new();
        let port = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("`{cmdline}` announced no port; stderr:\n{seen:?}"));
            match line.strip_prefix("PORT ") {
                Some(p) => {
                    break p
                        .parse()
                        .unwrap_or_else(|_| panic!("`{cmdline}`: bad {line:?}"))
                }
                None => seen.push(line),
            }
        };
        let stdout = if capture {
            let mut out = child.stdout.take().unwrap();
            Some(thread::spawn(move || {
                let mut v = Vec::new();
                let _ = out.read_to_end(&mut v);
                v
            }))
        } else {
            None
        };
        Receiver {
            child,
            port,
            cmdline,
            stderr: rx,
            seen,
            stdout,
        }
    }

    /// Waits (bounded) for a stderr line containing `needle`: the receiver's
    /// readiness signal that it handled something (e.g. dropped a peer).
    pub fn wait_stderr(&mut self, needle: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(l) => {
                    let hit = l.contains(needle);
                    self.seen.push(l);
                    if hit {
                        return;
                    }
                }
                Err(_) => panic!(
                    "`{}`: no stderr line with {needle:?} in 30 s; got:\n{}",
                    self.cmdline,
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Waits for the receiver to exit (bounded) and collects everything.
    pub fn finish(mut self) -> Finished {
        let status = wait_bounded(&mut self.child, Duration::from_secs(60), &self.cmdline);
        let stdout = self
            .stdout
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default();
        let mut stderr: String = self.seen.iter().map(|l| format!("{l}\n")).collect();
        while let Ok(l) = self.stderr.recv_timeout(Duration::from_secs(2)) {
            stderr.push_str(&l);
            stderr.push('\n');
        }
        Finished {
            status,
            stdout,
            stderr,
            cmdline: self.cmdline,
        }
    }
}

/// Runs rdsend to completion with `input` on stdin (or none when `input` is None).
pub fn send(args: &[&str], env: &[(&str, &str)], input: Option<&[u8]>) -> Finished {
    send_paced(args, env, input, None)
}

/// [`send`], with the input written `pace.0` bytes at a time and a pause of
/// `pace.1` after each piece (a producer slower than the link).
pub fn send_paced(
    args: &[&str],
    env: &[(&str, &str)],
    input: Option<&[u8]>,
    pace: Option<(usize, Duration)>,
) -> Finished {
    let mut cmd = Command::new(bin("rdsend"));
    cmd.args(args).env_remove("RDPIPE_KEY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let cmdline = describe(&cmd);
    children_get_default_signals();
    let mut child = cmd.spawn().expect("spawn rdsend");
    if let Some(data) = input {
        let mut w = child.stdin.take().unwrap();
        let data = data.to_vec();
        thread::spawn(move || match pace {
            None => {
                let _ = w.write_all(&data);
            }
            Some((piece, pause)) => {
                for p in data.chunks(piece.max(1)) {
                    if w.write_all(p).is_err() {
                        break;
                    }
                    thread::sleep(pause);
                }
            }
        });
    }
    let mut err = child.stderr.take().unwrap();
    let h = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = wait_bounded(&mut child, Duration::from_secs(60), &cmdline);
    let mut stdout = Vec::new();
    let _ = child.stdout.take().unwrap().read_to_end(&mut stdout);
    Finished {
        status,
        stdout,
        stderr: h.join().unwrap(),
        cmdline,
    }
}

/// Reads a whole file, with the path in the panic message.
pub fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// What a handshake-level test client (a fake or hostile sender) brings: TCP,
/// 1 MiB chunks, the default integrity.
pub fn sender_params() -> rdpipe_transport::handshake::LocalParams {
    rdpipe_transport::handshake::LocalParams {
        role: rdpipe_wire::Role::Sender,
        transport: rdpipe_wire::TransportPref::Tcp,
        caps: rdpipe_wire::Caps::default(),
        chunk_size: 1 << 20,
        slots: 2,
        integrity: rdpipe_wire::Integrity::Mac,
        rate_limit: None,
        compress: rdpipe_wire::Compress::None,
    }
}
