//! What a finished run reports in `--json FILE`: each hop as its ends reported
//! it, each segment's command status and CPU use, and (filled in by [`super::run_reported`])
//! the verdict. Built from the runner's state after the event loop, before the
//! verdict consumes it.

use super::Runner;
use rdpipe_control::{CmdExit, HopReport};
use rdpipe_plan::Node;
use rdpipe_report::{
    self, CpuReport, PipeReport, ReconnectReport, SegmentReport, Transfer, VerdictReport,
};
use std::time::Duration;

fn transfer(r: &HopReport) -> Transfer {
    Transfer {
        reconnects: r.reconnects.iter().map(ReconnectReport::of).collect(),
        compress: r.compress.as_ref().map(rdpipe_report::CompressReport::of),
        ..Transfer::done(&r.transport, Some(r.integrity), r.bytes, r.checksum, r.secs)
    }
}

impl Runner {
    /// The report of this run so far (the verdict is left empty).
    pub(super) fn record(&self, wall: Duration) -> PipeReport {
        let end = |n: Node| -> (String, Option<usize>) {
            match n {
                Node::Segment(i) => (self.plan.segments[i].host.label().to_string(), Some(i + 1)),
                other => (self.plan.node_name(other), None),
            }
        };
        let hops = self
            .plan
            .hops
            .iter()
            .zip(&self.disc.told)
            .map(|(h, told)| {
                let (sent, received) = (self.sent_report(h.from), self.recv_report(h.to));
                let (from, from_segment) = end(h.from);
                let (to, to_segment) = end(h.to);
                rdpipe_report::HopReport {
                    from,
                    from_segment,
                    to,
                    to_segment,
                    transfer: sent.or(received).map(transfer).unwrap_or_default(),
                    verified: matches!((sent, received), (Some(s), Some(r)) if s.same_stream(r)),
                    data_address: told.as_ref().map(|t| t.0.clone()),
                    data_address_from: told.as_ref().map(|t| t.1),
                }
            })
            .collect();
        let segments = self
            .plan
            .segments
            .iter()
            .zip(&self.segs)
            .enumerate()
            .map(|(i, (seg, st))| SegmentReport {
                segment: i + 1,
                host: seg.host.label().to_string(),
                action: seg.action.to_string(),
                relay: seg.action == rdpipe_plan::Action::Relay,
                exit_status: st.exit.and_then(CmdExit::status),
                signal: match st.exit {
                    Some(CmdExit::Signal(s)) => Some(s),
                    _ => None,
                },
                stopped: st.exit == Some(CmdExit::Killed),
                ok: st.ended == Some(true),
                agent_cpu: st.usage.map(|u| CpuReport::of(u.agent)),
                command_cpu: st.usage.map(|u| CpuReport::of(u.command)),
                copy: st.copied,
            })
            .collect();
        PipeReport {
            tool: super::tool(),
            version: rdpipe_report::VERSION,
            hops,
            segments,
            sinks: self.sink_reports(),
            sources: self.source_reports(),
            forward: self.forward_report(),
            reattaches: self.reattaches.clone(),
            rate_limit_bytes_per_second: self.config.rate_limit.map(|r| r.bytes_per_sec()),
            verdict: VerdictReport {
                exit_status: 0,
                errors: vec![],
            },
            signal: self.signal,
            wall_seconds: wall.as_secs_f64(),
        }
    }
}
