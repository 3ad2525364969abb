//! The segment's state machine: which of its parts (incoming transfer, outgoing
//! transfer, command, set-up failures) are still pending, the first failure that
//! stops it, and the report of every outcome to rdpipe (`DONE`, `EXIT`, `FAIL`,
//! `USAGE`, `END`).
//!
//! On the first failure the segment poisons its outgoing stream (the command's
//! output ending now is reported downstream as an abort, never as a clean end),
//! sends SIGTERM to the command's process group, and ends within [`FAIL_GRACE`]
//! (SIGKILL to the group first). A command that exits non-zero also poisons the
//! outgoing stream. The command's stdin is closed only once the incoming stream
//! was verified whole; after a failure the command is stopped first and its stdin
//! closed after.
//!
//! A command that stops reading its input early (`head -c 1000`) makes the
//! incoming transfer fail (the upstream is told "output closed", like SIGPIPE in a
//! shell pipeline) but is not stopped: its own exit status is still reported.
//!
//! A `--to` sink ([`Segment::sink`], see [`super::relay`]) differs: its
//! command's failure, or its stopping to read, is reported (`EXIT`, `FAIL cmd`)
//! but stops neither the incoming stream nor the relay to the next sink; and
//! its relay breaking (the next sink died) is reported (`FAIL out`) but does
//! not stop its own copy.

use super::command::{describe_exit, CmdEnd, HeldInput, Shared};
use super::say::Say;
use rdpipe_control::{CmdExit, Direction, FailKind, FromAgent, HopReport, Part};
use rdpipe_transport::{Report, TransportError};
use rustix::process::{kill_process_group, Pid, Signal};
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an agent lets its threads wind down after a failure before it kills
/// the command's process group with SIGKILL and exits.
pub const FAIL_GRACE: Duration = Duration::from_secs(2);

/// Why the agent was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Its stdin reached end of file: rdpipe or the SSH connection is gone.
    ControlClosed,
    /// Nothing from rdpipe for so many seconds
    /// ([`rdpipe_control::control_silence`]).
    ControlSilent(u64),
    /// The control channel was lost and no re-attach came within so many
    /// seconds (`--reattach`).
    NotReattached(u64),
    /// SIGTERM, SIGINT or SIGHUP.
    Signal(i32),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::ControlClosed => f.write_str("control channel closed (rdpipe or ssh gone)"),
            StopReason::ControlSilent(secs) => write!(
                f,
                "control channel silent for {secs} s (rdpipe or its host gone)"
            ),
            StopReason::NotReattached(secs) => write!(
                f,
                "control channel lost and not re-attached within {secs} s (rdpipe or its host gone)"
            ),
            StopReason::Signal(s) => write!(f, "killed by signal {s}"),
        }
    }
}

/// Something that happened to the segment.
pub enum Ev {
    /// A transfer ended.
    Done(Direction, Result<Report, TransportError>),
    /// The command exited.
    Exit(ExitStatus),
    /// Stopped from outside.
    Stop(StopReason),
    /// Preparing a part failed.
    Setup(Part, String),
    /// A `--to` sink's local part (its `> FILE`) failed; the stream goes on.
    Local(Part, String),
    /// A `--to` sink's command stopped reading after this many bytes of the
    /// stream; the stream goes on.
    Cut(u64),
    /// A line merge's lane K (1-based) ended ([`super::gather`]).
    Lane(usize, Result<Report, TransportError>),
    /// rdpipe gave lane K up: its source is gone (`LANE K UNLINK`).
    LaneDrop(usize),
    /// A line merge's input failed or ended ([`super::merge`]).
    Merge(super::merge::MergeEvent),
}

/// A line merge's state: its input and each lane's ([`super::gather`]).
struct Merge {
    merged: Arc<super::merge::Merged>,
    lanes: Vec<Arc<super::merge::Delivered>>,
    /// Lanes still running.
    pending: Vec<bool>,
    /// Lanes whose stream arrived whole, and how many must.
    whole: usize,
    needed: usize,
    /// The merged input has ended (or was abandoned).
    ended: bool,
}

/// The segment's state while it runs.
pub struct Segment {
    say: Say,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Ev>,
    /// The command's process group, once started.
    pgid: Option<Pid>,
    /// A command runs (its closed input is its own choice, see the module doc).
    has_cmd: bool,
    /// The `> FILE` target, for messages about the incoming transfer.
    pub file_target: Option<String>,
    /// A `--to` sink: a failure of the command or file is reported but stops
    /// neither the incoming stream nor the relay to the next sink.
    pub sink: bool,
    /// A sink's command stopped reading after this many bytes.
    cut: Option<u64>,
    /// A sink's command's failure was reported.
    local_reported: bool,
    /// The command's stdin, closed after a failure once the command was stopped.
    pub held_input: Option<HeldInput>,
    pending: [bool; 2],
    pending_exit: bool,
    pending_setup: usize,
    ok: bool,
    deadline: Option<Instant>,
    /// Whether the command had already ended when the first failure stopped the
    /// segment. Its exit is then its own doing (a SIGKILL from outside, a crash),
    /// never collateral, even when the sender's report of it reached this loop
    /// before the exit event did.
    exited_first: bool,
    /// The CPU used before the segment started (the agent's start-up helpers,
    /// such as `ip`, count as the agent's, not as the command's).
    usage_base: Option<rdpipe_control::Usage>,
    /// An rdcp side's counts, filled by the packer or unpacker when it is
    /// done, reported before `USAGE`.
    pub copied: Arc<std::sync::Mutex<Option<rdpipe_control::CopyCounts>>>,
    /// A line merge's lanes, when this segment is one.
    merge: Option<Merge>,
}

impl Segment {
    /// A segment with the transfers in `pending` (in, out) still to come.
    pub fn new(say: Say, shared: Arc<Shared>, tx: mpsc::Sender<Ev>, pending: [bool; 2]) -> Self {
        Segment {
            say,
            shared,
            tx,
            pgid: None,
            has_cmd: false,
            file_target: None,
            sink: false,
            cut: None,
            local_reported: false,
            held_input: None,
            pending,
            pending_exit: false,
            pending_setup: 0,
            ok: true,
            deadline: None,
            exited_first: false,
            usage_base: super::usage::measure(),
            copied: Arc::default(),
            merge: None,
        }
    }

    /// This segment's input is a line merge of these lanes (lane K at
    /// index K - 1), all running; at least `needed` of them must arrive
    /// whole for the merged input to end cleanly.
    pub fn set_merge(
        &mut self,
        merged: Arc<super::merge::Merged>,
        lanes: Vec<Arc<super::merge::Delivered>>,
        needed: usize,
    ) {
        let pending = vec![true; lanes.len()];
        self.merge = Some(Merge {
            merged,
            lanes,
            pending,
            whole: 0,
            needed,
            ended: false,
        });
        // With no lane at all, the input ends at once.
        self.lane_ended();
    }

    /// A lane ended: when none is left, the merged input ends, cleanly when
    /// enough lanes arrived whole (the ones that failed said so
    /// themselves), else as a failed input (see [`super::gather`]).
    fn lane_ended(&mut self) {
        let Some(m) = &mut self.merge else { return };
        if m.pending.iter().any(|p| *p) || m.ended {
            return;
        }
        if m.whole >= m.needed {
            // Ended off this loop (a stalled sink must not stall it); the
            // end comes back as Ev::MergeEnded.
            m.merged.finish();
            return;
        }
        m.ended = true;
        m.merged.abandon();
        let msg = format!(
            "only {} of {} sources' streams arrived whole, {} needed (--min-ok): \
             the merged input is not ended as good",
            m.whole,
            m.lanes.len(),
            m.needed
        );
        self.say
            .send(&FromAgent::fail(Part::In, FailKind::Echo, 4, msg));
        self.fail();
        if let Some(h) = &self.held_input {
            h.release();
        }
    }

    /// The merged input ended (`Err`: its flush failed).
    fn merge_ended(&mut self, r: Result<(), String>) {
        if let Some(m) = &mut self.merge {
            m.ended = true;
        }
        if let Err(e) = r {
            let (part, msg) = match &self.file_target {
                Some(p) => (Part::File, format!("{p}: {e}")),
                None => (Part::In, format!("ending the merged input: {e}")),
            };
            self.say
                .send(&FromAgent::fail(part, FailKind::Error, 1, msg));
            self.fail();
        }
    }

    /// Lane `lane`'s end (`r`), reported as `LANE K ...` lines; `None`: it
    /// was given up (its source is gone).
    fn lane_done(&mut self, lane: usize, r: Option<Result<Report, TransportError>>) {
        use super::say::lane_line;
        let Some(m) = self.merge.as_mut() else { return };
        match m.pending.get_mut(lane.wrapping_sub(1)) {
            Some(p) if *p => *p = false,
            _ => return,
        }
        let d = m.lanes[lane - 1].clone();
        let broken = m.merged.is_broken();
        if matches!(r, Some(Ok(_))) {
            m.whole += 1;
        }
        if r.is_none() {
            // Given up: it writes no more, and a long line it was in the
            // middle of ends here, passing the turn on.
            d.given_up.store(true, std::sync::atomic::Ordering::SeqCst);
            m.merged.end_long(lane, true);
        }
        let delivered = || {
            format!(
                "{} whole line(s), {} bytes, of it were delivered",
                d.lines.load(std::sync::atomic::Ordering::Relaxed),
                d.bytes.load(std::sync::atomic::Ordering::Relaxed)
            )
        };
        let say = |m: FromAgent| self.say.send(&lane_line(Some(lane), m));
        let ok = match r {
            Some(Ok(r)) => {
                say(FromAgent::Done {
                    dir: Direction::In,
                    report: HopReport::of(&r),
                });
                true
            }
            Some(Err(e)) => {
                // The merged input failing shows as every lane's output error:
                // an echo of that.
                let kind = if broken {
                    FailKind::Echo
                } else {
                    FailKind::Error
                };
                let msg = format!("{e}; {}", delivered());
                say(FromAgent::fail(Part::In, kind, e.exit_code(), msg));
                false
            }
            None => {
                let msg = format!("its source is gone; {}", delivered());
                say(FromAgent::fail(Part::In, FailKind::Echo, 5, msg));
                false
            }
        };
        say(FromAgent::Lines(
            d.lines.load(std::sync::atomic::Ordering::Relaxed),
        ));
        say(FromAgent::End { ok });
        self.lane_ended();
    }

    /// Whether the transfer in `dir` is still expected.
    pub fn pending(&self, dir: Direction) -> bool {
        self.pending[dir.index()]
    }

    /// That transfer will not happen after all (its set-up failed).
    pub fn drop_transfer(&mut self, dir: Direction) {
        self.pending[dir.index()] = false;
    }

    /// Preparing `part` failed: reported through the loop like any event.
    pub fn setup_failed(&mut self, part: Part, msg: String) {
        self.pending_setup += 1;
        let _ = self.tx.send(Ev::Setup(part, msg));
    }

    /// The command started as `child`: its exit becomes an event.
    pub fn command_started(&mut self, mut child: std::process::Child) {
        self.has_cmd = true;
        self.pending_exit = true;
        self.pgid = Some(Pid::from_child(&child));
        let tx = self.tx.clone();
        let shared = self.shared.clone();
        std::thread::spawn(move || {
            if let Ok(st) = child.wait() {
                shared.set_exit(st);
                let _ = tx.send(Ev::Exit(st));
            }
        });
    }

    fn kill(&self, sig: Signal) {
        if let Some(p) = self.pgid {
            let _ = kill_process_group(p, sig);
        }
    }

    /// The first failure stops the segment: poison the output, SIGTERM the
    /// command, and end within [`FAIL_GRACE`].
    fn fail(&mut self) {
        self.ok = false;
        if self.deadline.is_none() {
            self.exited_first = self.shared.exited();
            self.shared.poison(true);
            tracing::debug!("stopping the segment: SIGTERM to the command's process group");
            self.kill(Signal::Term);
            self.deadline = Some(Instant::now() + FAIL_GRACE);
        }
    }

    fn busy(&self) -> bool {
        self.pending.iter().any(|p| *p)
            || self.pending_exit
            || self.pending_setup > 0
            || self.merge.as_ref().is_some_and(|m| !m.ended)
    }

    /// Runs until every part has ended (or the grace after a failure is over),
    /// reports `END`, and returns whether the segment succeeded. After a
    /// failure the caller exits without dropping the segment (threads may be
    /// blocked in network I/O), once its stderr is relayed.
    pub fn run(&mut self, rx: mpsc::Receiver<Ev>) -> bool {
        drop(std::mem::replace(&mut self.tx, mpsc::channel().0));
        while self.busy() {
            let ev = match self.deadline {
                None => rx.recv().ok(),
                Some(d) => rx
                    .recv_timeout(d.saturating_duration_since(Instant::now()))
                    .ok(),
            };
            let Some(ev) = ev else { break };
            self.handle(ev);
        }
        if self.ok && self.sink && !self.local_reported {
            if let Some(n) = self.cut {
                self.say.send(&FromAgent::fail(
                    Part::Cmd,
                    FailKind::Error,
                    1,
                    format!("the command stopped reading its input after {n} bytes"),
                ));
            }
        }
        if !self.ok {
            self.kill(Signal::Kill);
        }
        let copied = *self.copied.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = copied {
            self.say.send(&FromAgent::Copied(c));
        }
        if let Some(u) = super::usage::measure() {
            let u = super::usage::command_since(u, self.usage_base);
            self.say.send(&FromAgent::Usage(u));
        }
        self.say.send(&FromAgent::End { ok: self.ok });
        self.ok
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Done(dir, Ok(r)) => {
                tracing::debug!(
                    "{}: {} bytes over {} in {:.3} s",
                    dir.as_str(),
                    r.bytes,
                    r.transport,
                    r.elapsed.as_secs_f64()
                );
                self.pending[dir.index()] = false;
                self.say.send(&FromAgent::Done {
                    dir,
                    report: HopReport::of(&r),
                });
            }
            Ev::Done(Direction::In, Err(e)) => self.input_failed(e),
            Ev::Done(Direction::Out, Err(e)) => {
                tracing::debug!("out: {e}");
                self.pending[Direction::Out.index()] = false;
                let echo = matches!(&e, TransportError::Input(io) if CmdEnd::is_poisoned(io));
                let kind = if echo {
                    FailKind::Echo
                } else {
                    FailKind::Error
                };
                self.say
                    .send(&FromAgent::fail(Part::Out, kind, e.exit_code(), &e));
                if self.sink {
                    // The next sink (or its host) is gone: our own copy goes on
                    // (the tee drops the relay); the sinks after it fail alone.
                    tracing::debug!("the relay to the next sink broke; the local part goes on");
                } else {
                    self.fail();
                }
            }
            Ev::Exit(st) => self.exited(st),
            Ev::Setup(part, msg) => {
                tracing::debug!("{}: {msg}", part.as_str());
                self.pending_setup -= 1;
                self.say
                    .send(&FromAgent::fail(part, FailKind::Error, 1, msg));
                self.fail();
            }
            Ev::Local(part, msg) => {
                tracing::debug!("{}: {msg} (the stream goes on)", part.as_str());
                self.local_reported = true;
                self.say
                    .send(&FromAgent::fail(part, FailKind::Error, 1, msg));
            }
            Ev::Cut(n) => {
                tracing::debug!("the command stopped reading after {n} bytes");
                self.cut = Some(n);
            }
            Ev::Lane(lane, r) => {
                tracing::debug!(
                    "lane {lane}: {}",
                    match &r {
                        Ok(r) => format!("{} bytes, verified", r.bytes),
                        Err(e) => e.to_string(),
                    }
                );
                self.lane_done(lane, Some(r));
            }
            Ev::LaneDrop(lane) => {
                tracing::debug!("lane {lane}: given up (its source is gone)");
                self.lane_done(lane, None);
            }
            Ev::Merge(super::merge::MergeEvent::Broken(kind, msg)) => self.merge_broken(kind, msg),
            Ev::Merge(super::merge::MergeEvent::Ended(r)) => self.merge_ended(r),
            Ev::Stop(why) => {
                tracing::debug!("{why}");
                self.say
                    .send(&FromAgent::fail(Part::Agent, FailKind::Stopped, 1, why));
                self.fail();
                // Nobody waits for our report: a short grace for the command.
                self.deadline = Some(Instant::now() + Duration::from_millis(500));
            }
        }
    }

    /// Writing the merged lines failed: as a failed input (a command that
    /// stopped reading is not stopped; its exit status still counts).
    fn merge_broken(&mut self, kind: std::io::ErrorKind, msg: String) {
        tracing::debug!("merged input: {msg}");
        let stopped_reading =
            self.has_cmd && self.deadline.is_none() && kind == std::io::ErrorKind::BrokenPipe;
        let (part, msg) = match &self.file_target {
            Some(p) => (Part::File, format!("{p}: {msg}")),
            None if stopped_reading => (Part::In, "the command stopped reading its input".into()),
            None => (Part::In, format!("writing the merged lines: {msg}")),
        };
        let fk = if stopped_reading {
            FailKind::StoppedReading
        } else {
            FailKind::Error
        };
        self.say.send(&FromAgent::fail(part, fk, 5, msg));
        if stopped_reading {
            self.ok = false;
            self.shared.poison(false);
        } else {
            self.fail();
        }
    }

    fn input_failed(&mut self, e: TransportError) {
        tracing::debug!("in: {e}");
        self.pending[Direction::In.index()] = false;
        let msg = match (&self.file_target, &e) {
            (Some(p), TransportError::Output(io)) => format!("{p}: {io}"),
            _ => e.to_string(),
        };
        let part = if self.file_target.is_some() {
            Part::File
        } else {
            Part::In
        };
        let stopped_reading = self.has_cmd
            && !self.sink
            && self.deadline.is_none()
            && matches!(&e, TransportError::Output(io) if io.kind() == std::io::ErrorKind::BrokenPipe);
        // The sender let go of the command's unfinished output first (it
        // failed): the command died of SIGPIPE and its input broke, and this
        // report can reach the loop before the sender's. An echo of the
        // sender's failure, not the command's choice. (Not judged by the exit
        // status: our SIGTERM can reach a shell around the command first.)
        let echo = stopped_reading && self.shared.output_cut();
        let kind = if echo {
            FailKind::Echo
        } else if stopped_reading {
            FailKind::StoppedReading
        } else {
            FailKind::Error
        };
        self.say
            .send(&FromAgent::fail(part, kind, e.exit_code(), msg));
        if stopped_reading {
            // The command stopped reading (like `head`): the upstream was told,
            // and our output must not end cleanly, but the command itself is not
            // stopped: its own exit status still counts.
            self.ok = false;
            self.shared.poison(false);
        } else {
            self.fail();
        }
        // Only now (the command was stopped) close its input.
        if let Some(h) = &self.held_input {
            h.release();
        }
    }

    fn exited(&mut self, st: ExitStatus) {
        tracing::debug!("the command {}", describe_exit(st));
        self.pending_exit = false;
        // Killed by us after another failure (or by SIGPIPE because our sender
        // stopped reading): not a failure of its own. Shells report those signals
        // as 128+N. A command that exited with another status after all is
        // reported as such.
        let collateral = match st.code() {
            None => true,
            Some(c) => c == 128 + 13 || c == 128 + 15 || c == 128 + 9,
        };
        // SIGPIPE after the sender closed the command's stdout: the sender's
        // failure (reported by its own `FAIL out`), whichever of the two reports
        // arrived first.
        let broken_output = (st.signal() == Some(13) || st.code() == Some(128 + 13))
            && self
                .shared
                .output_closed
                .load(std::sync::atomic::Ordering::SeqCst);
        if (self.deadline.is_some() && collateral && !self.exited_first) || broken_output {
            self.say.send(&FromAgent::Exit(CmdExit::Killed));
            return;
        }
        let exit = match (st.code(), st.signal()) {
            (Some(c), _) => CmdExit::Code(c),
            (None, Some(s)) => CmdExit::Signal(s),
            _ => CmdExit::Code(1),
        };
        self.say.send(&FromAgent::Exit(exit));
        if !st.success() {
            self.say.send(&FromAgent::fail(
                Part::Cmd,
                FailKind::Error,
                1,
                format!("the command {}", describe_exit(st)),
            ));
            if self.sink {
                // The stream goes on to the next sink; rdpipe judges this host.
                self.local_reported = true;
            } else {
                self.fail();
            }
        }
    }
}
