//! Re-linking a fan-out chain around a dead relay. The pure part, [`relink`]:
//! given which sinks' agents died, which live relay upstream should connect to
//! which live sink downstream (the hosts in between skipped), or why the chain
//! cannot be re-linked, as the one-line reason the later sinks fail with.
//! Then the runner's part: when a sink's agent dies, rdpipe tells the live
//! sink after it `RELINK in KEY` (a new random key), relays the port it then
//! listens on to the live relay before it as `RELINK out ADDR PORT KEY`, or
//! tells that relay `UNLINK` when nothing downstream is left to feed.
//!
//! The bytes a resumed sink misses must still be in the upstream relay's
//! replay window (`rdpipe_transport::replay`); whether they are is settled by
//! the resume exchange itself (`rdpipe_transport::chain`), not here.

use super::Runner;
use rdpipe_control::{Direction, ToAgent};
use rdpipe_plan::{Node, Pipeline};
use tracing::debug;

/// What to do about a dead sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relink {
    /// No live sink after it: nothing downstream lost the stream.
    NothingDownstream,
    /// Segment `upstream` (a live relay) connects to segment `downstream`,
    /// skipping the dead `skipped` ones.
    Around {
        /// The live relay before the dead ones.
        upstream: usize,
        /// The first live sink after them.
        downstream: usize,
        /// The dead sinks in between, in chain order.
        skipped: Vec<usize>,
    },
    /// The chain cannot be re-linked.
    Impossible(NoRelink),
}

/// Why a chain cannot be re-linked around a dead sink.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoRelink {
    /// The dead sink was the first: its upstream is the source side, which
    /// keeps no replay window.
    #[error("{dead} died and was the first sink: the source side keeps no replay window, so {downstream} cannot be re-linked")]
    FirstSink {
        /// `[3] n2`.
        dead: String,
        /// The first live sink after it.
        downstream: String,
    },
    /// `--replay-window 0`: re-linking is off.
    #[error("{dead} died and re-linking is off (--replay-window 0): {downstream} lost the stream")]
    Off {
        /// `[3] n2`.
        dead: String,
        /// The first live sink after it.
        downstream: String,
    },
}

/// The re-link around dead sink `dead` when the segments for which `died`
/// is true have died and each relay keeps a `window`-byte replay window.
pub fn relink(p: &Pipeline, died: &dyn Fn(usize) -> bool, dead: usize, window: usize) -> Relink {
    let sinks = p.sinks();
    debug_assert!(sinks.contains(&dead));
    let Some(downstream) = (dead + 1..sinks.end).find(|&k| !died(k)) else {
        return Relink::NothingDownstream;
    };
    let name = |k: usize| p.node_name(Node::Segment(k));
    let upstream = (sinks.start..dead).rev().find(|&k| !died(k));
    let (dead_name, down_name) = (name(dead), name(downstream));
    match upstream {
        None => Relink::Impossible(NoRelink::FirstSink {
            dead: dead_name,
            downstream: down_name,
        }),
        Some(_) if window == 0 => Relink::Impossible(NoRelink::Off {
            dead: dead_name,
            downstream: down_name,
        }),
        Some(upstream) => Relink::Around {
            upstream,
            downstream,
            skipped: (upstream + 1..downstream).collect(),
        },
    }
}

/// The `-n` line about re-linking a chain of three sinks or more, with a
/// `window`-byte replay window per relay.
pub fn describe(window: usize) -> String {
    match window {
        0 => "re-link: off (--replay-window 0): a relay host that dies costs the sinks \
              after it their stream"
            .to_string(),
        w => format!(
            "re-link: a relay host that dies is bypassed: the relay before it resends to the \
             sink after it from its last {} (--replay-window; that much memory per relay)",
            rdpipe_term::progress::human_bytes(w as u64)
        ),
    }
}

/// A re-link under way or done, as the sink it feeds knows it.
#[derive(Debug, Clone)]
pub struct Relinked {
    /// The live relay that resends.
    pub from: usize,
    /// The re-link hop's key.
    key: Vec<u8>,
}

impl Runner {
    /// Sink `i`'s agent died mid-stream: re-link the chain around it, or stop
    /// the sinks after it (they lost their stream).
    pub(super) fn sink_died(&mut self, i: usize) -> Vec<(usize, ToAgent)> {
        let died = |k: usize| k == i || self.agent_died(k);
        let sinks = self.plan.sinks();
        let upstream = (sinks.start..i).rev().find(|&k| !died(k));
        let window = self.config.replay_window;
        let plan = relink(&self.plan, &died, i, window);
        debug!("[{}] died: {plan:?}", i + 1);
        let mut orders = Vec::new();
        match plan {
            Relink::NothingDownstream => {
                if let (Some(up), true) = (upstream, window > 0) {
                    orders.push((up, ToAgent::Unlink));
                }
            }
            Relink::Around {
                upstream,
                downstream,
                ..
            } if !self.segs[upstream].exited && self.segs[upstream].ended.is_none() => {
                let mut key = vec![0u8; 32];
                getrandom::getrandom(&mut key).expect("the OS random source works");
                rdpipe_control::keylog::record("relink", &key);
                self.segs[downstream].relinked = Some(Relinked {
                    from: upstream,
                    key: key.clone(),
                });
                self.segs[upstream].relinked_to = Some(downstream);
                orders.push((downstream, ToAgent::RelinkIn { key }));
            }
            // Cannot re-link (the first sink died, re-linking is off, or the
            // relay before it already ended): the sinks after it have lost
            // their stream: stop them (their agents may still wait for a
            // connection from it).
            _ => {
                for j in i + 1..sinks.end {
                    debug!(
                        "[{}] lost its stream with [{}]: closing its channel",
                        j + 1,
                        i + 1
                    );
                    self.dismiss(j);
                }
            }
        }
        orders
    }

    /// Sink `d` listens for its re-link on `port`: tell the relay that
    /// resends where to connect.
    pub(super) async fn relink_port(&mut self, d: usize, port: u16) {
        let Some(r) = self.segs[d].relinked.clone() else {
            debug!("[{}] RELINK {port} without a re-link (ignored)", d + 1);
            return;
        };
        let me = Node::Segment(d);
        let Some(k) = self
            .plan
            .hops
            .iter()
            .position(|h| h.side_of(me) == Some(Direction::In))
        else {
            return;
        };
        // Where the dead relay was told to connect to it.
        let addr = match &self.disc.told[k] {
            Some((a, _)) => a.clone(),
            None => self.plan.hops[k].address.clone(),
        };
        debug!(
            "[{}] listens for the re-link on port {port}: telling [{}] to connect to {addr}",
            d + 1,
            r.from + 1
        );
        let order = ToAgent::RelinkOut {
            addr,
            port,
            key: r.key,
        };
        self.send(r.from, &order).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdpipe_plan::plan_fanout;

    /// `n0:cat` feeding sinks `n1`..`nN`.
    fn chain(n: usize) -> Pipeline {
        let sinks: Vec<String> = (1..=n).map(|h| format!("n{h}:cat")).collect();
        plan_fanout(&["n0:cat".to_string()], &sinks, false, &|r| r.name.clone()).unwrap()
    }

    #[test]
    fn a_dead_middle_relay_is_skipped() {
        let p = chain(4);
        // Segments: [0] n0, [1] n1, [2] n2, [3] n3, [4] n4.
        let died = |k: usize| k == 2;
        assert_eq!(
            relink(&p, &died, 2, 1 << 20),
            Relink::Around {
                upstream: 1,
                downstream: 3,
                skipped: vec![2]
            }
        );
        // Two neighbours dead: one re-link around both.
        let died = |k: usize| k == 2 || k == 3;
        assert_eq!(
            relink(&p, &died, 3, 1 << 20),
            Relink::Around {
                upstream: 1,
                downstream: 4,
                skipped: vec![2, 3]
            }
        );
    }

    #[test]
    fn the_last_sink_leaves_nothing_to_relink() {
        let p = chain(3);
        assert_eq!(relink(&p, &|k| k == 3, 3, 1), Relink::NothingDownstream);
        assert_eq!(relink(&p, &|k| k >= 2, 2, 1), Relink::NothingDownstream);
    }

    #[test]
    fn the_plan_line_states_the_window() {
        assert!(describe(32 << 20).contains("its last 32.00 MiB (--replay-window"));
        assert!(describe(0).starts_with("re-link: off"));
    }

    #[test]
    fn the_first_sink_or_a_zero_window_cannot_be_relinked() {
        let p = chain(3);
        let Relink::Impossible(why) = relink(&p, &|k| k == 1, 1, 1 << 20) else {
            panic!("re-linked around the first sink");
        };
        assert!(matches!(why, NoRelink::FirstSink { .. }));
        assert!(
            why.to_string()
                .starts_with("[2] n1 died and was the first sink"),
            "{why}"
        );
        let Relink::Impossible(why) = relink(&p, &|k| k == 2, 2, 0) else {
            panic!("re-linked with the window off");
        };
        assert_eq!(
            why.to_string(),
            "[3] n2 died and re-linking is off (--replay-window 0): [4] n3 lost the stream"
        );
    }
}
