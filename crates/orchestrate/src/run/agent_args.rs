//! An agent's command line (after the program): its links, tuning, roles in
//! a `--to` chain, and what its segment does (`--cmd`, `--read`, `--write`,
//! `--relay`, rdcp's `--pack`, `--unpack`, `--list`); the agent parses it back
//! (`rdpipe_agent::AgentArgs`).

use super::Config;
use rdpipe_plan::{Action, Node, Pipeline};

/// The agent's argv (after the program) for segment `i`.
pub fn agent_args(p: &Pipeline, i: usize, a: &Config) -> Vec<String> {
    let (input, output) = p.links(i);
    let seg = &p.segments[i];
    let mut v = vec![
        "--agent".to_string(),
        "--label".into(),
        format!("{}[{}]", seg.host.label(), i + 1),
        "--input".into(),
        input.as_str().into(),
        "--output".into(),
        output.as_str().into(),
        "--chunk-size".into(),
        a.chunk_size.to_string(),
        "--slots".into(),
        a.slots.to_string(),
        "--transport".into(),
        rdpipe_control::transport_name(a.transport).into(),
        "--connect-timeout".into(),
        a.connect_timeout.to_string(),
        "--handshake-timeout".into(),
        a.handshake_timeout.to_string(),
        "--reconnect-timeout".into(),
        a.reconnect_timeout.to_string(),
        "--reconnect-window".into(),
        a.replay_window.to_string(),
        "--integrity".into(),
        a.integrity.as_str().into(),
    ];
    if let Some(r) = a.rate_limit {
        v.extend(["--rate-limit".into(), r.bytes_per_sec().to_string()]);
    }
    if a.compress.is_on() {
        v.extend(["--compress".into(), a.compress.to_string()]);
    }
    // Only when asked for: the usual command line stays short.
    if a.verbose >= 2 {
        v.extend(["--verbose".into(), a.verbose.min(3).to_string()]);
    }
    if a.quiet {
        v.push("--quiet".into());
    }
    if a.direct
        && matches!(
            seg.action,
            Action::WriteFile { .. } | Action::Pack { .. } | Action::Unpack { .. }
        )
    {
        v.push("--direct".into());
    }
    if let Some(f) = &a.log {
        v.extend(["--log".into(), f.clone()]);
    }
    // Where a listening side listens: the address its peer connects to, unless
    // data-address discovery may pick another (then all addresses).
    let me = Node::Segment(i);
    let discovers = super::discover::discovery_hops(p, &a.data_host, a.transport, a.launcher);
    for (flag, hop) in [
        ("--in-addr", p.hop_into(me)),
        ("--out-addr", p.hop_from(me)),
    ] {
        let discovered = |h: &&rdpipe_plan::Hop| {
            p.hops
                .iter()
                .position(|x| x == *h)
                .is_some_and(|k| discovers[k])
        };
        if let Some(h) = hop.filter(|h| h.listener == me && !discovered(h)) {
            v.extend([flag.to_string(), h.address.clone()]);
        }
    }
    if p.is_sink(i) {
        v.push("--sink".into());
        if chain_hops(p, i, a) {
            if p.relays(i) {
                v.extend(["--replay-window".into(), a.replay_window.to_string()]);
            }
            if i > p.sinks().start {
                v.push("--chain-in".into());
            }
        }
    }
    v.extend(action_args(&seg.action));
    v
}

/// Whether segment `i` has a chain hop (one between two sinks) that re-links
/// around a dead relay: not without `--replay-window`.
pub(super) fn chain_hops(p: &Pipeline, i: usize, a: &Config) -> bool {
    a.replay_window > 0 && (p.relays(i) || (p.is_sink(i) && i > p.sinks().start))
}

/// The agent arguments of `action`.
pub fn action_args(action: &Action) -> Vec<String> {
    let mut v: Vec<String> = vec![];
    match action {
        Action::Command(c) => v.extend(["--cmd".into(), c.clone()]),
        Action::ReadFile(f) => v.extend(["--read".into(), f.clone()]),
        Action::WriteFile { path, append } => v.extend([
            if *append { "--append" } else { "--write" }.into(),
            path.clone(),
        ]),
        Action::Relay => v.push("--relay".into()),
        Action::SaveListing { run } => v.extend(["--save-listing".into(), run.clone()]),
        Action::Pack {
            sources,
            recursive,
            xattrs,
            specials,
            manifest,
            stripe,
        } => {
            for src in sources {
                v.extend(["--pack".into(), src.clone()]);
            }
            if *recursive {
                v.push("--recursive".into());
            }
            if *xattrs {
                v.push("--xattrs".into());
            }
            if *specials {
                v.push("--specials".into());
            }
            if let Some(m) = manifest {
                v.extend(["--manifest".into(), m.clone()]);
            }
            if let Some(s) = stripe {
                v.extend(["--stripe".into(), s.to_string()]);
            }
        }
        Action::List {
            dest,
            must_be_dir,
            tops,
            checksum,
        } => {
            v.extend(["--list".into(), dest.clone()]);
            for t in tops {
                v.extend(["--top".into(), t.clone()]);
            }
            if *must_be_dir {
                v.push("--must-be-dir".into());
            }
            if *checksum {
                v.push("--checksum".into());
            }
        }
        Action::Unpack {
            dest,
            must_be_dir,
            preserve,
            no_setid,
            specials,
            resumed_top,
            stripe,
        } => {
            v.extend(["--unpack".into(), dest.clone()]);
            if let Some(t) = resumed_top {
                v.extend(["--top".into(), t.clone()]);
            }
            if *must_be_dir {
                v.push("--must-be-dir".into());
            }
            if *preserve {
                v.push("--preserve".into());
            }
            if *no_setid {
                v.push("--no-setid".into());
            }
            if *specials {
                v.push("--specials".into());
            }
            if let Some(s) = stripe {
                v.extend(["--stripe".into(), s.to_string()]);
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Config;
    use rdpipe_plan::{plan, RemoteHost};
    use rdpipe_wire::TransportPref;

    fn config(verbose: u8, quiet: bool, log: Option<&str>) -> Config {
        Config {
            prepared: None,
            segments: vec!["h1:cat".into(), "h2:cat".into()],
            sinks: vec![],
            min_ok: None,
            replay_window: 0,
            dry_run: false,
            verbose,
            quiet,
            progress: false,
            log: log.map(Into::into),
            ssh_options: vec![],
            ssh_config: None,
            data_host: vec![],
            remote_bin: None,
            install: true,
            transport: TransportPref::Rdma,
            integrity: rdpipe_wire::Integrity::Encrypt,
            chunk_size: 1 << 20,
            slots: 2,
            connect_timeout: 30,
            reconnect_timeout: 60,
            handshake_timeout: 10,
            rate_limit: "16M".parse().ok(),
            compress: rdpipe_wire::Compress::Zstd(5),
            max_sessions: 10,
            direct: false,
            persist: None,
            launcher: Default::default(),
            jobid: None,
            summary: true,
        }
    }

    #[test]
    fn agent_args_parse_back_into_the_same_settings() {
        use clap::Parser;
        let a = config(0, false, None);
        let p = plan(&a.segments, false, &|r: &RemoteHost| r.name.clone()).unwrap();
        let args = agent_args(&p, 1, &a);
        let parsed = rdpipe_agent::AgentArgs::try_parse_from(
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
    }

    #[test]
    fn agents_get_the_verbosity_only_when_asked() {
        let a = config(1, false, None);
        let p = plan(&a.segments, false, &|r: &RemoteHost| r.name.clone()).unwrap();
        let has = |a: &Config, w: &str| agent_args(&p, 0, a).iter().any(|x| x == w);
        for w in ["--verbose", "--quiet", "--log"] {
            assert!(!has(&a, w), "{w}");
        }
        let v = agent_args(&p, 0, &config(5, false, None));
        let i = v.iter().position(|x| x == "--verbose").unwrap();
        assert_eq!(v[i + 1], "3");
        assert!(has(&config(0, true, None), "--quiet"));
        let v = agent_args(&p, 1, &config(0, false, Some("debug")));
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
            let v = agent_args(&p, i, a);
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
}
