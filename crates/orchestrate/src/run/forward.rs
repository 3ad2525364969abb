//! `rdpipe forward` in the conductor: where the listening side listens
//! (`LISTENING`, said on stderr: scripts wait for that line), each
//! connection's report (`CONN`: one line at `-v`, a warning when the target
//! refused or could not be reached, an entry in `--json`), and the first
//! stop signal turned into `STOP` for the listening side, which ends the
//! forward cleanly (a second signal interrupts it as any run).
//!
//! Everything else (launch, keys, the two hops, teardown, the verdict) is
//! the ordinary pipeline's: a forward is a two-segment pipeline whose hops
//! form a ring (`plan/forward.rs`).

use super::{tool, Runner};
use rdpipe_control::{ConnEnd, ConnReport, ToAgent};
use rdpipe_plan::Action;
use rdpipe_report::{ConnectionReport, ForwardReport};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tracing::info;

/// What the conductor knows of a forward.
#[derive(Default)]
pub(super) struct ForwardState {
    /// Where the listening side listens.
    listening: Option<SocketAddr>,
    /// Each connection that ended, in that order.
    conns: Vec<ConnReport>,
    /// When `STOP` went to the listening side.
    stopping: Option<Instant>,
}

/// A signal this soon after the one that stopped a forward is the same
/// stop delivered twice (`timeout` and a shell's job control signal the
/// process and its group), not a second Ctrl-C.
const REPEAT: Duration = Duration::from_millis(500);

fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs
    } else {
        0.0
    }
}

impl Runner {
    fn target_desc(&self) -> String {
        let t = &self.plan.segments[1 - self.plan.forward_listener().unwrap_or(0)];
        match &t.action {
            Action::ForwardTarget { to } => format!("{} {to}", t.host.label()),
            _ => t.host.label().to_string(),
        }
    }

    /// The listening side listens at `addr`.
    pub(super) fn forward_listening(&mut self, i: usize, addr: SocketAddr) {
        self.fwd.listening = Some(addr);
        if !self.config.quiet {
            let at = self.plan.segments[i].host.label().to_string();
            let host = if self.plan.segments[i].host.is_local() {
                String::new()
            } else {
                format!(" on {at}")
            };
            rdpipe_term::say(
                tool(),
                format!(
                    "forwarding {addr}{host} to {} (Ctrl-C ends it)",
                    self.target_desc()
                ),
            );
        }
    }

    /// Connection `c` is over.
    pub(super) fn forward_conn(&mut self, c: ConnReport) {
        let target = self.target_desc();
        match c.end {
            ConnEnd::Refused => rdpipe_term::warn(
                tool(),
                format!(
                    "connection {} from {}: {target} refused it (nothing listens there); closed",
                    c.id, c.peer
                ),
            ),
            ConnEnd::Unreachable => rdpipe_term::warn(
                tool(),
                format!(
                    "connection {} from {}: {target} could not be reached; closed",
                    c.id, c.peer
                ),
            ),
            _ => {}
        }
        info!(
            "connection {} from {}: {} B up, {} B down, {:.3} s, {}",
            c.id,
            c.peer,
            c.up,
            c.down,
            c.secs,
            c.end.as_str()
        );
        self.fwd.conns.push(c);
    }

    /// The first stop signal of a forward: `STOP` to its listening side;
    /// the same signal again within [`REPEAT`] is that one (true: the
    /// signal is handled so; a later one interrupts as in any run).
    pub(super) async fn forward_stop(&mut self) -> bool {
        let Some(i) = self.plan.forward_listener() else {
            return false;
        };
        if let Some(t) = self.fwd.stopping {
            if t.elapsed() < REPEAT {
                tracing::debug!("a stop signal again at once: the same stop");
                return true;
            }
            return false;
        }
        if self.fwd.listening.is_none() {
            return false;
        }
        self.fwd.stopping = Some(Instant::now());
        info!("stopping the forward: open connections are cut");
        self.send(i, &ToAgent::Stop).await;
        true
    }

    /// `--json`'s forward part.
    pub(super) fn forward_report(&self) -> Option<ForwardReport> {
        let i = self.plan.forward_listener()?;
        let transport = self
            .segs
            .get(i)
            .and_then(|s| s.reports[1].as_ref())
            .map(|r| r.transport.clone());
        let target = &self.plan.segments[1 - i];
        Some(ForwardReport {
            listening: self.fwd.listening.map(|a| a.to_string()),
            listen_host: self.plan.segments[i].host.label().to_string(),
            target_host: target.host.label().to_string(),
            target: match &target.action {
                Action::ForwardTarget { to } => to.clone(),
                _ => String::new(),
            },
            connections: self
                .fwd
                .conns
                .iter()
                .map(|c| ConnectionReport {
                    id: c.id,
                    peer: c.peer.clone(),
                    bytes_up: c.up,
                    bytes_down: c.down,
                    seconds: c.secs,
                    up_bytes_per_second: rate(c.up, c.secs),
                    down_bytes_per_second: rate(c.down, c.secs),
                    end: c.end.as_str().to_string(),
                    transport: transport.clone(),
                })
                .collect(),
        })
    }
}
