//! Running a pipeline: SSH masters, one agent per segment, relaying the agents'
//! `PORT` announcements as `CONNECT` orders, rdpipe's own stdin sender and stdout
//! receiver, stderr forwarding, the pipefail-style verdict and the teardown.
//!
//! Teardown: on the first failure rdpipe waits [`ROOT_CAUSE_GRACE`] for the root
//! cause to be reported (failures cascade along the pipeline within milliseconds),
//! then closes every agent's control channel (agents kill their commands' process
//! groups and exit at once), waits up to [`TEARDOWN_WAIT`] for them, kills local
//! agents that are still there, and closes the SSH masters. SIGINT, SIGTERM and
//! SIGHUP skip the grace. Every step is bounded, so a pipeline ends within about
//! five seconds of a failure.
//!
//! SSH: one master connection per distinct host and per [`Config::max_sessions`]
//! segments on it (sshd's MaxSessions), started in parallel; every agent is one
//! native-mux session on its host's master. Remote stderr is forwarded line by
//! line, prefixed with the host as written; local segments' stderr is inherited,
//! or forwarded unprefixed through the same line writer when a progress line is
//! drawn (so it never overwrites the line).
//!
//! The verdict: failures are ranked (a command's status, a file, ssh or a missing
//! rdrecv first; transfer errors next; aborts, which echo a failure elsewhere,
//! last) and the best-ranked ones are printed, one `rdpipe: error: ...` line each
//! (all with `-v`). The exit status is the failing command's (the rightmost), 127
//! for a missing rdrecv, 128+N for signal N, 141 quietly when rdpipe's own stdout
//! was closed, else 1.
//!
//! Progress ([`Config::progress`]): rdpipe sends `PROGRESS` to every agent and
//! draws one line from their `SIZE` / `BYTES` reports and its own transfers. When
//! the source's size is known (the last `< FILE` segment, else rdpipe's stdin when
//! it is a regular file), the line is about the source, as `pv FILE | …` would be:
//! bytes sent from it, rate, percentage and ETA (a command downstream may change
//! the data's size, so the source is the only place a percentage means anything).
//! Otherwise the bytes and the rate are those of the last hop that has carried any
//! data (what has arrived furthest down the pipeline, counted by the receiving end:
//! usually the last hop, an earlier one while a command buffers or when the last
//! command writes nothing). Messages, log events and forwarded stderr lines clear
//! the line and draw it again (`rdpipe-term`).
//!
//! Logging: `tracing` debug events (`-vv`, `RUST_LOG`) at each step of the set-up
//! and teardown and for every control line; rdpipe hands the level (and its
//! `RUST_LOG`) to the agents, whose log is forwarded like their stderr.

use crate::agent::{
    describe_exit, encode_hex, parse_line, AgentLine, Side, PING_EVERY, STOPPED_READING,
};
use crate::plan::{parse_data_host, plan, Action, Host, Node, Pipeline, PlanError, RemoteHost};
use crate::ssh::{Master, SshConfig};
use crate::transport_pref;
use rdpipe_term::progress::{Progress, Ticker};
use rdpipe_transport::{run_recv, run_send, Endpoint, Options, Report, TransportError};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tracing::{debug, trace};

/// How long rdpipe collects failure reports after the first one before it closes
/// the agents' control channels.
pub const ROOT_CAUSE_GRACE: Duration = Duration::from_millis(1000);
/// How long agents get to exit after their control channels closed.
pub const TEARDOWN_WAIT: Duration = Duration::from_secs(3);

/// The name on rdpipe's messages.
pub const TOOL: &str = "rdpipe";

/// rdpipe's exit status for a pipeline that failed without a failing command.
pub const EXIT_FAILED: u8 = 1;
/// Bad arguments.
pub const EXIT_USAGE: u8 = 2;
/// rdrecv missing on a host.
pub const EXIT_NOT_FOUND: u8 = 127;

/// Everything rdpipe was asked to do (built from the command line by the
/// `rdma-pipe` crate's `cli::pipe`).
#[derive(Debug, Clone)]
pub struct Config {
    /// The `HOST:CMD` arguments.
    pub segments: Vec<String>,
    /// `-n`: print the plan only.
    pub dry_run: bool,
    /// `-v` count: 1 per-hop reports and the bandwidth; 2 (`-vv`) debug log, also
    /// from the agents; 3 trace.
    pub verbose: u8,
    /// `-q`: no warnings (from the agents either); errors are still printed.
    pub quiet: bool,
    /// Draw the progress line (`--progress`, or stderr is a terminal and no `-q`).
    pub progress: bool,
    /// A log filter for the agents (rdpipe's `RUST_LOG`), overriding `verbose`.
    pub log: Option<String>,
    /// `-o` options for ssh.
    pub ssh_options: Vec<String>,
    /// `-F` file for ssh.
    pub ssh_config: Option<PathBuf>,
    /// `--data-host HOST=ADDR` values.
    pub data_host: Vec<String>,
    /// `--remote-bin DIR`.
    pub remote_bin: Option<String>,
    /// `auto`, `tcp` or `rdma`.
    pub transport: String,
    /// Chunk size in bytes.
    pub chunk_size: u32,
    /// Buffers in flight.
    pub slots: u32,
    /// Seconds to keep trying to connect.
    pub connect_timeout: u64,
    /// Seconds the authentication handshake may take.
    pub handshake_timeout: u64,
    /// SSH sessions per master connection.
    pub max_sessions: u32,
}

/// Where rdpipe finds the programs it runs locally.
#[derive(Debug, Clone)]
pub struct LocalExe {
    /// Run as `EXE --agent ...` for local segments and `EXE --ssh-guard ...` for
    /// masters (normally rdpipe itself).
    pub exe: PathBuf,
}

/// What went wrong, ranked: lower is closer to the root cause.
#[derive(Debug, Clone)]
struct Failure {
    rank: u8,
    node: Option<Node>,
    text: String,
}

enum Msg {
    Line(usize, String),
    Exited(usize, Option<i32>, String),
    Source(Result<Report, TransportError>),
    Sink(Result<Report, TransportError>),
}

#[derive(Default)]
struct SegState {
    hello: bool,
    ended: Option<bool>,
    exited: bool,
    exit_code: Option<i32>,
    exit_text: Option<String>,
    out_report: Option<(u64, String, f64, String)>,
    in_report: Option<(u64, String, f64, String)>,
    /// `BYTES in` / `BYTES out`: running counts.
    bytes_in: Option<u64>,
    bytes_out: Option<u64>,
    /// `SIZE`: the `< FILE` size.
    size: Option<u64>,
}

type Writer = Box<dyn AsyncWrite + Unpin + Send>;
type Reader = Box<dyn AsyncRead + Unpin + Send>;
/// A started agent: control stdin, control stdout, stderr (remote, or local with a
/// progress line), local pid, and the task that waits for its exit.
type Spawned = (Writer, Reader, Option<Reader>, Option<u32>, WaitFuture);
/// Waits for an agent's exit. Only awaited after its stdout and stderr reached end
/// of file: with native mux, finishing the wait closes the mux session, and the
/// master then drops whatever output it had not yet passed on.
type WaitFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = (Option<i32>, String)> + Send>>;

/// A forwarded stderr line, `host: line`, written whole (the progress line, if
/// any, is cleared and drawn again).
fn stderr_line(prefix: &str, line: &[u8]) {
    let mut v = Vec::with_capacity(prefix.len() + line.len() + 1);
    v.extend_from_slice(prefix.as_bytes());
    v.extend_from_slice(line);
    if !line.ends_with(b"\n") {
        v.push(b'\n');
    }
    rdpipe_term::line_bytes(&v);
}

/// Shell-quotes one word for the remote `sh`.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The endpoint tuning variables set here ([`rdpipe_transport::TUNING_ENV`]),
/// for the agents on other hosts.
fn tuning_env() -> Vec<(String, String)> {
    rdpipe_transport::TUNING_ENV
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// The remote shell's command line for an agent: `[env K=V ...] BIN ARGS...`, every
/// word quoted.
pub fn remote_command_line(bin: &str, args: &[String], env: &[(String, String)]) -> String {
    let env_words = (!env.is_empty())
        .then(|| "env".to_string())
        .into_iter()
        .chain(env.iter().map(|(k, v)| sh_quote(&format!("{k}={v}"))));
    env_words
        .chain(std::iter::once(sh_quote(bin)))
        .chain(args.iter().map(|w| sh_quote(w)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The agent's argv (after the program) for segment `i`.
pub fn agent_args(p: &Pipeline, i: usize, a: &Config) -> Vec<String> {
    let (input, output) = p.sides(i);
    let seg = &p.segments[i];
    let mut v = vec![
        "--agent".to_string(),
        "--label".into(),
        format!("{}[{}]", seg.host.label(), i + 1),
        "--input".into(),
        input.as_str().into(),
        "--output".into(),
        output.as_str().into(),
        "--chunk-size".into(),
        a.chunk_size.to_string(),
        "--slots".into(),
        a.slots.to_string(),
        "--transport".into(),
        a.transport.clone(),
        "--connect-timeout".into(),
        a.connect_timeout.to_string(),
        "--handshake-timeout".into(),
        a.handshake_timeout.to_string(),
    ];
    // Only when asked for: the usual command line stays what older agents know.
    if a.verbose >= 2 {
        v.extend(["--verbose".into(), a.verbose.min(3).to_string()]);
    }
    if a.quiet {
        v.push("--quiet".into());
    }
    if let Some(f) = &a.log {
        v.extend(["--log".into(), f.clone()]);
    }
    match &seg.action {
        Action::Command(c) => v.extend(["--cmd".into(), c.clone()]),
        Action::ReadFile(f) => v.extend(["--read".into(), f.clone()]),
        Action::WriteFile { path, append } => v.extend([
            if *append { "--append" } else { "--write" }.into(),
            path.clone(),
        ]),
    }
    v
}

fn runtime_dir() -> PathBuf {
    // sun_path is 108 bytes: keep the control sockets in a short directory.
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        let d = PathBuf::from(d);
        if d.as_os_str().len() < 40 && d.is_dir() {
            return d;
        }
    }
    PathBuf::from("/tmp")
}

/// Builds the plan from the arguments, resolving data addresses (`--data-host`,
/// else `ssh -G`'s HostName).
pub fn build_plan(a: &Config, stdin_is_input: bool) -> Result<Pipeline, PlanError> {
    let mut overrides = HashMap::new();
    for d in &a.data_host {
        let (h, addr) = parse_data_host(d)?;
        overrides.insert(h, addr);
    }
    let ssh = ssh_config(a);
    let cache: RefCell<HashMap<RemoteHost, String>> = RefCell::new(HashMap::new());
    let resolve = |r: &RemoteHost| -> String {
        if let Some(a) = overrides.get(&r.spec).or_else(|| overrides.get(&r.name)) {
            return a.clone();
        }
        if let Some(a) = cache.borrow().get(r) {
            return a.clone();
        }
        let h = ssh.hostname(r);
        cache.borrow_mut().insert(r.clone(), h.clone());
        h
    };
    plan(&a.segments, stdin_is_input, &resolve)
}

fn ssh_config(a: &Config) -> SshConfig {
    SshConfig {
        config_file: a.ssh_config.clone(),
        options: a.ssh_options.clone(),
        connect_timeout: a.connect_timeout.min(60),
    }
}

fn transfer_options(a: &Config, key: &[u8]) -> Options {
    Options {
        key: key.to_vec(),
        chunk_size: a.chunk_size,
        slots: a.slots,
        transport: transport_pref(&a.transport).unwrap_or_default(),
        handshake_timeout: Duration::from_secs(a.handshake_timeout),
        progress: None,
    }
}

/// Runs rdpipe with parsed arguments; returns the exit status.
pub fn run(a: Config, exe: LocalExe) -> u8 {
    let stdin_is_input = !std::io::stdin().is_terminal();
    let p = match build_plan(&a, stdin_is_input) {
        Ok(p) => p,
        Err(e) => {
            rdpipe_term::error(TOOL, e);
            return EXIT_USAGE;
        }
    };
    if a.dry_run {
        print!("{}", p.describe(a.max_sessions as usize));
        return 0;
    }
    debug!(
        "{} segment(s), {} transfer(s), {} remote host(s)",
        p.segments.len(),
        p.hops.len(),
        p.remote_hosts().len()
    );
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            rdpipe_term::error(TOOL, format!("cannot start the runtime: {e}"));
            return EXIT_FAILED;
        }
    };
    rt.block_on(Runner::new(a, p, exe).run())
}

struct Runner {
    a: Config,
    p: Pipeline,
    exe: LocalExe,
    key: Vec<u8>,
    tx: mpsc::UnboundedSender<Msg>,
    rx: mpsc::UnboundedReceiver<Msg>,
    stdins: Vec<Option<Writer>>,
    local_pids: Vec<Option<u32>>,
    segs: Vec<SegState>,
    failures: Vec<Failure>,
    source_done: bool,
    sink_done: bool,
    source_report: Option<Report>,
    sink_report: Option<Report>,
    broken_stdout: bool,
    signal: Option<i32>,
    /// The control channels are being closed: agents ending now are collateral.
    closing: bool,
    /// The progress line, while it is drawn.
    progress: Option<Ticker>,
    /// rdpipe's own transfers' running counts (stdin sent, stdout received).
    source_bytes: Arc<AtomicU64>,
    sink_bytes: Arc<AtomicU64>,
    /// rdpipe's stdin's size, when it is a regular file.
    stdin_size: Option<u64>,
}

impl Runner {
    fn new(a: Config, p: Pipeline, exe: LocalExe) -> Runner {
        let mut key = vec![0u8; 32];
        getrandom::getrandom(&mut key).expect("the OS random source works");
        let (tx, rx) = mpsc::unbounded_channel();
        let n = p.segments.len();
        let source_done = p.hop_from(Node::Stdin).is_none();
        let sink_done = p.hop_into(Node::Stdout).is_none();
        Runner {
            a,
            p,
            exe,
            key,
            tx,
            rx,
            stdins: (0..n).map(|_| None).collect(),
            local_pids: vec![None; n],
            segs: (0..n).map(|_| SegState::default()).collect(),
            failures: Vec::new(),
            source_done,
            sink_done,
            source_report: None,
            sink_report: None,
            broken_stdout: false,
            signal: None,
            closing: false,
            progress: None,
            source_bytes: Arc::new(AtomicU64::new(0)),
            sink_bytes: Arc::new(AtomicU64::new(0)),
            stdin_size: None,
        }
    }

    /// Starts the progress line, if wanted and there is a transfer to show.
    fn start_progress(&mut self) {
        if !self.a.progress || self.p.hops.is_empty() {
            return;
        }
        if self.p.hop_from(Node::Stdin).is_some() {
            use std::os::fd::AsFd;
            self.stdin_size = std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map(File::from)
                .and_then(|f| f.metadata())
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len());
        }
        self.progress = Some(Progress::new(TOOL, None).start());
    }

    /// Bytes received so far by `to` (its report, else its last `BYTES in`).
    fn received(&self, to: Node) -> Option<u64> {
        match to {
            Node::Stdout => Some(self.sink_bytes.load(Ordering::Relaxed)),
            Node::Segment(i) => {
                let s = &self.segs[i];
                s.in_report.as_ref().map(|r| r.0).or(s.bytes_in)
            }
            Node::Stdin => None,
        }
    }

    /// Bytes sent so far by `from` (its report, else its last `BYTES out`).
    fn sent(&self, from: Node) -> Option<u64> {
        match from {
            Node::Stdin => Some(self.source_bytes.load(Ordering::Relaxed)),
            Node::Segment(i) => {
                let s = &self.segs[i];
                s.out_report.as_ref().map(|r| r.0).or(s.bytes_out)
            }
            Node::Stdout => None,
        }
    }

    /// (sent, size) of the pipeline's source, when its size is known: the last
    /// `< FILE` segment (what comes before it is discarded), else rdpipe's stdin.
    fn source_progress(&self) -> Option<(u64, u64)> {
        let file = self
            .p
            .segments
            .iter()
            .rposition(|s| matches!(s.action, Action::ReadFile(_)));
        let (node, size) = match file {
            Some(i) => (Node::Segment(i), self.segs[i].size?),
            None => (Node::Stdin, self.stdin_size?),
        };
        self.p.hop_from(node)?;
        Some((self.sent(node).unwrap_or(0), size))
    }

    /// Hands the current counts to the progress line (see the module docs).
    fn update_progress(&self) {
        let Some(t) = &self.progress else { return };
        // The furthest hop the data has reached (a last command that writes
        // nothing, `cat > /dev/null`, leaves an empty last hop).
        let shown = self
            .p
            .hops
            .iter()
            .rev()
            .map(|h| {
                self.received(h.to)
                    .or_else(|| self.sent(h.from))
                    .unwrap_or(0)
            })
            .find(|&n| n > 0)
            .unwrap_or(0);
        t.update_shown(shown);
        if let Some((done, total)) = self.source_progress() {
            t.update_source(done);
            t.set_total(total);
        }
    }

    fn fail(&mut self, rank: u8, node: Option<Node>, text: String) {
        self.failures.push(Failure { rank, node, text });
    }

    fn seg_desc(&self, i: usize) -> String {
        let s = &self.p.segments[i];
        format!("{} [{}] '{}'", s.host.label(), i + 1, s.action)
    }

    async fn run(mut self) -> u8 {
        let start = Instant::now();
        let dir = match tempfile::Builder::new()
            .prefix("rdpipe-")
            .tempdir_in(runtime_dir())
        {
            Ok(d) => d,
            Err(e) => {
                rdpipe_term::error(TOOL, format!("cannot create a control directory: {e}"));
                return EXIT_FAILED;
            }
        };
        let mut masters: Vec<Master> = Vec::new();
        let mut seg_master: HashMap<usize, usize> = HashMap::new();
        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
        let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        // Starting the masters may take up to the connect timeout: a signal cancels
        // it (dropping a half-started master closes its guard's stdin, which ends it).
        let launched = tokio::select! {
            ok = self.launch_masters(dir.path(), &mut masters, &mut seg_master) => Ok(ok),
            _ = async { sigint.as_mut().ok()?.recv().await }, if sigint.is_ok() => Err(2),
            _ = async { sigterm.as_mut().ok()?.recv().await }, if sigterm.is_ok() => Err(15),
            _ = async { sighup.as_mut().ok()?.recv().await }, if sighup.is_ok() => Err(1),
        };
        let ok = match launched {
            Ok(ok) => ok,
            Err(sig) => {
                self.interrupted(sig);
                for s in &mut self.segs {
                    s.exited = true;
                }
                self.source_done = true;
                self.sink_done = true;
                false
            }
        };
        if ok {
            self.start_progress();
            self.spawn_agents(&masters, &seg_master).await;
            if let Some(t) = &self.progress {
                t.start_clock();
            }
        }
        let mut first_failure: Option<Instant> = None;
        let mut closed_at: Option<Instant> = None;
        let mut last_ping = Instant::now();
        // Agents were just started (spawn_agents returns once all are running).
        let started = Instant::now();
        let mut hello_timeout_reported = false;
        loop {
            if self.all_done() {
                break;
            }
            if !self.failures.is_empty() && first_failure.is_none() {
                first_failure = Some(Instant::now());
            }
            if let Some(f) = first_failure {
                let grace = if self.signal.is_some() {
                    Duration::ZERO
                } else {
                    ROOT_CAUSE_GRACE
                };
                if closed_at.is_none() && f.elapsed() >= grace {
                    debug!("closing the agents' control channels");
                    self.closing = true;
                    self.stdins.iter_mut().for_each(|s| *s = None);
                    closed_at = Some(Instant::now());
                }
                if closed_at.is_some_and(|c| c.elapsed() >= TEARDOWN_WAIT) {
                    break;
                }
                if self.agents_done() && closed_at.is_some() {
                    break;
                }
            }
            // An agent that never says HELLO (a login script waiting for input, a
            // hung remote shell) must not hang the pipeline: --connect-timeout, at
            // least 30 s (login scripts can be slow).
            let limit = Duration::from_secs(self.a.connect_timeout.max(30));
            if !hello_timeout_reported && started.elapsed() > limit {
                let late: Vec<usize> = (0..self.segs.len())
                    .filter(|&i| !self.segs[i].hello && !self.segs[i].exited)
                    .collect();
                for i in late {
                    hello_timeout_reported = true;
                    let t = format!(
                        "{}: the agent did not start within {} s",
                        self.seg_desc(i),
                        limit.as_secs()
                    );
                    self.fail(0, Some(Node::Segment(i)), t);
                }
            }
            if last_ping.elapsed() >= PING_EVERY {
                last_ping = Instant::now();
                for i in 0..self.stdins.len() {
                    self.send_line(i, "PING\n".to_string()).await;
                }
            }
            let tick = tokio::time::sleep(Duration::from_millis(100));
            tokio::select! {
                m = self.rx.recv() => match m {
                    Some(m) => self.handle(m).await,
                    None => break,
                },
                _ = async { sigint.as_mut().ok()?.recv().await }, if sigint.is_ok() => {
                    self.interrupted(2);
                }
                _ = async { sigterm.as_mut().ok()?.recv().await }, if sigterm.is_ok() => {
                    self.interrupted(15);
                }
                _ = async { sighup.as_mut().ok()?.recv().await }, if sighup.is_ok() => {
                    self.interrupted(1);
                }
                _ = tick => {}
            }
            self.update_progress();
        }
        // The data phase is over: the final progress line, before any report.
        self.update_progress();
        if let Some(t) = self.progress.take() {
            t.finish();
        }
        // Teardown (also after success: nothing is left running).
        debug!("teardown: closing the agents' control channels");
        self.closing = true;
        self.stdins.iter_mut().for_each(|s| *s = None);
        self.kill_local_agents().await;
        for (n, m) in masters.into_iter().enumerate() {
            debug!("teardown: closing ssh master {}", n + 1);
            m.close().await;
        }
        drop(dir);
        debug!("teardown done");
        self.verdict(start.elapsed())
    }

    fn interrupted(&mut self, sig: i32) {
        if self.signal.is_none() {
            self.signal = Some(sig);
            let name = match sig {
                2 => "SIGINT",
                15 => "SIGTERM",
                _ => "SIGHUP",
            };
            self.fail(0, None, format!("interrupted by {name}, pipeline stopped"));
        }
    }

    fn agents_done(&self) -> bool {
        self.segs.iter().all(|s| s.exited)
    }

    fn all_done(&self) -> bool {
        self.agents_done() && self.source_done && self.sink_done
    }

    async fn launch_masters(
        &mut self,
        dir: &Path,
        masters: &mut Vec<Master>,
        seg_master: &mut HashMap<usize, usize>,
    ) -> bool {
        let ssh = ssh_config(&self.a);
        let per = self.a.max_sessions.max(1) as usize;
        let mut jobs = Vec::new();
        for (host, segs) in self.p.remote_hosts() {
            for chunk in segs.chunks(per) {
                jobs.push((host.clone(), chunk.to_vec()));
            }
        }
        let mut set = tokio::task::JoinSet::new();
        for (n, (host, _)) in jobs.iter().enumerate() {
            let ssh = ssh.clone();
            let host = host.clone();
            let ctl = dir.join(format!("m{n}"));
            let exe = self.exe.exe.clone();
            debug!(
                "starting ssh master {} for {} ({})",
                n + 1,
                host.spec,
                ctl.display()
            );
            set.spawn(async move {
                let t = Instant::now();
                let m = Master::launch(&ssh, &host, &ctl, &exe).await;
                if m.is_ok() {
                    debug!(
                        "ssh master {} for {} is up after {} ms",
                        n + 1,
                        host.spec,
                        t.elapsed().as_millis()
                    );
                }
                (n, m)
            });
        }
        let mut got: Vec<Option<Master>> = (0..jobs.len()).map(|_| None).collect();
        let mut ok = true;
        while let Some(r) = set.join_next().await {
            match r {
                Ok((n, Ok(m))) => got[n] = Some(m),
                Ok((n, Err(e))) => {
                    ok = false;
                    let first = jobs[n].1[0];
                    self.fail(
                        0,
                        Some(Node::Segment(first)),
                        format!("{}: {e}", jobs[n].0.spec),
                    );
                }
                Err(e) => {
                    ok = false;
                    self.fail(0, None, format!("ssh launch task failed: {e}"));
                }
            }
        }
        for (n, m) in got.into_iter().enumerate() {
            if let Some(m) = m {
                let idx = masters.len();
                masters.push(m);
                for &s in &jobs[n].1 {
                    seg_master.insert(s, idx);
                }
            }
        }
        if !ok {
            // Nothing was started: mark every agent as done.
            for s in &mut self.segs {
                s.exited = true;
            }
            self.source_done = true;
            self.sink_done = true;
        }
        ok
    }

    async fn spawn_agents(&mut self, masters: &[Master], seg_master: &HashMap<usize, usize>) {
        // The key, and the request for byte counts when there is a progress line.
        let mut key_line = format!("{}\n", encode_hex(&self.key));
        if self.progress.is_some() {
            key_line.push_str("PROGRESS\n");
        }
        let tuning = tuning_env();
        for i in 0..self.p.segments.len() {
            let args = agent_args(&self.p, i, &self.a);
            let spawned: Result<Spawned, String> = match &self.p.segments[i].host {
                Host::Local => {
                    let mut c = tokio::process::Command::new(&self.exe.exe);
                    // With a progress line, the local command's stderr goes through
                    // the same line writer as remote stderr (which clears the line
                    // first); otherwise it is inherited untouched.
                    let stderr = if self.progress.is_some() {
                        Stdio::piped()
                    } else {
                        Stdio::inherit()
                    };
                    c.args(&args)
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(stderr)
                        .process_group(0)
                        .kill_on_drop(true);
                    match c.spawn() {
                        Ok(mut ch) => {
                            let sin = ch.stdin.take().expect("piped");
                            let sout = ch.stdout.take().expect("piped");
                            let serr = ch.stderr.take().map(|e| Box::new(e) as Reader);
                            let pid = ch.id();
                            let wait: WaitFuture = Box::pin(async move {
                                match ch.wait().await {
                                    Ok(s) => (s.code(), describe_exit(s)),
                                    Err(e) => (None, format!("wait failed: {e}")),
                                }
                            });
                            Ok((
                                Box::new(sin) as Writer,
                                Box::new(sout) as _,
                                serr,
                                pid,
                                wait,
                            ))
                        }
                        Err(e) => Err(format!(
                            "cannot run the local agent {}: {e}",
                            self.exe.exe.display()
                        )),
                    }
                }
                Host::Remote(_) => {
                    let m = &masters[seg_master[&i]];
                    let bin = match &self.a.remote_bin {
                        Some(d) => format!("{}/rdrecv", d.trim_end_matches('/')),
                        None => "rdrecv".to_string(),
                    };
                    let line = remote_command_line(&bin, &args, &tuning);
                    let mut cmd = openssh::Session::to_raw_command(m.session.clone(), line);
                    cmd.stdin(openssh::Stdio::piped())
                        .stdout(openssh::Stdio::piped())
                        .stderr(openssh::Stdio::piped());
                    match cmd.spawn().await {
                        Ok(mut ch) => {
                            let sin = ch.stdin().take().expect("piped");
                            let sout = ch.stdout().take().expect("piped");
                            let serr = ch.stderr().take().expect("piped");
                            let wait: WaitFuture = Box::pin(async move {
                                match ch.wait().await {
                                    Ok(s) => (s.code(), describe_exit(s)),
                                    // Native mux reports status 127 this way.
                                    Err(openssh::Error::Remote(e))
                                        if e.kind() == std::io::ErrorKind::NotFound =>
                                    {
                                        (Some(127), "exited with status 127".into())
                                    }
                                    Err(e) => (None, format!("ssh channel failed: {e}")),
                                }
                            });
                            Ok((
                                Box::new(sin) as Writer,
                                Box::new(sout) as _,
                                Some(Box::new(serr) as _),
                                None,
                                wait,
                            ))
                        }
                        Err(e) => Err(format!(
                            "cannot open an ssh session for the agent: {e} (if sshd's \
                             MaxSessions there is below {}, pass --max-sessions)",
                            self.a.max_sessions
                        )),
                    }
                }
            };
            match spawned {
                Ok((mut sin, sout, serr, pid, wait)) => {
                    debug!(
                        "[{}] agent started on {}{}: {}",
                        i + 1,
                        self.p.segments[i].host.label(),
                        pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                        args.join(" ")
                    );
                    self.local_pids[i] = pid;
                    if sin.write_all(key_line.as_bytes()).await.is_err()
                        || sin.flush().await.is_err()
                    {
                        // Reported through its exit.
                    }
                    self.stdins[i] = Some(sin);
                    let tx = self.tx.clone();
                    let label = self.p.segments[i].host.label().to_string();
                    let stderr_task = serr.map(|serr| {
                        // Local stderr keeps its own words, as when inherited.
                        let prefix = match self.p.segments[i].host {
                            Host::Local => String::new(),
                            Host::Remote(_) => format!("{} ", rdpipe_term::prefix(&label)),
                        };
                        tokio::spawn(async move {
                            let mut r = BufReader::new(serr);
                            let mut buf = Vec::new();
                            loop {
                                buf.clear();
                                match r.read_until(b'\n', &mut buf).await {
                                    Ok(0) | Err(_) => break,
                                    Ok(_) => stderr_line(&prefix, &buf),
                                }
                            }
                        })
                    });
                    tokio::spawn(async move {
                        let mut r = BufReader::new(sout);
                        let mut buf = Vec::new();
                        loop {
                            buf.clear();
                            match r.read_until(b'\n', &mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(_) => {
                                    let l = String::from_utf8_lossy(&buf).trim_end().to_string();
                                    let _ = tx.send(Msg::Line(i, l));
                                }
                            }
                        }
                        if let Some(t) = stderr_task {
                            // A background process may hold stderr open: bounded.
                            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
                        }
                        let (code, text) = wait.await;
                        let _ = tx.send(Msg::Exited(i, code, text));
                    });
                }
                Err(e) => {
                    self.segs[i].exited = true;
                    self.fail(
                        0,
                        Some(Node::Segment(i)),
                        format!("{}: {e}", self.seg_desc(i)),
                    );
                }
            }
        }
    }

    async fn send_line(&mut self, i: usize, line: String) {
        if let Some(w) = self.stdins[i].as_mut() {
            trace!("[{}] sent: {}", i + 1, line.trim_end());
            let _ = w.write_all(line.as_bytes()).await;
            let _ = w.flush().await;
        }
    }

    async fn handle(&mut self, m: Msg) {
        match m {
            Msg::Line(i, l) => self.handle_line(i, &l).await,
            Msg::Exited(i, code, text) => {
                debug!("[{}] agent {text}", i + 1);
                let st = &mut self.segs[i];
                st.exited = true;
                if st.ended == Some(true) {
                    let me = Node::Segment(i);
                    let missing_in = self.p.hop_into(me).is_some() && st.in_report.is_none();
                    let missing_out = self.p.hop_from(me).is_some() && st.out_report.is_none();
                    if missing_in || missing_out {
                        self.fail(
                            1,
                            Some(me),
                            format!(
                                "{}: the agent ended without completing its transfers",
                                self.seg_desc(i)
                            ),
                        );
                    }
                }
                let st = &self.segs[i];
                if st.ended.is_none() {
                    let hello = st.hello;
                    let host = self.p.segments[i].host.label().to_string();
                    if code == Some(127) && !hello {
                        self.fail(
                            0,
                            Some(Node::Segment(i)),
                            format!("{host}: rdrecv not found (install rdma-pipe there or pass --remote-bin)"),
                        );
                    } else if code == Some(2) && !hello {
                        self.fail(
                            0,
                            Some(Node::Segment(i)),
                            format!("{host}: rdrecv there does not understand --agent (install the same rdma-pipe version there)"),
                        );
                    } else if !hello {
                        self.fail(
                            0,
                            Some(Node::Segment(i)),
                            format!("{}: the agent did not start: it {text}", self.seg_desc(i)),
                        );
                    } else if self.signal.is_none() {
                        // Before teardown, an agent that vanishes is a root cause.
                        let rank = if self.closing { 2 } else { 0 };
                        self.fail(
                            rank,
                            Some(Node::Segment(i)),
                            format!(
                                "{}: the agent died without a report ({text})",
                                self.seg_desc(i)
                            ),
                        );
                    }
                }
            }
            Msg::Source(r) => {
                self.source_done = true;
                match r {
                    Ok(rep) => self.source_report = Some(rep),
                    Err(e) => {
                        let to = self.p.hop_from(Node::Stdin).map(|h| h.to);
                        let rank = rank_of(&e);
                        let name = to.map(|n| self.p.node_name(n)).unwrap_or_default();
                        self.fail(
                            rank,
                            Some(Node::Stdin),
                            format!("sending rdpipe's stdin to {name} failed: {e}"),
                        );
                    }
                }
            }
            Msg::Sink(r) => {
                self.sink_done = true;
                match r {
                    Ok(rep) => self.sink_report = Some(rep),
                    Err(TransportError::Output(e))
                        if e.kind() == std::io::ErrorKind::BrokenPipe =>
                    {
                        self.broken_stdout = true;
                        self.fail(1, Some(Node::Stdout), "rdpipe's stdout was closed".into());
                    }
                    Err(e) => {
                        let from = self.p.hop_into(Node::Stdout).map(|h| h.from);
                        let rank = rank_of(&e);
                        let name = from.map(|n| self.p.node_name(n)).unwrap_or_default();
                        self.fail(
                            rank,
                            Some(Node::Stdout),
                            format!("receiving rdpipe's stdout from {name} failed: {e}"),
                        );
                    }
                }
            }
        }
    }

    async fn handle_line(&mut self, i: usize, l: &str) {
        let line = parse_line(l);
        if matches!(line, AgentLine::Bytes { .. }) {
            trace!("[{}] said: {l}", i + 1);
        } else {
            debug!("[{}] said: {l}", i + 1);
        }
        match line {
            AgentLine::Hello => self.segs[i].hello = true,
            AgentLine::Port { side, port } => {
                let me = Node::Segment(i);
                let hop = match side {
                    Side::In => self.p.hop_into(me),
                    Side::Out => self.p.hop_from(me),
                };
                let Some(hop) = hop.cloned() else { return };
                let addr = hop.address.clone();
                match hop.connector() {
                    Node::Stdin => self.start_source(addr, port),
                    Node::Stdout => self.start_sink(addr, port),
                    Node::Segment(j) => {
                        let dir = if hop.to == Node::Segment(j) {
                            "in"
                        } else {
                            "out"
                        };
                        debug!(
                            "[{}] listens on port {port}: telling [{}] to CONNECT {dir} {addr} {port}",
                            i + 1,
                            j + 1
                        );
                        self.send_line(j, format!("CONNECT {dir} {addr} {port}\n"))
                            .await;
                    }
                }
            }
            AgentLine::Done {
                side,
                bytes,
                checksum,
                secs,
                transport,
            } => {
                let r = Some((bytes, checksum.to_string(), secs, transport.to_string()));
                match side {
                    Side::In => self.segs[i].in_report = r,
                    Side::Out => self.segs[i].out_report = r,
                }
            }
            AgentLine::Exit { code, text } => {
                if code.is_some() {
                    self.segs[i].exit_code = code;
                }
                self.segs[i].exit_text = Some(text.to_string());
            }
            AgentLine::Fail {
                part,
                code,
                message: msg,
            } => {
                let desc = self.seg_desc(i);
                let me = Node::Segment(i);
                let (rank, text) = match part {
                    "cmd" | "file" => (0, format!("{desc}: {msg}")),
                    "in" => {
                        let from = self
                            .p
                            .hop_into(me)
                            .map(|h| self.p.node_name(h.from))
                            .unwrap_or_default();
                        if msg.starts_with(STOPPED_READING) {
                            // The command stopped reading (`head -c 1000`): the root
                            // cause, like SIGPIPE for its producer in a shell with
                            // pipefail. The stream from upstream was cut short.
                            (
                                0,
                                format!(
                                    "{desc}: {STOPPED_READING}; the stream from {from} \
                                     was cut short"
                                ),
                            )
                        } else {
                            (
                                transfer_rank(code),
                                format!("{desc}: receiving from {from} failed: {msg}"),
                            )
                        }
                    }
                    "out" => {
                        let to = self
                            .p
                            .hop_from(me)
                            .map(|h| self.p.node_name(h.to))
                            .unwrap_or_default();
                        // "the pipeline failed": the agent poisoned its own output
                        // after a failure reported separately.
                        let rank = if msg.ends_with("the pipeline failed") {
                            2
                        } else {
                            transfer_rank(code)
                        };
                        (rank, format!("{desc}: sending to {to} failed: {msg}"))
                    }
                    _ if msg.starts_with("control channel closed")
                        || msg.starts_with("killed by signal") =>
                    {
                        (3, format!("{desc}: {msg}"))
                    }
                    _ => (0, format!("{desc}: {msg}")),
                };
                self.fail(rank, Some(me), text);
            }
            AgentLine::End { ok } => self.segs[i].ended = Some(ok),
            AgentLine::Bytes { side, bytes } => match side {
                Side::In => self.segs[i].bytes_in = Some(bytes),
                Side::Out => self.segs[i].bytes_out = Some(bytes),
            },
            AgentLine::Size(n) => self.segs[i].size = Some(n),
            AgentLine::Unknown => {}
        }
    }

    /// A progress callback storing into `counter`, when there is a progress line.
    fn counting(&self, counter: &Arc<AtomicU64>) -> Option<Box<dyn FnMut(u64) + Send>> {
        self.progress.as_ref()?;
        let c = counter.clone();
        Some(Box::new(move |n| c.store(n, Ordering::Relaxed)))
    }

    fn start_source(&mut self, addr: String, port: u16) {
        debug!("sending rdpipe's stdin to {addr} port {port}");
        let mut opts = transfer_options(&self.a, &self.key);
        opts.progress = self.counting(&self.source_bytes);
        let timeout = Duration::from_secs(self.a.connect_timeout);
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            let r = rustix::io::dup(std::io::stdin())
                .map_err(|e| TransportError::Input(e.into()))
                .and_then(|fd| {
                    let mut f = File::from(fd);
                    run_send(
                        Endpoint::Connect {
                            host: addr,
                            port,
                            timeout,
                        },
                        opts,
                        &mut f,
                    )
                });
            let _ = tx.send(Msg::Source(r));
        });
    }

    fn start_sink(&mut self, addr: String, port: u16) {
        debug!("receiving rdpipe's stdout from {addr} port {port}");
        let mut opts = transfer_options(&self.a, &self.key);
        opts.progress = self.counting(&self.sink_bytes);
        let timeout = Duration::from_secs(self.a.connect_timeout);
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            let r = run_recv(
                Endpoint::Connect {
                    host: addr,
                    port,
                    timeout,
                },
                opts,
                rdpipe_transport::endpoint::stdout_output,
            );
            let _ = tx.send(Msg::Sink(r));
        });
    }

    async fn kill_local_agents(&mut self) {
        // Local agents exit on their own when their stdin closes; give them a
        // moment, then SIGTERM (they still clean up), then SIGKILL.
        let deadline = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < deadline && !self.agents_done() {
            tokio::select! {
                m = self.rx.recv() => match m { Some(m) => self.handle(m).await, None => break },
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        for (i, pid) in self.local_pids.iter().enumerate() {
            if let (Some(pid), false) = (pid, self.segs[i].exited) {
                if let Some(p) = rustix::process::Pid::from_raw(*pid as i32) {
                    debug!("teardown: SIGTERM to local agent [{}] (pid {pid})", i + 1);
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::Term);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_millis(1000);
        while Instant::now() < deadline && !self.agents_done() {
            tokio::select! {
                m = self.rx.recv() => match m { Some(m) => self.handle(m).await, None => break },
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        for (i, pid) in self.local_pids.iter().enumerate() {
            if let (Some(pid), false) = (pid, self.segs[i].exited) {
                if let Some(p) = rustix::process::Pid::from_raw(*pid as i32) {
                    debug!("teardown: SIGKILL to local agent [{}] (pid {pid})", i + 1);
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::Kill);
                }
            }
        }
    }

    fn hop_report(&self, from: Node) -> Option<(u64, String, f64, String)> {
        match from {
            Node::Stdin => self.source_report.as_ref().map(report_tuple),
            Node::Segment(i) => self.segs[i].out_report.clone(),
            Node::Stdout => None,
        }
    }

    fn recv_report(&self, to: Node) -> Option<(u64, String, f64, String)> {
        match to {
            Node::Stdout => self.sink_report.as_ref().map(report_tuple),
            Node::Segment(i) => self.segs[i].in_report.clone(),
            Node::Stdin => None,
        }
    }

    fn verdict(mut self, wall: Duration) -> u8 {
        // Both ends of every hop must report the same count and checksum.
        if self.failures.is_empty() {
            for h in self.p.hops.clone() {
                let s = self.hop_report(h.from);
                let r = self.recv_report(h.to);
                match (s, r) {
                    (Some(s), Some(r)) if s.0 == r.0 && s.1 == r.1 => {}
                    (s, r) => {
                        let text = format!(
                            "{} -> {}: the two ends report different streams ({:?} / {:?})",
                            self.p.node_name(h.from),
                            self.p.node_name(h.to),
                            s.map(|s| (s.0, s.1)),
                            r.map(|r| (r.0, r.1))
                        );
                        self.fail(1, None, text);
                    }
                }
            }
            for (i, s) in self.segs.iter().enumerate() {
                if s.ended != Some(true) {
                    let t = format!("{}: no success report", self.seg_desc(i));
                    self.failures.push(Failure {
                        rank: 2,
                        node: Some(Node::Segment(i)),
                        text: t,
                    });
                }
            }
        }
        if self.a.verbose > 0 {
            for h in &self.p.hops {
                if let Some((bytes, sum, secs, transport)) = self.hop_report(h.from) {
                    let gbps = if secs > 0.0 {
                        bytes as f64 / secs / 1e9
                    } else {
                        0.0
                    };
                    rdpipe_term::say(
                        TOOL,
                        format!(
                            "{} -> {}: {transport}, {bytes} bytes in {secs:.3} s ({gbps:.3} GB/s), xxh3 {sum}",
                            self.p.node_name(h.from),
                            self.p.node_name(h.to)
                        ),
                    );
                }
            }
            let last = self
                .p
                .hops
                .iter()
                .rev()
                .filter_map(|h| self.hop_report(h.from))
                .find(|r| r.0 > 0);
            let gbps = match last {
                Some((b, _, s, _)) if s > 0.0 => b as f64 / s / 1e9,
                _ => 0.0,
            };
            rdpipe_term::say(TOOL, format!("{:.3} s in all", wall.as_secs_f64()));
            rdpipe_term::line(&format!("Bandwidth {gbps:.3} GB/s\n"));
        }
        if self.failures.is_empty() {
            return 0;
        }
        if self.broken_stdout && self.failures.iter().all(|f| f.rank > 0) {
            // Like a shell pipeline whose reader went away: quiet, SIGPIPE status.
            return 141;
        }
        let best = self.failures.iter().map(|f| f.rank).min().unwrap_or(1);
        let shown: Vec<&Failure> = if self.a.verbose > 0 {
            self.failures.iter().collect()
        } else {
            let mut v: Vec<&Failure> = self.failures.iter().filter(|f| f.rank == best).collect();
            // A command that stopped reading and also failed on its own: its exit
            // status is the verdict, whichever of the two reports came first.
            v.retain(|f| {
                !(f.text.contains(STOPPED_READING)
                    && self.failures.iter().any(|g| {
                        g.rank == 0 && g.node == f.node && !g.text.contains(STOPPED_READING)
                    }))
            });
            if best > 0 {
                v.truncate(1);
            }
            v
        };
        for f in shown {
            rdpipe_term::error(TOOL, &f.text);
        }
        if let Some(s) = self.signal {
            return 128 + s as u8;
        }
        if self
            .failures
            .iter()
            .any(|f| f.text.contains("rdrecv not found"))
        {
            return EXIT_NOT_FOUND;
        }
        // pipefail: the rightmost failing command's status.
        for i in (0..self.segs.len()).rev() {
            let failed_here = self
                .failures
                .iter()
                .any(|f| f.rank == 0 && f.node == Some(Node::Segment(i)));
            if let (true, Some(c)) = (failed_here, self.segs[i].exit_code) {
                if c != 0 {
                    return c.clamp(1, 255) as u8;
                }
            }
        }
        EXIT_FAILED
    }
}

/// A finished transfer as the agents report theirs: bytes, checksum, seconds, transport.
fn report_tuple(r: &Report) -> (u64, String, f64, String) {
    (
        r.bytes,
        format!("{:016x}", r.checksum),
        r.elapsed.as_secs_f64(),
        r.transport.clone(),
    )
}

fn rank_of(e: &TransportError) -> u8 {
    transfer_rank(e.exit_code())
}

/// Aborts (code 5) are usually an echo of a failure elsewhere.
fn transfer_rank(code: u8) -> u8 {
    if code == rdpipe_transport::error::EXIT_ABORTED {
        2
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(verbose: u8, quiet: bool, log: Option<&str>) -> Config {
        Config {
            segments: vec!["h1:cat".into(), "h2:cat".into()],
            dry_run: false,
            verbose,
            quiet,
            progress: false,
            log: log.map(Into::into),
            ssh_options: vec![],
            ssh_config: None,
            data_host: vec![],
            remote_bin: None,
            transport: "auto".into(),
            chunk_size: 1 << 20,
            slots: 2,
            connect_timeout: 30,
            handshake_timeout: 10,
            max_sessions: 10,
        }
    }

    #[test]
    fn remote_command_line_quotes_and_passes_the_tuning_env() {
        let args = vec!["--agent".to_string(), "--label".into(), "h 1[1]".into()];
        assert_eq!(
            remote_command_line("/opt/rd pipe/rdrecv", &args, &[]),
            "'/opt/rd pipe/rdrecv' --agent --label 'h 1[1]'"
        );
        let env = vec![
            ("RDPIPE_TCP_SEND".to_string(), "inline".to_string()),
            ("RDPIPE_RDMA_NO_IMM".to_string(), "1; rm -rf /".to_string()),
        ];
        assert_eq!(
            remote_command_line("rdrecv", &args, &env),
            "env RDPIPE_TCP_SEND=inline 'RDPIPE_RDMA_NO_IMM=1; rm -rf /' rdrecv --agent \
             --label 'h 1[1]'"
        );
    }

    #[test]
    fn agents_get_the_verbosity_only_when_asked() {
        let a = config(1, false, None);
        let p = plan(&a.segments, false, &|r: &RemoteHost| r.name.clone()).unwrap();
        let has = |a: &Config, w: &str| agent_args(&p, 0, a).iter().any(|x| x == w);
        // Default and -v: the command line older agents know.
        for w in ["--verbose", "--quiet", "--log"] {
            assert!(!has(&a, w), "{w}");
        }
        let v = agent_args(&p, 0, &config(5, false, None));
        let i = v.iter().position(|x| x == "--verbose").unwrap();
        assert_eq!(v[i + 1], "3");
        assert!(has(&config(0, true, None), "--quiet"));
        let v = agent_args(&p, 1, &config(0, false, Some("debug")));
        let i = v.iter().position(|x| x == "--log").unwrap();
        assert_eq!(v[i + 1], "debug");
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("rdrecv"), "rdrecv");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(
            sh_quote("tr [:lower:] [:upper:]"),
            "'tr [:lower:] [:upper:]'"
        );
    }
}
