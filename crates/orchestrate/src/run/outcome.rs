//! The outcome of a run: checking that both ends of every hop saw the same
//! stream, the `-v` report of each hop and of each agent's CPU, and the verdict (decided by the pure
//! [`super::verdict::decide`]).

use super::verdict::{self, Cause, Finding, Members, Verdict};
use super::{tool, Runner};
use rdpipe_control::{CmdExit, Direction, HopReport};
use rdpipe_plan::Node;
use std::time::Duration;

impl Runner {
    pub(super) fn verdict(mut self, wall: Duration) -> Verdict {
        if self.findings.failures.is_empty() {
            self.check_reports();
        }
        self.judge_sinks();
        self.judge_sources();
        if self.config.verbose > 0 && self.config.summary {
            self.say_hop_reports(wall);
        }
        let statuses: Vec<Option<i32>> = self
            .segs
            .iter()
            .map(|s| s.exit.and_then(CmdExit::status))
            .collect();
        verdict::decide(&self.findings.failures, &statuses, self.config.verbose > 0)
    }

    /// Both ends of every hop must report the same count and checksum, and every
    /// segment must have ended well. The hops between `--to` sinks and the
    /// sinks themselves are judged per sink instead ([`super::sinks`]: a relay
    /// that broke costs only the sinks after it).
    fn check_reports(&mut self) {
        let chain = self.plan.sinks();
        let judged_as_sink =
            |n: Node| matches!(n, Node::Segment(k) if k > chain.start && chain.contains(&k));
        let source_segs: Vec<bool> = (0..self.segs.len())
            .map(|k| self.plan.source_of(k).is_some())
            .collect();
        let judged_as_source = |n: Node| matches!(n, Node::Segment(k) if source_segs[k]);
        for h in self.plan.hops.clone() {
            if judged_as_sink(h.to) || judged_as_source(h.to) {
                continue;
            }
            match (self.sent_report(h.from), self.recv_report(h.to)) {
                (Some(s), Some(r)) if s.same_stream(r) => {}
                (s, r) => {
                    let cause = Cause::Mismatch {
                        from: self.plan.node_name(h.from),
                        to: self.plan.node_name(h.to),
                        sent: s.map(|s| (s.bytes, s.checksum)),
                        received: r.map(|r| (r.bytes, r.checksum)),
                    };
                    self.fail(None, cause);
                }
            }
        }
        for i in 0..self.segs.len() {
            if self.segs[i].ended != Some(true)
                && !self.plan.is_sink(i)
                && self.plan.source_of(i).is_none()
            {
                let seg = self.seg_desc(i);
                self.fail(Some(Node::Segment(i)), Cause::NoSuccess { seg });
            }
        }
    }

    /// Judges a fan-out's sinks or a gather's sources as `--min-ok` says:
    /// prints each one's `(host, ok, line)` in `verdicts` (at `-v`, or when
    /// anything failed) and, when fewer than `--min-ok` (default: all)
    /// succeeded, makes their failures (`kept`, held apart until now) the
    /// run's; when enough did, a warning names how many failed.
    pub(super) fn judge_members(
        &mut self,
        members: Members,
        verdicts: &[(String, bool, String)],
        kept: Vec<Finding>,
    ) {
        if verdicts.is_empty() {
            return;
        }
        let total = verdicts.len();
        let failed = verdicts.iter().filter(|(_, ok, _)| !ok).count();
        if self.config.verbose > 0 || failed > 0 || !self.findings.failures.is_empty() {
            for (_, _, line) in verdicts {
                rdpipe_term::say(tool(), line);
            }
        }
        let needed = self.config.min_ok.unwrap_or(total).min(total);
        if failed == 0 || self.signal.is_some() {
            return;
        }
        if total - failed >= needed {
            if !self.config.quiet {
                rdpipe_term::warn(
                    tool(),
                    format!(
                        "{failed} of {total} {members} failed; {} succeeded (--min-ok {needed})",
                        total - failed
                    ),
                );
            }
            return;
        }
        let failed_already = !self.findings.failures.is_empty();
        self.findings.failures.extend(kept);
        if failed_already {
            // The run failed anyway: the lines above say which ones.
            return;
        }
        let failed = verdicts
            .iter()
            .filter(|(_, ok, _)| !ok)
            .map(|(host, _, _)| host.clone())
            .collect();
        self.fail(
            None,
            Cause::TooFew {
                members,
                failed,
                total,
                needed,
            },
        );
    }

    /// `by`'s transfer with `peer` failed on its own account (not an echo).
    pub(super) fn peer_lost(&mut self, by: Node, peer: Option<Node>) {
        if let Some(Node::Segment(k)) = peer {
            self.segs[k].lost_by.push(by);
        }
    }

    /// After teardown: a segment whose transfers' other ends lost them while
    /// it said nothing at all (no `FAIL`, no `END`, though its control channel
    /// was closed and a live agent answers that with `END`) is the root cause:
    /// its host died or was cut off, and its neighbours' losses (each only a
    /// dead-peer timeout) echo that. A `--to` sink is judged with the sinks.
    pub(super) fn judge_silent(&mut self) {
        if self.signal.is_some() {
            return;
        }
        for k in 0..self.segs.len() {
            let st = &self.segs[k];
            let spoke = st.failed || st.ended.is_some();
            let known = self
                .findings
                .failures
                .iter()
                .any(|f| f.node == Some(Node::Segment(k)) && f.cause.rank() < 2);
            if st.lost_by.is_empty()
                || spoke
                || known
                || self.plan.is_sink(k)
                || self.plan.source_of(k).is_some()
            {
                continue;
            }
            // In stream order, whichever reported first.
            let mut by = st.lost_by.clone();
            by.sort_by_key(|n| match n {
                Node::Stdin => 0,
                Node::Segment(i) => i + 1,
                Node::Stdout => usize::MAX,
            });
            by.dedup();
            let by = by.iter().map(|&n| self.plan.node_name(n)).collect();
            let cause = Cause::Lost {
                seg: self.seg_desc(k),
                host: self.plan.segments[k].host.label().to_string(),
                by,
            };
            self.fail(Some(Node::Segment(k)), cause);
        }
    }

    /// `-v`: each hop's transport, bytes, rate and checksum, and the bandwidth.
    fn say_hop_reports(&self, wall: Duration) {
        for h in &self.plan.hops {
            if let Some(r) = self.sent_report(h.from) {
                let gbps = if r.secs > 0.0 {
                    r.bytes as f64 / r.secs / 1e9
                } else {
                    0.0
                };
                rdpipe_term::say(
                    tool(),
                    format!(
                        "{} -> {}: {}, {} bytes in {:.3} s ({gbps:.3} GB/s), xxh3 {:016x}",
                        self.plan.node_name(h.from),
                        self.plan.node_name(h.to),
                        r.describe(),
                        r.bytes,
                        r.secs,
                        r.checksum
                    ),
                );
            }
        }
        self.say_relays();
        self.say_usage();
        let last = self
            .plan
            .hops
            .iter()
            .rev()
            .filter_map(|h| self.sent_report(h.from))
            .find(|r| r.bytes > 0);
        let gbps = match last {
            Some(r) if r.secs > 0.0 => r.bytes as f64 / r.secs / 1e9,
            _ => 0.0,
        };
        rdpipe_term::say(tool(), format!("{:.3} s in all", wall.as_secs_f64()));
        // (A forward's hops carry many connections: no one bandwidth.)
        if self.plan.forward_listener().is_none() {
            rdpipe_term::line(&format!("Bandwidth {gbps:.3} GB/s\n"));
        }
    }

    /// `-v`: what each relay-only segment (`HOST:`) forwarded.
    fn say_relays(&self) {
        for (i, seg) in self.plan.segments.iter().enumerate() {
            if seg.action != rdpipe_plan::Action::Relay {
                continue;
            }
            let me = Node::Segment(i);
            let lanes = self.plan.lanes_of(i);
            if !lanes.is_empty() {
                // A line merge with no sink segment: what it gathered.
                let whole = lanes
                    .iter()
                    .filter(|&&l| self.recv_report(Node::Segment(l)).is_some())
                    .count();
                let sent = self.sent_report(me).map_or(0, |s| s.bytes);
                rdpipe_term::say(
                    tool(),
                    format!(
                        "{}: merged the lines of {whole} of {} source(s) whose stream arrived \
                         whole: {sent} bytes to {}",
                        self.plan.node_name(me),
                        lanes.len(),
                        self.plan
                            .hop_from(me)
                            .map(|h| self.plan.node_name(h.to))
                            .unwrap_or_default()
                    ),
                );
                continue;
            }
            let (from, to) = (self.plan.hop_into(me), self.plan.hop_from(me));
            let name = |h: Option<Node>| h.map(|n| self.plan.node_name(n)).unwrap_or_default();
            let what = match (self.recv_report(me), self.sent_report(me)) {
                (Some(r), Some(s)) => format!(
                    "{} bytes from {} forwarded to {} ({}), no command",
                    r.bytes,
                    name(from.map(|h| h.from)),
                    name(to.map(|h| h.to)),
                    if r.same_stream(s) {
                        "the same stream"
                    } else {
                        "NOT the same stream"
                    }
                ),
                _ => "did not finish".to_string(),
            };
            rdpipe_term::say(
                tool(),
                format!("{}: relay only: {what}", self.plan.node_name(me)),
            );
        }
    }

    /// `-v`: the CPU each agent and its command used (`USAGE`), and the agent's
    /// per GB of the stream it carried (the larger of its two transfers).
    fn say_usage(&self) {
        for (i, st) in self.segs.iter().enumerate() {
            let Some(u) = st.usage else { continue };
            let me = Node::Segment(i);
            let bytes = [self.recv_report(me), self.sent_report(me)]
                .into_iter()
                .flatten()
                .map(|r| r.bytes)
                .max()
                .unwrap_or(0);
            let agent = u.agent.total().as_secs_f64();
            let per_gb = if bytes > 0 {
                format!(", agent {:.3} s/GB", agent / (bytes as f64 / 1e9))
            } else {
                String::new()
            };
            rdpipe_term::say(
                tool(),
                format!(
                    "{}: cpu: agent {agent:.3} s (user {:.3}, sys {:.3}), command {:.3} s{per_gb}",
                    self.plan.node_name(me),
                    u.agent.user.as_secs_f64(),
                    u.agent.system.as_secs_f64(),
                    u.command.total().as_secs_f64(),
                ),
            );
        }
    }

    /// The report of the transfer sent by `from`.
    pub(super) fn sent_report(&self, from: Node) -> Option<&HopReport> {
        match from {
            Node::Stdin => self.ends.source_report.as_ref(),
            Node::Segment(i) => self.segs[i].reports[Direction::Out.index()].as_ref(),
            Node::Stdout => None,
        }
    }

    /// The report of the transfer received by `to`.
    pub(super) fn recv_report(&self, to: Node) -> Option<&HopReport> {
        match to {
            Node::Stdout => self.ends.sink_report.as_ref(),
            Node::Segment(i) => self.segs[i].reports[Direction::In.index()].as_ref(),
            Node::Stdin => None,
        }
    }
}
