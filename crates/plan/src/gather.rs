//! Many streams into one: the `--from HOST:CMD` sources of a gather, each sent
//! over a hop of its own straight to the sink's host (a star, never a chain:
//! no source carries another's bytes).
//!
//! # Syntax
//!
//! `rdpipe [--each | --tag] --from HOST:CMD [--from HOST:CMD ...] [SINK-SEGMENT ...]`
//!
//! - Each `--from` is one source (`HOST:CMD` or `HOST:'< FILE'`), or one per
//!   host of a Slurm hostlist (`--from 'pc[1-8]:collect'`). A source cannot
//!   write a file or relay (it has no input).
//! - The positional segments after them are the sink pipeline; with none, the
//!   gathered stream comes out on rdpipe's standard output.
//!
//! # Line merge (the default)
//!
//! Each source's hop ends in a *lane* ([`Action::Lane`]): a segment of the
//! plan with a hop of its own, run inside the agent of the *merge segment*
//! (the first sink segment, or a local relay-only segment when there is
//! none), which writes every source's lines into that segment's one input,
//! whole and in each source's order ([`Gather::merge`]). A lane is planned as
//! a segment so that its hop is listened, connected, discovered, reported
//! and verified as every other hop is; only its agent is shared.
//!
//! # `--each`
//!
//! The sink segments run once per source: source `k`'s hop feeds instance
//! `k` of the first sink segment, and the instance's stream continues
//! through its own instances of the later ones; each chain is an ordinary
//! linear chain of the plan. In an instance's `> FILE` / `>> FILE`, `%h`
//! is the source's host, `%i` its index (1-based), `%%` a `%`
//! ([`expand_source_path`]).

use super::{plan_chain, Action, Host, Node, Pipeline, PlanError, RemoteHost, Segment};
use std::fmt::Write;

/// How the sources' streams are gathered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatherMode {
    /// One stream of whole lines from every source; with `tag`, each line
    /// starts with its source's [`Source::tag`].
    Lines {
        /// `--tag`.
        tag: bool,
    },
    /// `--each`: the sink segments run once per source.
    Each,
}

/// One `--from` source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// 1-based, in the order given (`RDPIPE_SOURCE_INDEX`, `%i`).
    pub index: usize,
    /// Its host as written (`RDPIPE_SOURCE`, `%h`; `local` for `-:`).
    pub host: String,
    /// Its segment.
    pub seg: usize,
    /// The segments that carry only this source's stream: its lane (line
    /// merge) or its instances of the sink segments (`--each`).
    pub own: Vec<usize>,
    /// `--tag`'s prefix: `HOST: `, or `HOST[INDEX]: ` when the host has
    /// several sources.
    pub tag: String,
}

/// The gather of a `--from` run ([`Pipeline::gather`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gather {
    /// Line merge or `--each`.
    pub mode: GatherMode,
    /// The sources, in order.
    pub sources: Vec<Source>,
    /// Line merge: the segment whose agent runs the lanes and takes their
    /// merged lines as its input.
    pub merge: Option<usize>,
}

/// `path` of an `--each` instance's `> FILE`: `%h` the source's host, `%i`
/// its index, `%%` a `%`; any other `%` stays as written.
pub fn expand_source_path(path: &str, host: &str, index: usize) -> String {
    let mut out = String::with_capacity(path.len() + host.len());
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('h') => out.push_str(host),
            Some('i') => out.push_str(&index.to_string()),
            Some('%') => out.push('%'),
            _ => {
                out.push('%');
                continue;
            }
        }
        chars.next();
    }
    out
}

/// Plans the `--from` `sources` into the positional `sinks` segments.
pub fn plan_gather(
    sources: &[String],
    sinks: &[String],
    mode: GatherMode,
    data_addr: &dyn Fn(&RemoteHost) -> String,
) -> Result<Pipeline, PlanError> {
    let mut srcs = Vec::new();
    for arg in sources
        .iter()
        .map(|a| super::fanout::expand_hostlist_arg(a))
        .collect::<Result<Vec<_>, _>>()?
        .concat()
    {
        let seg = super::parse_segment(&arg)?;
        match seg.action {
            Action::WriteFile { .. } => return Err(PlanError::SourceWrites(arg)),
            Action::Relay => return Err(PlanError::SourceRelays(arg)),
            _ => {}
        }
        srcs.push(seg);
    }
    if srcs.is_empty() {
        return Err(PlanError::Empty);
    }
    let sink_segs = sinks
        .iter()
        .map(|a| super::parse_segment(a))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(first) = sink_segs.first() {
        if matches!(first.action, Action::ReadFile(_)) {
            return Err(PlanError::GatherSinkReads(sinks[0].clone()));
        }
    }
    let n = srcs.len();
    let tags = tags(&srcs);
    let mut p = Pipeline {
        segments: vec![],
        hops: vec![],
        first_sink: None,
        gather: None,
    };
    let mut gather = Gather {
        mode,
        sources: vec![],
        merge: None,
    };
    match mode {
        GatherMode::Lines { .. } => {
            // The merge segment: the first sink segment, or a local relay
            // whose output is rdpipe's stdout.
            let mut merge_chain = sink_segs;
            if merge_chain.is_empty() {
                merge_chain.push(Segment {
                    host: Host::Local,
                    action: Action::Relay,
                });
            }
            let merge_host = merge_chain[0].host.clone();
            let with_stdout = !matches!(
                merge_chain[merge_chain.len() - 1].action,
                Action::WriteFile { .. }
            );
            for (k, s) in srcs.into_iter().enumerate() {
                let lane = Segment {
                    host: merge_host.clone(),
                    action: Action::Lane { source: k + 1 },
                };
                let base = p.segments.len();
                gather.sources.push(Source {
                    index: k + 1,
                    host: s.host.label().to_string(),
                    seg: base,
                    own: vec![base + 1],
                    tag: tags[k].clone(),
                });
                p.append(plan_chain(vec![s, lane], false, false, data_addr));
            }
            gather.merge = Some(p.segments.len());
            p.append(plan_chain(merge_chain, false, with_stdout, data_addr));
        }
        GatherMode::Each => {
            if sink_segs.is_empty() {
                return Err(PlanError::EachWithoutSink);
            }
            for (k, s) in srcs.into_iter().enumerate() {
                let host = s.host.label().to_string();
                let base = p.segments.len();
                let mut chain = vec![s];
                chain.extend(sink_segs.iter().map(|seg| {
                    let action = match &seg.action {
                        Action::WriteFile { path, append } => Action::WriteFile {
                            path: expand_source_path(path, &host, k + 1),
                            append: *append,
                        },
                        a => a.clone(),
                    };
                    Segment {
                        host: seg.host.clone(),
                        action,
                    }
                }));
                gather.sources.push(Source {
                    index: k + 1,
                    host,
                    seg: base,
                    own: (base + 1..base + chain.len()).collect(),
                    tag: tags[k].clone(),
                });
                p.append(plan_chain(chain, false, false, data_addr));
            }
            // Two instances writing one file would replace or interleave
            // each other's streams.
            let mut written = std::collections::HashSet::new();
            for (k, seg) in p.segments.iter().enumerate() {
                if let Action::WriteFile { path, .. } = &seg.action {
                    if !written.insert((seg.host.label(), path.as_str())) {
                        let arg = sinks[(k % (sink_segs.len() + 1)) - 1].clone();
                        return Err(PlanError::EachSameFile {
                            arg,
                            path: path.clone(),
                        });
                    }
                }
            }
        }
    }
    debug_assert!(n == gather.sources.len());
    p.gather = Some(gather);
    Ok(p)
}

/// Each source's `--tag` prefix: `HOST: `, or `HOST[INDEX]: ` where a host
/// has several sources.
fn tags(srcs: &[Segment]) -> Vec<String> {
    srcs.iter()
        .enumerate()
        .map(|(k, s)| {
            let label = s.host.label();
            let several = srcs.iter().filter(|o| o.host.label() == label).count() > 1;
            if several {
                format!("{label}[{}]: ", k + 1)
            } else {
                format!("{label}: ")
            }
        })
        .collect()
}

impl Pipeline {
    /// Appends `other`'s segments and hops after this plan's (its segment
    /// numbers shifted), as a chain of its own.
    fn append(&mut self, other: Pipeline) {
        let base = self.segments.len();
        let shift = |n: Node| match n {
            Node::Segment(i) => Node::Segment(i + base),
            n => n,
        };
        self.segments.extend(other.segments);
        self.hops.extend(other.hops.into_iter().map(|mut h| {
            h.from = shift(h.from);
            h.to = shift(h.to);
            h.listener = shift(h.listener);
            h
        }));
    }

    /// The `--from` source whose own stream segment `i` carries (the source
    /// itself, its lane, or one of its `--each` instances).
    pub fn source_of(&self, i: usize) -> Option<&Source> {
        self.gather
            .as_ref()?
            .sources
            .iter()
            .find(|s| s.seg == i || s.own.contains(&i))
    }

    /// Line merge: the segment whose agent runs lane `i` (a segment whose
    /// action is [`Action::Lane`]).
    pub fn merge_of_lane(&self, i: usize) -> Option<usize> {
        match self.segments.get(i)?.action {
            Action::Lane { .. } => self.gather.as_ref()?.merge,
            _ => None,
        }
    }

    /// The lanes a merge segment `i` runs, in source order (empty for any
    /// other segment).
    pub fn lanes_of(&self, i: usize) -> Vec<usize> {
        match &self.gather {
            Some(g) if g.merge == Some(i) => g.sources.iter().flat_map(|s| s.own.clone()).collect(),
            _ => vec![],
        }
    }

    /// The `-n` lines about a gather: who sends to whom, and how.
    pub(super) fn describe_gather(&self, s: &mut String) {
        let Some(g) = &self.gather else { return };
        match (g.mode, g.merge) {
            (GatherMode::Lines { tag }, Some(m)) => {
                let _ = writeln!(
                    s,
                    "gather: {} source(s) into {} by line merge: every line whole, each \
                     source's lines in order, sources taken in turn{}:",
                    g.sources.len(),
                    self.node_name(Node::Segment(m)),
                    if tag {
                        ", each line tagged with its source"
                    } else {
                        ""
                    }
                );
                for src in &g.sources {
                    let _ = writeln!(
                        s,
                        "  {} -> lane {} of {}{}",
                        self.node_name(Node::Segment(src.seg)),
                        src.index,
                        self.node_name(Node::Segment(m)),
                        if tag {
                            format!(" (lines tagged {:?})", src.tag)
                        } else {
                            String::new()
                        }
                    );
                }
            }
            _ => {
                let _ = writeln!(
                    s,
                    "gather: {} source(s), each into its own instance of the sink segments (--each):",
                    g.sources.len()
                );
                for src in &g.sources {
                    let _ = write!(s, "  {}", self.node_name(Node::Segment(src.seg)));
                    for &o in &src.own {
                        let _ = write!(
                            s,
                            " -> {} '{}'",
                            self.node_name(Node::Segment(o)),
                            self.segments[o].action
                        );
                    }
                    let _ = writeln!(
                        s,
                        " (RDPIPE_SOURCE={} RDPIPE_SOURCE_INDEX={})",
                        src.host, src.index
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tests::{addr, args as v};

    #[test]
    fn line_merge_gives_each_source_a_lane_of_the_merge_segment() {
        let p = plan_gather(
            &v(&["pc[1-2]:collect", "pc3:< /d"]),
            &v(&["pc0:sort", "pc0:> /log"]),
            GatherMode::Lines { tag: true },
            &addr,
        )
        .unwrap();
        let g = p.gather.clone().unwrap();
        assert_eq!(g.merge, Some(6));
        assert_eq!(g.sources.len(), 3);
        assert_eq!(
            g.sources
                .iter()
                .map(|s| (s.seg, s.own.clone()))
                .collect::<Vec<_>>(),
            [(0, vec![1]), (2, vec![3]), (4, vec![5])]
        );
        assert_eq!(p.segments[3].action, Action::Lane { source: 2 });
        assert_eq!(p.segments[3].host.label(), "pc0");
        assert_eq!(p.lanes_of(6), [1, 3, 5]);
        assert_eq!(p.merge_of_lane(5), Some(6));
        assert_eq!(p.merge_of_lane(6), None);
        let pairs: Vec<(Node, Node)> = p.hops.iter().map(|h| (h.from, h.to)).collect();
        assert_eq!(
            pairs,
            [
                (Node::Segment(0), Node::Segment(1)),
                (Node::Segment(2), Node::Segment(3)),
                (Node::Segment(4), Node::Segment(5)),
                (Node::Segment(6), Node::Segment(7)),
            ]
        );
        // The lane (remote) listens at the sink's data address.
        assert_eq!(p.hops[1].listener, Node::Segment(3));
        assert_eq!(p.hops[1].address, "pc0.data");
        assert_eq!(p.links(6).0, super::super::Link::None);
        assert_eq!(p.source_of(3).unwrap().host, "pc2");
        assert_eq!(g.sources[1].tag, "pc2: ");
        let text = p.describe(&|_| String::new());
        assert!(
            text.contains("gather: 3 source(s) into [7] pc0 by line merge"),
            "{text}"
        );
        assert!(
            text.contains("  [3] pc2 -> lane 2 of [7] pc0 (lines tagged \"pc2: \")"),
            "{text}"
        );
    }

    #[test]
    fn without_sink_segments_the_lines_come_out_on_stdout() {
        let p = plan_gather(
            &v(&["a:x", "a:y"]),
            &[],
            GatherMode::Lines { tag: false },
            &addr,
        )
        .unwrap();
        let m = p.gather.as_ref().unwrap().merge.unwrap();
        assert_eq!(m, 4);
        assert_eq!(p.segments[m].host, Host::Local);
        assert_eq!(p.segments[m].action, Action::Relay);
        // Local lanes connect out to the remote sources, which listen.
        assert_eq!(p.hops[0].listener, Node::Segment(0));
        assert_eq!(p.hops[0].address, "a.data");
        assert_eq!(p.hop_into(Node::Stdout).unwrap().from, Node::Segment(m));
        let g = p.gather.unwrap();
        assert_eq!(
            (g.sources[0].tag.as_str(), g.sources[1].tag.as_str()),
            ("a[1]: ", "a[2]: ")
        );
    }

    #[test]
    fn each_source_gets_its_own_instances_of_the_sink_segments() {
        let p = plan_gather(
            &v(&["pc1:a", "pc2:b"]),
            &v(&["pc0:gzip", "pc0:> /log/%h-%i.gz"]),
            GatherMode::Each,
            &addr,
        )
        .unwrap();
        assert_eq!(p.segments.len(), 6);
        let g = p.gather.clone().unwrap();
        assert_eq!(g.merge, None);
        assert_eq!(g.sources[1].seg, 3);
        assert_eq!(g.sources[1].own, [4, 5]);
        assert_eq!(
            p.segments[5].action,
            Action::WriteFile {
                path: "/log/pc2-2.gz".into(),
                append: false
            }
        );
        assert!(p.hop_into(Node::Stdout).is_none());
        assert_eq!(p.hops.len(), 4);
        assert_eq!(p.hops[2].from, Node::Segment(3));
        assert_eq!(p.source_of(2).unwrap().index, 1);
        let text = p.describe(&|_| String::new());
        assert!(
            text.contains(
                "  [4] pc2 -> [5] pc0 'gzip' -> [6] pc0 '> /log/pc2-2.gz' \
                 (RDPIPE_SOURCE=pc2 RDPIPE_SOURCE_INDEX=2)"
            ),
            "{text}"
        );
    }

    #[test]
    fn bad_gathers_are_one_line_errors() {
        let lines = GatherMode::Lines { tag: false };
        let e = plan_gather(&v(&["a:> f"]), &[], lines, &addr).unwrap_err();
        assert_eq!(e, PlanError::SourceWrites("a:> f".into()));
        let e = plan_gather(&v(&["a:"]), &[], lines, &addr).unwrap_err();
        assert_eq!(e, PlanError::SourceRelays("a:".into()));
        let e = plan_gather(&v(&["a:x"]), &v(&["b:< f"]), lines, &addr).unwrap_err();
        assert_eq!(e, PlanError::GatherSinkReads("b:< f".into()));
        let e = plan_gather(&v(&["a:x"]), &[], GatherMode::Each, &addr).unwrap_err();
        assert_eq!(e, PlanError::EachWithoutSink);
        // --each instances that would write one file.
        for (srcs, sink) in [
            (&["a:x", "b:y"][..], "c:> /log/out"),
            (&["a:x", "a:y"][..], "c:>> /log/%h"),
        ] {
            let e = plan_gather(&v(srcs), &v(&[sink]), GatherMode::Each, &addr).unwrap_err();
            assert!(
                matches!(&e, PlanError::EachSameFile { arg, .. } if arg == sink),
                "{e}"
            );
            assert!(e.to_string().contains("%i"), "{e}");
        }
        assert!(plan_gather(
            &v(&["a:x", "a:y"]),
            &v(&["c:> /l/%h.%i"]),
            GatherMode::Each,
            &addr
        )
        .is_ok());
        let e = plan_gather(&v(&["a[2-1]:x"]), &[], lines, &addr).unwrap_err();
        assert!(matches!(e, PlanError::BadHostList { .. }));
        for e in [
            PlanError::SourceWrites("a:> f".into()),
            PlanError::EachWithoutSink,
            PlanError::FromAndTo,
        ] {
            assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn source_paths_expand_host_index_and_percent() {
        assert_eq!(expand_source_path("/l/%h.%i", "pc3", 3), "/l/pc3.3");
        assert_eq!(expand_source_path("100%%-%h", "a", 1), "100%-a");
        assert_eq!(expand_source_path("%x%", "a", 1), "%x%");
        assert_eq!(expand_source_path("%%h", "a", 1), "%h");
    }
}
