//! From findings to problems: each check of `rdpipe doctor` as a pure function
//! of a host's or a pair's report, giving [`Problem`]s (one line each, with the
//! fix; they make the exit status 1) and notes (printed, not problems).

use super::{HostReport, PairReport, Problem};
use rdpipe_control::PROTOCOL;
use rdpipe_report::VERSION;
use rdpipe_term::progress::human_bytes;

fn problem(host: &str, problem: impl Into<String>, fix: impl Into<String>) -> Problem {
    Problem {
        host: host.to_string(),
        problem: problem.into(),
        fix: fix.into(),
    }
}

const INSTALL_RDMA: &str = "install rdma-core and the providers (Debian/Ubuntu: apt install \
                            rdma-core ibverbs-providers; RHEL/Fedora: dnf install rdma-core \
                            libibverbs)";

/// The problems and notes of one host.
pub fn host(r: &HostReport) -> (Vec<Problem>, Vec<String>) {
    let h = r.host.as_str();
    let (mut problems, mut notes) = (Vec::new(), Vec::new());
    if let Some(e) = &r.ssh_error {
        problems.push(problem(
            h,
            format!("cannot connect over ssh ({e})"),
            format!(
                "check that `ssh {h} true` works without a prompt (rdpipe runs ssh with \
                 BatchMode=yes: keys or an agent, a known host key)"
            ),
        ));
        return (problems, notes);
    }
    if let Some(e) = &r.install_error {
        problems.push(problem(h, "no usable agent", e.clone()));
        return (problems, notes);
    }
    if r.rdrecv_missing {
        problems.push(problem(
            h,
            "rdrecv not found",
            "install rdma-pipe there (cargo install --path .) or pass --remote-bin DIR \
             (without --no-install and --remote-bin, rdpipe installs itself)",
        ));
        return (problems, notes);
    }
    let Some(p) = &r.probe else {
        let found = match &r.other_version {
            Some(v) => format!("{v} is there but cannot report"),
            None => "rdrecv cannot report".to_string(),
        };
        let why = r.probe_error.as_deref().unwrap_or("no report");
        problems.push(problem(
            h,
            format!("{found} ({why})"),
            format!("install rdma-pipe {VERSION} there (or pass --remote-bin DIR)"),
        ));
        return (problems, notes);
    };
    if p.agent_protocol != PROTOCOL {
        problems.push(problem(
            h,
            format!(
                "rdrecv {} speaks agent protocol {}, this rdpipe {VERSION} speaks {PROTOCOL}",
                p.version, p.agent_protocol
            ),
            format!("install rdma-pipe {VERSION} there"),
        ));
    } else if p.version != VERSION {
        notes.push(format!(
            "rdrecv {} there, rdpipe {VERSION} here (same agent protocol {PROTOCOL})",
            p.version
        ));
    }
    if !p.libraries.loaded {
        let what = match (&p.libraries.missing, &p.libraries.error) {
            (Some(lib), _) => format!("the RDMA libraries do not load ({lib} is missing)"),
            (None, Some(e)) => format!("the RDMA libraries do not work ({e})"),
            (None, None) => "the RDMA libraries do not load".to_string(),
        };
        problems.push(problem(h, what, INSTALL_RDMA));
        return (problems, notes);
    }
    for e in &p.device_errors {
        problems.push(problem(
            h,
            format!("an RDMA device cannot be used ({e})"),
            "check the provider (ibverbs-providers) and the permissions of /dev/infiniband/uverbs*",
        ));
    }
    if p.devices.is_empty() {
        let why = match &p.no_device_list {
            Some(e) => format!(" ({e}: no RDMA support in the kernel)"),
            None => String::new(),
        };
        notes.push(format!(
            "no RDMA device{why}: transfers from and to this host use TCP"
        ));
        return (problems, notes);
    }
    for d in &p.devices {
        for port in d.ports.iter().filter(|port| !port.active) {
            notes.push(format!("{} port {} is {}", d.name, port.port, port.state));
        }
    }
    if p.active_ports().next().is_none() {
        let states: Vec<String> = p
            .devices
            .iter()
            .flat_map(|d| {
                d.ports
                    .iter()
                    .map(move |port| format!("{} port {} {}", d.name, port.port, port.state))
            })
            .collect();
        problems.push(problem(
            h,
            format!("no RDMA port is ACTIVE ({})", states.join(", ")),
            "bring the link up (cable, switch port; `rdma link`, `ibstat`); an InfiniBand \
             port stuck in INIT needs a subnet manager (opensm)",
        ));
        return (problems, notes);
    }
    memlock(r, p, &mut problems, &mut notes);
    data_address(r, p, &mut problems, &mut notes);
    (problems, notes)
}

fn memlock(
    r: &HostReport,
    p: &rdpipe_agent::inventory::HostProbe,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
) {
    let Some(limit) = p.memlock_bytes else {
        return;
    };
    let need = p.pinned_per_transfer;
    if limit < need {
        problems.push(problem(
            &r.host,
            format!(
                "ulimit -l is {}, a transfer pins {}",
                human_bytes(limit),
                human_bytes(need)
            ),
            "raise memlock in /etc/security/limits.conf (e.g. `* - memlock unlimited`, \
             LimitMEMLOCK= for services) or use a smaller --chunk-size/--slots",
        ));
    } else if limit < 2 * need {
        notes.push(format!(
            "ulimit -l is {}: enough for one transfer ({}), not for a segment in the middle \
             of a pipeline, which pins {}",
            human_bytes(limit),
            human_bytes(need),
            human_bytes(2 * need)
        ));
    }
}

fn data_address(
    r: &HostReport,
    p: &rdpipe_agent::inventory::HostProbe,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
) {
    let (Some(addr), Some(from)) = (&r.data_address, r.data_address_from) else {
        return;
    };
    let rdma = p.rdma_addresses();
    if r.data_ips.iter().any(|ip| rdma.contains(ip)) {
        return;
    }
    let suggestion = rdma
        .iter()
        .find(|a| !a.contains(':') || !a.starts_with("fe80"))
        .cloned();
    if from != "--data-host" {
        if let Some(a) = &suggestion {
            // A pipeline discovers the RDMA address when the peer shares its
            // subnet or reaches it over its fabric (run/fabric.rs); the pair's
            // RDMA transfer below shows whether it does.
            notes.push(format!(
                "the data address {addr} (from {from}) is not on an RDMA port; pipelines \
                 use its RDMA address ({a}) instead when the other host shares that subnet \
                 or routes to it over its own RDMA port (--data-host {}={a} makes it certain)",
                r.host
            ));
            return;
        }
    }
    let fix = match &suggestion {
        Some(a) => format!(
            "pass --data-host {}={a} (an address on its RDMA port)",
            r.host
        ),
        None => "give the RDMA port's network device an address and pass --data-host \
                 HOST=ADDR"
            .to_string(),
    };
    let on = if rdma.is_empty() {
        "its RDMA ports have no address".to_string()
    } else {
        format!("its RDMA addresses are {}", rdma.join(", "))
    };
    problems.push(problem(
        &r.host,
        format!(
            "the data address {addr} (from {from}) is not on an RDMA port, so transfers \
             to it use TCP ({on})"
        ),
        fix,
    ));
}

/// The problems of one pair's transfers.
pub fn pair(p: &PairReport) -> Vec<Problem> {
    let who = format!("{} -> {}", p.from, p.to);
    let mut v = Vec::new();
    let first = |e: &[String]| e.first().cloned().unwrap_or_else(|| "failed".into());
    if let Some(t) = p.tcp.as_ref().filter(|t| !t.ok) {
        v.push(problem(
            &who,
            format!("the TCP test transfer failed ({})", first(&t.errors)),
            format!(
                "check that {} can reach {}'s data address on ephemeral ports (firewall, \
                 routing); --data-host picks another address",
                p.from, p.to
            ),
        ));
    }
    if let Some(t) = p.rdma.as_ref().filter(|t| !t.ok) {
        v.push(problem(
            &who,
            format!("the RDMA test transfer failed ({})", first(&t.errors)),
            format!(
                "see the set-up steps with `rdpipe -vv --transport rdma {}:'head -c 1M \
                 /dev/zero' {}:'> /dev/null'` and docs/troubleshooting.md",
                p.from, p.to
            ),
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdpipe_agent::inventory::{Device, HostProbe, Libraries, Netdev, Port};

    fn probe() -> HostProbe {
        HostProbe {
            version: VERSION.into(),
            agent_protocol: PROTOCOL,
            exe: None,
            hostname: None,
            libraries: Libraries {
                loaded: true,
                missing: None,
                error: None,
            },
            devices: vec![Device {
                name: "rxe0".into(),
                transport: "ib".into(),
                numa_node: None,
                netdevs: vec![Netdev {
                    name: "eth1".into(),
                    addresses: vec!["10.0.0.2/24".into()],
                }],
                ports: vec![Port {
                    port: 1,
                    state: "ACTIVE".into(),
                    active: true,
                    link_layer: "Ethernet".into(),
                    mtu: Some(1024),
                    rate_gbps: Some(10.0),
                    lanes: Some(1),
                    lane_gbps: Some(10.0),
                    gids: vec![],
                }],
            }],
            device_errors: vec![],
            no_device_list: None,
            memlock_bytes: Some(8 << 20),
            pinned_per_transfer: 2 << 20,
        }
    }

    fn report(p: HostProbe, data_ip: &str) -> HostReport {
        let mut r = HostReport::new("h2", false);
        r.data_address = Some(data_ip.into());
        r.data_address_from = Some("ssh HostName");
        r.data_ips = vec![data_ip.into()];
        r.probe = Some(p);
        r
    }

    #[test]
    fn a_healthy_host_has_no_problem() {
        let (p, notes) = host(&report(probe(), "10.0.0.2"));
        assert!(p.is_empty(), "{p:?}");
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn memlock_too_small() {
        let mut pr = probe();
        pr.memlock_bytes = Some(64 << 10);
        let (p, _) = host(&report(pr, "10.0.0.2"));
        assert_eq!(p.len(), 1);
        let line = p[0].to_string();
        assert!(
            line.starts_with("h2: ulimit -l is 64.00 KiB, a transfer pins 2.00 MiB: raise memlock in /etc/security/limits.conf"),
            "{line}"
        );
    }

    #[test]
    fn data_address_off_the_rdma_port() {
        // From ssh: discovery takes care of it; a note says so.
        let (p, notes) = host(&report(probe(), "192.168.1.2"));
        assert!(p.is_empty(), "{p:?}");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("use its RDMA address (10.0.0.2)")),
            "{notes:?}"
        );
        // Chosen with --data-host: a problem with the fix.
        let mut r = report(probe(), "192.168.1.2");
        r.data_address_from = Some("--data-host");
        let (p, _) = host(&r);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].problem.contains("192.168.1.2"), "{}", p[0]);
        assert_eq!(
            p[0].fix,
            "pass --data-host h2=10.0.0.2 (an address on its RDMA port)"
        );
    }

    #[test]
    fn missing_libraries_and_missing_rdrecv() {
        let mut pr = probe();
        pr.libraries = Libraries {
            loaded: false,
            missing: Some("libibverbs.so.1".into()),
            error: Some("cannot load".into()),
        };
        pr.devices.clear();
        let (p, _) = host(&report(pr, "10.0.0.2"));
        assert_eq!(p.len(), 1);
        assert!(p[0].problem.contains("libibverbs.so.1"), "{}", p[0]);
        assert!(p[0].fix.contains("install rdma-core"), "{}", p[0]);
        let mut r = HostReport::new("h3", false);
        r.rdrecv_missing = true;
        let (p, _) = host(&r);
        assert_eq!(
            p[0].to_string(),
            "h3: rdrecv not found: install rdma-pipe there (cargo install --path .) or pass \
             --remote-bin DIR (without --no-install and --remote-bin, rdpipe installs itself)"
        );
    }

    #[test]
    fn no_device_is_a_note_and_a_down_port_a_problem() {
        let mut pr = probe();
        pr.devices.clear();
        let (p, notes) = host(&report(pr, "10.0.0.2"));
        assert!(p.is_empty());
        assert!(notes[0].contains("TCP"));
        let mut pr = probe();
        pr.devices[0].ports[0].active = false;
        pr.devices[0].ports[0].state = "DOWN".into();
        let (p, _) = host(&report(pr, "10.0.0.2"));
        assert!(p[0].problem.contains("rxe0 port 1 DOWN"), "{}", p[0]);
    }
}
