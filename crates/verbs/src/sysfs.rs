//! What the kernel says about an RDMA device in sysfs
//! (`/sys/class/infiniband/DEV/...`): the GID table with each entry's RoCE
//! version and network device, the device's NUMA node, and the network devices
//! it carries. Plain file reads, no `unsafe`; the root is a parameter so tests
//! can use a fake tree.

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

/// Where the kernel lists RDMA devices.
pub const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// The kind of a GID table entry (`gid_attrs/types/N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// `IB/RoCE v1`: InfiniBand, or RoCE v1 (Ethernet, not routable).
    IbRoceV1,
    /// `RoCE v2`: RoCE over UDP/IP (routable).
    RoceV2,
    /// Not given (no `types` file: InfiniBand ports on older kernels).
    Unknown,
}

impl std::fmt::Display for GidType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GidType::IbRoceV1 => "IB/RoCE v1",
            GidType::RoceV2 => "RoCE v2",
            GidType::Unknown => "unknown",
        })
    }
}

/// One non-zero entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// Its index (what `ibv_query_gid` and `show_gids` call it).
    pub index: u32,
    /// The GID (for RoCE, an IPv6 address or an IPv4-mapped one).
    pub gid: Ipv6Addr,
    /// IB/RoCE v1 or RoCE v2.
    pub kind: GidType,
    /// The network device the entry belongs to (RoCE).
    pub netdev: Option<String>,
}

impl GidEntry {
    /// The IP address a RoCE GID stands for (IPv4 for an IPv4-mapped GID); none
    /// for link-local and InfiniBand GIDs.
    pub fn ip(&self) -> Option<std::net::IpAddr> {
        if let Some(v4) = self.gid.to_ipv4_mapped() {
            return Some(v4.into());
        }
        let link_local = (self.gid.segments()[0] & 0xffc0) == 0xfe80;
        (self.netdev.is_some() && !link_local).then_some(self.gid.into())
    }
}

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn port_dir(root: &Path, dev: &str, port: u8) -> PathBuf {
    root.join(dev).join("ports").join(port.to_string())
}

/// The non-zero entries among the first `len` of a port's GID table.
pub fn gids(root: &Path, dev: &str, port: u8, len: u32) -> Vec<GidEntry> {
    let dir = port_dir(root, dev, port);
    (0..len.min(1024))
        .filter_map(|i| {
            let gid: Ipv6Addr = read_trimmed(&dir.join("gids").join(i.to_string()))?
                .parse()
                .ok()?;
            if gid.is_unspecified() {
                return None;
            }
            let kind = match read_trimmed(&dir.join("gid_attrs/types").join(i.to_string())) {
                Some(t) if t.contains("v2") => GidType::RoceV2,
                Some(_) => GidType::IbRoceV1,
                None => GidType::Unknown,
            };
            let netdev = read_trimmed(&dir.join("gid_attrs/ndevs").join(i.to_string()));
            Some(GidEntry {
                index: i,
                gid,
                kind,
                netdev,
            })
        })
        .collect()
}

/// The device's NUMA node (`device/numa_node`); none when the kernel does not
/// say or says -1 (no affinity, or a virtual device such as Soft-RoCE).
pub fn numa_node(root: &Path, dev: &str) -> Option<i32> {
    read_trimmed(&root.join(dev).join("device/numa_node"))?
        .parse()
        .ok()
        .filter(|n: &i32| *n >= 0)
}

/// The network devices an RDMA device carries: those of its GID entries, the
/// PCI function's own (`device/net/*`: IPoIB, a RoCE NIC's Ethernet) and a
/// software device's `parent` (Soft-RoCE), without duplicates, sorted.
pub fn netdevs(root: &Path, dev: &str, gids: &[GidEntry]) -> Vec<String> {
    let mut v: Vec<String> = gids.iter().filter_map(|g| g.netdev.clone()).collect();
    if let Ok(rd) = std::fs::read_dir(root.join(dev).join("device/net")) {
        v.extend(
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned()),
        );
    }
    v.extend(read_trimmed(&root.join(dev).join("parent")));
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_soft_roce_tree() {
        let root = std::env::temp_dir().join(format!("rdpipe-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let p = root.join("rxe0/ports/1");
        for d in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        let w = |f: &str, s: &str| std::fs::write(p.join(f), s).unwrap();
        w("gids/0", "fe80:0000:0000:0000:5054:00ff:fe12:3456\n");
        w("gid_attrs/types/0", "IB/RoCE v1\n");
        w("gid_attrs/ndevs/0", "eth1\n");
        w("gids/1", "0000:0000:0000:0000:0000:ffff:0a00:0002\n");
        w("gid_attrs/types/1", "RoCE v2\n");
        w("gid_attrs/ndevs/1", "eth1\n");
        w("gids/2", "0000:0000:0000:0000:0000:0000:0000:0000\n");
        std::fs::write(root.join("rxe0/parent"), "eth1\n").unwrap();
        let g = gids(&root, "rxe0", 1, 3);
        assert_eq!(g.len(), 2, "{g:?}");
        assert_eq!(g[0].kind, GidType::IbRoceV1);
        assert_eq!(g[0].ip(), None, "link-local");
        assert_eq!(g[1].kind, GidType::RoceV2);
        assert_eq!(g[1].ip(), Some("10.0.0.2".parse().unwrap()));
        assert_eq!(netdevs(&root, "rxe0", &g), ["eth1"]);
        assert_eq!(numa_node(&root, "rxe0"), None);
        std::fs::create_dir_all(root.join("rxe0/device")).unwrap();
        std::fs::write(root.join("rxe0/device/numa_node"), "1\n").unwrap();
        assert_eq!(numa_node(&root, "rxe0"), Some(1));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
