//! What [`Adapt`](super::Adapt) is doing now ([`Phase`]), the pause a window
//! decided ([`Pause`]), and every move from one phase to another.

use super::super::decision::Decision;

/// The phase of the stream: compressing (the first window after a stretch is
/// a probe), a pause decided, or storing without trying.
#[derive(Debug, Clone)]
pub(super) enum Phase {
    /// Compressing, and the window under way is a probe: the stream's first,
    /// or the first after a stored stretch ([`Adapt::probe_left`](super::Adapt::probe_left)).
    Probing,
    /// Compressing; the window under way decides as any other.
    Compressing,
    /// A window decided to store the next chunks; the pause begins with the
    /// next [`Adapt::next_level`](super::Adapt::next_level). Chunks compressed
    /// before still count in windows, and a window that ends before then
    /// decides on this pause ([`Phase::pause_mut`]).
    PauseDue(Pause),
    /// Storing without trying: a stretch whose chunks measure storing's rate.
    Storing(Pause),
}

/// A pause: the units left to store, and what its end depends on.
#[derive(Debug, Clone, Default)]
pub(super) struct Pause {
    /// [`UNIT`](super::UNIT)s left to store without trying (counted down by
    /// the stored chunks' units; at 0 the stretch ends, or goes on a few units
    /// to measure: [`Stretch::needs_more`](super::stretch::Stretch::needs_more)).
    pub(super) left: u32,
    /// Set where the pause follows a probe slower than storing.
    pub(super) after_loss: Option<AfterLoss>,
    /// The stream's first window, where compression bound in it
    /// ([`Why::CpuFirst`](super::Why::CpuFirst)): compared with this
    /// stretch's rate at its end ([`Adapt::first_lost`](super::Adapt::first_lost)).
    pub(super) first: Option<Decision>,
}

/// A pause after a probe slower than storing.
#[derive(Debug, Clone, Copy)]
pub(super) struct AfterLoss {
    /// Its length: where the link idled while it stored, it starts again at
    /// this instead of ending in a probe ([`Stretch::link_idle`](super::stretch::Stretch::link_idle)).
    pub(super) length: u32,
    /// A long pause: the rate of the probe it follows, which it ends early
    /// against ([`Stretch::lost_bet`](super::stretch::Stretch::lost_bet)).
    pub(super) bet: Option<f64>,
}

impl Phase {
    /// The window under way is a probe.
    pub(super) fn probing(&self) -> bool {
        matches!(self, Phase::Probing)
    }

    /// Stored chunks are being counted as a stretch.
    pub(super) fn storing(&self) -> bool {
        matches!(self, Phase::Storing(_))
    }

    /// The units a pause decided or under way has left (0: none).
    pub(super) fn store_for(&self) -> u32 {
        match self {
            Phase::PauseDue(p) | Phase::Storing(p) => p.left,
            Phase::Probing | Phase::Compressing => 0,
        }
    }

    /// A window ended: the next is no probe.
    pub(super) fn window_ended(&mut self) {
        if self.probing() {
            *self = Phase::Compressing;
        }
    }

    /// The pause a window's decision sets: the one already due (its other
    /// parts kept), else a new one. Not while storing: no window ends then.
    pub(super) fn pause_mut(&mut self) -> &mut Pause {
        if matches!(self, Phase::Probing | Phase::Compressing) {
            *self = Phase::PauseDue(Pause::default());
        }
        match self {
            Phase::PauseDue(p) | Phase::Storing(p) => p,
            Phase::Probing | Phase::Compressing => unreachable!("a pause was just made"),
        }
    }

    /// The pause due begins: its chunks go stored from now on. Whether one
    /// was due.
    pub(super) fn begin_pause(&mut self) -> bool {
        match std::mem::replace(self, Phase::Compressing) {
            Phase::PauseDue(p) => {
                *self = Phase::Storing(p);
                true
            }
            other => {
                *self = other;
                false
            }
        }
    }

    /// The stretch ends: the next window is a probe. The pause it ends.
    pub(super) fn end_stretch(&mut self) -> Pause {
        match std::mem::replace(self, Phase::Probing) {
            Phase::Storing(p) => p,
            other => unreachable!("no stretch under way to end: {other:?}"),
        }
    }

    /// A chunk of `units` went stored: counted against the pause it belongs
    /// to, whether it did (else it stored past the pause's length). A pause
    /// due that no chunks are left of is none.
    pub(super) fn count_stored(&mut self, units: u32) -> bool {
        let (Phase::PauseDue(p) | Phase::Storing(p)) = self else {
            return false;
        };
        if p.left == 0 {
            return false;
        }
        p.left = p.left.saturating_sub(units);
        if p.left == 0 && matches!(self, Phase::PauseDue(_)) {
            *self = Phase::Compressing;
        }
        true
    }
}
