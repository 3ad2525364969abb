//! One stream to many hosts: the `--to HOST:CMD` sinks of a fan-out, planned as a
//! chain relay. The source part (the positional `HOST:CMD` segments, or rdpipe's
//! standard input when there are none) sends the stream once, to the first sink;
//! each sink's agent feeds its own command (or `> FILE`) and forwards the same
//! bytes to the next sink, so every link carries the stream once. The hops are
//! ordinary hops of a linear [`Pipeline`]; what makes a segment a sink (and its
//! outgoing hop a relay) is [`Pipeline::first_sink`].
//!
//! # Syntax
//!
//! `rdpipe [SOURCE-SEGMENT ...] --to HOST:CMD --to HOST:CMD ...`
//!
//! - Each `--to` is one segment (`HOST:CMD`, `HOST:'> FILE'`, `HOST:'>> FILE'`),
//!   or one per host of a Slurm hostlist (`--to 'n[001-064]:> /img'`);
//!   a sink that needs several commands uses a shell pipe inside CMD
//!   (`--to b1:'gunzip | zfs recv pool/x'`). A sink cannot be `< FILE`.
//! - The sinks are relayed in the order given; nothing comes back to rdpipe's
//!   standard output. A sink command's own stdout is shown on rdpipe's stderr,
//!   prefixed with its host, like its stderr.
//! - The chain runs at the slowest sink's speed: a relay forwards what its
//!   command has taken.

use super::{plan_chain, Action, Node, Pipeline, PlanError, RemoteHost};
use std::fmt::Write;

/// Plans `sources` (positional segments) followed by the `--to` `sinks`.
pub fn plan_fanout(
    sources: &[String],
    sinks: &[String],
    stdin_is_input: bool,
    data_addr: &dyn Fn(&RemoteHost) -> String,
) -> Result<Pipeline, PlanError> {
    if sinks.is_empty() {
        return super::plan(sources, stdin_is_input, data_addr);
    }
    let mut segments = sources
        .iter()
        .map(|a| super::parse_segment(a))
        .collect::<Result<Vec<_>, _>>()?;
    let first_sink = segments.len();
    for arg in sinks
        .iter()
        .map(|a| expand_hostlist_arg(a))
        .collect::<Result<Vec<_>, _>>()?
        .concat()
    {
        let seg = super::parse_segment(&arg)?;
        match seg.action {
            Action::ReadFile(_) => return Err(PlanError::SinkReads(arg)),
            Action::Relay => return Err(PlanError::SinkRelays(arg)),
            _ => {}
        }
        segments.push(seg);
    }
    let source_reads_file = segments
        .first()
        .is_some_and(|s| matches!(s.action, Action::ReadFile(_)));
    if first_sink == 0 && !stdin_is_input {
        return Err(PlanError::NoSource);
    }
    if first_sink > 0 && segments[0].action == Action::Relay && !stdin_is_input {
        return Err(PlanError::RelayWithoutInput(sources[0].clone()));
    }
    let mut p = plan_chain(
        segments,
        stdin_is_input && !source_reads_file,
        false,
        data_addr,
    );
    p.first_sink = Some(first_sink);
    Ok(p)
}

/// One `--to` (or `--from`) argument as the segments it names: a Slurm
/// hostlist in its host (`n[001-064]:CMD`) is one per host, in order
/// ([`super::hostlist`]).
pub(super) fn expand_hostlist_arg(arg: &str) -> Result<Vec<String>, PlanError> {
    match arg.split_once(':') {
        Some((host, cmd)) if !arg.starts_with('[') => Ok(super::hostlist::expand(host)?
            .into_iter()
            .map(|h| format!("{h}:{cmd}"))
            .collect()),
        _ => Ok(vec![arg.to_string()]),
    }
}

impl Pipeline {
    /// Whether segment `i` is a `--to` sink.
    pub fn is_sink(&self, i: usize) -> bool {
        self.first_sink.is_some_and(|f| i >= f)
    }

    /// The sinks' segment indices, in chain order (empty without `--to`).
    pub fn sinks(&self) -> std::ops::Range<usize> {
        match self.first_sink {
            Some(f) => f..self.segments.len(),
            None => 0..0,
        }
    }

    /// Whether segment `i` forwards its incoming stream to the next sink.
    pub fn relays(&self, i: usize) -> bool {
        self.is_sink(i) && i + 1 < self.segments.len()
    }

    /// The `-n` lines about the fan-out: the chain, who relays to whom.
    pub(super) fn describe_fanout(&self, s: &mut String) {
        let Some(first) = self.first_sink else { return };
        let source = match self.hop_into(Node::Segment(first)) {
            Some(h) => self.node_name(h.from),
            None => "nothing".into(),
        };
        let _ = writeln!(
            s,
            "fan-out: {} sink(s) by chain relay; the source sends each byte once; \
             the chain runs at the slowest sink's speed:",
            self.segments.len() - first
        );
        let _ = write!(s, "  {source}");
        for i in self.sinks() {
            let _ = write!(s, " -> {}", self.node_name(Node::Segment(i)));
        }
        let _ = writeln!(s);
        for i in self.sinks() {
            let what = if self.relays(i) {
                format!(
                    "feeds '{}' and relays the stream to {}",
                    self.segments[i].action,
                    self.node_name(Node::Segment(i + 1))
                )
            } else {
                format!("feeds '{}' (end of the chain)", self.segments[i].action)
            };
            let _ = writeln!(s, "  {}: {what}", self.node_name(Node::Segment(i)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Hop;

    use crate::tests::{addr, args as v};

    #[test]
    fn sinks_form_a_chain_after_the_source() {
        let p = plan_fanout(
            &v(&["src:zfs send -I a b"]),
            &v(&["b1:zfs recv pool/x", "b2:> /img", "b3:zfs recv pool/x"]),
            false,
            &addr,
        )
        .unwrap();
        assert_eq!(p.first_sink, Some(1));
        assert_eq!(p.sinks(), 1..4);
        assert!(!p.is_sink(0) && p.is_sink(1) && p.is_sink(3));
        assert!(p.relays(1) && p.relays(2) && !p.relays(3));
        let pairs: Vec<(Node, Node)> = p.hops.iter().map(|h| (h.from, h.to)).collect();
        assert_eq!(
            pairs,
            [
                (Node::Segment(0), Node::Segment(1)),
                (Node::Segment(1), Node::Segment(2)),
                (Node::Segment(2), Node::Segment(3)),
            ]
        );
        // Remote downstream ends listen, at their data address.
        assert_eq!(
            p.hops[1],
            Hop {
                from: Node::Segment(1),
                to: Node::Segment(2),
                listener: Node::Segment(2),
                address: "b2.data".into(),
            }
        );
        assert!(p.hop_into(Node::Stdout).is_none());
        let text = p.describe(&|_| String::new());
        assert!(text.contains("fan-out: 3 sink(s) by chain relay"), "{text}");
        assert!(
            text.contains("  [1] src -> [2] b1 -> [3] b2 -> [4] b3\n"),
            "{text}"
        );
        assert!(
            text.contains("[2] b1: feeds 'zfs recv pool/x' and relays the stream to [3] b2"),
            "{text}"
        );
        assert!(
            text.contains("[4] b3: feeds 'zfs recv pool/x' (end of the chain)"),
            "{text}"
        );
    }

    #[test]
    fn stdin_is_the_source_without_source_segments() {
        let p = plan_fanout(&[], &v(&["n1:> /img", "n2:> /img"]), true, &addr).unwrap();
        assert_eq!(p.first_sink, Some(0));
        assert_eq!(p.hops[0].from, Node::Stdin);
        assert_eq!(p.hops.len(), 2);
        assert!(p
            .describe(&|_| String::new())
            .contains("  rdpipe stdin -> [1] n1 -> [2] n2\n"));
        // A source reading a file ignores stdin.
        let p = plan_fanout(&v(&["a:< f"]), &v(&["n1:cat"]), true, &addr).unwrap();
        assert_eq!(p.hops.len(), 1);
        assert_eq!(p.hops[0].from, Node::Segment(0));
    }

    #[test]
    fn local_sinks_connect_outward() {
        let p = plan_fanout(&v(&["h1:cat"]), &v(&["-:> a", "h2:> b"]), false, &addr).unwrap();
        // h1 -> local: the remote sender listens, the local end connects.
        assert_eq!(p.hops[0].listener, Node::Segment(0));
        // local -> h2: h2 listens.
        assert_eq!(p.hops[1].listener, Node::Segment(2));
        assert_eq!(p.hops[1].address, "h2.data");
    }

    #[test]
    fn bad_fanouts_are_one_line_errors() {
        let e = plan_fanout(&v(&["a:cat"]), &v(&["b:< f"]), false, &addr).unwrap_err();
        assert_eq!(e, PlanError::SinkReads("b:< f".into()));
        assert!(e.to_string().contains("cannot read a file"));
        let e = plan_fanout(&[], &v(&["b:cat"]), false, &addr).unwrap_err();
        assert_eq!(e, PlanError::NoSource);
        let e = plan_fanout(&v(&["a:cat"]), &v(&["nocolon"]), false, &addr).unwrap_err();
        assert_eq!(e, PlanError::NoColon("nocolon".into()));
        let e = plan_fanout(&v(&["a:cat"]), &v(&["b:"]), false, &addr).unwrap_err();
        assert_eq!(e, PlanError::SinkRelays("b:".into()));
        assert!(e.to_string().contains("a sink needs a command"));
        let e = plan_fanout(&v(&["a:"]), &v(&["b:cat"]), false, &addr).unwrap_err();
        assert_eq!(e, PlanError::RelayWithoutInput("a:".into()));
        for e in [PlanError::NoSource, PlanError::SinkReads("b:< f".into())] {
            assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn a_relay_only_segment_may_be_part_of_the_source() {
        // a:'< f' gw: --to b:'> f': gw forwards, b is the only sink.
        let p = plan_fanout(&v(&["a:< f", "gw:"]), &v(&["b:> f"]), false, &addr).unwrap();
        assert_eq!(p.segments[1].action, Action::Relay);
        assert!(!p.is_sink(1) && p.is_sink(2) && !p.relays(1));
        assert_eq!(p.hops.len(), 2);
    }

    #[test]
    fn without_sinks_it_is_a_plain_pipeline() {
        let p = plan_fanout(&v(&["a:cat", "b:rev"]), &[], false, &addr).unwrap();
        assert_eq!(p.first_sink, None);
        assert_eq!(p.sinks(), 0..0);
        assert_eq!(
            p,
            crate::plan(&v(&["a:cat", "b:rev"]), false, &addr).unwrap()
        );
    }
}
