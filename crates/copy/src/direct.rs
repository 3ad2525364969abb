//! `rdcp --direct`: big files read and written with `O_DIRECT`, past the page
//! cache (for NVMe and the like). A copy of a data set larger than memory
//! then neither evicts everything else cached on either host nor pays the
//! kernel's copy into and out of the cache.
//!
//! `O_DIRECT` needs the memory, the file offset and the length aligned to the
//! device's logical block; [`BLOCK`] (4 KiB) is a multiple of every common one.
//! Only files of at least [`DIRECT_MIN`] bytes use it (a small file gains
//! nothing), from offset 0 (or an aligned resume offset). The sending side
//! reads into an aligned buffer whole blocks at a time (the kernel returns the
//! short last one); the receiving side gathers the stream's pieces in an
//! aligned [`Stage`] and writes it whole, leaving zero blocks as holes as
//! always, and writes the unaligned tail with `O_DIRECT` turned off again.
//!
//! A filesystem that refuses the flag (tmpfs on older kernels, some FUSE and
//! network filesystems) or a device that refuses an access later (`EINVAL`:
//! a stricter alignment) turns it off for that file: the bytes are the same,
//! only the page cache is used; each side warns once.

use rdpipe_transport::buf::PageBuf;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

pub use rdpipe_transport::direct::set_direct as set;

/// The alignment of every `O_DIRECT` access: memory, offset and length (the
/// transport's, a multiple of every common logical block size).
pub const BLOCK: usize = rdpipe_transport::direct::BLOCK;

/// Files smaller than this are read and written through the page cache even
/// with `--direct`.
pub const DIRECT_MIN: u64 = 1 << 20;

/// The receiving side's staging buffer per file.
pub const STAGE: usize = 1 << 20;

/// A zeroed buffer whose first byte is [`BLOCK`]-aligned.
pub type Aligned = PageBuf;

/// Whether `e` is the kernel refusing an `O_DIRECT` access's alignment.
pub fn refused(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())
}

/// Says once per process and side that `O_DIRECT` was not used for `what`.
pub fn note_fallback(what: &str, why: &dyn std::fmt::Display) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        tracing::warn!("--direct: {what} ({why}); using the page cache instead (said once)");
    }
}

/// A received file's data gathered for aligned writes: `filled` bytes that
/// belong at `at` (a multiple of [`BLOCK`]) in the file.
pub struct Stage {
    pub(crate) buf: Aligned,
    pub(crate) filled: usize,
    pub(crate) at: u64,
}

impl Stage {
    /// An empty stage for data from `at` on; `None` when `at` is not
    /// aligned (then the file goes through the page cache).
    pub fn new(at: u64) -> Option<Stage> {
        (at % BLOCK as u64 == 0).then(|| Stage {
            buf: Aligned::new(STAGE),
            filled: 0,
            at,
        })
    }
}
