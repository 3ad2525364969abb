//! The endpoint agent: what runs on each host for one segment of a pipeline
//! (`rdrecv --agent ...` over SSH, `rdpipe --agent ...` for local segments).
//!
//! One agent per segment. It owns the segment's incoming transfer (a receiver), its
//! outgoing transfer (a sender) and its shell command (`sh -c CMD` in a process group
//! of its own), or handles a `< FILE` / `> FILE` / `>> FILE` operator itself.
//!
//! # Control protocol (line based, over the SSH channel)
//!
//! rdpipe → agent, on the agent's stdin:
//! - line 1: the pipeline key, 64 hex digits (never on argv or in the environment);
//! - `CONNECT in ADDR PORT` / `CONNECT out ADDR PORT`: where to connect the
//!   incoming / outgoing transfer, for a side started with `connect`;
//! - `PING`, every [`PING_EVERY`]: rdpipe is alive. An agent that hears nothing
//!   for [`CONTROL_SILENCE`] ends the segment as below (the peer went silent);
//! - `PROGRESS` (optional, sent right after the key when rdpipe shows a progress
//!   line): report byte counts with `SIZE` and `BYTES` (below). Without it an agent
//!   sends neither, so there is no extra traffic when progress is off; an agent
//!   that does not know the line ignores it, like any unknown line;
//! - end of file: rdpipe (or the SSH connection) is gone: the agent kills its
//!   command's process group and exits at once, whatever state it is in.
//!
//! agent → rdpipe, on the agent's stdout:
//! - `HELLO 1`: started, key read (protocol version 1);
//! - `PORT in N` / `PORT out N`: a side started with `listen` is listening on port N;
//! - `IN BYTES CHECKSUM SECS TRANSPORT` / `OUT ...`: a transfer completed, verified;
//! - `EXIT CODE`, `EXIT signal N`, `EXIT killed`: how the command ended (`killed`:
//!   by the agent, after another failure);
//! - `FAIL PART CODE MESSAGE`: something failed; PART is `in`, `out`, `cmd`, `file`
//!   or `agent`, CODE the rdsend/rdrecv exit code of a transfer error (1 otherwise);
//! - `SIZE N` (after `PROGRESS`): a `< FILE` segment's file is a regular file of N
//!   bytes (for the percentage and ETA); sent once;
//! - `BYTES in N` / `BYTES out N` (after `PROGRESS`): the running byte count of the
//!   incoming / outgoing transfer, every [`PROGRESS_EVERY`] while it changes (the
//!   final count is the one in `IN` / `OUT`);
//! - `END ok` / `END fail`: the last line; the agent exits 0 / 1 right after and
//!   writes nothing more (not even a `BYTES` line already due).
//!
//! [`parse_line`] reads these lines on rdpipe's side. Lines never interleave: every
//! one is written whole under one lock.
//!
//! The command's stderr is the agent's stderr (rdpipe prefixes it with the host),
//! and so are the agent's own messages and, with `--verbose 2` or `--log FILTER`
//! (rdpipe's `-vv` / `RUST_LOG`), its `tracing` log.
//!
//! # Failure semantics
//!
//! On the first failure the agent poisons its outgoing stream (the command's
//! output ending now is reported downstream as an abort, never as a clean end),
//! sends SIGTERM to the command's process group, and exits within
//! [`FAIL_GRACE`] (SIGKILL to the group first). A command that exits non-zero also
//! poisons the outgoing stream: a downstream `> FILE` or `zfs recv` never sees a
//! clean end of a stream whose producer failed. Likewise the command's stdin is
//! closed (end of file for it) only once the incoming stream was verified whole;
//! after a failure the command is stopped first and its stdin closed after.
//!
//! A command that stops reading its input early (`head -c 1000`) makes the
//! incoming transfer fail (the upstream is told "output closed", like SIGPIPE in a
//! shell pipeline) but is not stopped: its own exit status is still reported.
//!
//! The command runs under a guardian ([`crate::guard::cmd_main`]) that leads its
//! process group and takes the group down when the agent dies, even by SIGKILL.
//! The agent itself ends when its stdin closes, when rdpipe is silent for
//! [`CONTROL_SILENCE`], or on SIGTERM/SIGINT/SIGHUP; a data peer that goes silent is
//! detected by the transport (TCP keepalive and user timeout, 30 s).

use crate::transport_pref;
use rdpipe_transport::{run_recv, run_send, Endpoint, Options, Report, TransportError};
use rustix::process::{kill_process_group, Pid, Signal};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdout, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often rdpipe sends `PING` on each agent's control channel.
pub const PING_EVERY: Duration = Duration::from_secs(5);

/// An agent that hears nothing from rdpipe for this long (no `PING`, no line at
/// all) considers rdpipe or its host gone and ends the segment.
pub const CONTROL_SILENCE: Duration = Duration::from_secs(60);

/// The start of the `FAIL in` message of a command that stopped reading its
/// input before the stream ended (`head -c 1000`), as opposed to a command
/// stopped after another failure.
pub const STOPPED_READING: &str = "the command stopped reading its input";

/// Version of the control protocol (`HELLO 1`).
pub const PROTOCOL: u32 = 1;

/// How often an agent sends `BYTES` lines (after `PROGRESS`, while counts change).
pub const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// How long an agent lets its threads wind down after a failure before it kills
/// the command's process group with SIGKILL and exits.
pub const FAIL_GRACE: Duration = Duration::from_secs(2);

/// How a side of the agent takes part in its transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SideArg {
    /// No such transfer.
    None,
    /// Listen on an ephemeral port, announce `PORT`.
    Listen,
    /// Wait for `CONNECT`, then connect.
    Connect,
}

/// The agent's command line (hidden; written by rdpipe).
#[derive(Debug, clap::Parser)]
#[command(name = "rdrecv --agent", about = "rdpipe endpoint agent (internal)")]
#[command(group(clap::ArgGroup::new("action").required(true).args(["cmd", "read", "write", "append"])))]
pub struct AgentArgs {
    /// Label for messages.
    #[arg(long, default_value = "agent")]
    pub label: String,
    /// The incoming transfer.
    #[arg(long, value_enum)]
    pub input: SideArg,
    /// The outgoing transfer.
    #[arg(long, value_enum)]
    pub output: SideArg,
    /// Chunk size in bytes.
    #[arg(long, default_value_t = rdpipe_wire::DEFAULT_CHUNK_SIZE)]
    pub chunk_size: u32,
    /// Buffers in flight.
    #[arg(long, default_value_t = 4)]
    pub slots: u32,
    /// auto, tcp or rdma.
    #[arg(long, default_value = "auto")]
    pub transport: String,
    /// Seconds the authentication handshake may take.
    #[arg(long, default_value_t = 10)]
    pub handshake_timeout: u64,
    /// Seconds to keep retrying a connect.
    #[arg(long, default_value_t = 30)]
    pub connect_timeout: u64,
    /// Run `sh -c CMD`.
    #[arg(long)]
    pub cmd: Option<String>,
    /// Send this file (`< FILE`).
    #[arg(long)]
    pub read: Option<String>,
    /// Write the stream into this file (`> FILE`).
    #[arg(long)]
    pub write: Option<String>,
    /// Append the stream to this file (`>> FILE`).
    #[arg(long)]
    pub append: Option<String>,
    /// Log level as for rdpipe's `-v` count: 2 debug, 3 trace.
    #[arg(long, default_value_t = 0)]
    pub verbose: u8,
    /// Errors only (rdpipe's `-q`).
    #[arg(long)]
    pub quiet: bool,
    /// A log filter (`RUST_LOG` syntax, rdpipe's own `RUST_LOG`), overriding
    /// `--verbose`.
    #[arg(long, value_name = "FILTER")]
    pub log: Option<String>,
}

/// Which transfer of a segment a line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The incoming transfer.
    In,
    /// The outgoing transfer.
    Out,
}

impl Side {
    /// `in` / `out`, as on the control channel.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::In => "in",
            Side::Out => "out",
        }
    }
}

/// One agent → rdpipe control line, as [`parse_line`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentLine<'a> {
    /// `HELLO V`.
    Hello,
    /// `PORT in|out N`.
    Port {
        /// The side listening (anything but `in` is `out`).
        side: Side,
        /// The port.
        port: u16,
    },
    /// `IN ...` / `OUT ...`: a transfer completed.
    Done {
        /// Which transfer.
        side: Side,
        /// Bytes (0 if unreadable).
        bytes: u64,
        /// xxh3-64, hex.
        checksum: &'a str,
        /// Seconds (0 if unreadable).
        secs: f64,
        /// The transport, e.g. `tcp`.
        transport: &'a str,
    },
    /// `EXIT ...`.
    Exit {
        /// The status: the code, or 128+N for `signal N`; none for `killed`.
        code: Option<i32>,
        /// Everything after `EXIT `.
        text: &'a str,
    },
    /// `FAIL PART CODE MESSAGE`.
    Fail {
        /// `in`, `out`, `cmd`, `file` or `agent` (the default).
        part: &'a str,
        /// The exit code of a transfer error (1 by default).
        code: u8,
        /// The message (may be empty).
        message: &'a str,
    },
    /// `END ok` / `END fail`.
    End {
        /// `END ok`.
        ok: bool,
    },
    /// `BYTES in|out N`.
    Bytes {
        /// Which transfer.
        side: Side,
        /// The running count.
        bytes: u64,
    },
    /// `SIZE N`.
    Size(u64),
    /// Anything else, or a line with a malformed number: ignored.
    Unknown,
}

/// Reads one agent → rdpipe control line (without its newline). Never fails:
/// what it does not understand is [`AgentLine::Unknown`].
pub fn parse_line(l: &str) -> AgentLine<'_> {
    let mut w = l.splitn(4, ' ');
    let tag = w.next().unwrap_or("");
    let side = |s: Option<&str>| match s {
        Some("in") => Some(Side::In),
        Some("out") => Some(Side::Out),
        _ => None,
    };
    match tag {
        "HELLO" => AgentLine::Hello,
        "PORT" => {
            let side = if w.next() == Some("in") {
                Side::In
            } else {
                Side::Out
            };
            match w.next().and_then(|p| p.parse::<u16>().ok()) {
                Some(port) => AgentLine::Port { side, port },
                None => AgentLine::Unknown,
            }
        }
        "IN" | "OUT" => {
            let rest: Vec<&str> = l.splitn(5, ' ').collect();
            if rest.len() != 5 {
                return AgentLine::Unknown;
            }
            AgentLine::Done {
                side: if tag == "IN" { Side::In } else { Side::Out },
                bytes: rest[1].parse().unwrap_or(0),
                checksum: rest[2],
                secs: rest[3].parse().unwrap_or(0.0),
                transport: rest[4],
            }
        }
        "EXIT" => {
            let text = l.strip_prefix("EXIT ").unwrap_or("");
            let code = if let Ok(c) = text.parse::<i32>() {
                Some(c)
            } else if let Some(s) = text.strip_prefix("signal ") {
                s.parse::<i32>().ok().map(|s| 128 + s)
            } else {
                None
            };
            AgentLine::Exit { code, text }
        }
        "FAIL" => AgentLine::Fail {
            part: w.next().unwrap_or("agent"),
            code: w.next().and_then(|c| c.parse().ok()).unwrap_or(1),
            message: w.next().unwrap_or(""),
        },
        "END" => AgentLine::End {
            ok: w.next() == Some("ok"),
        },
        "BYTES" => match (side(w.next()), w.next().and_then(|n| n.parse().ok())) {
            (Some(side), Some(bytes)) => AgentLine::Bytes { side, bytes },
            _ => AgentLine::Unknown,
        },
        "SIZE" => match w.next().and_then(|n| n.parse().ok()) {
            Some(n) => AgentLine::Size(n),
            None => AgentLine::Unknown,
        },
        _ => AgentLine::Unknown,
    }
}

/// Control-channel output, shared by the threads: each line is written whole
/// under the lock, and nothing after `END`.
#[derive(Clone)]
struct Say(Arc<Mutex<(Box<dyn Write + Send>, bool)>>);

impl Say {
    fn new() -> Say {
        Say::to(Box::new(io::stdout()))
    }

    fn to(w: Box<dyn Write + Send>) -> Say {
        Say(Arc::new(Mutex::new((w, false))))
    }

    fn line(&self, l: &str) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (o, ended) = &mut *g;
        if *ended {
            return;
        }
        *ended = l.starts_with("END ");
        // rdpipe gone: nothing to tell, stdin EOF ends us.
        let _ = o.write_all(format!("{}\n", l.replace('\n', " ")).as_bytes());
        let _ = o.flush();
    }
}

/// The byte counts behind `SIZE` and `BYTES`: stored by the transfers' progress
/// callbacks (one relaxed store per chunk), read by the reporter thread that
/// `PROGRESS` starts.
struct Meter {
    bytes: [AtomicU64; 2],
    /// The `< FILE` size; `u64::MAX` while unknown.
    size: AtomicU64,
    /// `PROGRESS` was heard, `SIZE` was sent.
    started: AtomicBool,
    size_sent: AtomicBool,
    say: Say,
}

impl Meter {
    fn new(say: &Say) -> Meter {
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
            self.say.line(&format!("SIZE {size}"));
        }
    }

    /// The `< FILE` is a regular file of `n` bytes.
    fn set_size(&self, n: u64) {
        self.size.store(n, Ordering::SeqCst);
        self.send_size();
    }

    /// The progress callback for one side's transfer.
    fn callback(self: &Arc<Meter>, side: Side) -> Box<dyn FnMut(u64) + Send> {
        let m = self.clone();
        Box::new(move |n| m.bytes[side as usize].store(n, Ordering::Relaxed))
    }

    /// Starts reporting (once): `SIZE` when known, and a thread sending `BYTES`
    /// lines every [`PROGRESS_EVERY`] while a count changes, until the process ends.
    fn start(self: &Arc<Meter>) {
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
                    for side in [Side::In, Side::Out] {
                        let n = m.bytes[side as usize].load(Ordering::Relaxed);
                        if n != sent[side as usize] {
                            sent[side as usize] = n;
                            m.say.line(&format!("BYTES {} {n}", side.as_str()));
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the progress reporter: {e}");
        }
    }
}

enum Ev {
    In(Result<Report, TransportError>),
    Out(Result<Report, TransportError>),
    Exit(ExitStatus),
    /// rdpipe or the SSH channel is gone (why).
    ControlGone(String),
    /// SIGTERM/SIGINT/SIGHUP.
    Signal(i32),
    /// Preparation failed (part, message).
    Setup(&'static str, String),
}

/// The command's exit, as its output's reader must know it before it may call the
/// output complete.
#[derive(Default)]
struct ExitCell {
    status: Mutex<Option<ExitStatus>>,
    cv: Condvar,
}

struct Shared {
    /// The outgoing stream must not end cleanly.
    poisoned: AtomicBool,
    /// The command is being stopped: do not wait for its exit.
    stopping: AtomicBool,
    /// The sender let go of the command's stdout (set just before the pipe's read
    /// end closes): from then on a SIGPIPE death of the command is the sender's
    /// failure showing through, not the command's own.
    output_closed: AtomicBool,
    exit: ExitCell,
}

/// The command's stdout, as the sender's input: at end of file it waits for the
/// command's exit and turns a failure (or a poisoned pipeline) into an input error,
/// so the receiver is told of an abort instead of a clean end.
struct CmdOutput {
    inner: ChildStdout,
    shared: Arc<Shared>,
}

impl Read for CmdOutput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            return Ok(n);
        }
        let mut st = self
            .shared
            .exit
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        while st.is_none() && !self.shared.stopping.load(Ordering::SeqCst) {
            st = self
                .shared
                .exit
                .cv
                .wait_timeout(st, Duration::from_millis(200))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        // Poisoned first: a command stopped by the agent after another failure is
        // an echo of that failure, not a failure of its own to report downstream.
        let poisoned = self.shared.poisoned.load(Ordering::SeqCst);
        match *st {
            Some(s) if !s.success() && !poisoned => Err(io::Error::other(format!(
                "the command {}",
                describe_exit(s)
            ))),
            Some(_) if !poisoned => Ok(0),
            _ => Err(io::Error::other("the pipeline failed")),
        }
    }
}

impl Drop for CmdOutput {
    fn drop(&mut self) {
        // Runs before `inner` (the pipe's read end) is closed.
        self.shared.output_closed.store(true, Ordering::SeqCst);
    }
}

impl AsFd for CmdOutput {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

/// The command's stdin, held apart from the receiver: the receiver closes it
/// (end of file for the command) only after the stream was verified whole. After
/// a failure the agent first stops the command, then closes it, so a command never
/// mistakes a truncated stream for a complete one.
#[derive(Clone)]
struct HeldInput(Arc<Mutex<Option<std::process::ChildStdin>>>);

impl HeldInput {
    fn release(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl Write for HeldInput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(w) => w.write(buf),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// `exited with status N` / `was killed by signal N`.
pub fn describe_exit(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended".to_string(),
    }
}

fn expand_home(p: &str) -> String {
    match p.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(h) => format!("{}/{rest}", h.to_string_lossy()),
            None => p.to_string(),
        },
        None => p.to_string(),
    }
}

fn report_line(tag: &str, r: &Report) -> String {
    format!(
        "{tag} {} {:016x} {:.6} {}",
        r.bytes,
        r.checksum,
        r.elapsed.as_secs_f64(),
        r.transport
    )
}

/// Runs the agent with `args` (the words after `--agent`) and returns its exit
/// status. This is the whole of `rdrecv --agent`.
pub fn main<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    let args = match <AgentArgs as clap::Parser>::try_parse_from(
        std::iter::once(OsString::from("rdrecv --agent")).chain(args),
    ) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    rdpipe_term::init_logging_with(
        &format!("agent {}", args.label),
        args.verbose,
        args.quiet,
        args.log.as_deref(),
    );
    match run(args) {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}

fn connect_wait(
    rx: &mpsc::Receiver<(String, u16)>,
    timeout: Duration,
) -> Result<Endpoint, TransportError> {
    let (host, port) = rx.recv().map_err(|_| TransportError::PeerGone {
        peer: "rdpipe".into(),
        cause: rdpipe_transport::error::GoneCause::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "control channel closed before CONNECT",
        )),
    })?;
    Ok(Endpoint::Connect {
        host,
        port,
        timeout,
    })
}

fn run(a: AgentArgs) -> bool {
    let say = Say::new();
    let mut stdin = BufReader::new(io::stdin());
    let mut key_line = String::new();
    if stdin.read_line(&mut key_line).unwrap_or(0) == 0 {
        return false;
    }
    let key = match decode_hex(key_line.trim()) {
        Some(k) if !k.is_empty() => k,
        _ => {
            say.line("FAIL agent 2 the first line on stdin is not a hex key");
            say.line("END fail");
            return false;
        }
    };
    let pref = match transport_pref(&a.transport) {
        Some(p) => p,
        None => {
            say.line(&format!("FAIL agent 2 bad transport '{}'", a.transport));
            say.line("END fail");
            return false;
        }
    };
    say.line(&format!("HELLO {PROTOCOL}"));
    tracing::debug!("started: input {:?}, output {:?}", a.input, a.output);
    let meter = Arc::new(Meter::new(&say));

    let (tx, rx) = mpsc::channel::<Ev>();
    // Signals end the segment like a closed control channel does.
    if let Ok(mut sigs) = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ]) {
        let tx = tx.clone();
        std::thread::spawn(move || {
            if let Some(s) = sigs.forever().next() {
                let _ = tx.send(Ev::Signal(s));
            }
        });
    }
    // The control channel: CONNECT lines, and EOF.
    let (in_tx, in_rx) = mpsc::channel::<(String, u16)>();
    let (out_tx, out_rx) = mpsc::channel::<(String, u16)>();
    let last_heard = Arc::new(Mutex::new(Instant::now()));
    {
        // rdpipe pings every PING_EVERY; silence means it (or its host) is gone.
        let tx = tx.clone();
        let last_heard = last_heard.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let t = *last_heard.lock().unwrap_or_else(|p| p.into_inner());
            if t.elapsed() > CONTROL_SILENCE {
                let _ = tx.send(Ev::ControlGone(format!(
                    "control channel silent for {} s (rdpipe or its host gone)",
                    CONTROL_SILENCE.as_secs()
                )));
                return;
            }
        });
    }
    {
        let tx = tx.clone();
        let meter = meter.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                match stdin.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        *last_heard.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                    }
                }
                let w: Vec<&str> = line.split_whitespace().collect();
                if w.first() != Some(&"PING") {
                    tracing::debug!("control: {}", line.trim_end());
                }
                match w[..] {
                    ["CONNECT", side, host, port] => {
                        if let Ok(port) = port.parse::<u16>() {
                            let to = if side == "in" { &in_tx } else { &out_tx };
                            let _ = to.send((host.to_string(), port));
                        }
                    }
                    ["PROGRESS"] => meter.start(),
                    _ => {}
                }
            }
            let _ = tx.send(Ev::ControlGone(
                "control channel closed (rdpipe or ssh gone)".to_string(),
            ));
        });
    }

    let opts = |key: &[u8], side: Side| Options {
        key: key.to_vec(),
        chunk_size: a.chunk_size,
        slots: a.slots,
        transport: pref,
        handshake_timeout: Duration::from_secs(a.handshake_timeout),
        progress: Some(meter.callback(side)),
    };
    let connect_timeout = Duration::from_secs(a.connect_timeout);
    let shared = Arc::new(Shared {
        poisoned: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
        output_closed: AtomicBool::new(false),
        exit: ExitCell::default(),
    });

    // Where the incoming transfer comes from (endpoint), started in a thread.
    let in_endpoint = {
        let say = say.clone();
        move |side: SideArg| -> Box<dyn FnOnce() -> Result<Endpoint, TransportError> + Send> {
            match side {
                SideArg::Listen => Box::new(move || {
                    Ok(Endpoint::Listen {
                        port: 0,
                        announce: Some(Box::new(move |p| {
                            say.line(&format!("PORT in {p}"));
                            Ok(())
                        })),
                    })
                }),
                _ => Box::new(move || connect_wait(&in_rx, connect_timeout)),
            }
        }
    };
    let out_endpoint = {
        let say = say.clone();
        move |side: SideArg| -> Box<dyn FnOnce() -> Result<Endpoint, TransportError> + Send> {
            match side {
                SideArg::Listen => Box::new(move || {
                    Ok(Endpoint::Listen {
                        port: 0,
                        announce: Some(Box::new(move |p| {
                            say.line(&format!("PORT out {p}"));
                            Ok(())
                        })),
                    })
                }),
                _ => Box::new(move || connect_wait(&out_rx, connect_timeout)),
            }
        }
    };

    let spawn_recv =
        |ep: Box<dyn FnOnce() -> Result<Endpoint, TransportError> + Send>,
         o: Options,
         out: Box<dyn FnOnce() -> Result<Box<dyn Write + Send>, TransportError> + Send>,
         held: Option<HeldInput>| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let r = ep().and_then(|ep| run_recv(ep, o, out));
                if r.is_ok() {
                    // Verified whole: now the command may see end of file.
                    if let Some(h) = held {
                        h.release();
                    }
                }
                let _ = tx.send(Ev::In(r));
            });
        };
    fn spawn_send<R: Read + AsFd + Send + 'static>(
        tx: &mpsc::Sender<Ev>,
        ep: Box<dyn FnOnce() -> Result<Endpoint, TransportError> + Send>,
        o: Options,
        mut input: R,
    ) {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let r = ep().and_then(|ep| run_send(ep, o, &mut input));
            let _ = tx.send(Ev::Out(r));
        });
    }

    let mut child: Option<Child> = None;
    let mut pending_in = a.input != SideArg::None;
    let mut pending_out = a.output != SideArg::None;
    let mut pending_exit = false;
    let mut file_target: Option<String> = None;
    let mut held_input: Option<HeldInput> = None;
    // Setup failures are sent as events too: count them so the loop reads them.
    let mut pending_setup = 0usize;
    let setup_fail = |pending: &mut usize, part: &'static str, msg: String| {
        *pending += 1;
        let _ = tx.send(Ev::Setup(part, msg));
    };

    if let Some(cmd) = &a.cmd {
        // sh runs under a guardian that leads its process group and takes the group
        // down if this agent dies, even by SIGKILL (see guard::cmd_main).
        let lifeline =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).and_then(|(r, w)| {
                rustix::io::fcntl_setfd(&r, rustix::io::FdFlags::empty())?;
                Ok((r, w))
            });
        let mut c = match (&lifeline, std::env::current_exe()) {
            (Ok((r, _)), Ok(exe)) => {
                let mut c = Command::new(exe);
                c.arg("--cmd-guard")
                    .arg(std::os::fd::AsRawFd::as_raw_fd(r).to_string())
                    .arg("sh");
                c
            }
            _ => Command::new("sh"),
        };
        c.arg("-c").arg(cmd).process_group(0);
        c.stdin(if pending_in {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        c.stdout(if pending_out {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        match c.spawn() {
            Ok(mut ch) => {
                tracing::debug!("command started (pid {}): {cmd}", ch.id());
                let cin = ch.stdin.take();
                let cout = ch.stdout.take();
                if let Some(cin) = cin {
                    // One write per received buffer into the command, not one per 64 KiB.
                    rdpipe_transport::pump::grow_pipe(&cin);
                    let held = HeldInput(Arc::new(Mutex::new(Some(cin))));
                    held_input = Some(held.clone());
                    let w = held.clone();
                    spawn_recv(
                        in_endpoint(a.input),
                        opts(&key, Side::In),
                        Box::new(move || Ok(Box::new(w) as Box<dyn Write + Send>)),
                        Some(held),
                    );
                }
                if let Some(cout) = cout {
                    spawn_send(
                        &tx,
                        out_endpoint(a.output),
                        opts(&key, Side::Out),
                        CmdOutput {
                            inner: cout,
                            shared: shared.clone(),
                        },
                    );
                }
                pending_exit = true;
                child = Some(ch);
                // Keep the write end for our whole life; the read end is the guard's.
                if let Ok((r, w)) = lifeline {
                    drop(r);
                    std::mem::forget(w);
                }
            }
            Err(e) => {
                setup_fail(&mut pending_setup, "cmd", format!("cannot start sh: {e}"));
            }
        }
    } else if let Some(path) = &a.read {
        let path = expand_home(path);
        if pending_in {
            // `<` in the middle: drain the previous output (verified), discard it.
            spawn_recv(
                in_endpoint(a.input),
                opts(&key, Side::In),
                Box::new(|| Ok(Box::new(io::sink()) as Box<dyn Write + Send>)),
                None,
            );
        }
        if pending_out {
            match File::open(&path) {
                Ok(f) => {
                    if let Some(m) = f.metadata().ok().filter(|m| m.is_file()) {
                        meter.set_size(m.len());
                    }
                    spawn_send(&tx, out_endpoint(a.output), opts(&key, Side::Out), f)
                }
                Err(e) => {
                    pending_out = false;
                    setup_fail(
                        &mut pending_setup,
                        "file",
                        format!("cannot open {path}: {e}"),
                    );
                }
            }
        }
    } else {
        let (path, append) = match (&a.write, &a.append) {
            (Some(p), _) => (expand_home(p), false),
            (None, Some(p)) => (expand_home(p), true),
            (None, None) => unreachable!("clap requires an action"),
        };
        file_target = Some(path.clone());
        let open = move || {
            OpenOptions::new()
                .write(true)
                .create(true)
                .append(append)
                .truncate(!append)
                .open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot open: {e}")))
        };
        if pending_in {
            spawn_recv(
                in_endpoint(a.input),
                opts(&key, Side::In),
                Box::new(move || {
                    open()
                        .map(|f| Box::new(f) as Box<dyn Write + Send>)
                        .map_err(TransportError::Output)
                }),
                None,
            );
        } else if let Err(e) = open() {
            setup_fail(
                &mut pending_setup,
                "file",
                format!("{}: {e}", file_target.clone().unwrap_or_default()),
            );
        }
        if pending_out {
            // `>` in the middle: an empty stream goes onward.
            match File::open("/dev/null") {
                Ok(f) => spawn_send(&tx, out_endpoint(a.output), opts(&key, Side::Out), f),
                Err(e) => {
                    pending_out = false;
                    setup_fail(
                        &mut pending_setup,
                        "agent",
                        format!("cannot open /dev/null: {e}"),
                    );
                }
            }
        }
    }

    // The command's exit, for the sender's end-of-file check and for the report.
    let pgid = child.as_ref().map(Pid::from_child);
    if let Some(mut ch) = child {
        let tx = tx.clone();
        let shared = shared.clone();
        std::thread::spawn(move || {
            let st = ch.wait();
            if let Ok(st) = st {
                *shared.exit.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(st);
                shared.exit.cv.notify_all();
                let _ = tx.send(Ev::Exit(st));
            }
        });
    }
    drop(tx);

    let kill = |sig: Signal| {
        if let Some(p) = pgid {
            let _ = kill_process_group(p, sig);
        }
    };
    let mut ok = true;
    let mut deadline: Option<Instant> = None;
    // Whether the command had already ended when the first failure stopped the
    // segment. Its exit is then its own doing (a SIGKILL from outside, a crash),
    // never collateral, even when the sender's report of it (the command's output
    // ended with a failed command) reached this loop before the exit event did.
    let mut exited_first = false;
    let fail = |ok: &mut bool, deadline: &mut Option<Instant>, exited_first: &mut bool| {
        *ok = false;
        if deadline.is_none() {
            *exited_first = shared
                .exit
                .status
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some();
            shared.poisoned.store(true, Ordering::SeqCst);
            shared.stopping.store(true, Ordering::SeqCst);
            shared.exit.cv.notify_all();
            tracing::debug!("stopping the segment: SIGTERM to the command's process group");
            kill(Signal::Term);
            *deadline = Some(Instant::now() + FAIL_GRACE);
        }
    };
    let in_part = if file_target.is_some() { "file" } else { "in" };
    while pending_in || pending_out || pending_exit || pending_setup > 0 {
        let ev = match deadline {
            None => rx.recv().ok(),
            Some(d) => rx
                .recv_timeout(d.saturating_duration_since(Instant::now()))
                .ok(),
        };
        let Some(ev) = ev else { break };
        match &ev {
            Ev::In(r) | Ev::Out(r) => {
                let side = if matches!(ev, Ev::In(_)) { "in" } else { "out" };
                match r {
                    Ok(r) => tracing::debug!(
                        "{side}: {} bytes over {} in {:.3} s",
                        r.bytes,
                        r.transport,
                        r.elapsed.as_secs_f64()
                    ),
                    Err(e) => tracing::debug!("{side}: {e}"),
                }
            }
            Ev::Exit(st) => tracing::debug!("the command {}", describe_exit(*st)),
            Ev::ControlGone(why) => tracing::debug!("{why}"),
            Ev::Signal(sig) => tracing::debug!("signal {sig}"),
            Ev::Setup(part, msg) => tracing::debug!("{part}: {msg}"),
        }
        match ev {
            Ev::In(Ok(r)) => {
                pending_in = false;
                say.line(&report_line("IN", &r));
            }
            Ev::In(Err(e)) => {
                pending_in = false;
                let msg = match (&file_target, &e) {
                    (Some(p), TransportError::Output(io)) => format!("{p}: {io}"),
                    _ => e.to_string(),
                };
                let closed_input = a.cmd.is_some()
                    && matches!(&e, TransportError::Output(io) if io.kind() == io::ErrorKind::BrokenPipe);
                let msg = if closed_input && deadline.is_none() {
                    // rdpipe recognises this text (the consumer's own choice, not
                    // an echo of another failure).
                    format!("{STOPPED_READING} ({msg})")
                } else {
                    msg
                };
                say.line(&format!("FAIL {in_part} {} {msg}", e.exit_code()));
                if closed_input && deadline.is_none() {
                    // The command stopped reading (like `head`): the upstream was
                    // told, and our output must not end cleanly, but the command
                    // itself is not stopped: its own exit status still counts.
                    ok = false;
                    shared.poisoned.store(true, Ordering::SeqCst);
                    shared.exit.cv.notify_all();
                } else {
                    fail(&mut ok, &mut deadline, &mut exited_first);
                }
                // Only now (the command was stopped) close its input.
                if let Some(h) = &held_input {
                    h.release();
                }
            }
            Ev::Out(Ok(r)) => {
                pending_out = false;
                say.line(&report_line("OUT", &r));
            }
            Ev::Out(Err(e)) => {
                pending_out = false;
                say.line(&format!("FAIL out {} {e}", e.exit_code()));
                fail(&mut ok, &mut deadline, &mut exited_first);
            }
            Ev::Exit(st) => {
                pending_exit = false;
                // Killed by us after another failure (or by SIGPIPE because our
                // sender stopped reading): not a failure of its own. Shells report
                // those signals as 128+N. A command that exited with another status
                // after all is reported as such.
                let collateral = match (st.code(), st.signal()) {
                    (None, _) => true,
                    (Some(c), _) => c == 128 + 13 || c == 128 + 15 || c == 128 + 9,
                };
                // SIGPIPE after the sender closed the command's stdout: the
                // sender's failure (reported by its own `FAIL out`), whichever of
                // the two reports arrived first.
                let broken_output = (st.signal() == Some(13) || st.code() == Some(128 + 13))
                    && shared.output_closed.load(Ordering::SeqCst);
                if (deadline.is_some() && collateral && !exited_first) || broken_output {
                    say.line("EXIT killed");
                } else {
                    match (st.code(), st.signal()) {
                        (Some(c), _) => say.line(&format!("EXIT {c}")),
                        (None, Some(s)) => say.line(&format!("EXIT signal {s}")),
                        _ => say.line("EXIT 1"),
                    }
                    if !st.success() {
                        say.line(&format!("FAIL cmd 1 the command {}", describe_exit(st)));
                        fail(&mut ok, &mut deadline, &mut exited_first);
                    }
                }
            }
            Ev::Setup(part, msg) => {
                pending_setup -= 1;
                say.line(&format!("FAIL {part} 1 {msg}"));
                fail(&mut ok, &mut deadline, &mut exited_first);
            }
            Ev::ControlGone(_) | Ev::Signal(_) => {
                let why = match ev {
                    Ev::Signal(s) => format!("killed by signal {s}"),
                    Ev::ControlGone(why) => why,
                    _ => unreachable!(),
                };
                say.line(&format!("FAIL agent 1 {why}"));
                fail(&mut ok, &mut deadline, &mut exited_first);
                // Nobody waits for our report: a short grace for the command.
                deadline = Some(Instant::now() + Duration::from_millis(500));
            }
        }
    }
    if !ok {
        kill(Signal::Kill);
    }
    say.line(if ok { "END ok" } else { "END fail" });
    if !ok {
        // Threads may be blocked in network I/O: do not wait for them.
        std::process::exit(1);
    }
    true
}

/// Decodes lowercase or uppercase hex.
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Encodes bytes as lowercase hex.
pub fn encode_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let k = [0u8, 1, 0xab, 0xff];
        assert_eq!(encode_hex(&k), "0001abff");
        assert_eq!(decode_hex("0001ABff").unwrap(), k);
        assert!(decode_hex("abc").is_none());
        assert!(decode_hex("zz").is_none());
    }

    #[test]
    fn control_lines_parse() {
        assert_eq!(parse_line("HELLO 1"), AgentLine::Hello);
        assert_eq!(
            parse_line("PORT in 4242"),
            AgentLine::Port {
                side: Side::In,
                port: 4242
            }
        );
        assert_eq!(parse_line("PORT out 99999"), AgentLine::Unknown);
        assert_eq!(
            parse_line("OUT 12 00000000000000ff 0.500000 rdma (rxe0, write-with-imm)"),
            AgentLine::Done {
                side: Side::Out,
                bytes: 12,
                checksum: "00000000000000ff",
                secs: 0.5,
                transport: "rdma (rxe0, write-with-imm)"
            }
        );
        assert_eq!(parse_line("IN 12 ff"), AgentLine::Unknown);
        assert_eq!(
            parse_line("EXIT 3"),
            AgentLine::Exit {
                code: Some(3),
                text: "3"
            }
        );
        assert_eq!(
            parse_line("EXIT signal 9"),
            AgentLine::Exit {
                code: Some(137),
                text: "signal 9"
            }
        );
        assert_eq!(
            parse_line("EXIT killed"),
            AgentLine::Exit {
                code: None,
                text: "killed"
            }
        );
        assert_eq!(
            parse_line("FAIL file 1 /x: No space left on device"),
            AgentLine::Fail {
                part: "file",
                code: 1,
                message: "/x: No space left on device"
            }
        );
        assert_eq!(
            parse_line("FAIL"),
            AgentLine::Fail {
                part: "agent",
                code: 1,
                message: ""
            }
        );
        assert_eq!(parse_line("END ok"), AgentLine::End { ok: true });
        assert_eq!(parse_line("END fail"), AgentLine::End { ok: false });
        assert_eq!(
            parse_line("BYTES in 1048576"),
            AgentLine::Bytes {
                side: Side::In,
                bytes: 1 << 20
            }
        );
        assert_eq!(
            parse_line("BYTES out 0"),
            AgentLine::Bytes {
                side: Side::Out,
                bytes: 0
            }
        );
        for bad in [
            "BYTES",
            "BYTES sideways 5",
            "BYTES in -1",
            "BYTES in 5x",
            "SIZE",
            "SIZE lots",
            "",
            "NOPE 1",
            "hello",
        ] {
            assert_eq!(parse_line(bad), AgentLine::Unknown, "{bad:?}");
        }
        assert_eq!(parse_line("SIZE 4194304"), AgentLine::Size(4 << 20));
    }

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
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let say = say.clone();
                std::thread::spawn(move || {
                    for n in 0..200 {
                        say.line(&format!("BYTES out {}", t * 1000 + n));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        say.line("END ok");
        // A BYTES line due after END is dropped.
        say.line("BYTES out 5");
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 801);
        assert_eq!(*lines.last().unwrap(), "END ok");
        assert!(lines[..800].iter().all(|l| matches!(
            parse_line(l),
            AgentLine::Bytes {
                side: Side::Out,
                ..
            }
        )));
    }

    #[test]
    fn home_expansion() {
        std::env::set_var("HOME", "/home/x");
        assert_eq!(expand_home("~/a"), "/home/x/a");
        assert_eq!(expand_home("/abs"), "/abs");
    }
}
