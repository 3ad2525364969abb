//! An agent's settings for one segment: its links, tuning, roles in a `--to`
//! chain, and what its segment does (`--cmd`, `--read`, `--write`, `--relay`,
//! rdcp's `--pack`, `--unpack`, `--list`), as the [`AgentArgs`] the agent
//! parses back (written by [`AgentArgs::to_argv`]).

use super::Config;
use rdpipe_control::AgentArgs;
use rdpipe_plan::{Action, Node, Pipeline};

/// The agent's settings for segment `i`; `via` names where the remote
/// hosts' data addresses come from ([`rdpipe_launch::Launcher::address_origin`]).
pub fn agent_settings(p: &Pipeline, i: usize, a: &Config, via: &'static str) -> AgentArgs {
    let (input, output) = p.links(i);
    let seg = &p.segments[i];
    let mut v = AgentArgs::new(format!("{}[{}]", seg.host.label(), i + 1), input, output);
    v.chunk_size = a.chunk_size;
    v.slots = a.slots;
    v.transport = a.transport;
    v.connect_timeout = a.connect_timeout;
    v.handshake_timeout = a.handshake_timeout;
    v.reconnect_timeout = a.reconnect_timeout;
    v.reconnect_window = a.replay_window;
    v.integrity = a.integrity;
    v.rate_limit = a.rate_limit;
    v.compress = a.compress;
    // Only when asked for: the usual command line stays short.
    if a.verbose >= 2 {
        v.verbose = a.verbose.min(3);
    }
    v.quiet = a.quiet;
    v.direct = a.direct
        && matches!(
            seg.action,
            Action::WriteFile { .. } | Action::Pack { .. } | Action::Unpack { .. }
        );
    v.log = a.log.clone();
    // Where a listening side listens: the address its peer connects to, unless
    // data-address discovery may pick another (then all addresses).
    let me = Node::Segment(i);
    let discovers = super::discover::discovery_hops(p, &a.data_host, a.transport, via);
    let discovered = |h: &rdpipe_plan::Hop| {
        p.hops
            .iter()
            .position(|x| x == h)
            .is_some_and(|k| discovers[k])
    };
    let listening = |hop: Option<&rdpipe_plan::Hop>| {
        hop.filter(|h| h.listener == me && !discovered(h))
            .map(|h| h.address.clone())
    };
    v.in_addr = listening(p.hop_into(me));
    v.out_addr = listening(p.hop_from(me));
    if p.is_sink(i) {
        v.sink = true;
        if chain_hops(p, i, a) {
            if p.relays(i) {
                v.replay_window = a.replay_window;
            }
            v.chain_in = i > p.sinks().start;
        }
    }
    // A line merge's lanes: one incoming transfer per source.
    let lanes = p.lanes_of(i);
    if !lanes.is_empty() {
        v.lanes = lanes.iter().map(|&l| p.links(l).0).collect();
        v.lanes_needed = a.min_ok;
        // The address the listening lanes listen at: the one their peers
        // connect to when they all agree (loopback for a local merge), every
        // address of the host when they differ or one is discovered.
        let listening: Vec<&rdpipe_plan::Hop> = lanes
            .iter()
            .filter_map(|&l| {
                p.hop_into(Node::Segment(l))
                    .filter(|h| h.listener == Node::Segment(l))
            })
            .collect();
        let first = listening.first().map(|h| h.address.clone());
        if listening
            .iter()
            .all(|h| !discovered(h) && Some(&h.address) == first.as_ref())
        {
            v.lane_addr = first;
        }
        if let Some(rdpipe_plan::Gather {
            mode: rdpipe_plan::GatherMode::Lines { tag: true },
            sources,
            ..
        }) = &p.gather
        {
            v.lane_tags = sources.iter().map(|s| s.tag.clone()).collect();
        }
    }
    // A source's own segments: the command's RDPIPE_SOURCE; its stream's
    // receiving end at the sink (an --each instance) spools.
    if let Some(s) = p.source_of(i) {
        v.source_host = Some(s.host.clone());
        v.source_index = s.index;
        if s.own.first() == Some(&i) && p.merge_of_lane(i).is_none() {
            v.spool = a.spool.clone();
        }
    }
    if !lanes.is_empty() {
        v.spool = a.spool.clone();
    }
    set_action(&mut v, &seg.action);
    v
}

/// Whether segment `i` has a chain hop (one between two sinks) that re-links
/// around a dead relay: not without `--replay-window`.
pub(super) fn chain_hops(p: &Pipeline, i: usize, a: &Config) -> bool {
    a.replay_window > 0 && (p.relays(i) || (p.is_sink(i) && i > p.sinks().start))
}

/// What the agent does for `action`.
fn set_action(v: &mut AgentArgs, action: &Action) {
    match action {
        Action::Command(c) => v.cmd = Some(c.clone()),
        Action::ReadFile(f) => v.read = Some(f.clone()),
        Action::WriteFile { path, append: true } => v.append = Some(path.clone()),
        Action::WriteFile {
            path,
            append: false,
        } => v.write = Some(path.clone()),
        Action::Relay => v.relay = true,
        // Never an agent of its own (run by its merge segment's agent).
        Action::Lane { .. } => v.relay = true,
        Action::SaveListing { run } => v.save_listing = Some(run.clone()),
        Action::ForwardListen { addr, once, max } => {
            v.forward_listen = Some(addr.clone());
            v.forward_once = *once;
            v.forward_max = *max;
        }
        Action::ForwardTarget { to } => v.forward_target = Some(to.clone()),
        Action::Pack {
            sources,
            recursive,
            xattrs,
            specials,
            glob,
            manifest,
            stripe,
            mirror,
        } => {
            v.mirror = *mirror;
            v.pack = sources.clone();
            v.recursive = *recursive;
            v.xattrs = *xattrs;
            v.glob = *glob;
            v.specials = *specials;
            v.manifest = manifest.clone();
            v.stripe = *stripe;
        }
        Action::List {
            dest,
            must_be_dir,
            tops,
            checksum,
            mirror,
        } => {
            v.mirror = mirror.then(rdpipe_copy::mirror::Mirror::default);
            v.list = Some(dest.clone());
            v.top = tops.clone();
            v.must_be_dir = *must_be_dir;
            v.checksum = *checksum;
        }
        Action::Unpack {
            dest,
            must_be_dir,
            preserve,
            no_setid,
            specials,
            resumed_top,
            stripe,
            mirror,
        } => {
            v.mirror = *mirror;
            v.unpack = Some(dest.clone());
            v.top = resumed_top.iter().cloned().collect();
            v.must_be_dir = *must_be_dir;
            v.preserve = *preserve;
            v.no_setid = *no_setid;
            v.specials = *specials;
            v.stripe = *stripe;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agent's argv (after the program) for segment `i`, as a launcher
    /// writes it.
    fn agent_args(p: &Pipeline, i: usize, a: &Config, via: &'static str) -> Vec<String> {
        rdpipe_launch::launcher::agent_argv(&agent_settings(p, i, a, via))
    }
    use crate::run::Config;
    use rdpipe_plan::{plan, RemoteHost};
    use rdpipe_wire::TransportPref;

    fn config(verbose: u8, quiet: bool, log: Option<&str>) -> Config {
        let mut a = Config::for_tests(vec!["h1:cat".into(), "h2:cat".into()]);
        a.verbose = verbose;
        a.quiet = quiet;
        a.log = log.map(Into::into);
        a
    }

    #[test]
    fn agent_args_parse_back_into_the_same_settings() {
        use clap::Parser;
        let a = config(0, false, None);
        let p = plan(&a.segments, false, &|r: &RemoteHost| r.name.clone()).unwrap();
        let args = agent_args(&p, 1, &a, "ssh");
        assert_eq!(args[0], "--agent");
        let parsed = rdpipe_control::AgentArgs::try_parse_from(
            std::iter::once("rdrecv --agent".to_string()).chain(args.into_iter().skip(1)),
        )
        .unwrap();
        assert_eq!(parsed.transport, TransportPref::Rdma);
        assert_eq!(parsed.integrity, rdpipe_wire::Integrity::Encrypt);
        assert_eq!((parsed.input, parsed.output), p.links(1));
        assert_eq!(parsed.cmd.as_deref(), Some("cat"));
        assert_eq!(parsed.chunk_size, 1 << 20);
        assert_eq!(parsed.rate_limit, "16M".parse().ok());
        assert_eq!(parsed.compress, rdpipe_wire::Compress::Zstd(5));
        assert_eq!(parsed, agent_settings(&p, 1, &a, "ssh"));
    }

    #[test]
    fn agents_get_the_verbosity_only_when_asked() {
        let a = config(1, false, None);
        let p = plan(&a.segments, false, &|r: &RemoteHost| r.name.clone()).unwrap();
        let has = |a: &Config, w: &str| agent_args(&p, 0, a, "ssh").iter().any(|x| x == w);
        for w in ["--verbose", "--quiet", "--log"] {
            assert!(!has(&a, w), "{w}");
        }
        let v = agent_args(&p, 0, &config(5, false, None), "ssh");
        let i = v.iter().position(|x| x == "--verbose").unwrap();
        assert_eq!(v[i + 1], "3");
        assert!(has(&config(0, true, None), "--quiet"));
        let v = agent_args(&p, 1, &config(0, false, Some("debug")), "ssh");
        let i = v.iter().position(|x| x == "--log").unwrap();
        assert_eq!(v[i + 1], "debug");
    }

    #[test]
    fn chain_sinks_get_their_relink_roles() {
        use rdpipe_plan::plan_fanout;
        let mut a = config(0, false, None);
        a.replay_window = 1 << 20;
        let sinks = ["b1:cat", "b2:cat", "b3:cat"].map(String::from);
        let p = plan_fanout(&["s:cat".to_string()], &sinks, false, &|r| r.name.clone()).unwrap();
        let roles = |a: &Config, i: usize| {
            let v = agent_args(&p, i, a, "ssh");
            let w = v
                .iter()
                .position(|x| x == "--replay-window")
                .map(|k| v[k + 1].clone());
            (w, v.iter().any(|x| x == "--chain-in"), chain_hops(&p, i, a))
        };
        assert_eq!(roles(&a, 0), (None, false, false));
        assert_eq!(roles(&a, 1), (Some("1048576".into()), false, true));
        assert_eq!(roles(&a, 2), (Some("1048576".into()), true, true));
        assert_eq!(roles(&a, 3), (None, true, true));
        a.replay_window = 0;
        assert_eq!(roles(&a, 2), (None, false, false));
    }

    #[test]
    fn the_command_line_keeps_its_order_and_two_word_flags() {
        use rdpipe_plan::plan_fanout;
        let mut a = config(0, false, None);
        a.replay_window = 1 << 20;
        let sinks = ["b1:cat", "b2:> /x y", "b3:cat"].map(String::from);
        let p = plan_fanout(&["s:cat".to_string()], &sinks, false, &|r| r.name.clone()).unwrap();
        let v = agent_args(&p, 2, &a, "ssh");
        let want = [
            "--agent",
            "--label",
            "b2[3]",
            "--input",
            "connect",
            "--output",
            "listen",
            "--chunk-size",
            "1048576",
            "--slots",
            "2",
            "--transport",
            "rdma",
            "--connect-timeout",
            "30",
            "--handshake-timeout",
            "10",
            "--reconnect-timeout",
            "60",
            "--reconnect-window",
            "1048576",
            "--integrity",
            "encrypt",
            "--rate-limit",
            "16000000",
            "--compress",
            "zstd:5",
            "--sink",
            "--replay-window",
            "1048576",
            "--chain-in",
            "--write",
            "/x y",
        ];
        let (head, tail) = v.split_at(v.iter().position(|x| x == "--sink").unwrap());
        let flags: Vec<&str> = head
            .iter()
            .map(String::as_str)
            .filter(|w| w.starts_with("--"))
            .collect();
        let want_flags: Vec<&str> = want[..want.iter().position(|x| *x == "--sink").unwrap()]
            .iter()
            .copied()
            .filter(|w| w.starts_with("--"))
            .collect();
        assert_eq!(flags, want_flags, "{v:?}");
        assert_eq!(tail, &want[want.len() - 6..], "{v:?}");
    }
}
