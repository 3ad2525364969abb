//! Re-linking a fan-out chain around a dead relay, the pure part: given which
//! sinks' agents died, which live relay upstream should connect to which live
//! sink downstream (the hosts in between skipped), or why the chain cannot be
//! re-linked, as the one-line reason the later sinks fail with.
//!
//! The bytes a resumed sink misses must still be in the upstream relay's
//! replay window ([`crate::agent::replay`]); whether they are is settled by
//! the resume exchange itself ([`rdpipe_wire::resume`]), not here.

use crate::plan::{Node, Pipeline};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan_fanout;

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
