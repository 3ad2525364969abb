//! Per-source verdicts of a gather (`--from`): each source's stream is
//! judged on its own segments (the source, its lane or its `--each`
//! instances), printed one line per source at `-v` and whenever anything
//! failed, and counted against `--min-ok`.
//!
//! A failure along a source's own segments stops only those
//! ([`Runner::source_failed`] keeps it apart; a source's agent that dies has
//! its lane given up or its instances' channels closed,
//! [`Runner::stop_source`]); the other sources go on to the end, and the run
//! fails only when fewer sources than `--min-ok` (default: all) succeeded.

use super::verdict::{Cause, Finding, Members};
use super::Runner;
use rdpipe_control::{CmdExit, Direction, FailKind, HopReport, Part, ToAgent};
use rdpipe_plan::Node;
use rdpipe_report::SourceReport;

/// What rdpipe heard about one source.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFacts {
    /// `source 2 [3] pc2 'collect'`.
    pub name: String,
    /// Its stream as the source sent it.
    pub sent: Option<HopReport>,
    /// As its receiver (lane or first instance) verified it.
    pub received: Option<HopReport>,
    /// Every hop among its own segments carried the same stream at both
    /// ends.
    pub hops_agree: bool,
    /// Whether the source runs a command (else it reads a file).
    pub is_command: bool,
    /// Its command's exit.
    pub exit: Option<CmdExit>,
    /// The `--each` instances' commands that did not exit 0.
    pub instance_exits: Vec<(String, Option<CmdExit>)>,
    /// The closest-to-root failure among its segments.
    pub failure: Option<String>,
    /// Every one of its segments ended well.
    pub ended_ok: bool,
    /// With `--spool`: its peak backlog (bytes) and the seconds it was held
    /// back by a full spool.
    pub spool: Option<(u64, f64)>,
    /// A line merge: the whole lines of it delivered.
    pub lines: Option<u64>,
}

/// One source's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceVerdict {
    /// The source succeeded.
    pub ok: bool,
    /// Its stream arrived whole and verified.
    pub verified: bool,
    /// What went wrong, when something did.
    pub problem: Option<String>,
    /// The one-line summary (without the tool prefix).
    pub line: String,
}

/// How `what` ended, when it did not exit 0.
fn ended(what: &str, e: Option<CmdExit>) -> String {
    match e {
        None | Some(CmdExit::Killed) => format!("{what} did not finish"),
        Some(CmdExit::Code(c)) => format!("{what} exited with status {c}"),
        Some(e) => format!("{what} ended with {e}"),
    }
}

/// Judges one source.
pub fn judge(f: &SourceFacts) -> SourceVerdict {
    let verified = match (&f.sent, &f.received) {
        (Some(s), Some(r)) => s.same_stream(r) && f.hops_agree,
        _ => false,
    };
    let failed_instance = f
        .instance_exits
        .iter()
        .find(|(_, e)| *e != Some(CmdExit::Code(0)));
    let problem = if let Some(m) = &f.failure {
        Some(m.clone())
    } else if f.is_command && f.exit != Some(CmdExit::Code(0)) {
        Some(ended("the command", f.exit))
    } else if !verified {
        Some("the stream did not arrive whole".to_string())
    } else if let Some((name, e)) = failed_instance {
        Some(format!("{name}: {}", ended("the command", *e)))
    } else if !f.ended_ok {
        Some("its agents did not end well".to_string())
    } else {
        None
    };
    let stream = match (&f.received, &f.sent) {
        (Some(r), _) if verified => format!(
            "{} bytes over {} verified, xxh3 {:016x}",
            r.bytes,
            r.describe(),
            r.checksum
        ),
        (Some(r), _) => format!("{} bytes, xxh3 {:016x}, NOT verified", r.bytes, r.checksum),
        (None, Some(s)) => format!("{} bytes sent, none verified", s.bytes),
        (None, None) => "no verified stream".to_string(),
    };
    let lines = f.lines.map(|n| format!(", {n} lines")).unwrap_or_default();
    let cmd = match (f.is_command, f.exit) {
        (true, Some(e)) => format!(", command exit {e}"),
        (true, None) => ", command exit unknown".to_string(),
        (false, _) => String::new(),
    };
    let head = match &problem {
        None => "ok".to_string(),
        Some(p) => format!("FAILED ({p})"),
    };
    let spool = f
        .spool
        .map(|(peak, held)| {
            format!(
                ", spool peak {:.1} MiB, held back {held:.3} s",
                peak as f64 / (1 << 20) as f64
            )
        })
        .unwrap_or_default();
    SourceVerdict {
        ok: problem.is_none(),
        verified,
        line: format!("{}: {head}: {stream}{lines}{cmd}{spool}", f.name),
        problem,
    }
}

impl Runner {
    /// Whether a `FAIL` from segment `i` belongs to a `--from` source's own
    /// segments: kept apart (it stops only that source's segments, which
    /// end by themselves), judged at the end.
    pub(super) fn source_failed(
        &mut self,
        i: usize,
        part: Part,
        kind: FailKind,
        code: u8,
        msg: &str,
    ) -> bool {
        if self.plan.source_of(i).is_none() {
            return false;
        }
        self.segs[i].failed = true;
        let cause = self.failure_cause(i, part, kind, code, msg.to_string());
        self.findings.source_failures.push(Finding {
            cause,
            node: Some(Node::Segment(i)),
        });
        true
    }

    /// Segment `i` (one of a source's own) failed for good (`cause`: its
    /// agent did not start, died, or its host could not be reached): the
    /// source fails alone, and the rest of its segments stop.
    pub(super) async fn source_lost(&mut self, i: usize, cause: Cause) {
        self.segs[i].failed = true;
        self.findings.source_failures.push(Finding {
            cause,
            node: Some(Node::Segment(i)),
        });
        self.stop_source(i).await;
    }

    /// Whether every segment in `segs` carries only some `--from` source's
    /// own stream: a host holding only such segments that cannot be reached
    /// costs those sources, not the run.
    pub(super) fn only_sources(&self, segs: &[usize]) -> bool {
        !segs.is_empty() && segs.iter().all(|&s| self.plan.source_of(s).is_some())
    }

    /// The sources owning `segs` cannot start (their host could not be
    /// readied: `cause`): each fails alone, none of its segments is started,
    /// and its lane is given up once the merge's agent runs
    /// ([`Runner::give_up_lanes`]).
    pub(super) fn sources_not_started(&mut self, segs: &[usize], cause: Cause) {
        let mut done = Vec::new();
        for &s in segs {
            let Some(src) = self.plan.source_of(s).cloned() else {
                continue;
            };
            if done.contains(&src.index) {
                continue;
            }
            done.push(src.index);
            self.findings.source_failures.push(Finding {
                cause: cause.clone(),
                node: Some(Node::Segment(s)),
            });
            for j in std::iter::once(src.seg).chain(src.own.iter().copied()) {
                self.segs[j].not_started = true;
                self.segs[j].exited = true;
                self.segs[j].failed = true;
            }
        }
    }

    /// After the agents started: the lanes of sources that never started
    /// are given up, so that the merge does not wait for them.
    pub(super) async fn give_up_lanes(&mut self) {
        for i in 0..self.segs.len() {
            if self.segs[i].not_started && self.plan.merge_of_lane(i).is_some() {
                self.send(i, &ToAgent::Unlink).await;
            }
        }
    }

    /// Segment `i`'s agent (one of a source's own) died: the rest of that
    /// source's segments stop now instead of waiting out
    /// `--reconnect-timeout` for a peer that is gone (a lane is given up;
    /// an agent's control channel is closed, and it ends).
    pub(super) async fn stop_source(&mut self, i: usize) {
        let Some(src) = self.plan.source_of(i).cloned() else {
            return;
        };
        for j in std::iter::once(src.seg).chain(src.own.iter().copied()) {
            if j == i || self.segs[j].exited || self.segs[j].ended.is_some() {
                continue;
            }
            if self.plan.merge_of_lane(j).is_some() {
                self.send(j, &ToAgent::Unlink).await;
            } else {
                self.dismiss(j);
            }
        }
    }

    fn source_facts(&self, index: usize) -> SourceFacts {
        let g = self.plan.gather.as_ref().expect("a gather");
        let src = &g.sources[index];
        let segs: Vec<usize> = std::iter::once(src.seg)
            .chain(src.own.iter().copied())
            .collect();
        let mine = |n: Node| matches!(n, Node::Segment(k) if segs.contains(&k));
        let hops_agree = self
            .plan
            .hops
            .iter()
            .filter(|h| mine(h.from) && mine(h.to))
            .all(
                |h| match (self.sent_report(h.from), self.recv_report(h.to)) {
                    (Some(s), Some(r)) => s.same_stream(r),
                    _ => false,
                },
            );
        let failure = self
            .findings
            .source_failures
            .iter()
            .filter(|f| f.node.is_some_and(&mine))
            .min_by_key(|f| f.cause.rank())
            .map(|f| f.cause.to_string());
        let first = src.own.first().copied();
        let is_command = self.plan.segments[src.seg].action.is_command();
        SourceFacts {
            name: format!(
                "source {} {} '{}'",
                src.index,
                self.plan.node_name(Node::Segment(src.seg)),
                self.plan.segments[src.seg].action
            ),
            sent: self.segs[src.seg].reports[Direction::Out.index()].clone(),
            received: first.and_then(|k| self.segs[k].reports[Direction::In.index()].clone()),
            hops_agree,
            is_command,
            exit: self.segs[src.seg].exit,
            instance_exits: src
                .own
                .iter()
                .filter(|&&k| self.plan.segments[k].action.is_command())
                .map(|&k| (self.plan.node_name(Node::Segment(k)), self.segs[k].exit))
                .collect(),
            failure,
            ended_ok: segs.iter().all(|&k| self.segs[k].ended == Some(true)),
            spool: first.and_then(|k| self.segs[k].spool),
            lines: first.and_then(|k| self.segs[k].lines),
        }
    }

    /// Each source's verdict, in order (none without `--from`).
    pub(super) fn source_verdicts(&self) -> Vec<(usize, SourceVerdict)> {
        let n = self.plan.gather.as_ref().map_or(0, |g| g.sources.len());
        (0..n).map(|k| (k, judge(&self.source_facts(k)))).collect()
    }

    /// The `--json` records of the sources.
    pub(super) fn source_reports(&self) -> Vec<SourceReport> {
        let Some(g) = &self.plan.gather else {
            return vec![];
        };
        self.source_verdicts()
            .into_iter()
            .map(|(k, v)| {
                let src = &g.sources[k];
                let first = src.own.first().map(|&j| &self.segs[j]);
                let r = first.and_then(|s| s.reports[Direction::In.index()].as_ref());
                let spool = first.and_then(|s| s.spool);
                SourceReport {
                    index: src.index,
                    host: src.host.clone(),
                    command: self.plan.segments[src.seg].action.to_string(),
                    bytes: r.map(|r| r.bytes),
                    checksum: r.map(|r| format!("{:016x}", r.checksum)),
                    lines: first.and_then(|s| s.lines),
                    transport: r.map(HopReport::describe),
                    verified: v.verified,
                    exit_status: self.segs[src.seg].exit.and_then(CmdExit::status),
                    reconnects: r.map_or(0, |r| r.reconnects.len()),
                    peak_backlog: spool.map(|s| s.0),
                    held_back_secs: spool.map(|s| s.1),
                    ok: v.ok,
                    problem: v.problem,
                }
            })
            .collect()
    }

    /// Judges the sources against `--min-ok` ([`Runner::judge_members`]).
    pub(super) fn judge_sources(&mut self) {
        let Some(g) = &self.plan.gather else { return };
        let hosts: Vec<String> = g.sources.iter().map(|s| s.host.clone()).collect();
        let verdicts: Vec<(String, bool, String)> = self
            .source_verdicts()
            .into_iter()
            .map(|(k, v)| (hosts[k].clone(), v.ok, v.line))
            .collect();
        let kept = self.findings.source_failures.clone();
        self.judge_members(Members::Sources, &verdicts, kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(bytes: u64, checksum: u64) -> HopReport {
        HopReport {
            bytes,
            checksum,
            secs: 1.0,
            transport: "tcp".into(),
            integrity: rdpipe_wire::Integrity::Encrypt,
            compress: None,
            reconnects: vec![],
        }
    }

    fn facts() -> SourceFacts {
        SourceFacts {
            name: "source 2 [3] pc2 'collect'".into(),
            sent: Some(hop(100, 7)),
            received: Some(hop(100, 7)),
            hops_agree: true,
            is_command: true,
            exit: Some(CmdExit::Code(0)),
            instance_exits: vec![],
            failure: None,
            ended_ok: true,
            spool: None,
            lines: None,
        }
    }

    #[test]
    fn a_whole_verified_stream_and_a_clean_exit_is_ok() {
        let v = judge(&facts());
        assert!(v.ok && v.verified);
        assert_eq!(
            v.line,
            "source 2 [3] pc2 'collect': ok: 100 bytes over tcp, encrypt verified, \
             xxh3 0000000000000007, command exit 0"
        );
    }

    #[test]
    fn a_failing_source_names_its_exit_and_where_it_stopped() {
        let mut f = facts();
        f.exit = Some(CmdExit::Code(3));
        f.received = None;
        let v = judge(&f);
        assert!(!v.ok && !v.verified);
        assert_eq!(
            v.problem.as_deref(),
            Some("the command exited with status 3")
        );
        assert!(
            v.line
                .contains("100 bytes sent, none verified, command exit 3"),
            "{}",
            v.line
        );
        f.failure = Some("[4] pc0: receiving from [3] pc2 failed: x; 5 whole line(s)".into());
        assert_eq!(judge(&f).problem, f.failure);
    }

    #[test]
    fn streams_that_differ_or_instances_that_fail_are_failures() {
        let mut f = facts();
        f.received = Some(hop(100, 8));
        assert_eq!(
            judge(&f).problem.as_deref(),
            Some("the stream did not arrive whole")
        );
        let mut f = facts();
        f.hops_agree = false;
        assert!(!judge(&f).ok);
        let mut f = facts();
        f.instance_exits = vec![
            ("[4] pc0".into(), Some(CmdExit::Code(0))),
            ("[5] pc0".into(), Some(CmdExit::Code(1))),
        ];
        assert_eq!(
            judge(&f).problem.as_deref(),
            Some("[5] pc0: the command exited with status 1")
        );
        let mut f = facts();
        f.is_command = false;
        f.exit = None;
        f.ended_ok = false;
        assert_eq!(
            judge(&f).problem.as_deref(),
            Some("its agents did not end well")
        );
    }
}
