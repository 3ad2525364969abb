//! Protection domains and registered memory.
//!
//! A [`MemoryRegion`] owns its own page-aligned allocation, rounded up to whole
//! pages, so the `MADV_DONTFORK` that `ibv_fork_init` applies to registered pages
//! never hits unrelated data (see the crate docs). Registration pins the pages;
//! failing for lack of lockable memory is recognisable with
//! [`crate::VerbsError::is_memlock`].
//!
//! A [`RegionAlias`] is another region's memory registered in a second PD as
//! well (on the same or another device): a source of WRITEs on that PD's queue
//! pairs, with no CPU access of its own (the original region has it), keeping
//! the original (and so its buffer) alive. A relay forwards from its receive
//! ring this way without copying.
//!
//! Access from the CPU: [`MemoryRegion::as_slice`] and
//! [`MemoryRegion::as_mut_slice`] hand out ordinary slices. The NIC may read or write
//! the same bytes while a work request that names them is outstanding (or, for a
//! region registered with remote write access, whenever the authenticated peer
//! decides to write). That is a protocol concern, not a memory-safety one: the
//! allocation stays alive as long as any queue pair that may touch it (queue pairs
//! keep the regions they used alive), and every bit pattern is a valid `u8`, so the
//! worst a protocol error can do is deliver wrong bytes, which the end-to-end
//! checksum catches. The transport's credit logic makes sure it never happens.

use crate::cm::{CmId, CmIdInner};
use crate::{dl, errno, VerbsError};
use rdma_sys as sys;
use std::alloc::{self, Layout};
use std::sync::Arc;

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// A zeroed, page-aligned allocation of whole pages.
struct PageBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl PageBuf {
    fn new(len: usize) -> Result<Self, VerbsError> {
        let page = page_size();
        let size = len.max(1).div_ceil(page) * page;
        let layout = Layout::from_size_align(size, page).map_err(|_| VerbsError::Alloc { len })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(VerbsError::Alloc { len });
        }
        Ok(PageBuf { ptr, layout })
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { alloc::dealloc(self.ptr, self.layout) }
    }
}

pub(crate) struct PdInner {
    pub(crate) pd: *mut sys::ibv_pd,
    _id: Arc<CmIdInner>,
}

// SAFETY: libibverbs objects may be used from any thread; Rust never mutates them.
unsafe impl Send for PdInner {}
// SAFETY: see above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd; every MR and QP of it holds an Arc to
        // this struct, so they are gone already.
        unsafe {
            (dl::ibv().ibv_dealloc_pd)(self.pd);
        }
    }
}

/// A protection domain on the device a cm id is bound to.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl ProtectionDomain {
    /// Allocates a PD on `id`'s device (the id must be bound or resolved). Calls
    /// [`crate::fork_init`] first, since registrations follow.
    pub fn new(id: &CmId) -> Result<Self, VerbsError> {
        crate::fork_init()?;
        let ctx = id.verbs()?;
        // SAFETY: a live context (kept alive by the id we hold an Arc to).
        let pd = unsafe { (dl::ibv().ibv_alloc_pd)(ctx) };
        if pd.is_null() {
            return Err(VerbsError::AllocPd(errno()));
        }
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                pd,
                _id: id.inner.clone(),
            }),
        })
    }

    /// Allocates `len` bytes (whole pages, zeroed) and registers them for local
    /// write access, plus remote write access when `remote_write`.
    pub fn register(&self, len: usize, remote_write: bool) -> Result<MemoryRegion, VerbsError> {
        crate::fork_init()?;
        let buf = PageBuf::new(len)?;
        let mut access = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if remote_write {
            access |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
        // SAFETY: the PD is live; the buffer is a live allocation of at least `len`
        // bytes that outlives the registration (MrInner deregisters before freeing).
        let mr =
            unsafe { (dl::ibv().ibv_reg_mr)(self.inner.pd, buf.ptr.cast(), len, access as i32) };
        if mr.is_null() {
            return Err(VerbsError::RegMr {
                len,
                source: errno(),
            });
        }
        Ok(MemoryRegion {
            inner: Arc::new(MrInner {
                mr,
                len,
                buf: Backing::Own(buf),
                pd: self.inner.clone(),
            }),
        })
    }

    /// Registers `of`'s memory in this PD too, for local read access only: the
    /// alias is a source of RDMA WRITEs on this PD's queue pairs. It keeps `of`
    /// (its buffer and registration) alive.
    pub fn register_alias(&self, of: &MemoryRegion) -> Result<RegionAlias, VerbsError> {
        let len = of.len();
        // SAFETY: the PD is live; `of`'s buffer is a live allocation of at least
        // `len` bytes that outlives this registration (the alias holds an Arc to
        // `of`'s MrInner and deregisters before releasing it). Access 0: local
        // read only, so the NIC never writes through the alias.
        let mr = unsafe { (dl::ibv().ibv_reg_mr)(self.inner.pd, of.inner.base().cast(), len, 0) };
        if mr.is_null() {
            return Err(VerbsError::RegMr {
                len,
                source: errno(),
            });
        }
        Ok(RegionAlias {
            inner: Arc::new(MrInner {
                mr,
                len,
                buf: Backing::Of(of.inner.clone()),
                pd: self.inner.clone(),
            }),
        })
    }
}

/// Where a registration's bytes live.
enum Backing {
    /// Its own allocation.
    Own(PageBuf),
    /// Another region's (a [`RegionAlias`]), kept alive.
    Of(Arc<MrInner>),
}

pub(crate) struct MrInner {
    pub(crate) mr: *mut sys::ibv_mr,
    pub(crate) len: usize,
    buf: Backing,
    pub(crate) pd: Arc<PdInner>,
}

// SAFETY: see PdInner; the buffer is plain memory.
unsafe impl Send for MrInner {}
// SAFETY: see PdInner; shared access only reads the handle fields.
unsafe impl Sync for MrInner {}

impl Drop for MrInner {
    fn drop(&mut self) {
        // SAFETY: registered once, deregistered once, before `buf` is freed or
        // released (fields drop after this body). Every QP that used it held an Arc, so no work
        // request can still reference it.
        unsafe {
            (dl::ibv().ibv_dereg_mr)(self.mr);
        }
    }
}

impl MrInner {
    pub(crate) fn base(&self) -> *mut u8 {
        match &self.buf {
            Backing::Own(b) => b.ptr,
            Backing::Of(o) => o.base(),
        }
    }
}

/// Registered memory: a page-aligned buffer the NIC can use.
pub struct MemoryRegion {
    pub(crate) inner: Arc<MrInner>,
}

impl MemoryRegion {
    /// Length in bytes (as registered).
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The local key (for work requests on this side).
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is live while `self` is.
        unsafe { (*self.inner.mr).lkey }
    }

    /// The remote key (for the peer's RDMA WRITEs).
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.inner.mr).rkey }
    }

    /// The virtual address the peer names in RDMA operations.
    pub fn addr(&self) -> u64 {
        self.inner.base() as u64
    }

    /// The bytes, for reading (see the module docs about concurrent NIC access).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: a live allocation of at least `len` bytes, initialised (zeroed at
        // allocation); any bit pattern is a valid u8.
        unsafe { std::slice::from_raw_parts(self.inner.base(), self.inner.len) }
    }

    /// The bytes, for writing (see the module docs about concurrent NIC access).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` makes this the only CPU-side reference
        // (MemoryRegion is not Clone; QPs keep only the owner handle, never slices).
        unsafe { std::slice::from_raw_parts_mut(self.inner.base(), self.inner.len) }
    }
}

/// Another [`MemoryRegion`]'s memory, registered in a second protection domain
/// for local reading: what a queue pair of that PD may WRITE from
/// ([`crate::QueuePair::post_write_alias`]). No CPU access: the original region
/// has it.
pub struct RegionAlias {
    pub(crate) inner: Arc<MrInner>,
}

impl RegionAlias {
    /// Length in bytes (the original's).
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_whole_private_pages() {
        let page = page_size();
        for len in [1, 100, page, page + 1, 3 << 20] {
            let b = PageBuf::new(len).unwrap();
            assert_eq!(b.ptr as usize % page, 0, "{len}: not page-aligned");
            assert_eq!(b.layout.size() % page, 0, "{len}: not whole pages");
            assert!(b.layout.size() >= len);
            // Zeroed, so slices over it are initialised.
            // SAFETY: a live allocation of layout.size() bytes.
            let s = unsafe { std::slice::from_raw_parts(b.ptr, b.layout.size()) };
            assert!(s.iter().all(|&x| x == 0));
        }
    }
}
