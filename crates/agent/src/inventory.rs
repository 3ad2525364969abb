//! The host side of `rdpipe doctor`: what this host's rdma-pipe sees (version,
//! agent protocol, whether the RDMA libraries load, every RDMA device and port,
//! the netdevs' addresses, `ulimit -l`), as [`HostProbe`]. `rdrecv
//! --doctor-probe [--chunk-size N] [--slots N]` prints it as one JSON document
//! on stdout (read back over ssh); for `-` rdpipe calls [`collect`] itself.

use rdpipe_control::NetAddr;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::process::ExitCode;

/// Whether the RDMA libraries load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Libraries {
    /// libibverbs and librdmacm were loaded.
    pub loaded: bool,
    /// The library that could not be loaded (`libibverbs.so.1`).
    pub missing: Option<String>,
    /// The loader's (or ibv_fork_init's) message.
    pub error: Option<String>,
}

/// One GID table entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gid {
    /// Index in the table.
    pub index: u32,
    /// The GID.
    pub gid: String,
    /// `IB/RoCE v1`, `RoCE v2` or `unknown`.
    pub kind: String,
    /// Its network device (RoCE).
    pub netdev: Option<String>,
    /// The IP address it stands for (RoCE), if any.
    pub ip: Option<String>,
}

/// One port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Port {
    /// Number (from 1).
    pub port: u8,
    /// `ACTIVE`, `DOWN`, `INIT`, `ARMED`.
    pub state: String,
    /// The state is ACTIVE.
    pub active: bool,
    /// `InfiniBand`, `Ethernet`.
    pub link_layer: String,
    /// Active MTU, bytes.
    pub mtu: Option<u32>,
    /// Lanes × Gb/s per lane.
    pub rate_gbps: Option<f64>,
    /// Lanes (1X, 4X...).
    pub lanes: Option<u8>,
    /// Gb/s per lane.
    pub lane_gbps: Option<f64>,
    /// The non-zero GID entries.
    pub gids: Vec<Gid>,
}

/// A network device and its addresses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Netdev {
    /// Name (`eth1`, `ib0`).
    pub name: String,
    /// Its addresses (`10.0.0.2/24`), from `ip -o addr`, else from the GIDs.
    pub addresses: Vec<String>,
}

/// One RDMA device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// Name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// `ib` (InfiniBand, RoCE), `iwarp`, `other`.
    pub transport: String,
    /// NUMA node, when it has one.
    pub numa_node: Option<i32>,
    /// The network devices it carries.
    pub netdevs: Vec<Netdev>,
    /// Its ports.
    pub ports: Vec<Port>,
}

/// What one host reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostProbe {
    /// rdma-pipe's version there.
    pub version: String,
    /// Its agent protocol ([`rdpipe_control::PROTOCOL`]).
    pub agent_protocol: u32,
    /// The program that answered (its path).
    pub exe: Option<String>,
    /// The host's own name.
    pub hostname: Option<String>,
    /// The RDMA libraries.
    pub libraries: Libraries,
    /// The devices (empty without libraries).
    pub devices: Vec<Device>,
    /// Devices that could not be opened or queried, with why.
    pub device_errors: Vec<String>,
    /// Why no device could be listed at all (no RDMA support in the kernel).
    pub no_device_list: Option<String>,
    /// `ulimit -l` in bytes; none when unlimited.
    pub memlock_bytes: Option<u64>,
    /// What one transfer pins there (slots × chunk size).
    pub pinned_per_transfer: u64,
}

impl HostProbe {
    /// The ports in state ACTIVE, with their devices.
    pub fn active_ports(&self) -> impl Iterator<Item = (&Device, &Port)> {
        self.devices
            .iter()
            .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
            .filter(|(_, p)| p.active)
    }

    /// The addresses (without prefix length) of the netdevs behind active ports.
    pub fn rdma_addresses(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for d in self
            .devices
            .iter()
            .filter(|d| d.ports.iter().any(|p| p.active))
        {
            for n in &d.netdevs {
                v.extend(n.addresses.iter().map(|a| strip_prefix_len(a).to_string()));
            }
            for p in d.ports.iter().filter(|p| p.active) {
                v.extend(p.gids.iter().filter_map(|g| g.ip.clone()));
            }
        }
        v.sort();
        v.dedup();
        v
    }

    /// The same addresses with their prefix lengths (a GID's address, known
    /// without one, stands for itself alone), in the order found: what an agent
    /// reports in its `FABRIC` line.
    pub fn rdma_networks(&self) -> Vec<NetAddr> {
        networks(&self.devices)
    }
}

fn networks(devices: &[Device]) -> Vec<NetAddr> {
    let mut v: Vec<NetAddr> = Vec::new();
    // Device by device: a netdev's own addresses (with their prefixes) first.
    for d in devices.iter().filter(|d| d.ports.iter().any(|p| p.active)) {
        let gid_ips = d
            .ports
            .iter()
            .filter(|p| p.active)
            .flat_map(|p| p.gids.iter().filter_map(|g| g.ip.as_deref()));
        let found = d.netdevs.iter().flat_map(|n| n.addresses.iter());
        for a in found.map(String::as_str).chain(gid_ips) {
            if let Ok(a) = a.parse::<NetAddr>() {
                if !v.iter().any(|b| b.ip == a.ip) {
                    v.push(a);
                }
            }
        }
    }
    v
}

/// This host's RDMA-capable addresses ([`HostProbe::rdma_networks`]): none
/// without the RDMA libraries or an ACTIVE port.
pub fn rdma_networks() -> Vec<NetAddr> {
    if rdpipe_verbs::load().is_err() {
        return vec![];
    }
    match rdpipe_verbs::device_details() {
        Ok(list) => networks(&list.into_iter().flatten().map(device).collect::<Vec<_>>()),
        Err(_) => vec![],
    }
}

/// `10.0.0.2/24` → `10.0.0.2`.
pub fn strip_prefix_len(a: &str) -> &str {
    a.split('/').next().unwrap_or(a)
}

/// A netdev's addresses as `ip -o addr show dev NAME` lists them (none when `ip`
/// is missing).
fn ip_addresses(netdev: &str) -> Vec<String> {
    let Ok(o) = std::process::Command::new("ip")
        .args(["-o", "addr", "show", "dev", netdev])
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return vec![];
    };
    parse_ip_addr(&String::from_utf8_lossy(&o.stdout))
}

/// The `inet`/`inet6` addresses of `ip -o addr` output.
pub fn parse_ip_addr(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|t| *t == "inet" || *t == "inet6")?;
            w.next().map(str::to_string)
        })
        .collect()
}

fn device(d: rdpipe_verbs::DeviceDetails) -> Device {
    let ports: Vec<Port> = d
        .ports
        .iter()
        .map(|p| Port {
            port: p.port,
            state: p.state.to_string(),
            active: p.state == rdpipe_verbs::PortState::Active,
            link_layer: p.link_layer.to_string(),
            mtu: p.active_mtu,
            rate_gbps: p.rate_gbps(),
            lanes: p.lanes,
            lane_gbps: p.lane_gbps,
            gids: p
                .gids
                .iter()
                .map(|g| Gid {
                    index: g.index,
                    gid: g.gid.to_string(),
                    kind: g.kind.to_string(),
                    netdev: g.netdev.clone(),
                    ip: g.ip().map(|ip| ip.to_string()),
                })
                .collect(),
        })
        .collect();
    let netdevs = d
        .netdevs
        .iter()
        .map(|n| {
            let mut addresses = ip_addresses(n);
            if addresses.is_empty() {
                // No `ip`: the addresses the GID table knows.
                addresses = ports
                    .iter()
                    .flat_map(|p| &p.gids)
                    .filter(|g| g.netdev.as_deref() == Some(n))
                    .filter_map(|g| g.ip.clone())
                    .collect();
                addresses.dedup();
            }
            Netdev {
                name: n.clone(),
                addresses,
            }
        })
        .collect();
    Device {
        name: d.name,
        transport: match d.transport {
            rdpipe_verbs::DeviceTransport::Ib => "ib",
            rdpipe_verbs::DeviceTransport::Iwarp => "iwarp",
            rdpipe_verbs::DeviceTransport::Other => "other",
        }
        .into(),
        numa_node: d.numa_node,
        netdevs,
        ports,
    }
}

/// This host's report, for transfers of `slots` × `chunk_size`.
pub fn collect(chunk_size: u32, slots: u32) -> HostProbe {
    let libraries = match rdpipe_verbs::load().and_then(|()| rdpipe_verbs::fork_init()) {
        Ok(_) => Libraries {
            loaded: true,
            missing: None,
            error: None,
        },
        Err(e) => Libraries {
            loaded: false,
            missing: match &e {
                rdpipe_verbs::VerbsError::LibraryMissing { lib, .. } => Some(lib.to_string()),
                _ => None,
            },
            error: Some(e.to_string()),
        },
    };
    let (mut devices, mut device_errors, mut no_device_list) = (Vec::new(), Vec::new(), None);
    if libraries.loaded {
        match rdpipe_verbs::device_details() {
            Ok(list) => {
                for d in list {
                    match d {
                        Ok(d) => devices.push(device(d)),
                        Err(e) => device_errors.push(e.to_string()),
                    }
                }
            }
            Err(e @ rdpipe_verbs::VerbsError::GetDeviceList(_)) => {
                no_device_list = Some(e.to_string())
            }
            Err(e) => device_errors.push(e.to_string()),
        }
    }
    let memlock = rustix::process::getrlimit(rustix::process::Resource::Memlock);
    HostProbe {
        version: rdpipe_report::VERSION.into(),
        agent_protocol: rdpipe_control::PROTOCOL,
        exe: std::env::current_exe()
            .ok()
            .map(|p| p.display().to_string()),
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|s| s.trim().to_string()),
        libraries,
        devices,
        device_errors,
        no_device_list,
        memlock_bytes: memlock.current,
        pinned_per_transfer: u64::from(chunk_size) * u64::from(slots),
    }
}

/// `--doctor-probe [--chunk-size N] [--slots N]` (after the mode word): prints
/// [`collect`]'s report as JSON on stdout.
pub fn main<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    let (mut chunk, mut slots) = (1u32 << 20, 2u32);
    let mut it = args.into_iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(flag) = it.next() {
        let value = it.next().and_then(|v| v.parse::<u32>().ok());
        match (flag.as_str(), value) {
            ("--chunk-size", Some(v)) => chunk = v,
            ("--slots", Some(v)) => slots = v,
            _ => {
                eprintln!("--doctor-probe: unknown or malformed argument {flag}");
                return ExitCode::from(2);
            }
        }
    }
    match serde_json::to_string(&collect(chunk, slots)) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("--doctor-probe: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addr_output() {
        let out = "3: eth1    inet 10.0.0.2/24 brd 10.0.0.255 scope global eth1\\       valid_lft forever preferred_lft forever\n\
                   3: eth1    inet6 fe80::5054:ff:fe12:3456/64 scope link \\       valid_lft forever preferred_lft forever\n";
        assert_eq!(
            parse_ip_addr(out),
            ["10.0.0.2/24", "fe80::5054:ff:fe12:3456/64"]
        );
        assert_eq!(strip_prefix_len("10.0.0.2/24"), "10.0.0.2");
    }

    #[test]
    fn rdma_networks_of_active_ports_only() {
        let port = |active: bool, ip: &str| Port {
            port: 1,
            state: if active { "ACTIVE" } else { "DOWN" }.into(),
            active,
            link_layer: "Ethernet".into(),
            mtu: None,
            rate_gbps: None,
            lanes: None,
            lane_gbps: None,
            gids: vec![Gid {
                index: 1,
                gid: String::new(),
                kind: "RoCE v2".into(),
                netdev: Some("eth1".into()),
                ip: Some(ip.into()),
            }],
        };
        let dev = |name: &str, active: bool, addrs: &[&str], gid_ip: &str| Device {
            name: name.into(),
            transport: "ib".into(),
            numa_node: None,
            netdevs: vec![Netdev {
                name: "eth1".into(),
                addresses: addrs.iter().map(|a| a.to_string()).collect(),
            }],
            ports: vec![port(active, gid_ip)],
        };
        let devices = [
            dev("mlx5_0", true, &["10.0.0.2/24", "fe80::2/64"], "10.0.0.2"),
            dev("mlx5_1", false, &["10.9.0.2/24"], "10.9.0.2"),
            dev("rxe0", true, &[], "10.1.0.2"),
        ];
        let got: Vec<String> = networks(&devices).iter().map(|a| a.to_string()).collect();
        assert_eq!(got, ["10.0.0.2/24", "fe80::2/64", "10.1.0.2/32"]);
    }

    #[test]
    fn this_host_probes_and_round_trips() {
        let p = collect(1 << 20, 2);
        assert_eq!(p.pinned_per_transfer, 2 << 20);
        assert_eq!(p.agent_protocol, rdpipe_control::PROTOCOL);
        let back: HostProbe = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
