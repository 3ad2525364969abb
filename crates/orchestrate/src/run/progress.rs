//! The progress line ([`super::Config::progress`]): rdpipe sends `PROGRESS` to
//! every agent and draws one line from their `SIZE` / `BYTES` reports and its own
//! transfers. When the source's size is known (the last `< FILE` segment, else
//! rdpipe's stdin when it is a regular file), the line is about the source, as
//! `pv FILE | …` would be: bytes sent from it, rate, percentage and ETA (a command
//! downstream may change the data's size, so the source is the only place a
//! percentage means anything). Otherwise the bytes and the rate are those of the
//! last hop that has carried any data (what has arrived furthest down the
//! pipeline, counted by the receiving end: usually the last hop, an earlier one
//! while a command buffers or when the last command writes nothing). Messages,
//! log events and forwarded stderr lines clear the line and draw it again
//! (`rdpipe-term`). A gather's (`--from`) line shows the bytes all its
//! sources have sent, and how many sources are done and running.

use super::{tool, Runner};
use rdpipe_control::Direction;
use rdpipe_plan::{Action, Node};
use rdpipe_term::progress::Progress;
use std::fs::File;
use std::sync::atomic::Ordering;

impl Runner {
    /// Starts the progress line, if wanted and there is a transfer to show.
    pub(super) fn start_progress(&mut self) {
        if !self.config.progress || self.plan.hops.is_empty() {
            return;
        }
        if self.plan.hop_from(Node::Stdin).is_some() {
            use std::os::fd::AsFd;
            self.ends.stdin_size = std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map(File::from)
                .and_then(|f| f.metadata())
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len());
        }
        self.progress = Some(Progress::new(tool(), None).start());
    }

    /// Bytes carried so far through `node`'s `dir` transfer (its report, else its
    /// last `BYTES`; rdpipe's own ends from their counters).
    fn carried(&self, node: Node, dir: Direction) -> Option<u64> {
        match (node, dir) {
            (Node::Stdout, Direction::In) => Some(self.ends.sink_bytes.load(Ordering::Relaxed)),
            (Node::Stdin, Direction::Out) => Some(self.ends.source_bytes.load(Ordering::Relaxed)),
            (Node::Segment(i), d) => {
                let s = &self.segs[i];
                s.reports[d.index()]
                    .as_ref()
                    .map(|r| r.bytes)
                    .or(s.bytes[d.index()])
            }
            _ => None,
        }
    }

    /// (sent, size) of the pipeline's source, when its size is known: the last
    /// `< FILE` segment (what comes before it is discarded), else rdpipe's stdin.
    fn source_progress(&self) -> Option<(u64, u64)> {
        let file = self
            .plan
            .segments
            .iter()
            .rposition(|s| matches!(s.action, Action::ReadFile(_)));
        let (node, size) = match file {
            Some(i) => (Node::Segment(i), self.segs[i].size?),
            None => (Node::Stdin, self.ends.stdin_size?),
        };
        self.plan.hop_from(node)?;
        Some((self.carried(node, Direction::Out).unwrap_or(0), size))
    }

    /// Hands the current counts to the progress line (see the module docs).
    pub(super) fn update_progress(&self) {
        let Some(t) = &self.progress else { return };
        // A gather: every source's bytes sent, and how many have ended.
        if let Some(g) = &self.plan.gather {
            let sent: u64 = g
                .sources
                .iter()
                .filter_map(|s| self.carried(Node::Segment(s.seg), Direction::Out))
                .sum();
            let done = g
                .sources
                .iter()
                .filter(|s| self.segs[s.seg].ended.is_some() || self.segs[s.seg].exited)
                .count();
            t.update_shown(sent);
            t.set_note(Some(&format!(
                "sources: {done} done, {} running",
                g.sources.len() - done
            )));
            return;
        }
        // The furthest hop the data has reached (a last command that writes
        // nothing, `cat > /dev/null`, leaves an empty last hop).
        let shown = self
            .plan
            .hops
            .iter()
            .rev()
            .map(|h| {
                self.carried(h.to, Direction::In)
                    .or_else(|| self.carried(h.from, Direction::Out))
                    .unwrap_or(0)
            })
            .find(|&n| n > 0)
            .unwrap_or(0);
        t.update_shown(shown);
        if let Some((done, total)) = self.source_progress() {
            t.update_source(done);
            t.set_total(total);
        }
    }
}
