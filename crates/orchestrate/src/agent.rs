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
//! - `END ok` / `END fail`: the last line; the agent exits 0 / 1 right after.
//!
//! The command's stderr is the agent's stderr (rdpipe prefixes it with the host).
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
use std::sync::atomic::{AtomicBool, Ordering};
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
}

/// Control-channel output, shared by the threads.
#[derive(Clone)]
struct Say(Arc<Mutex<io::Stdout>>);

impl Say {
    fn line(&self, l: &str) {
        let mut o = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // rdpipe gone: nothing to tell, stdin EOF ends us.
        let _ = writeln!(o, "{}", l.replace('\n', " "));
        let _ = o.flush();
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
        reason: "control channel closed before CONNECT".into(),
    })?;
    Ok(Endpoint::Connect {
        host,
        port,
        timeout,
    })
}

fn run(a: AgentArgs) -> bool {
    let say = Say(Arc::new(Mutex::new(io::stdout())));
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
                if let ["CONNECT", side, host, port] = w[..] {
                    if let Ok(port) = port.parse::<u16>() {
                        let to = if side == "in" { &in_tx } else { &out_tx };
                        let _ = to.send((host.to_string(), port));
                    }
                }
            }
            let _ = tx.send(Ev::ControlGone(
                "control channel closed (rdpipe or ssh gone)".to_string(),
            ));
        });
    }

    let opts = |key: &[u8]| Options {
        key: key.to_vec(),
        chunk_size: a.chunk_size,
        slots: a.slots,
        transport: pref,
        handshake_timeout: Duration::from_secs(a.handshake_timeout),
        progress: None,
    };
    let connect_timeout = Duration::from_secs(a.connect_timeout);
    let shared = Arc::new(Shared {
        poisoned: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
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
                        opts(&key),
                        Box::new(move || Ok(Box::new(w) as Box<dyn Write + Send>)),
                        Some(held),
                    );
                }
                if let Some(cout) = cout {
                    spawn_send(
                        &tx,
                        out_endpoint(a.output),
                        opts(&key),
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
                opts(&key),
                Box::new(|| Ok(Box::new(io::sink()) as Box<dyn Write + Send>)),
                None,
            );
        }
        if pending_out {
            match File::open(&path) {
                Ok(f) => spawn_send(&tx, out_endpoint(a.output), opts(&key), f),
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
                opts(&key),
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
                Ok(f) => spawn_send(&tx, out_endpoint(a.output), opts(&key), f),
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
                if deadline.is_some() && collateral && !exited_first {
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
    fn home_expansion() {
        std::env::set_var("HOME", "/home/x");
        assert_eq!(expand_home("~/a"), "/home/x/a");
        assert_eq!(expand_home("/abs"), "/abs");
    }
}
