//! What one window of `--compress auto` concluded ([`super::adapt`]): what
//! bound the sender, why the window ended as it did, and the decision as
//! `RUST_LOG=debug` on the sender prints it.

use super::tuning::{LARGE_FROM_LEVEL, LARGE_LINK_SHARE};

/// What bound the sender during a window, as [`Adapt`](super::adapt::Adapt) saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// The link: raise the level.
    Link,
    /// Compression: lower it.
    Cpu,
    /// Neither: keep it.
    Neither,
}

/// Why a window ended as it did ([`Decision`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The chunks shrank by less than [`INCOMPRESSIBLE`](super::tuning::INCOMPRESSIBLE): stored for a while.
    Incompressible,
    /// Compression bound above the lowest level: halfway down to it.
    CpuLower,
    /// Compressing moved fewer bytes per second than storing did (times
    /// `tuning::KEEP_MARGIN`): stored for a while.
    SlowerThanStoring,
    /// The link carried the compressed chunks since the last stretch faster
    /// than storing's measured rate allows (`tuning::UNDERRATED`): that rate is
    /// forgotten, a stretch goes stored now to measure it again.
    StoringUnderrated,
    /// Compression bound at the lowest level before any stretch was stored:
    /// stored for a while, to compare.
    CpuFirst,
    /// Compression pays (or nothing bound): the level follows the binding,
    /// and a stretch goes stored now and then to measure storing again
    /// (`store_for` says when this window started one).
    Pays,
}

/// One window's decision, for diagnostics (`RUST_LOG=debug` on the sender).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// Compressed over raw bytes in the window.
    pub ratio: f64,
    /// What bound it.
    pub binding: Binding,
    /// The share of the window's time the sender waited on the link.
    pub link_share: f64,
    /// Raw bytes per second the window moved.
    pub rate: f64,
    /// Storing's rate (bytes per second) the window was judged against
    /// (the lowest of the last few stretches), if any was stored yet.
    pub stored_rate: Option<f64>,
    /// What was decided.
    pub why: Why,
    /// The level from now on.
    pub level: i32,
    /// [`UNIT`](super::tuning::UNIT)s stored without trying from now on (0: none).
    pub store_for: u32,
}

impl Decision {
    /// Whether `auto` compresses chunks as large as the transport's buffer
    /// after this window (`was`: whether it did before): from
    /// [`LARGE_FROM_LEVEL`] on, once a window waited on the link for
    /// [`LARGE_LINK_SHARE`] of its time or more, until compression binds or
    /// the level falls below it.
    pub fn large_chunks(&self, was: bool) -> bool {
        if self.level < LARGE_FROM_LEVEL || self.binding == Binding::Cpu {
            false
        } else if self.binding == Binding::Link && self.link_share >= LARGE_LINK_SHARE {
            true
        } else {
            was
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mbs = |r: f64| r / 1e6;
        write!(
            f,
            "window ratio {:.2}, {:?} bound (link {:.0} %), {:.0} MB/s (stored {}): {:?}, level {}",
            self.ratio,
            self.binding,
            self.link_share * 100.0,
            mbs(self.rate),
            self.stored_rate
                .map_or("not yet".to_string(), |r| format!("{:.0} MB/s", mbs(r))),
            self.why,
            self.level
        )?;
        if self.store_for > 0 {
            let mib = self.store_for as f64 * super::tuning::UNIT as f64 / (1 << 20) as f64;
            write!(f, ", next {mib} MiB stored")?;
        }
        Ok(())
    }
}
