//! Device discovery: which RDMA devices exist and which have an active port. The
//! transport announces RDMA in its hello only when [`active_devices`] finds one.

use crate::{dl, errno, VerbsError};
use rdma_sys as sys;
use std::ffi::CStr;

/// The transport family of a device (matters for WRITE_WITH_IMM: iWARP lacks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceTransport {
    /// InfiniBand or RoCE (Soft-RoCE included).
    Ib,
    /// iWARP (Soft-iWARP included): no immediate data.
    Iwarp,
    /// Anything else.
    Other,
}

impl DeviceTransport {
    pub(crate) fn from_raw(t: sys::ibv_transport_type::Type) -> Self {
        match t {
            sys::ibv_transport_type::IBV_TRANSPORT_IB => DeviceTransport::Ib,
            sys::ibv_transport_type::IBV_TRANSPORT_IWARP => DeviceTransport::Iwarp,
            _ => DeviceTransport::Other,
        }
    }
}

/// What discovery found about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Kernel name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Transport family.
    pub transport: DeviceTransport,
    /// Port numbers whose state is ACTIVE.
    pub active_ports: Vec<u8>,
}

/// Owns the array from `ibv_get_device_list`.
pub(crate) struct DeviceList {
    list: *mut *mut sys::ibv_device,
    pub(crate) len: usize,
}

impl DeviceList {
    pub(crate) fn get() -> Result<Self, VerbsError> {
        // Loads the libraries (and runs ibv_fork_init) on first use.
        let ibv = &dl::api()?.ibv;
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out pointer; the returned array is owned by us
        // until ibv_free_device_list (in Drop).
        let list = unsafe { (ibv.ibv_get_device_list)(&mut n) };
        if list.is_null() {
            return Err(VerbsError::GetDeviceList(errno()));
        }
        Ok(DeviceList {
            list,
            len: n.max(0) as usize,
        })
    }

    pub(crate) fn device(&self, i: usize) -> *mut sys::ibv_device {
        assert!(i < self.len);
        // SAFETY: the array holds `len` valid device pointers (then a NULL).
        unsafe { *self.list.add(i) }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed once. Contexts
        // opened from its devices are closed before this (see `probe`).
        unsafe { (dl::ibv().ibv_free_device_list)(self.list) }
    }
}

/// Owns a device context opened for discovery.
pub(crate) struct Context(pub(crate) *mut sys::ibv_context);

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: opened by ibv_open_device, closed once, nothing else uses it.
        unsafe {
            (dl::ibv().ibv_close_device)(self.0);
        }
    }
}

/// The name of a device, from a pointer that libibverbs gave us.
pub(crate) fn device_name(dev: *mut sys::ibv_device) -> String {
    // SAFETY: `dev` is a live device pointer; the name is a NUL-terminated string
    // owned by the device.
    let p = unsafe { (dl::ibv().ibv_get_device_name)(dev) };
    if p.is_null() {
        return "?".into();
    }
    // SAFETY: non-null, NUL-terminated (see above), and copied at once.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A device opened just long enough to read its attributes and every port's.
pub(crate) struct Queried {
    /// Its name (`mlx5_0`, `rxe0`).
    pub name: String,
    /// Its transport.
    pub transport: DeviceTransport,
    /// Each port (numbered from 1) with its attributes.
    pub ports: Vec<(u8, sys::ibv_port_attr)>,
}

/// Opens `dev`, queries it and each of its ports, and closes it again.
pub(crate) fn query_device(dev: *mut sys::ibv_device) -> Result<Queried, VerbsError> {
    let name = device_name(dev);
    // SAFETY: `dev` is a live entry of the device list, which outlives this call.
    let transport = DeviceTransport::from_raw(unsafe { (*dev).transport_type });
    // SAFETY: as above; the context is owned by `Context` and closed on drop.
    let ctx = unsafe { (dl::ibv().ibv_open_device)(dev) };
    if ctx.is_null() {
        return Err(VerbsError::OpenDevice {
            device: name,
            source: errno(),
        });
    }
    let ctx = Context(ctx);
    // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
    let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: valid context and out pointer.
    let rc = unsafe { (dl::ibv().ibv_query_device)(ctx.0, &mut attr) };
    crate::rc_errno(rc).map_err(|source| VerbsError::QueryDevice {
        device: name.clone(),
        source,
    })?;
    let mut ports = Vec::new();
    for port in 1..=attr.phys_port_cnt {
        // SAFETY: plain old data, zero is valid.
        let mut pa: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context, port number within phys_port_cnt.
        let rc = unsafe { dl::query_port(dl::loaded(), ctx.0, port, &mut pa) };
        crate::rc_errno(rc).map_err(|source| VerbsError::QueryPort {
            device: name.clone(),
            port,
            source,
        })?;
        ports.push((port, pa));
    }
    Ok(Queried {
        name,
        transport,
        ports,
    })
}

fn probe(dev: *mut sys::ibv_device) -> Result<DeviceInfo, VerbsError> {
    let q = query_device(dev)?;
    let active_ports = q
        .ports
        .iter()
        .filter(|(_, pa)| pa.state == sys::ibv_port_state::IBV_PORT_ACTIVE)
        .map(|(port, _)| *port)
        .collect();
    Ok(DeviceInfo {
        name: q.name,
        transport: q.transport,
        active_ports,
    })
}

/// Every RDMA device this host has, with its active ports. A device that cannot
/// be opened or queried is left out (it cannot carry traffic either).
/// [`VerbsError::LibraryMissing`] when this host has no rdma-core.
pub fn devices() -> Result<Vec<DeviceInfo>, VerbsError> {
    // Discovery is the first verbs call a process makes; loading the libraries
    // runs ibv_fork_init before it (its man page asks for "before any other
    // libibverbs call"). A fork_init failure resurfaces, and stops RDMA, at the
    // first registration.
    let list = DeviceList::get()?;
    let mut out = Vec::with_capacity(list.len);
    for i in 0..list.len {
        let d = list.device(i);
        if d.is_null() {
            break;
        }
        if let Ok(info) = probe(d) {
            out.push(info);
        }
    }
    Ok(out)
}

/// The devices that have at least one ACTIVE port. Empty (not an error) on a host
/// without RDMA or without rdma-core (ask [`crate::load`] which).
pub fn active_devices() -> Vec<DeviceInfo> {
    devices()
        .unwrap_or_default()
        .into_iter()
        .filter(|d| !d.active_ports.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_without_rdma_is_empty_not_a_crash() {
        // On the build machines there is no RDMA at all; on others this lists
        // whatever exists. Either way active_devices() only returns active ones.
        for d in active_devices() {
            assert!(!d.active_ports.is_empty(), "{d:?}");
            assert!(!d.name.is_empty());
        }
    }
}
