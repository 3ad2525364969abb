//! `rdpipe forward [LISTEN_HOST:]PORT TARGET_HOST:ADDR:PORT`: two segments,
//! the listening side and the target side, joined by two hops, one each
//! way (the one pipeline shape whose hops form a ring). The listening side
//! accepts TCP connections at `BIND:PORT` on its host; the target side
//! connects each to `ADDR:PORT` as its host resolves it; the connections
//! travel as frames over the two hops (`rdpipe_wire::mux`).
//!
//! Which end of each hop listens follows the plain pipeline's rule
//! ([`super::plan_chain`]): the local machine only connects outward.

use super::{hop_between, Action, Host, Pipeline, PlanError, RemoteHost, Segment};
use crate::Node;

/// What the user asked to forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardSpec {
    /// `[LISTEN_HOST:]PORT`.
    pub listen: String,
    /// `TARGET_HOST:ADDR:PORT`.
    pub target: String,
    /// `--bind`: the listening address on the listening host.
    pub bind: String,
    /// `--once`.
    pub once: bool,
    /// `--max-connections`.
    pub max: Option<usize>,
}

/// The loopback address a forward listens on without `--bind`, as `ssh -L`
/// does without GatewayPorts.
pub const DEFAULT_BIND: &str = "127.0.0.1";

fn host_of(spec: &str, arg: &str) -> Result<Host, PlanError> {
    super::parse_segment(&format!("{spec}:"))
        .map(|s| s.host)
        .map_err(|e| match e {
            PlanError::EmptyHost(_) => PlanError::EmptyHost(arg.to_string()),
            e => e,
        })
}

fn port_of(p: &str, arg: &str, zero_ok: bool) -> Result<u16, PlanError> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 || zero_ok => Ok(n),
        _ => Err(PlanError::ForwardPort(arg.to_string())),
    }
}

/// The address `ADDR` as a socket address's host part: an IPv6 literal in
/// brackets.
fn bracketed(addr: &str) -> String {
    if addr.contains(':') && !addr.starts_with('[') {
        format!("[{addr}]")
    } else {
        addr.to_string()
    }
}

/// Builds the forward's pipeline.
pub fn plan_forward(
    f: &ForwardSpec,
    data_addr: &dyn Fn(&RemoteHost) -> String,
) -> Result<Pipeline, PlanError> {
    let (listen_host, port) = match f.listen.rsplit_once(':') {
        None => (Host::Local, f.listen.as_str()),
        Some((h, p)) => (host_of(h, &f.listen)?, p),
    };
    let port = port_of(port, &f.listen, true)?;
    let target = super::parse_segment(&f.target)?;
    let Action::Command(addr) = &target.action else {
        return Err(PlanError::ForwardTarget(f.target.clone()));
    };
    let (addr, tport) = addr
        .rsplit_once(':')
        .filter(|(a, _)| !a.is_empty() && !a.contains(char::is_whitespace))
        .ok_or_else(|| PlanError::ForwardTarget(f.target.clone()))?;
    let tport = port_of(tport, &f.target, false)?;
    if f.bind.is_empty() || f.bind.contains(char::is_whitespace) {
        return Err(PlanError::ForwardBind(f.bind.clone()));
    }
    let segments = vec![
        Segment {
            host: listen_host,
            action: Action::ForwardListen {
                addr: format!("{}:{port}", bracketed(&f.bind)),
                once: f.once,
                max: f.max,
            },
        },
        Segment {
            host: target.host,
            action: Action::ForwardTarget {
                to: format!("{addr}:{tport}"),
            },
        },
    ];
    let (a, b) = (Node::Segment(0), Node::Segment(1));
    let hops = vec![
        hop_between(&segments, a, b, data_addr),
        hop_between(&segments, b, a, data_addr),
    ];
    Ok(Pipeline {
        segments,
        hops,
        first_sink: None,
        gather: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(listen: &str, target: &str) -> ForwardSpec {
        ForwardSpec {
            listen: listen.into(),
            target: target.into(),
            bind: DEFAULT_BIND.into(),
            once: false,
            max: None,
        }
    }

    fn plan(listen: &str, target: &str) -> Result<Pipeline, PlanError> {
        plan_forward(&spec(listen, target), &|r| format!("{}.data", r.name))
    }

    #[test]
    fn local_listener_remote_target_both_hops_listen_remotely() {
        let p = plan("8080", "h2:localhost:5432").unwrap();
        assert_eq!(
            p.segments[0].action,
            Action::ForwardListen {
                addr: "127.0.0.1:8080".into(),
                once: false,
                max: None
            }
        );
        assert_eq!(
            p.segments[1].action,
            Action::ForwardTarget {
                to: "localhost:5432".into()
            }
        );
        assert!(p.segments[0].host.is_local());
        // The local machine only connects outward: h2 listens on both.
        for h in &p.hops {
            assert_eq!(h.listener, Node::Segment(1));
            assert_eq!(h.address, "h2.data");
        }
        assert_eq!(p.links(0), (crate::Link::Connect, crate::Link::Connect));
        assert_eq!(p.links(1), (crate::Link::Listen, crate::Link::Listen));
        assert_eq!(p.forward_listener(), Some(0));
    }

    #[test]
    fn listen_host_and_ipv6_addresses() {
        let p = plan("h1:0", "h2:[::1]:22").unwrap();
        assert!(!p.segments[0].host.is_local());
        assert_eq!(
            p.segments[1].action,
            Action::ForwardTarget {
                to: "[::1]:22".into()
            }
        );
        let p = plan("-:9000", "h2:10.0.0.1:80").unwrap();
        assert!(p.segments[0].host.is_local());
        let mut s = spec("9000", "h2:db:5432");
        s.bind = "::".into();
        let p = plan_forward(&s, &|r| r.name.clone()).unwrap();
        assert_eq!(
            p.segments[0].action,
            Action::ForwardListen {
                addr: "[::]:9000".into(),
                once: false,
                max: None
            }
        );
    }

    #[test]
    fn malformed_ports_and_targets_are_refused() {
        assert!(matches!(
            plan("x", "h2:a:1"),
            Err(PlanError::ForwardPort(_))
        ));
        assert!(matches!(
            plan("70000", "h2:a:1"),
            Err(PlanError::ForwardPort(_))
        ));
        assert!(matches!(
            plan("1", "h2:a:0"),
            Err(PlanError::ForwardPort(_))
        ));
        assert!(matches!(
            plan("1", "h2:a"),
            Err(PlanError::ForwardTarget(_))
        ));
        assert!(matches!(
            plan("1", "h2::80"),
            Err(PlanError::ForwardTarget(_))
        ));
        assert!(matches!(plan("1", "h2:"), Err(PlanError::ForwardTarget(_))));
        assert!(matches!(
            plan("1", "h2:< f"),
            Err(PlanError::ForwardTarget(_))
        ));
        assert!(plan("1", "nohost").is_err());
        assert!(matches!(plan(":1", "h2:a:1"), Err(PlanError::EmptyHost(_))));
    }
}
