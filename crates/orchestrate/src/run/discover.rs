//! Fabric address discovery in the running pipeline: the agents' `FABRIC`
//! reports (rdpipe's own addresses for its stdin and stdout ends), the `PORT`
//! announcements held back until both ends of a hop have reported, the probes
//! of a listener's addresses from the connecting side when no subnet is shared
//! (`PROBE`, answered by `REACH`), and the address each hop's connecting side
//! is told (decided by the pure [`super::fabric::choose`] and
//! [`super::fabric::after_probe`], said at `-v`, kept for `--json`).
//!
//! A hop where discovery runs has its listener bound to all addresses (see
//! [`super::agent_args::agent_args`]), so that whichever address is chosen reaches it.

use super::fabric::{self, Choice, Origin};
use super::{tool, Runner};
use rdpipe_control::{Direction, NetAddr, Reach, ToAgent};
use rdpipe_plan::{parse_data_host, Node, Pipeline};
use rdpipe_wire::TransportPref;
use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use tracing::debug;

/// What rdpipe knows for discovery.
pub(super) struct Discovery {
    /// Per hop: where its planned address comes from.
    pub(super) origins: Vec<Origin>,
    /// Per hop: whether discovery runs for it.
    pub(super) runs: Vec<bool>,
    /// Per segment: its host's RDMA-capable addresses, once reported.
    fabric: Vec<Option<Vec<NetAddr>>>,
    /// This machine's, once needed (rdpipe's own ends connect from here).
    local: Option<Vec<NetAddr>>,
    /// `PORT`s not relayed yet: (hop, port).
    pending: Vec<(usize, u16)>,
    /// Hops being probed from their connecting side: (hop, port, the
    /// addresses asked about, in order).
    probing: Vec<(usize, u16, Vec<IpAddr>)>,
    /// Per hop: the address its connecting side was told, and where it came
    /// from (an [`Origin`]'s word, or `discovered`).
    pub(super) told: Vec<Option<(String, &'static str)>>,
}

/// The `--data-host` overrides by host (unparsable ones were refused by the plan).
pub fn overrides(data_host: &[String]) -> HashMap<String, String> {
    data_host
        .iter()
        .filter_map(|d| parse_data_host(d).ok())
        .collect()
}

/// Per hop of `p`: whether discovery runs for it.
pub fn discovery_hops(
    p: &Pipeline,
    data_host: &[String],
    t: TransportPref,
    via: &'static str,
) -> Vec<bool> {
    let o = overrides(data_host);
    p.hops
        .iter()
        .map(|h| fabric::discovers(fabric::origin(p, h, &o, via), t))
        .collect()
}

/// `rdpipe -n`'s section on data addresses (empty when no hop crosses hosts).
pub fn describe(p: &Pipeline, data_host: &[String], t: TransportPref, via: &'static str) -> String {
    let o = overrides(data_host);
    let mut s = String::new();
    for h in &p.hops {
        let origin = fabric::origin(p, h, &o, via);
        if origin == Origin::Loopback {
            continue;
        }
        let host = match h.listener {
            Node::Segment(i) => p.segments[i].host.label(),
            Node::Stdin | Node::Stdout => "rdpipe",
        };
        let note = fabric::plan_note(origin, t, &h.address);
        s += &format!(
            "  {} -> {}: data address of {host}: {note}\n",
            p.node_name(h.from),
            p.node_name(h.to)
        );
    }
    if s.is_empty() {
        s
    } else {
        format!("data addresses:\n{s}")
    }
}

impl Discovery {
    pub(super) fn new(
        p: &Pipeline,
        data_host: &[String],
        t: TransportPref,
        via: &'static str,
    ) -> Discovery {
        let o = overrides(data_host);
        let origins: Vec<Origin> = p
            .hops
            .iter()
            .map(|h| fabric::origin(p, h, &o, via))
            .collect();
        Discovery {
            runs: origins.iter().map(|&o| fabric::discovers(o, t)).collect(),
            origins,
            fabric: vec![None; p.segments.len()],
            local: None,
            pending: Vec::new(),
            probing: Vec::new(),
            told: vec![None; p.hops.len()],
        }
    }
}

impl Runner {
    /// Segment `i`'s `FABRIC` line: relay the `PORT`s that waited for it.
    pub(super) async fn fabric_reported(&mut self, i: usize, addrs: Vec<NetAddr>) {
        // A merge segment's lanes are on its host.
        for l in self.plan.lanes_of(i) {
            self.disc.fabric[l] = Some(addrs.clone());
        }
        self.disc.fabric[i] = Some(addrs);
        let pending = std::mem::take(&mut self.disc.pending);
        for (k, port) in pending {
            self.relay_hop(k, port).await;
        }
    }

    /// The RDMA-capable addresses of `node`'s host, once known.
    fn fabric_of(&mut self, node: Node) -> Option<Vec<NetAddr>> {
        match node {
            Node::Segment(i) => self.disc.fabric[i].clone(),
            Node::Stdin | Node::Stdout => Some(
                self.disc
                    .local
                    .get_or_insert_with(rdpipe_agent::inventory::rdma_networks)
                    .clone(),
            ),
        }
    }

    /// Hop `k`'s listener listens on `port`: tell the connecting side where to
    /// connect, once both ends reported their addresses when discovery runs
    /// (and, without a shared subnet, once the connecting side probed them).
    pub(super) async fn relay_hop(&mut self, k: usize, port: u16) {
        let hop = self.plan.hops[k].clone();
        let busy = self.disc.told[k].is_some()
            || self.disc.pending.iter().any(|&(h, _)| h == k)
            || self.disc.probing.iter().any(|(h, ..)| *h == k);
        if busy {
            // A second PORT for one hop (only a misbehaving agent sends one).
            debug!("hop {}: PORT again (ignored)", k + 1);
            return;
        }
        if !self.disc.runs[k] {
            let from = self.disc.origins[k].as_str();
            return self.tell(k, port, hop.address.clone(), from).await;
        }
        let (Some(there), Some(here)) = (
            self.fabric_of(hop.listener),
            self.fabric_of(hop.connector()),
        ) else {
            debug!("hop {}: waiting for both ends' FABRIC", k + 1);
            self.disc.pending.push((k, port));
            return;
        };
        let given: Vec<IpAddr> = (hop.address.as_str(), 0)
            .to_socket_addrs()
            .map(|a| a.map(|a| a.ip()).collect())
            .unwrap_or_default();
        match fabric::choose(&given, &there, &here) {
            Choice::Probe(addrs) => self.probe(k, port, addrs, here).await,
            c => self.decided(k, port, c).await,
        }
    }

    /// No shared subnet for hop `k`: its connecting side probes `addrs` (an
    /// agent answers with `REACH`; rdpipe's own ends probe from here, off the
    /// event loop, with `mine`, this machine's RDMA-capable addresses, and the
    /// result comes back as an event).
    async fn probe(&mut self, k: usize, port: u16, addrs: Vec<IpAddr>, mine: Vec<NetAddr>) {
        self.disc.probing.push((k, port, addrs.clone()));
        let hop = &self.plan.hops[k];
        match hop.connector() {
            Node::Segment(j) => {
                let dir = hop.side_of(Node::Segment(j)).unwrap_or(Direction::Out);
                let order = ToAgent::Probe { dir, port, addrs };
                debug!(
                    "hop {}: no shared subnet: telling [{}] to {order}",
                    k + 1,
                    j + 1
                );
                self.send(j, &order).await;
            }
            Node::Stdin | Node::Stdout => {
                debug!(
                    "hop {}: no shared subnet: probing {addrs:?} from here",
                    k + 1
                );
                let tx = self.events.tx.clone();
                tokio::task::spawn_blocking(move || {
                    let r = rdpipe_agent::reach::probe(
                        &addrs,
                        port,
                        &mine,
                        rdpipe_agent::reach::PROBE_TIMEOUT,
                    );
                    let _ = tx.send(super::Event::Reached(k, r));
                });
            }
        }
    }

    /// Segment `j`'s `REACH` for its `dir` transfer: decide the hop that waited.
    pub(super) async fn reach_reported(
        &mut self,
        j: usize,
        dir: Direction,
        results: Vec<(IpAddr, Reach)>,
    ) {
        let me = Node::Segment(j);
        let hop = |k: usize| {
            let h = &self.plan.hops[k];
            h.connector() == me && h.side_of(me) == Some(dir)
        };
        match self.disc.probing.iter().find(|(k, ..)| hop(*k)) {
            Some(&(k, ..)) => self.probed(k, results).await,
            None => debug!("[{}] REACH {} for no probe (ignored)", j + 1, dir.as_str()),
        }
    }

    /// Hop `k`'s probe found `results`: decide it, on the addresses asked about
    /// only, in the order asked (one not answered for counts as silent).
    pub(super) async fn probed(&mut self, k: usize, results: Vec<(IpAddr, Reach)>) {
        let Some(at) = self.disc.probing.iter().position(|(h, ..)| *h == k) else {
            return;
        };
        let (k, port, asked) = self.disc.probing.remove(at);
        let found: Vec<(IpAddr, Reach)> = asked
            .into_iter()
            .map(|ip| {
                let r = results.iter().find(|(a, _)| *a == ip).map(|(_, r)| *r);
                (ip, r.unwrap_or(Reach::Silent))
            })
            .collect();
        self.decided(k, port, fabric::after_probe(&found)).await;
    }

    /// Hop `k` decided by discovery (`c`): say so at `-v`, then tell.
    async fn decided(&mut self, k: usize, port: u16, c: Choice) {
        let hop = self.plan.hops[k].clone();
        let listener = self.host_name(hop.listener);
        let why = fabric::reason(
            &hop.address,
            self.disc.origins[k].as_str(),
            &listener,
            &self.host_name(hop.connector()),
            &c,
        );
        let addr = fabric::address(&hop.address, &c);
        let from = match c {
            Choice::Switch(..) => "discovered",
            _ => self.disc.origins[k].as_str(),
        };
        // (Not `A -> B:`: those lines are the hops' reports.)
        let connector = match hop.connector() {
            Node::Segment(_) => self.plan.node_name(hop.connector()),
            Node::Stdin | Node::Stdout => "rdpipe".into(),
        };
        let line = format!(
            "{}: data address {addr} for {connector} ({why})",
            self.plan.node_name(hop.listener),
        );
        debug!("{line}");
        if self.config.verbose > 0 {
            rdpipe_term::say(tool(), &line);
        }
        self.tell(k, port, addr, from).await;
    }

    /// Tells hop `k`'s connecting side to connect to `addr`:`port`.
    async fn tell(&mut self, k: usize, port: u16, addr: String, from: &'static str) {
        let hop = self.plan.hops[k].clone();
        self.disc.told[k] = Some((addr.clone(), from));
        match hop.connector() {
            Node::Stdin => self.start_source(addr, port),
            Node::Stdout => self.start_sink(addr, port),
            Node::Segment(j) => {
                let dir = hop.side_of(Node::Segment(j)).unwrap_or(Direction::Out);
                let order = ToAgent::Connect { dir, addr, port };
                let l = match hop.listener {
                    Node::Segment(i) => i + 1,
                    Node::Stdin | Node::Stdout => 0,
                };
                debug!(
                    "[{l}] listens on port {port}: telling [{}] to {order}",
                    j + 1
                );
                self.send(j, &order).await;
            }
        }
    }

    /// A host's label for messages (`rdpipe`'s machine for its own ends).
    fn host_name(&self, n: Node) -> String {
        match n {
            Node::Segment(i) => self.plan.segments[i].host.label().to_string(),
            Node::Stdin | Node::Stdout => "this machine".into(),
        }
    }
}
