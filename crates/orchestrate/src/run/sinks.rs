//! Per-host verdicts of a fan-out's `--to` sinks: what each sink's agent
//! reported (the incoming hop's bytes and checksum, verified by its MAC or
//! checksum at the receiver; the command's exit status; a failure of its command
//! or `> FILE`), judged by the pure [`judge`], printed one line per host at `-v`
//! and whenever anything failed, and counted against `--min-ok`.
//!
//! A sink's local failure is not a pipeline failure by itself: its agent goes on
//! relaying, so rdpipe keeps such reports apart ([`Runner::sink_failed`]) and
//! the run fails only when fewer sinks than `--min-ok` (default: all) succeeded.
//! So are the failures along the chain: a transfer between two sinks, or a
//! sink's agent that dies (the sinks before it finish their copies; the chain
//! re-links around it, [`super::relink`], or rdpipe stops the ones after it,
//! and their verdicts name the dead relay).

use super::verdict::{Cause, Finding, Members};
use super::Runner;
use rdpipe_control::{CmdExit, Direction, FailKind, HopReport, Part};
use rdpipe_plan::Node;
use rdpipe_report::SinkReport;

/// What rdpipe heard about one sink.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkFacts {
    /// `[3] b2`.
    pub name: String,
    /// The stream as this sink received (and verified) it.
    pub received: Option<HopReport>,
    /// The stream as its upstream neighbour sent it.
    pub sent: Option<HopReport>,
    /// The stream as the first sink received it (what every sink must get).
    pub reference: Option<(u64, u64)>,
    /// Whether the sink runs a command (else it writes a file).
    pub is_command: bool,
    /// Its command's exit.
    pub exit: Option<CmdExit>,
    /// Its command's or file's failure, as its agent said it.
    pub local_failure: Option<String>,
    /// Its agent ended well (`END ok`).
    pub ended_ok: bool,
    /// The next sink, when it relays.
    pub relays_to: Option<String>,
    /// Its agent died mid-stream (vanished without `END`, not in teardown).
    pub died: bool,
    /// The nearest relay upstream of it whose agent died (`[3] b2`): the
    /// stream it lost.
    pub dead_relay: Option<String>,
    /// Its relay to the next sink broke (that sink or its host died).
    pub relay_broke: bool,
    /// It relays to a later sink than the next, around the dead next one
    /// (`[4] b3`).
    pub relinked_to: Option<String>,
    /// Its re-link around the dead relay failed, and why.
    pub relink_failure: Option<String>,
}

/// One sink's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkVerdict {
    /// The sink succeeded: the whole stream verified, and its command or file too.
    pub ok: bool,
    /// The stream arrived whole and verified, the same as the source's.
    pub verified: bool,
    /// What went wrong, when something did.
    pub problem: Option<String>,
    /// The one-line summary (without the tool prefix).
    pub line: String,
}

/// Judges one sink.
pub fn judge(f: &SinkFacts) -> SinkVerdict {
    let verified = match (&f.received, &f.sent, f.reference) {
        (Some(r), Some(s), Some(reference)) => {
            r.same_stream(s) && (r.bytes, r.checksum) == reference
        }
        _ => false,
    };
    let problem = if f.died {
        Some("its agent died mid-stream".to_string())
    } else if let Some(m) = &f.local_failure {
        Some(m.clone())
    } else if !verified {
        Some(match (&f.received, &f.dead_relay) {
            (None, Some(dead)) => match &f.relink_failure {
                Some(why) => format!(
                    "the stream did not arrive whole: relay {dead} died upstream and the \
                     re-link around it failed: {why}"
                ),
                None => format!("the stream did not arrive whole: relay {dead} died upstream"),
            },
            (None, None) => "the stream did not arrive whole".to_string(),
            (Some(_), _) => "the stream differs from the source's".to_string(),
        })
    } else if f.is_command && f.exit != Some(CmdExit::Code(0)) {
        Some(match f.exit {
            None | Some(CmdExit::Killed) => "the command did not finish".to_string(),
            Some(e) => format!("the command ended with {e}"),
        })
    } else if !f.ended_ok {
        Some("its agent did not end well".to_string())
    } else {
        None
    };
    let stream = match &f.received {
        Some(r) if verified => format!(
            "{} bytes over {} verified, xxh3 {:016x}",
            r.bytes,
            r.describe(),
            r.checksum
        ),
        Some(r) => format!("{} bytes, xxh3 {:016x}, NOT verified", r.bytes, r.checksum),
        None => "no verified stream".to_string(),
    };
    let local = match (f.is_command, f.exit) {
        (true, Some(e)) => format!(", command exit {e}"),
        (true, None) => ", command exit unknown".to_string(),
        (false, _) => String::new(),
    };
    let relay = f
        .relays_to
        .as_ref()
        .map(|n| match (&f.relinked_to, f.relay_broke) {
            _ if f.died => format!(", relay to {n} cut"),
            (Some(to), true) => format!(", relay to {n} broke, re-link to {to} failed"),
            (Some(to), false) => format!(", relayed to {to} (re-linked around {n})"),
            (None, true) => format!(", relay to {n} broke"),
            (None, false) => format!(", relayed to {n}"),
        })
        .unwrap_or_default();
    let head = match &problem {
        None => "ok".to_string(),
        Some(p) => format!("FAILED ({p})"),
    };
    SinkVerdict {
        ok: problem.is_none(),
        verified,
        line: format!("sink {}: {head}: {stream}{local}{relay}", f.name),
        problem,
    }
}

impl Runner {
    /// Whether a `FAIL` from segment `i` is a sink's own failure (its command or
    /// file), which does not stop the pipeline: kept apart, judged at the end.
    ///
    /// So is a failure of a transfer between two sinks (a sink's relay out, or
    /// its incoming stream from the sink before it): it costs the sinks from
    /// there on their stream (their verdicts say so), not the ones before.
    pub(super) fn sink_failed(
        &mut self,
        i: usize,
        part: Part,
        kind: FailKind,
        code: u8,
        msg: &str,
    ) -> bool {
        let chain_transfer = match part {
            Part::In => i > self.plan.sinks().start,
            Part::Out => self.plan.relays(i),
            _ => false,
        };
        // Stopped by rdpipe because a relay before it died (see agents.rs).
        let cut_off = (self.plan.sinks().start..i).any(|k| self.agent_died(k));
        if !self.plan.is_sink(i)
            || (kind == FailKind::Stopped && !cut_off)
            || !(matches!(part, Part::Cmd | Part::File) || chain_transfer || cut_off)
        {
            return false;
        }
        let relink = match part {
            Part::In => self.segs[i].relinked.as_ref().map(|r| {
                format!(
                    "re-link from {}",
                    self.plan.node_name(Node::Segment(r.from))
                )
            }),
            Part::Out => self.segs[i]
                .relinked_to
                .map(|d| format!("re-link to {}", self.plan.node_name(Node::Segment(d)))),
            _ => None,
        };
        if part == Part::In && relink.is_some() {
            self.segs[i].relink_failure = Some(msg.to_string());
        }
        let cause = match (part, relink) {
            (Part::In | Part::Out, Some(what)) => Cause::Transfer {
                text: format!("{}: {what} failed: {msg}", self.seg_desc(i)),
                echo: false,
            },
            (Part::In | Part::Out | Part::Agent, None) => {
                self.failure_cause(i, part, kind, code, msg.to_string())
            }
            _ => Cause::Segment {
                seg: self.seg_desc(i),
                message: msg.to_string(),
            },
        };
        self.segs[i].relay_broke |= part == Part::Out;
        self.findings.sink_failures.push(Finding {
            cause,
            node: Some(Node::Segment(i)),
        });
        true
    }

    /// Whether segment `i`'s agent died mid-stream (a root cause, not
    /// teardown's collateral).
    pub(super) fn agent_died(&self, i: usize) -> bool {
        self.findings
            .failures
            .iter()
            .chain(&self.findings.sink_failures)
            .any(|f| {
                f.node == Some(Node::Segment(i))
                    && matches!(
                        f.cause,
                        Cause::Died {
                            teardown: false,
                            ..
                        }
                    )
            })
    }

    fn sink_facts(&self, i: usize) -> SinkFacts {
        let me = Node::Segment(i);
        let first = self.plan.sinks().start;
        let reference = self
            .recv_report(Node::Segment(first))
            .map(|r| (r.bytes, r.checksum));
        // A re-linked sink's stream came, in the end, from the relay that
        // re-linked to it (its report covers the whole stream).
        let sent = match &self.segs[i].relinked {
            Some(r) => self.segs[r.from].reports[Direction::Out.index()].as_ref(),
            None => self
                .plan
                .hop_into(me)
                .and_then(|h| self.sent_report(h.from)),
        };
        let local_failure = self
            .findings
            .sink_failures
            .iter()
            .find_map(|f| match &f.cause {
                Cause::Segment { message, .. } if f.node == Some(me) => Some(message.clone()),
                _ => None,
            });
        let dead_relay = self
            .plan
            .sinks()
            .rev()
            .find(|&k| k < i && self.plan.relays(k) && self.agent_died(k))
            .map(|k| self.plan.node_name(Node::Segment(k)));
        SinkFacts {
            relinked_to: self.segs[i]
                .relinked_to
                .map(|d| self.plan.node_name(Node::Segment(d))),
            relink_failure: self.segs[i].relink_failure.clone(),
            relay_broke: self.segs[i].relay_broke,
            died: self.agent_died(i),
            dead_relay,
            name: self.plan.node_name(me),
            received: self.segs[i].reports[Direction::In.index()].clone(),
            sent: sent.cloned(),
            reference,
            is_command: self.plan.segments[i].action.is_command(),
            exit: self.segs[i].exit,
            local_failure,
            ended_ok: self.segs[i].ended == Some(true),
            relays_to: self
                .plan
                .relays(i)
                .then(|| self.plan.node_name(Node::Segment(i + 1))),
        }
    }

    /// Each sink's verdict, in chain order (none without `--to`).
    pub(super) fn sink_verdicts(&self) -> Vec<(usize, SinkVerdict)> {
        self.plan
            .sinks()
            .map(|i| (i, judge(&self.sink_facts(i))))
            .collect()
    }

    /// The `--json` records of the sinks.
    pub(super) fn sink_reports(&self) -> Vec<SinkReport> {
        self.sink_verdicts()
            .into_iter()
            .map(|(i, v)| {
                let r = self.segs[i].reports[Direction::In.index()].as_ref();
                SinkReport {
                    segment: i + 1,
                    host: self.plan.segments[i].host.label().to_string(),
                    action: self.plan.segments[i].action.to_string(),
                    bytes: r.map(|r| r.bytes),
                    checksum: r.map(|r| format!("{:016x}", r.checksum)),
                    transport: r.map(HopReport::describe),
                    verified: v.verified,
                    exit_status: self.segs[i].exit.and_then(CmdExit::status),
                    ok: v.ok,
                    problem: v.problem,
                }
            })
            .collect()
    }

    /// Judges the sinks against `--min-ok` ([`Runner::judge_members`]).
    pub(super) fn judge_sinks(&mut self) {
        let verdicts: Vec<(String, bool, String)> = self
            .sink_verdicts()
            .into_iter()
            .map(|(i, v)| (self.plan.segments[i].host.label().to_string(), v.ok, v.line))
            .collect();
        let kept = self.findings.sink_failures.clone();
        self.judge_members(Members::Sinks, &verdicts, kept);
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
            integrity: rdpipe_wire::Integrity::Mac,
            compress: None,
            reconnects: vec![],
        }
    }

    fn facts() -> SinkFacts {
        SinkFacts {
            name: "[2] b1".into(),
            received: Some(hop(100, 7)),
            sent: Some(hop(100, 7)),
            reference: Some((100, 7)),
            is_command: true,
            exit: Some(CmdExit::Code(0)),
            local_failure: None,
            ended_ok: true,
            relays_to: Some("[3] b2".into()),
            died: false,
            dead_relay: None,
            relay_broke: false,
            relinked_to: None,
            relink_failure: None,
        }
    }

    #[test]
    fn a_whole_verified_stream_and_a_clean_exit_is_ok() {
        let v = judge(&facts());
        assert!(v.ok && v.verified);
        assert_eq!(
            v.line,
            "sink [2] b1: ok: 100 bytes over tcp, mac verified, xxh3 0000000000000007, \
             command exit 0, relayed to [3] b2"
        );
    }

    #[test]
    fn a_failing_command_names_itself_and_the_stream_still_counts() {
        let mut f = facts();
        f.exit = Some(CmdExit::Code(3));
        f.local_failure = Some("the command exited with status 3".into());
        let v = judge(&f);
        assert!(!v.ok && v.verified);
        assert!(
            v.line
                .starts_with("sink [2] b1: FAILED (the command exited with status 3): 100 bytes"),
            "{}",
            v.line
        );
    }

    #[test]
    fn a_stream_unlike_the_sources_is_not_verified() {
        let mut f = facts();
        f.received = Some(hop(100, 8));
        f.sent = Some(hop(100, 8));
        let v = judge(&f);
        assert!(!v.ok && !v.verified);
        assert_eq!(
            v.problem.as_deref(),
            Some("the stream differs from the source's")
        );
        f.received = None;
        assert_eq!(
            judge(&f).problem.as_deref(),
            Some("the stream did not arrive whole")
        );
    }

    #[test]
    fn a_command_that_never_reported_its_exit_fails() {
        let mut f = facts();
        f.exit = None;
        assert!(!judge(&f).ok);
        f.exit = Some(CmdExit::Killed);
        assert!(!judge(&f).ok);
        // A file sink has no exit.
        f.is_command = false;
        f.relays_to = None;
        let v = judge(&f);
        assert!(v.ok);
        assert!(v.line.ends_with("xxh3 0000000000000007"), "{}", v.line);
    }

    #[test]
    fn a_dead_relay_and_the_sinks_it_cut_off_say_so() {
        let mut f = facts();
        f.died = true;
        f.received = None;
        let v = judge(&f);
        assert!(!v.ok);
        assert_eq!(v.problem.as_deref(), Some("its agent died mid-stream"));
        let mut f = facts();
        f.received = None;
        f.dead_relay = Some("[2] b1".into());
        f.relays_to = None;
        assert_eq!(
            judge(&f).line,
            "sink [2] b1: FAILED (the stream did not arrive whole: relay [2] b1 died \
             upstream): no verified stream, command exit 0"
        );
        // The sink before the dead one: its own copy is whole.
        let mut f = facts();
        f.relay_broke = true;
        let v = judge(&f);
        assert!(v.ok, "{}", v.line);
        assert!(v.line.ends_with(", relay to [3] b2 broke"), "{}", v.line);
    }

    #[test]
    fn a_relink_around_a_dead_relay_says_so_or_why_it_failed() {
        // The relay before the dead one re-linked to the sink after it.
        let mut f = facts();
        f.relinked_to = Some("[4] b3".into());
        let v = judge(&f);
        assert!(v.ok);
        assert!(
            v.line
                .ends_with(", relayed to [4] b3 (re-linked around [3] b2)"),
            "{}",
            v.line
        );
        f.relay_broke = true;
        assert!(judge(&f)
            .line
            .ends_with(", relay to [3] b2 broke, re-link to [4] b3 failed"));
        // The dead relay itself.
        let mut f = facts();
        f.died = true;
        f.received = None;
        assert!(judge(&f).line.ends_with(", relay to [3] b2 cut"));
        // The sink after it, whose resume was refused.
        let mut f = facts();
        f.received = None;
        f.relays_to = None;
        f.dead_relay = Some("[3] b2".into());
        f.relink_failure = Some("cannot resume the stream at byte 5: ...".into());
        let v = judge(&f);
        assert!(!v.ok);
        assert_eq!(
            v.problem.as_deref(),
            Some(
                "the stream did not arrive whole: relay [3] b2 died upstream and the re-link \
                 around it failed: cannot resume the stream at byte 5: ..."
            )
        );
    }
}
