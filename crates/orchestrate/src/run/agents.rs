//! What the agents say: their control lines (`HELLO`, `FABRIC`, `PORT` relayed
//! as `CONNECT`, `DONE`, `EXIT`, `FAIL` turned into a typed [`Cause`], `END`,
//! `BYTES`, `SIZE`, `USAGE`) and their exits.

use super::verdict::{Cause, Finding};
use super::Runner;
use rdpipe_control::{Direction, FailKind, FromAgent, Part, PROTOCOL};
use rdpipe_plan::Node;
use rdpipe_transport::error::EXIT_ABORTED;
use tracing::{debug, info, trace};

impl Runner {
    pub(super) async fn agent_exited(&mut self, i: usize, code: Option<i32>, how: String) {
        debug!("[{}] agent {how}", i + 1);
        let me = Node::Segment(i);
        let seg = self.seg_desc(i);
        let st = &mut self.segs[i];
        if st.exited {
            return;
        }
        st.exited = true;
        let (hello, ended) = (st.hello, st.ended);
        // A lane that had not ended when its merge segment's agent did:
        // that agent's end is what is reported.
        if self.plan.merge_of_lane(i).is_some() && ended != Some(true) {
            return;
        }
        if ended == Some(true) {
            let missing =
                |d: Direction, hop: Option<_>| hop.is_some() && st.reports[d.index()].is_none();
            // A sink whose relay broke said so (FAIL out): no report due.
            let out_due = !st.relay_broke;
            if missing(Direction::In, self.plan.hop_into(me))
                || (out_due && missing(Direction::Out, self.plan.hop_from(me)))
            {
                self.fail(Some(me), Cause::Incomplete { seg });
            }
            return;
        }
        if ended.is_some() {
            return;
        }
        let host = self.plan.segments[i].host.label().to_string();
        let cause = match (code, hello) {
            (Some(127), false) => Cause::RdrecvMissing { host },
            (Some(2), false) => Cause::AgentVersion {
                host,
                version: None,
            },
            (_, false) => Cause::NotStarted { seg, how },
            // A `--to` sink's agent that dies is judged with the sinks
            // ([`super::sinks`]), not as the pipeline's failure: the chain
            // re-links around it, or the sinks after it lose their stream
            // (their verdicts say so).
            (_, true) if self.signal.is_none() && !self.closing && self.plan.is_sink(i) => {
                self.findings.sink_failures.push(Finding {
                    cause: Cause::Died {
                        seg,
                        how,
                        teardown: false,
                    },
                    node: Some(me),
                });
                for (j, order) in self.sink_died(i) {
                    self.send(j, &order).await;
                }
                return;
            }
            // Before teardown, an agent that vanishes is a root cause.
            (_, true) if self.signal.is_none() => Cause::Died {
                seg,
                how,
                teardown: self.closing,
            },
            _ => return,
        };
        // One of a `--from` source's own agents that did not start or died:
        // judged with the sources ([`super::sources`]); the rest of that
        // source's segments are stopped, the other sources go on.
        if self.signal.is_none() && !self.closing && self.plan.source_of(i).is_some() {
            self.source_lost(i, cause).await;
            return;
        }
        self.fail(Some(me), cause);
    }

    pub(super) async fn handle_line(&mut self, i: usize, l: &str) {
        let msg = match l.parse::<FromAgent>() {
            Ok(m) => m,
            Err(e) => {
                debug!("[{}] said: {l} ({e}; ignored)", i + 1);
                return;
            }
        };
        if matches!(msg, FromAgent::Bytes { .. }) {
            trace!("[{}] said: {l}", i + 1);
        } else {
            debug!("[{}] said: {l}", i + 1);
        }
        // A merge segment's lane speaks through its agent.
        let (i, msg) = match msg {
            FromAgent::Lane { lane, msg } => match self.plan.lanes_of(i).get(lane - 1) {
                Some(&l) => (l, *msg),
                None => {
                    debug!("[{}] no lane {lane} (ignored)", i + 1);
                    return;
                }
            },
            m => (i, m),
        };
        let me = Node::Segment(i);
        match msg {
            FromAgent::Hello { version } => {
                self.segs[i].hello = true;
                for l in self.plan.lanes_of(i) {
                    self.segs[l].hello = true;
                }
                if version != PROTOCOL {
                    let host = self.plan.segments[i].host.label().to_string();
                    let version = Some(version);
                    self.fail(Some(me), Cause::AgentVersion { host, version });
                }
            }
            FromAgent::Fabric(addrs) => self.fabric_reported(i, addrs).await,
            FromAgent::Port { dir, port } => self.relay_port(i, dir, port).await,
            FromAgent::Reach { dir, results } => self.reach_reported(i, dir, results).await,
            FromAgent::Done { dir, mut report } => {
                report.reconnects = std::mem::take(&mut self.segs[i].reconnects[dir.index()]);
                self.segs[i].reports[dir.index()] = Some(report)
            }
            FromAgent::Exit(e) => self.segs[i].exit = Some(e),
            FromAgent::Fail {
                part,
                kind,
                code,
                message,
            } => {
                if self.sink_failed(i, part, kind, code, &message)
                    || self.source_failed(i, part, kind, code, &message)
                {
                    return;
                }
                self.segs[i].failed = true;
                let cause = self.failure_cause(i, part, kind, code, message);
                if matches!(cause, Cause::Transfer { echo: false, .. }) {
                    let peer = match part {
                        Part::In => self.plan.hop_into(me).map(|h| h.from),
                        Part::Out => self.plan.hop_from(me).map(|h| h.to),
                        _ => None,
                    };
                    self.peer_lost(me, peer);
                }
                self.fail(Some(me), cause);
            }
            FromAgent::End { ok } => self.segs[i].ended = Some(ok),
            FromAgent::Bytes { dir, bytes } => self.segs[i].bytes[dir.index()] = Some(bytes),
            FromAgent::Size(n) => self.segs[i].size = Some(n),
            FromAgent::RelinkPort(port) => self.relink_port(i, port).await,
            FromAgent::Usage(u) => self.segs[i].usage = Some(u),
            FromAgent::Copied(c) => self.segs[i].copied = Some(c),
            // Only the first line of a sealed channel (`rdpipe_launch::srun`).
            FromAgent::Munge(_) => debug!("[{}] a MUNGE line after the handshake: ignored", i + 1),
            FromAgent::Spool { peak, held } => self.segs[i].spool = Some((peak, held)),
            FromAgent::Lines(n) => self.segs[i].lines = Some(n),
            FromAgent::Listening(addr) => self.forward_listening(i, addr),
            FromAgent::Conn(c) => self.forward_conn(c),
            FromAgent::Detachable(path) => self.detachable(i, path),
            // (Only the first line of a new channel: [`super::reattach`].)
            FromAgent::Attached(_) => debug!("[{}] an ATTACHED line out of place: ignored", i + 1),
            // (Taken by the channel's reader: `Event::Pong`.)
            FromAgent::Pong => {}
            // (Unwrapped above: a lane never speaks for another.)
            FromAgent::Lane { .. } => debug!("[{}] a nested LANE line: ignored", i + 1),
            FromAgent::Lost { dir, offset } => {
                info!(
                    "{}: the {} hop's connection was lost at byte {offset}; reconnecting",
                    self.seg_desc(i),
                    dir.as_str()
                );
                if let Some(t) = &self.progress {
                    t.set_note(Some("reconnecting…"));
                }
            }
            FromAgent::Reconnected { dir, reconnect: r } => {
                info!(
                    "{}: the {} hop reconnected at byte {} after {:.3} s, over {}",
                    self.seg_desc(i),
                    dir.as_str(),
                    r.offset,
                    r.downtime.as_secs_f64(),
                    r.transport
                );
                self.segs[i].reconnects[dir.index()].push(r);
                if let Some(t) = &self.progress {
                    t.set_note(None);
                }
            }
        }
    }

    /// Segment `i` listens on `port` for its `dir` transfer: tell the other end
    /// (once discovery, [`super::discover`], has what it needs).
    async fn relay_port(&mut self, i: usize, dir: Direction, port: u16) {
        let me = Node::Segment(i);
        let hop = self
            .plan
            .hops
            .iter()
            .position(|h| h.side_of(me) == Some(dir));
        if let Some(k) = hop {
            self.relay_hop(k, port).await;
        }
    }

    pub(super) fn failure_cause(
        &self,
        i: usize,
        part: Part,
        kind: FailKind,
        code: u8,
        msg: String,
    ) -> Cause {
        let seg = self.seg_desc(i);
        let me = Node::Segment(i);
        let echo = kind == FailKind::Echo || code == EXIT_ABORTED;
        // A line merge's input comes from its lanes, not from one hop.
        let from_name = |h: Option<&rdpipe_plan::Hop>| match h {
            Some(h) => self.plan.node_name(h.from),
            None if !self.plan.lanes_of(i).is_empty() => "the --from sources".into(),
            None => String::new(),
        };
        match (part, kind) {
            (_, FailKind::Stopped) => Cause::Stopped { seg, message: msg },
            (Part::In, FailKind::StoppedReading) => Cause::StoppedReading {
                seg,
                from: from_name(self.plan.hop_into(me)),
            },
            (Part::In, _) => {
                let from = from_name(self.plan.hop_into(me));
                Cause::Transfer {
                    text: format!("{seg}: receiving from {from} failed: {msg}"),
                    echo,
                }
            }
            (Part::Out, _) => {
                let to = self.plan.hop_from(me).map(|h| self.plan.node_name(h.to));
                let to = to.unwrap_or_default();
                Cause::Transfer {
                    text: format!("{seg}: sending to {to} failed: {msg}"),
                    echo,
                }
            }
            (Part::Cmd | Part::File | Part::Agent, _) => Cause::Segment { seg, message: msg },
        }
    }
}
