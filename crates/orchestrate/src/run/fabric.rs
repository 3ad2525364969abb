//! Fabric address discovery, the pure part: for one hop, whether the address
//! the connecting side was going to use (ssh's HostName or the name) should be
//! replaced by one of the listening host's RDMA-capable addresses, and the
//! words `-v` and `-n` say about it. No I/O: the agents' `FABRIC` reports and
//! the resolved addresses come in as values ([`super::discover`] gathers them).
//!
//! The rules: when the listening host has RDMA-capable addresses and the given
//! address is none of them, use the first of them that shares a subnet with one
//! of the connecting host's RDMA-capable addresses (preferring the given
//! address's family). Without such a shared subnet, the connecting host probes
//! them ([`Choice::Probe`], `PROBE`/`REACH`, [`rdpipe_agent::reach`]) and the first
//! that is routed from one of its RDMA-capable addresses and answers on the
//! listening port is used ([`after_probe`]); when none does, the given address
//! stays and `-v` says to pass `--data-host`. `--data-host` is never replaced,
//! and `--transport tcp` turns discovery off.

use rdpipe_control::{NetAddr, Reach};
use rdpipe_plan::{Hop, Host, Pipeline};
use rdpipe_wire::TransportPref;
use std::collections::HashMap;
use std::net::IpAddr;

/// Where a hop's planned data address comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Both ends on one host (or the listener is local): loopback.
    Loopback,
    /// `--data-host HOST=ADDR`: used as given.
    DataHost,
    /// What the remote hosts' launcher says (ssh's HostName, Slurm's
    /// NodeAddr), else the host's name: discovery may replace it. Named as
    /// the launcher names it ([`rdpipe_launch::Launcher::address_origin`]).
    Launcher(&'static str),
}

impl Origin {
    /// How `-v` and `-n` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Loopback => "loopback",
            Origin::DataHost => "--data-host",
            Origin::Launcher(name) => name,
        }
    }
}

/// The origin of `hop`'s address, given the `--data-host` overrides (keyed by
/// the host as written or its name, as [`super::build_plan`] looks them up).
pub fn origin(
    p: &Pipeline,
    hop: &Hop,
    overrides: &HashMap<String, String>,
    via: &'static str,
) -> Origin {
    let host = |n| match n {
        rdpipe_plan::Node::Segment(i) => &p.segments[i].host,
        _ => &Host::Local,
    };
    match (host(hop.listener), host(hop.connector())) {
        (Host::Remote(l), Host::Remote(c)) if l == c => Origin::Loopback,
        (Host::Remote(l), _) => {
            if overrides.contains_key(&l.spec) || overrides.contains_key(&l.name) {
                Origin::DataHost
            } else {
                Origin::Launcher(via)
            }
        }
        (Host::Local, _) => Origin::Loopback,
    }
}

/// Whether discovery runs for a hop of this origin under `--transport`.
pub fn discovers(origin: Origin, transport: TransportPref) -> bool {
    matches!(origin, Origin::Launcher(_)) && transport != TransportPref::Tcp
}

/// Why a hop keeps its planned address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// It is one of the listening host's RDMA-capable addresses.
    AlreadyRdma,
    /// The listening host reported no RDMA-capable address.
    NoRdmaAtListener,
    /// The connecting host reported none.
    NoRdmaAtConnector,
    /// None of the listening host's RDMA-capable addresses (listed) shares a
    /// subnet with the connecting host's, and none can be probed (link-local
    /// or loopback only).
    NoSharedSubnet(Vec<NetAddr>),
    /// None shares a subnet, and none probed from the connecting host was
    /// routed over its fabric and answered (what each probe found).
    NoneAnswered(Vec<(IpAddr, Reach)>),
}

/// Which rule picked a discovered address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// It shares a subnet with one of the connecting host's RDMA-capable addresses.
    SharedSubnet,
    /// The connecting host's route to it leaves from an RDMA-capable address,
    /// and it answered there.
    Routed,
}

/// The decision for one hop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Connect to the planned address.
    Keep(Keep),
    /// Connect to this RDMA-capable address of the listening host instead.
    Switch(IpAddr, Rule),
    /// Not decided yet: no shared subnet; probe these addresses of the
    /// listening host (in order of preference) from the connecting host, then
    /// decide with [`after_probe`].
    Probe(Vec<IpAddr>),
}

/// Decides one hop: `given` is what the planned address resolves to (empty when
/// it does not resolve), `listener` and `connector` the two hosts'
/// RDMA-capable addresses.
pub fn choose(given: &[IpAddr], listener: &[NetAddr], connector: &[NetAddr]) -> Choice {
    if listener.is_empty() {
        return Choice::Keep(Keep::NoRdmaAtListener);
    }
    if listener.iter().any(|a| given.contains(&a.ip)) {
        return Choice::Keep(Keep::AlreadyRdma);
    }
    if connector.is_empty() {
        return Choice::Keep(Keep::NoRdmaAtConnector);
    }
    let reachable = |a: &&NetAddr| {
        a.usable_by_peers()
            && connector
                .iter()
                .any(|c| c.usable_by_peers() && c.same_subnet(a))
    };
    let same_family = |a: &&NetAddr| given.iter().any(|g| g.is_ipv4() == a.ip.is_ipv4());
    let best = listener
        .iter()
        .filter(reachable)
        .find(same_family)
        .or_else(|| listener.iter().find(reachable));
    if let Some(a) = best {
        return Choice::Switch(a.ip, Rule::SharedSubnet);
    }
    // No shared subnet: the usable ones, the given address's family first.
    // At most MAX_PROBE of them, each once (a host's report is not trusted
    // to be short).
    let usable = || listener.iter().filter(|a| a.usable_by_peers());
    let mut probe: Vec<IpAddr> = Vec::new();
    for a in usable()
        .filter(same_family)
        .chain(usable().filter(|a| !same_family(a)))
    {
        if !probe.contains(&a.ip) && probe.len() < rdpipe_control::MAX_PROBE {
            probe.push(a.ip);
        }
    }
    if probe.is_empty() {
        Choice::Keep(Keep::NoSharedSubnet(listener.to_vec()))
    } else {
        Choice::Probe(probe)
    }
}

/// Decides a hop that [`choose`] left to a probe: the first address (in the
/// order probed) that answered, else the given address stays.
pub fn after_probe(results: &[(IpAddr, Reach)]) -> Choice {
    match results.iter().find(|(_, r)| r.answered()) {
        Some(&(ip, _)) => Choice::Switch(ip, Rule::Routed),
        None => Choice::Keep(Keep::NoneAnswered(results.to_vec())),
    }
}

/// The address the connecting side is told: the switch's, else `given`.
pub fn address(given: &str, c: &Choice) -> String {
    match c {
        Choice::Switch(ip, _) => ip.to_string(),
        Choice::Keep(_) | Choice::Probe(_) => given.to_string(),
    }
}

/// `-v`'s words for a decided hop, after `LISTENER: data address ADDR for CONNECTOR`:
/// the parenthesis saying why.
pub fn reason(given: &str, from: &str, listener: &str, connector: &str, c: &Choice) -> String {
    match c {
        Choice::Switch(_, Rule::SharedSubnet) => format!("RDMA-capable, instead of {given} from {from}"),
        Choice::Switch(_, Rule::Routed) => format!(
            "RDMA-capable, routed from {connector}'s fabric and answering, instead of {given} from {from}"
        ),
        Choice::Probe(v) => format!(
            "from {from}, while {connector} probes {}",
            v.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
        ),
        Choice::Keep(Keep::AlreadyRdma) => format!("from {from}, RDMA-capable"),
        Choice::Keep(Keep::NoRdmaAtListener) => {
            format!("from {from}; {listener} reported no RDMA-capable address")
        }
        Choice::Keep(Keep::NoRdmaAtConnector) => {
            format!("from {from}; {connector} reported no RDMA-capable address")
        }
        Choice::Keep(Keep::NoSharedSubnet(l)) => format!(
            "from {from}; {listener}'s RDMA-capable {} share no subnet with {connector}'s and \
             none can be reached from another host: pass --data-host {listener}=ADDR",
            l.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Choice::Keep(Keep::NoneAnswered(r)) => format!(
            "from {from}; {listener}'s RDMA-capable addresses share no subnet with {connector}'s, \
             and none was routed over {connector}'s fabric and answered ({}): \
             pass --data-host {listener}=ADDR for a routed one",
            r.iter()
                .map(|(ip, r)| format!("{ip} {r}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `-n`'s line about a hop whose listener is on another host.
pub fn plan_note(origin: Origin, transport: TransportPref, given: &str) -> String {
    match origin {
        Origin::Loopback => format!("{given} (loopback)"),
        Origin::DataHost => format!("{given} (from --data-host, used as given)"),
        Origin::Launcher(_) if discovers(origin, transport) => format!(
            "{given} (from {}); RDMA-capable address discovered at start: when the \
             agents report that {given} is not one, one on a subnet both hosts share, \
             else one the connecting host reaches over its fabric and that answers",
            origin.as_str()
        ),
        Origin::Launcher(_) => format!(
            "{given} (from {}; --transport tcp: no discovery)",
            origin.as_str()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdpipe_plan::{plan, Node, RemoteHost};

    fn nets(v: &[&str]) -> Vec<NetAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }
    fn ips(v: &[&str]) -> Vec<IpAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }
    fn switch(s: &str) -> Choice {
        Choice::Switch(s.parse().unwrap(), Rule::SharedSubnet)
    }

    #[test]
    fn management_address_switches_to_the_rdma_subnet() {
        let h2 = nets(&["10.0.0.2/24", "10.1.0.2/24"]);
        let h1 = nets(&["10.1.0.1/24"]);
        assert_eq!(choose(&ips(&["192.168.1.2"]), &h2, &h1), switch("10.1.0.2"));
        // Unresolvable name: switch all the same.
        assert_eq!(choose(&[], &h2, &h1), switch("10.1.0.2"));
        let r = reason("192.168.1.2", "ssh", "h2", "h1", &switch("10.1.0.2"));
        assert_eq!(r, "RDMA-capable, instead of 192.168.1.2 from ssh");
        assert_eq!(address("192.168.1.2", &switch("10.1.0.2")), "10.1.0.2");
    }

    #[test]
    fn an_rdma_capable_address_stays() {
        let h2 = nets(&["10.0.0.2/24"]);
        let h1 = nets(&["10.0.0.1/24"]);
        let c = choose(&ips(&["10.0.0.2"]), &h2, &h1);
        assert_eq!(c, Choice::Keep(Keep::AlreadyRdma));
        assert_eq!(address("h2.example", &c), "h2.example");
        // A name resolving to several addresses, one of them RDMA-capable.
        let c = choose(&ips(&["192.168.1.2", "10.0.0.2"]), &h2, &h1);
        assert_eq!(c, Choice::Keep(Keep::AlreadyRdma));
    }

    #[test]
    fn no_rdma_anywhere_keeps_the_address() {
        let g = ips(&["192.168.1.2"]);
        assert_eq!(choose(&g, &[], &[]), Choice::Keep(Keep::NoRdmaAtListener));
        assert_eq!(
            choose(&g, &[], &nets(&["10.0.0.1/24"])),
            Choice::Keep(Keep::NoRdmaAtListener)
        );
        assert_eq!(
            choose(&g, &nets(&["10.0.0.2/24"]), &[]),
            Choice::Keep(Keep::NoRdmaAtConnector)
        );
    }

    #[test]
    fn no_shared_subnet_probes_from_the_connecting_host() {
        let h2 = nets(&["fd00::2/64", "10.0.0.2/24", "fe80::2/64", "10.5.0.2/31"]);
        let c = choose(&ips(&["192.168.1.2"]), &h2, &nets(&["10.9.0.1/24"]));
        // The given address's family first; link-local is never probed.
        assert_eq!(c, Choice::Probe(ips(&["10.0.0.2", "10.5.0.2", "fd00::2"])));
        assert_eq!(address("192.168.1.2", &c), "192.168.1.2");
        let r = reason("192.168.1.2", "ssh", "h2", "h1", &c);
        assert!(r.contains("h1 probes 10.0.0.2, 10.5.0.2, fd00::2"), "{r}");
        // A long report with repeats: each address once, at most MAX_PROBE.
        let many: Vec<NetAddr> = (0..200)
            .map(|i| format!("10.{}.0.2/31", i % 40).parse().unwrap())
            .collect();
        let Choice::Probe(v) = choose(&[], &many, &nets(&["10.99.0.1/24"])) else {
            panic!("no probe")
        };
        assert_eq!(v.len(), rdpipe_control::MAX_PROBE);
        assert_eq!(v[1], "10.1.0.2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn the_first_address_that_answered_is_used() {
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.2".parse().unwrap(),
            "10.5.0.2".parse().unwrap(),
            "fd00::2".parse().unwrap(),
        );
        let via: IpAddr = "192.168.1.1".parse().unwrap();
        let r = [
            (a, Reach::OffFabric(via)),
            (b, Reach::Answered),
            (c, Reach::Answered),
        ];
        let ch = after_probe(&r);
        assert_eq!(ch, Choice::Switch(b, Rule::Routed));
        assert_eq!(address("192.168.1.2", &ch), "10.5.0.2");
        let why = reason("192.168.1.2", "ssh", "h2", "h1", &ch);
        assert_eq!(
            why,
            "RDMA-capable, routed from h1's fabric and answering, instead of 192.168.1.2 from ssh"
        );
    }

    #[test]
    fn none_answered_keeps_the_address_and_says_what_each_probe_found() {
        let via: IpAddr = "192.168.1.1".parse().unwrap();
        let r = [
            ("10.0.0.2".parse().unwrap(), Reach::OffFabric(via)),
            ("10.5.0.2".parse().unwrap(), Reach::Silent),
            ("fd00::2".parse().unwrap(), Reach::Refused),
        ];
        let ch = after_probe(&r);
        assert_eq!(ch, Choice::Keep(Keep::NoneAnswered(r.to_vec())));
        assert_eq!(address("192.168.1.2", &ch), "192.168.1.2");
        let why = reason("192.168.1.2", "ssh", "h2", "h1", &ch);
        assert!(
            why.contains("10.0.0.2 off-fabric@192.168.1.1, 10.5.0.2 silent, fd00::2 refused"),
            "{why}"
        );
        assert!(why.contains("--data-host h2=ADDR"), "{why}");
        assert_eq!(after_probe(&[]), Choice::Keep(Keep::NoneAnswered(vec![])));
    }

    #[test]
    fn ipv6_and_the_given_family() {
        let h2 = nets(&["fd00::2/64", "10.0.0.2/24", "fe80::2/64"]);
        let h1 = nets(&["10.0.0.1/24", "fd00::1/64", "fe80::1/64"]);
        assert_eq!(choose(&ips(&["192.168.1.2"]), &h2, &h1), switch("10.0.0.2"));
        assert_eq!(choose(&ips(&["2001:db8::2"]), &h2, &h1), switch("fd00::2"));
        // IPv6 only; link-local addresses are never picked (they need a zone).
        let h2 = nets(&["fe80::2/64", "fd00::2/64"]);
        let h1 = nets(&["fe80::1/64", "fd00::1/64"]);
        assert_eq!(choose(&ips(&["2001:db8::2"]), &h2, &h1), switch("fd00::2"));
        let h2 = nets(&["fe80::2/64"]);
        let h1 = nets(&["fe80::1/64"]);
        let c = choose(&ips(&["2001:db8::2"]), &h2, &h1);
        assert_eq!(c, Choice::Keep(Keep::NoSharedSubnet(h2)));
        let r = reason("2001:db8::2", "ssh", "h2", "h1", &c);
        assert!(r.contains("fe80::2/64 share no subnet with h1's"), "{r}");
        assert!(r.contains("--data-host h2=ADDR"), "{r}");
    }

    #[test]
    fn origins_overrides_and_transport() {
        let args: Vec<String> = ["h1:cat", "h2:cat", "h2:cat", "-:cat"]
            .map(Into::into)
            .to_vec();
        let p = plan(&args, true, &|r: &RemoteHost| r.name.clone()).unwrap();
        let none = HashMap::new();
        let o: Vec<Origin> = p.hops.iter().map(|h| origin(&p, h, &none, "ssh")).collect();
        // stdin -> h1 (h1 listens, rdpipe connects), h1 -> h2, h2 -> h2
        // (loopback), h2 -> local (h2 listens, the local agent connects).
        assert_eq!(p.hops[0].to, Node::Segment(0));
        assert_eq!(
            o[..4],
            [
                Origin::Launcher("ssh"),
                Origin::Launcher("ssh"),
                Origin::Loopback,
                Origin::Launcher("ssh")
            ]
        );
        let over = HashMap::from([("h2".to_string(), "10.0.0.2".to_string())]);
        assert_eq!(origin(&p, &p.hops[1], &over, "ssh"), Origin::DataHost);
        assert_eq!(
            origin(&p, &p.hops[0], &over, "ssh"),
            Origin::Launcher("ssh")
        );
        assert!(discovers(Origin::Launcher("ssh"), TransportPref::Auto));
        assert!(discovers(Origin::Launcher("ssh"), TransportPref::Rdma));
        assert!(!discovers(Origin::Launcher("ssh"), TransportPref::Tcp));
        assert!(!discovers(Origin::DataHost, TransportPref::Auto));
        assert!(!discovers(Origin::Loopback, TransportPref::Auto));
        let n = plan_note(Origin::Launcher("ssh"), TransportPref::Auto, "192.168.1.2");
        assert!(
            n.contains("RDMA-capable address discovered at start"),
            "{n}"
        );
        let n = plan_note(Origin::Launcher("ssh"), TransportPref::Tcp, "192.168.1.2");
        assert!(n.contains("no discovery"), "{n}");
    }
}
