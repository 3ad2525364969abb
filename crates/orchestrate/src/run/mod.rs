//! Running a pipeline: the event loop. It prepares the hosts through the
//! run's launchers ([`launchers`]: ssh masters, or the Slurm allocation
//! checked), finds or installs the agent on each host ([`install`]) and
//! starts one agent per segment ([`spawn`]), relays the agents' `PORT` announcements as `CONNECT`
//! orders (at the address [`discover`] picks), runs rdpipe's own stdin sender and stdout receiver ([`ends`]), draws
//! the progress line ([`progress`]), tears everything down ([`teardown`]) and
//! decides the verdict ([`verdict`]; a fan-out's per-host verdicts: [`sinks`];
//! re-linking its chain around a dead relay host: [`relink`]).
//!
//! Teardown: on the first failure rdpipe waits [`ROOT_CAUSE_GRACE`] for the root
//! cause to be reported (failures cascade along the pipeline within milliseconds;
//! while a segment upstream of an aborted stream, or a failed segment whose
//! command has not reported its exit, is still to speak, up to
//! [`ROOT_CAUSE_WAIT`] in all), then closes every agent's control channel (agents
//! kill their commands' process groups and exit at once), waits up to
//! [`TEARDOWN_WAIT`] for them, kills local agents that are still there, and closes
//! the launchers (ssh masters closed, leftover srun steps cancelled). SIGINT, SIGTERM and SIGHUP skip the grace. Every step is
//! bounded, so a pipeline ends within a few seconds of a failure.
//!
//! Logging: `tracing` debug events (`-vv`, `RUST_LOG`) at each step of the set-up
//! and teardown and for every control line; rdpipe hands the level (and its
//! `RUST_LOG`) to the agents, whose log is forwarded like their stderr.

pub mod agent_args;
pub mod agents;
mod build;
pub mod config;
pub mod discover;
pub mod ends;
pub mod fabric;
pub mod forward;
mod install;
pub mod launchers;

pub mod outcome;
pub mod progress;
pub mod reattach;
pub mod record;
pub mod relink;
pub mod sinks;
pub mod sources;
pub mod spawn;

pub mod teardown;
pub mod verdict;

use rdpipe_control::{CmdExit, HopReport, ToAgent, PING_EVERY};
use rdpipe_launch::Writer;
use rdpipe_plan::{Host, Node, Pipeline};
use rdpipe_report::{PipeReport, VerdictReport};
use rdpipe_term::progress::Ticker;
use rdpipe_transport::{Report, TransportError};
use rdpipe_wire::Integrity;
use std::io::IsTerminal;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tracing::{debug, trace};
use verdict::{Cause, Finding, Verdict};

pub use build::build_plan;
pub use config::{Config, LocalExe, RunError};
use launchers::Launchers;

/// How long rdpipe collects failure reports after the first one before it closes
/// the agents' control channels.
pub const ROOT_CAUSE_GRACE: Duration = Duration::from_millis(1000);
/// The longest rdpipe waits after the first failure for a root cause still to be
/// reported (see the module doc).
pub const ROOT_CAUSE_WAIT: Duration = Duration::from_secs(4);
/// How long agents get to exit after their control channels closed.
pub const TEARDOWN_WAIT: Duration = Duration::from_secs(3);

/// The name on the orchestrator's messages: `rdpipe`, or the tool that set
/// another with [`set_tool`] (rdcp).
static TOOL_NAME: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names the tool on this process's messages (once, before the run).
pub fn set_tool(name: &'static str) {
    let _ = TOOL_NAME.set(name);
}

/// The name on this process's messages.
pub fn tool() -> &'static str {
    TOOL_NAME.get().copied().unwrap_or("rdpipe")
}

/// Something the event loop hears.
enum Event {
    /// A control line from agent `i`, on its channel number N
    /// ([`reattach::AttachState::gen`]).
    Line(usize, u32, String),
    /// Agent `i`'s `PONG` on its channel number N.
    Pong(usize, u32),
    /// Agent `i`'s channel number N ended (status, description).
    Exited(usize, u32, Option<i32>, String),
    /// rdpipe's stdin sender ended.
    Source(Result<Report, TransportError>),
    /// rdpipe's stdout receiver ended.
    Sink(Result<Report, TransportError>),
    /// rdpipe's own probe for hop `k` ([`discover`]) found this.
    Reached(usize, Vec<(std::net::IpAddr, rdpipe_control::Reach)>),
    /// The re-attach to agent `i` ([`reattach`]) ended.
    Reattached(usize, Result<reattach::NewChannel, String>),
}

/// What rdpipe knows about one segment's agent.
#[derive(Default)]
struct SegState {
    hello: bool,
    /// `END`: Some(ok).
    ended: Option<bool>,
    exited: bool,
    /// The command's `EXIT`.
    exit: Option<CmdExit>,
    /// A `FAIL` line was heard.
    failed: bool,
    /// A `--to` sink's relay to the next sink broke (its own copy goes on).
    relay_broke: bool,
    /// A `--to` sink fed by a re-link around a dead relay ([`relink`]).
    relinked: Option<relink::Relinked>,
    /// A relay that re-links to this sink around the dead next one.
    relinked_to: Option<usize>,
    /// A re-linked sink's failure to resume (its `FAIL in` message).
    relink_failure: Option<String>,
    /// `DONE in` / `DONE out`.
    reports: [Option<HopReport>; 2],
    /// `RECONNECTED in` / `out` heard so far (moved into the `DONE` report).
    reconnects: [Vec<rdpipe_transport::reconnect::Reconnect>; 2],
    /// `BYTES in` / `BYTES out`: running counts.
    bytes: [Option<u64>; 2],
    /// `SIZE`: the `< FILE` size.
    size: Option<u64>,
    /// A `--from` source's segment that is not started: its host could not
    /// be readied ([`sources`]).
    not_started: bool,
    /// `USAGE`: the CPU the agent and its command used.
    usage: Option<rdpipe_control::Usage>,
    /// `COPIED`: an rdcp side's counts.
    copied: Option<rdpipe_control::CopyCounts>,
    /// `LINES`: a line merge's lane's whole lines delivered.
    lines: Option<u64>,
    /// `SPOOL`: with `--spool`, the incoming stream's peak backlog (bytes)
    /// and the seconds its receiver was held back.
    spool: Option<(u64, f64)>,
    /// The ends (segments, rdpipe's stdin or stdout) whose transfer with this
    /// segment failed on its own account (not an echo): what
    /// [`Runner::judge_silent`] weighs against this segment's silence.
    lost_by: Vec<Node>,
}

/// Runs rdpipe with parsed arguments (`-n` prints the plan on stdout).
pub fn run(a: Config, exe: LocalExe) -> Result<(), RunError> {
    run_reported(a, exe).0
}

/// [`run`], also returning the run's report (`--json FILE`); none for `-n`.
/// rdpipe's standard input feeds the first segment unless it is a terminal.
pub fn run_reported(a: Config, exe: LocalExe) -> (Result<(), RunError>, Option<PipeReport>) {
    let stdin_is_input = !std::io::stdin().is_terminal();
    run_with_input(a, exe, stdin_is_input)
}

/// [`run_reported`], saying whether rdpipe's stdin feeds the first segment
/// (`rdpipe doctor`'s test transfers read none).
pub fn run_with_input(
    a: Config,
    exe: LocalExe,
    stdin_is_input: bool,
) -> (Result<(), RunError>, Option<PipeReport>) {
    let start = Instant::now();
    let dry_run = a.dry_run;
    let r = run_inner(a, exe, stdin_is_input);
    let report = match &r {
        _ if dry_run => None,
        Ok(Some(rep)) => Some(rep.clone()),
        Ok(None) => None,
        Err(e) => Some(PipeReport::empty(
            e.exit_code(),
            e.messages(),
            start.elapsed().as_secs_f64(),
        )),
    };
    let result = match r {
        Ok(Some(rep)) if rep.verdict.exit_status != 0 => Err(RunError::Failed(Verdict {
            lines: rep.verdict.errors,
            status: rep.verdict.exit_status,
        })),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    };
    (result, report)
}

fn run_inner(
    a: Config,
    exe: LocalExe,
    stdin_is_input: bool,
) -> Result<Option<PipeReport>, RunError> {
    let launchers = Launchers::for_run(&a, &exe);
    if a.dry_run {
        let p = build_plan(&a, &**launchers.remote(), stdin_is_input)?;
        print!("{}", p.describe(&|h| launchers.of(h).describe_host(h)));
        print!("{}", launchers.remote().describe_hosts(&p.remote_hosts()));
        print!(
            "{}",
            discover::describe(
                &p,
                &a.data_host,
                a.transport,
                launchers.remote().address_origin()
            )
        );
        println!(
            "protection: {} on every transfer ({})",
            a.integrity.as_str(),
            match a.integrity {
                Integrity::Encrypt => "AES-256-GCM on every chunk",
                Integrity::Mac => "keyed BLAKE3 MAC over the stream; readable on the wire",
                Integrity::Checksum => "xxh3 only: no defence against an attacker on the path",
            }
        );
        if let Some(r) = a.rate_limit {
            println!("rate limit: {r} on every transfer (each hop's sender paces)");
        }
        if a.compress.is_on() {
            println!(
                "compression: {} on every transfer (each hop's sender compresses, its receiver decompresses)",
                a.compress
            );
        }
        if let Some(s) = &a.spool {
            println!(
                "spool: up to {} MiB of each source's stream held at the sink's host ({})",
                s.size >> 20,
                match &s.dir {
                    Some(d) => format!("in a file in {d}"),
                    None => "in memory".into(),
                }
            );
        }
        if p.sinks().len() > 2 {
            println!("{}", relink::describe(a.replay_window));
        }
        return Ok(None);
    }
    // The data addresses are asked while the hosts' connections start
    // ([`Runner::plan_addresses`]).
    let (p, wanted) = build::plan_names(&a, stdin_is_input)?;
    debug!(
        "{} segment(s), {} transfer(s), {} remote host(s)",
        p.segments.len(),
        p.hops.len(),
        p.remote_hosts().len()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let mut runner = Runner::new(a, p, exe, launchers);
    runner.addresses = Some((stdin_is_input, wanted));
    let (v, mut report) = rt.block_on(runner.run())?;
    report.verdict = VerdictReport {
        exit_status: v.status,
        errors: v.lines,
    };
    Ok(Some(report))
}

/// A run in progress: what it was asked, how it reaches its hosts, and what
/// it has heard so far.
struct Runner {
    /// The run's settings.
    config: Config,
    /// What runs where.
    plan: Pipeline,
    /// This executable (the local agent, the ssh masters' guard).
    exe: LocalExe,
    /// How each segment's agent is started.
    launchers: Launchers,
    /// Segment index → the agent binary its host ran (a re-attach's helper
    /// is the same binary).
    agent_bins: std::collections::HashMap<usize, String>,
    /// Self-install, when this run may install its agent.
    install: Option<install::Install>,
    /// Until the plan has its data addresses: whether stdin is the input,
    /// and the hosts whose launcher is to say theirs.
    addresses: Option<(bool, Vec<rdpipe_plan::RemoteHost>)>,
    /// The run's secrets.
    keys: Keys,
    /// The event loop's queue: agents' lines and exits, rdpipe's own ends.
    events: Events,
    /// Each segment's agent, as rdpipe talks to it.
    agents: Vec<AgentChannel>,
    /// What each segment's agent has said.
    segs: Vec<SegState>,
    /// What went wrong, for the verdict.
    findings: Findings,
    /// rdpipe's own stdin sender and stdout receiver.
    ends: Ends,
    /// The first stop signal.
    signal: Option<i32>,
    /// The control channels are being closed: agents ending now are collateral.
    closing: bool,
    /// The progress line, while it is drawn.
    progress: Option<Ticker>,
    /// Fabric address discovery's state.
    disc: discover::Discovery,
    /// `rdpipe forward`'s listening address and connections.
    fwd: forward::ForwardState,
    /// The re-attaches so far (`--json`).
    reattaches: Vec<rdpipe_report::ReattachReport>,
}

/// A run's secrets, all random.
struct Keys {
    /// One key per hop (same order as the plan's hops).
    hops: Vec<Vec<u8>>,
    /// A fan-out's chain secret (keys the chain hops' stream MAC).
    chain: Vec<u8>,
}

/// The event loop's queue.
struct Events {
    tx: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
}

/// How rdpipe talks to one segment's agent.
#[derive(Default)]
struct AgentChannel {
    /// Its control channel (its stdin), until teardown closes it.
    stdin: Option<Writer>,
    /// On a channel that needs it (an srun step's), the sealer every line
    /// to the agent goes through.
    sealer: Option<rdpipe_control::seal::Sealer>,
    /// A local process's pid (the agent's, or its `srun`'s).
    pid: Option<u32>,
    /// Re-attaching ([`reattach`]): the agent's socket (`DETACHABLE`), the
    /// secret, the lines on each side, a re-attach in progress.
    attach: reattach::AttachState,
}

/// What went wrong, for the verdict.
#[derive(Default)]
struct Findings {
    /// Failures that stop the pipeline.
    failures: Vec<Finding>,
    /// `--to` sinks' own failures (command, file): judged at the end against
    /// `--min-ok` ([`sinks`]), they do not stop the pipeline.
    sink_failures: Vec<Finding>,
    /// Failures along a `--from` source's own segments (the source, its
    /// lane or `--each` instances): judged per source at the end against
    /// `--min-ok` ([`sources`]); they stop only that source's segments.
    source_failures: Vec<Finding>,
}

/// rdpipe's own two ends: the sender of its stdin, the receiver into its
/// stdout.
struct Ends {
    source_done: bool,
    sink_done: bool,
    source_report: Option<HopReport>,
    sink_report: Option<HopReport>,
    /// Running counts (stdin sent, stdout received).
    source_bytes: Arc<AtomicU64>,
    sink_bytes: Arc<AtomicU64>,
    /// rdpipe's stdin's size, when it is a regular file.
    stdin_size: Option<u64>,
}

impl Runner {
    fn new(config: Config, plan: Pipeline, exe: LocalExe, launchers: Launchers) -> Runner {
        let random = || {
            let mut k = vec![0u8; 32];
            getrandom::getrandom(&mut k).expect("the OS random source works");
            k
        };
        let keys = Keys {
            hops: (0..plan.hops.len()).map(|_| random()).collect(),
            chain: random(),
        };
        for (k, key) in keys.hops.iter().enumerate() {
            rdpipe_control::keylog::record(&format!("hop {}", k + 1), key);
        }
        rdpipe_control::keylog::record("chain", &keys.chain);
        let (tx, rx) = mpsc::unbounded_channel();
        let n = plan.segments.len();
        let ends = Ends {
            source_done: plan.hop_from(Node::Stdin).is_none(),
            sink_done: plan.hop_into(Node::Stdout).is_none(),
            source_report: None,
            sink_report: None,
            source_bytes: Arc::new(AtomicU64::new(0)),
            sink_bytes: Arc::new(AtomicU64::new(0)),
            stdin_size: None,
        };
        let disc = discover::Discovery::new(
            &plan,
            &config.data_host,
            config.transport,
            launchers.remote().address_origin(),
        );
        Runner {
            config,
            plan,
            exe,
            launchers,
            agent_bins: Default::default(),
            install: None,
            addresses: None,
            keys,
            events: Events { tx, rx },
            agents: (0..n).map(|_| AgentChannel::default()).collect(),
            segs: (0..n).map(|_| SegState::default()).collect(),
            findings: Findings::default(),
            ends,
            signal: None,
            closing: false,
            progress: None,
            disc,
            fwd: Default::default(),
            reattaches: Vec::new(),
        }
    }

    fn fail(&mut self, node: Option<Node>, cause: Cause) {
        self.findings.failures.push(Finding { cause, node });
    }

    /// The key of the hop into (`Direction::In`) or out of `node`.
    fn hop_key(&self, node: Node, dir: rdpipe_control::Direction) -> Option<Vec<u8>> {
        let i = self.plan.hops.iter().position(|h| match dir {
            rdpipe_control::Direction::In => h.to == node,
            rdpipe_control::Direction::Out => h.from == node,
        })?;
        Some(self.keys.hops[i].clone())
    }

    fn seg_desc(&self, i: usize) -> String {
        let s = &self.plan.segments[i];
        match s.action {
            rdpipe_plan::Action::Relay => format!("{} [{}] (relay only)", s.host.label(), i + 1),
            _ => format!("{} [{}] '{}'", s.host.label(), i + 1, s.action),
        }
    }

    /// Nothing was or will be started: every part counts as done.
    fn give_up(&mut self) {
        for s in &mut self.segs {
            s.exited = true;
        }
        self.ends.source_done = true;
        self.ends.sink_done = true;
    }

    async fn run(mut self) -> Result<(Verdict, PipeReport), RunError> {
        let start = Instant::now();
        let mut signals = teardown::Signals::new();
        let binary = self.read_agent_binary();
        let addresses = self.ask_addresses();
        // Preparing the hosts may take up to the connect timeout: a signal
        // cancels it (dropping a half-started master closes its guard's
        // stdin, which ends it).
        let prepared = tokio::select! {
            ok = self.prepare_hosts() => Ok(ok),
            sig = signals.next() => Err(sig),
        };
        let prepared = match prepared {
            Ok(true) => tokio::select! {
                ok = self.plan_addresses(addresses) => Ok(ok),
                sig = signals.next() => Err(sig),
            },
            other => other,
        };
        // The agent binary on each host: found, or installed (bounded; a
        // signal cancels it too).
        let ready = match prepared {
            Ok(true) => {
                let r = tokio::select! {
                    ok = self.ready_install(binary) => Ok(ok),
                    sig = signals.next() => Err(sig),
                };
                if let Err(sig) = r {
                    self.interrupted(sig);
                }
                r == Ok(true)
            }
            Ok(false) => false,
            Err(sig) => {
                self.interrupted(sig);
                false
            }
        };
        if ready {
            self.start_progress();
            self.spawn_agents().await;
            if let Some(t) = &self.progress {
                t.start_clock();
            }
        } else {
            self.give_up();
        }
        self.event_loop(&mut signals).await;
        // The data phase is over: the final progress line, before any report.
        self.update_progress();
        if let Some(t) = self.progress.take() {
            t.finish();
        }
        self.teardown().await;
        self.judge_silent();
        let wall = start.elapsed();
        let report = self.record(wall);
        Ok((self.verdict(wall), report))
    }

    async fn event_loop(&mut self, signals: &mut teardown::Signals) {
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
            if !self.findings.failures.is_empty() && first_failure.is_none() {
                first_failure = Some(Instant::now());
            }
            if let Some(f) = first_failure {
                let grace_over = match self.signal {
                    Some(_) => true,
                    None => {
                        f.elapsed() >= ROOT_CAUSE_GRACE
                            && (f.elapsed() >= ROOT_CAUSE_WAIT || !self.root_cause_pending())
                    }
                };
                if closed_at.is_none() && grace_over {
                    self.close_channels();
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
            let limit = Duration::from_secs(self.config.connect_timeout.max(30));
            if !hello_timeout_reported && started.elapsed() > limit {
                hello_timeout_reported = true;
                for i in 0..self.segs.len() {
                    // (A lane's agent is its merge segment's: reported once.)
                    if !self.segs[i].hello
                        && !self.segs[i].exited
                        && self.plan.merge_of_lane(i).is_none()
                    {
                        let seg = self.seg_desc(i);
                        let secs = limit.as_secs();
                        let cause = Cause::Silent { seg, secs };
                        if self.plan.source_of(i).is_some() {
                            // That source alone: its agent is told to go.
                            self.dismiss(i);
                            self.source_lost(i, cause).await;
                        } else {
                            self.fail(Some(Node::Segment(i)), cause);
                        }
                    }
                }
            }
            if last_ping.elapsed() >= PING_EVERY {
                last_ping = Instant::now();
                for i in 0..self.agents.len() {
                    self.send(i, &ToAgent::Ping).await;
                }
                self.find_stalled();
            }
            let tick = tokio::time::sleep(Duration::from_millis(100));
            tokio::select! {
                m = self.events.rx.recv() => match m {
                    Some(m) => self.handle(m).await,
                    None => break,
                },
                sig = signals.next() => {
                    if !self.forward_stop().await {
                        self.interrupted(sig);
                    }
                }
                _ = tick => {}
            }
            self.update_progress();
        }
    }

    /// Whether a root cause is probably still on its way: a segment upstream of
    /// an aborted stream has not ended yet, or a segment that reported a failure
    /// has a command that has not reported its exit yet.
    fn root_cause_pending(&self) -> bool {
        let speaking = |k: usize| self.segs[k].ended.is_none() && !self.segs[k].exited;
        let upstream_of_abort = self.findings.failures.iter().any(|f| {
            matches!(f.cause, Cause::Transfer { echo: true, .. })
                && f.node
                    .and_then(|n| self.plan.hop_into(n))
                    .is_some_and(|h| matches!(h.from, Node::Segment(k) if speaking(k)))
        });
        let exit_due = (0..self.segs.len()).any(|k| {
            self.segs[k].failed
                && self.segs[k].exit.is_none()
                && self.plan.segments[k].action.is_command()
                && speaking(k)
        });
        upstream_of_abort || exit_due
    }

    fn interrupted(&mut self, sig: i32) {
        if self.signal.is_none() {
            self.signal = Some(sig);
            self.fail(None, Cause::Interrupted(sig));
        }
    }

    fn agents_done(&self) -> bool {
        self.segs.iter().all(|s| s.exited)
    }

    fn all_done(&self) -> bool {
        self.agents_done() && self.ends.source_done && self.ends.sink_done
    }

    async fn send(&mut self, i: usize, m: &ToAgent) {
        // A lane's orders go to its merge segment's agent, marked for it.
        let lane;
        let (i, m) = match self.plan.merge_of_lane(i) {
            Some(_) if *m == ToAgent::Ping => return,
            Some(merge) => {
                let k = self.plan.lanes_of(merge).iter().position(|&l| l == i);
                lane = ToAgent::Lane {
                    lane: k.map_or(0, |k| k + 1),
                    msg: Box::new(m.clone()),
                };
                (merge, &lane)
            }
            None => (i, m),
        };
        // (While a re-attach is under way the line is recorded, and sent
        // once the new channel is up.)
        if self.agents[i].stdin.is_none() && self.agents[i].attach.pending.is_none() {
            return;
        }
        if !matches!(m, ToAgent::RelinkIn { .. } | ToAgent::RelinkOut { .. }) {
            // (Not the re-link orders: they carry a key.)
            trace!("[{}] sent: {m}", i + 1);
        }
        self.send_line(i, &m.to_string()).await;
    }

    /// Agent `i`'s channel ended for good: its end (and its lanes') judged.
    async fn channel_ended(&mut self, i: usize, code: Option<i32>, text: String) {
        // A merge segment's lanes end with its agent.
        for l in self.plan.lanes_of(i) {
            self.agent_exited(l, code, text.clone()).await;
        }
        self.agent_exited(i, code, text).await
    }

    /// Writes `line` to agent `i`'s control channel, sealed on an srun one.
    async fn send_line(&mut self, i: usize, line: &str) {
        self.agents[i].attach.sent(line);
        self.write_line(i, line).await;
    }

    /// [`Runner::send_line`] without recording it (a line sent again after
    /// a re-attach).
    async fn write_line(&mut self, i: usize, line: &str) {
        let agent = &mut self.agents[i];
        let Some(w) = agent.stdin.as_mut() else {
            return;
        };
        let line = match agent.sealer.as_mut().map(|s| s.seal(line)) {
            None => line.to_string(),
            Some(Ok(sealed)) => sealed,
            Some(Err(e)) => {
                // Never in clear text: the agent hears no more.
                tracing::warn!("[{}] control channel: {e}; closing it", i + 1);
                agent.stdin = None;
                return;
            }
        };
        let _ = w.write_all(format!("{line}\n").as_bytes()).await;
        let _ = w.flush().await;
    }

    async fn handle(&mut self, m: Event) {
        match m {
            Event::Line(i, g, l) => {
                if self.agents[i].attach.current(g) {
                    self.agents[i].attach.received += 1;
                    self.handle_line(i, &l).await
                }
            }
            Event::Pong(i, g) => {
                self.agents[i].attach.current(g);
            }
            Event::Exited(i, g, code, text) => {
                if !self.agents[i].attach.current(g) {
                    debug!("[{}] a replaced channel ended ({text})", i + 1);
                } else if self.should_reattach(i) {
                    self.start_reattach(i, code, text, None);
                } else {
                    self.channel_ended(i, code, text).await
                }
            }
            Event::Reattached(i, r) => self.reattached(i, r).await,
            Event::Source(r) => self.source_ended(r),
            Event::Sink(r) => self.sink_ended(r),
            Event::Reached(k, r) => self.probed(k, r).await,
        }
    }

    /// Whether segment `i` runs on this machine.
    fn is_local(&self, i: usize) -> bool {
        matches!(self.plan.segments[i].host, Host::Local)
    }
}
