//! `rdpipe doctor`'s report for people: per host what was found, per pair the
//! rates beside the link rate, then every problem with its fix, one line each.

use super::{DoctorReport, HostReport, PairTransfer};
use rdpipe_agent::inventory::{Device, HostProbe};
use rdpipe_term::progress::human_bytes;
use std::fmt::Write;

fn device_lines(out: &mut String, d: &Device) {
    let numa = d
        .numa_node
        .map(|n| format!("NUMA node {n}"))
        .unwrap_or_else(|| "no NUMA node".into());
    let _ = writeln!(out, "  device {} ({}, {numa})", d.name, d.transport);
    for p in &d.ports {
        let rate = match (p.rate_gbps, p.lanes, p.lane_gbps) {
            (Some(r), Some(l), Some(s)) => format!("{r} Gb/s ({l}x {s} Gb/s)"),
            _ => "rate unknown".into(),
        };
        let mtu = p
            .mtu
            .map(|m| format!("MTU {m}"))
            .unwrap_or_else(|| "MTU unknown".into());
        let _ = writeln!(
            out,
            "    port {}: {}, {}, {rate}, {mtu}",
            p.port, p.state, p.link_layer
        );
        for g in &p.gids {
            let dev = g.netdev.as_deref().unwrap_or("-");
            let _ = writeln!(out, "      GID {} {} {} {dev}", g.index, g.gid, g.kind);
        }
    }
    for n in &d.netdevs {
        let addrs = if n.addresses.is_empty() {
            "no address".to_string()
        } else {
            n.addresses.join(", ")
        };
        let _ = writeln!(out, "    netdev {}: {addrs}", n.name);
    }
}

fn probe_lines(out: &mut String, p: &HostProbe) {
    let exe = p.exe.as_deref().unwrap_or("?");
    let name = p
        .hostname
        .as_deref()
        .map(|h| format!(" on {h}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  rdma-pipe {} (agent protocol {}) at {exe}{name}",
        p.version, p.agent_protocol
    );
    match (&p.libraries.loaded, &p.libraries.error) {
        (true, _) => {
            let _ = writeln!(
                out,
                "  RDMA libraries: loaded (libibverbs.so.1, librdmacm.so.1)"
            );
        }
        (false, e) => {
            let _ = writeln!(
                out,
                "  RDMA libraries: not loaded ({})",
                e.as_deref().unwrap_or("?")
            );
        }
    }
    if p.libraries.loaded && p.devices.is_empty() {
        let _ = writeln!(out, "  RDMA devices: none");
    }
    for d in &p.devices {
        device_lines(out, d);
    }
    let limit = p
        .memlock_bytes
        .map(human_bytes)
        .unwrap_or_else(|| "unlimited".into());
    let _ = writeln!(
        out,
        "  ulimit -l: {limit} (a transfer pins {})",
        human_bytes(p.pinned_per_transfer)
    );
}

fn host_lines(out: &mut String, r: &HostReport) {
    let how = if r.local {
        "this machine".to_string()
    } else if let Some(e) = &r.ssh_error {
        format!("ssh failed: {e}")
    } else {
        "reachable over ssh".to_string()
    };
    let _ = writeln!(out, "host {}: {how}", r.host);
    if let (Some(a), Some(from)) = (&r.data_address, r.data_address_from) {
        let ips = if r.data_ips.is_empty() {
            "does not resolve here".to_string()
        } else {
            r.data_ips.join(", ")
        };
        let _ = writeln!(out, "  data address: {a} (from {from}; {ips})");
    }
    if r.rdrecv_missing {
        let _ = writeln!(out, "  rdrecv: not found");
    }
    if let Some(a) = &r.agent {
        let _ = writeln!(out, "  agent: {a}");
    }
    if let Some(e) = &r.install_error {
        let _ = writeln!(out, "  agent: {e}");
    }
    if let Some(e) = &r.probe_error {
        let v = r.other_version.as_deref().unwrap_or("rdrecv");
        let _ = writeln!(out, "  {v}: its probe failed: {e}");
    }
    if let Some(p) = &r.probe {
        probe_lines(out, p);
    }
    for n in &r.notes {
        let _ = writeln!(out, "  note: {n}");
    }
}

fn transfer_text(name: &str, t: &PairTransfer) -> String {
    if !t.ok {
        let e = t.errors.first().map(String::as_str).unwrap_or("failed");
        return format!("{name} FAILED ({e})");
    }
    let rate = t
        .gbit_per_second
        .map(|g| format!("{g:.2} Gb/s"))
        .unwrap_or_else(|| "rate unknown".into());
    let what = match (t.bytes, t.seconds) {
        (Some(b), Some(s)) => format!(" ({} in {s:.3} s)", human_bytes(b)),
        _ => String::new(),
    };
    let link = t
        .link_gbps
        .map(|l| format!(", link {l} Gb/s"))
        .unwrap_or_default();
    let over = t.transport.as_deref().unwrap_or(name);
    format!("{name} {rate}{what} over {over}{link}")
}

/// The whole report as text.
pub fn render(r: &DoctorReport) -> String {
    let mut out = String::new();
    for h in &r.hosts {
        host_lines(&mut out, h);
    }
    for p in &r.pairs {
        let mut parts = Vec::new();
        if let Some(t) = &p.tcp {
            parts.push(transfer_text("tcp", t));
        }
        if let Some(t) = &p.rdma {
            parts.push(transfer_text("rdma", t));
        }
        if let Some(s) = &p.skipped {
            parts.push(s.clone());
        }
        let _ = writeln!(out, "pair {} -> {}: {}", p.from, p.to, parts.join("; "));
    }
    if r.problems.is_empty() {
        let _ = writeln!(out, "no problems found");
    } else {
        let _ = writeln!(out, "{} problem(s):", r.problems.len());
        for p in &r.problems {
            let _ = writeln!(out, "{p}");
        }
    }
    out
}
