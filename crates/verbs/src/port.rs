//! Everything about each RDMA device and port that a health check wants
//! (`rdpipe doctor`): port state, link layer, active MTU, width × speed as a
//! link rate in Gb/s (from `ibv_query_port`), and from sysfs the GID table with
//! RoCE versions, the network devices and the NUMA node.

use crate::device::{query_device, DeviceList, DeviceTransport};
use crate::sysfs::{self, GidEntry};
use crate::VerbsError;
use rdma_sys as sys;
use std::path::Path;

/// A port's logical state (`ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// DOWN: no link.
    Down,
    /// INIT: link up, not yet configured by the subnet manager.
    Init,
    /// ARMED: configured, not yet active.
    Armed,
    /// ACTIVE: can carry traffic.
    Active,
    /// Another value (NOP, ACTIVE_DEFER, or unknown).
    Other(u32),
}

impl PortState {
    fn from_raw(s: sys::ibv_port_state::Type) -> PortState {
        match s {
            sys::ibv_port_state::IBV_PORT_DOWN => PortState::Down,
            sys::ibv_port_state::IBV_PORT_INIT => PortState::Init,
            sys::ibv_port_state::IBV_PORT_ARMED => PortState::Armed,
            sys::ibv_port_state::IBV_PORT_ACTIVE => PortState::Active,
            other => PortState::Other(other),
        }
    }
}

impl std::fmt::Display for PortState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortState::Down => f.write_str("DOWN"),
            PortState::Init => f.write_str("INIT"),
            PortState::Armed => f.write_str("ARMED"),
            PortState::Active => f.write_str("ACTIVE"),
            PortState::Other(n) => write!(f, "state {n}"),
        }
    }
}

/// A port's link layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE, iWARP).
    Ethernet,
    /// Not said (older providers: InfiniBand).
    Unspecified,
}

impl LinkLayer {
    fn from_raw(l: u8) -> LinkLayer {
        // IBV_LINK_LAYER_{UNSPECIFIED,INFINIBAND,ETHERNET} (verbs.h #defines,
        // which bindgen does not carry over).
        match l {
            1 => LinkLayer::InfiniBand,
            2 => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        }
    }
}

impl std::fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Unspecified => "unspecified",
        })
    }
}

/// Lanes of an `active_width` value (1X, 2X, 4X, 8X, 12X).
pub fn lanes(active_width: u8) -> Option<u8> {
    match active_width {
        1 => Some(1),
        2 => Some(4),
        4 => Some(8),
        8 => Some(12),
        16 => Some(2),
        _ => None,
    }
}

/// Gb/s per lane of an `active_speed` value (SDR ... NDR), as `ibv_devinfo`
/// names them.
pub fn lane_gbps(active_speed: u8) -> Option<f64> {
    match active_speed {
        1 => Some(2.5),
        2 => Some(5.0),
        4 | 8 => Some(10.0),
        16 => Some(14.0),
        32 => Some(25.0),
        64 => Some(50.0),
        128 => Some(100.0),
        _ => None,
    }
}

/// Bytes of an `ibv_mtu` value.
pub fn mtu_bytes(mtu: sys::ibv_mtu::Type) -> Option<u32> {
    (1..=5).contains(&mtu).then(|| 128u32 << mtu)
}

/// One port of a device.
#[derive(Debug, Clone, PartialEq)]
pub struct PortDetails {
    /// Its number (from 1).
    pub port: u8,
    /// Logical state.
    pub state: PortState,
    /// InfiniBand or Ethernet.
    pub link_layer: LinkLayer,
    /// Active MTU in bytes.
    pub active_mtu: Option<u32>,
    /// Lanes in use.
    pub lanes: Option<u8>,
    /// Gb/s per lane.
    pub lane_gbps: Option<f64>,
    /// The non-zero GID table entries (from sysfs).
    pub gids: Vec<GidEntry>,
}

impl PortDetails {
    /// The link rate in Gb/s (lanes × per-lane speed), when both are known.
    pub fn rate_gbps(&self) -> Option<f64> {
        Some(f64::from(self.lanes?) * self.lane_gbps?)
    }
}

/// One RDMA device with all its ports.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceDetails {
    /// Kernel name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Transport family.
    pub transport: DeviceTransport,
    /// NUMA node of the device, when it has one.
    pub numa_node: Option<i32>,
    /// The network devices it carries (RoCE's Ethernet, IPoIB).
    pub netdevs: Vec<String>,
    /// Its ports.
    pub ports: Vec<PortDetails>,
}

fn details(dev: *mut sys::ibv_device, root: &Path) -> Result<DeviceDetails, VerbsError> {
    let q = query_device(dev)?;
    let (name, transport) = (q.name, q.transport);
    let ports: Vec<PortDetails> = q
        .ports
        .iter()
        .map(|(port, pa)| PortDetails {
            port: *port,
            state: PortState::from_raw(pa.state),
            link_layer: LinkLayer::from_raw(pa.link_layer),
            active_mtu: mtu_bytes(pa.active_mtu),
            lanes: lanes(pa.active_width),
            lane_gbps: lane_gbps(pa.active_speed),
            gids: sysfs::gids(root, &name, *port, pa.gid_tbl_len.max(0) as u32),
        })
        .collect();
    let gids: Vec<GidEntry> = ports.iter().flat_map(|p| p.gids.clone()).collect();
    Ok(DeviceDetails {
        netdevs: sysfs::netdevs(root, &name, &gids),
        numa_node: sysfs::numa_node(root, &name),
        name,
        transport,
        ports,
    })
}

/// Every RDMA device with every port, for a health check. A device that cannot
/// be opened or queried is reported as that error; [`VerbsError::LibraryMissing`]
/// when this host has no rdma-core.
pub fn device_details() -> Result<Vec<Result<DeviceDetails, VerbsError>>, VerbsError> {
    let list = DeviceList::get()?;
    let root = Path::new(sysfs::SYSFS_INFINIBAND);
    let mut out = Vec::with_capacity(list.len);
    for i in 0..list.len {
        let d = list.device(i);
        if d.is_null() {
            break;
        }
        out.push(details(d, root));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_mtus() {
        let p = PortDetails {
            port: 1,
            state: PortState::Active,
            link_layer: LinkLayer::InfiniBand,
            active_mtu: mtu_bytes(5),
            lanes: lanes(2),
            lane_gbps: lane_gbps(32),
            gids: vec![],
        };
        assert_eq!(p.rate_gbps(), Some(100.0), "4X EDR");
        assert_eq!(p.active_mtu, Some(4096));
        assert_eq!(mtu_bytes(1), Some(256));
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(lanes(3), None);
        assert_eq!(PortState::Active.to_string(), "ACTIVE");
    }

    #[test]
    fn details_without_devices_is_empty_not_a_crash() {
        // The build machines have the libraries but no device; elsewhere every
        // device listed has at least one port.
        for d in device_details().unwrap_or_default().into_iter().flatten() {
            assert!(!d.ports.is_empty(), "{d:?}");
        }
    }
}
