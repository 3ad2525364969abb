//! How long the next pauses are, and when the next trial stretch goes
//! stored ([`Lengths`], [`Trials`]).

use super::super::tuning::{FIRST_INCOMPRESSIBLE_OFF, FIRST_OFF, MAX_OFF, TRIAL_FIRST, TRIAL_MAX};

/// The lengths, in units, of the next pauses of each kind.
#[derive(Debug, Clone)]
pub(super) struct Lengths {
    /// The next pause for data that does not compress: from
    /// [`FIRST_INCOMPRESSIBLE_OFF`], twice as long after each such window in
    /// a row.
    pub(super) incompressible: u32,
    /// The next pause after a probe that lost to storing (or compression
    /// bound before storing was measured): from [`FIRST_OFF`], twice the
    /// last one.
    pub(super) lost: u32,
}

impl Lengths {
    /// Both at their first.
    pub(super) fn new() -> Lengths {
        Lengths {
            incompressible: FIRST_INCOMPRESSIBLE_OFF,
            lost: FIRST_OFF,
        }
    }

    /// The pause for an incompressible window; the next twice as long (up
    /// to [`MAX_OFF`]).
    pub(super) fn incompressible(&mut self) -> u32 {
        let length = self.incompressible;
        self.incompressible = (self.incompressible * 2).min(MAX_OFF);
        length
    }

    /// The pause after a loss, at least `least` units (up to [`MAX_OFF`]);
    /// the next twice as long.
    pub(super) fn lost(&mut self, least: u32) -> u32 {
        let length = self.lost.max(least).min(MAX_OFF);
        self.lost = (length * 2).min(MAX_OFF);
        length
    }

    /// A long pause ended early after `stored` units: the next after a loss
    /// is twice what it stored, not what it was to be.
    pub(super) fn lost_ended_after(&mut self, stored: u32) {
        self.lost = stored.saturating_mul(2).clamp(FIRST_OFF, MAX_OFF);
    }
}

/// The windows that compression paid since the last stored stretch, and
/// how many before the next (a trial stretch, to measure storing again).
#[derive(Debug, Clone)]
pub(super) struct Trials {
    pub(super) since: u32,
    pub(super) every: u32,
}

impl Trials {
    /// The first trial after [`TRIAL_FIRST`] windows.
    pub(super) fn new() -> Trials {
        Trials {
            since: 0,
            every: TRIAL_FIRST,
        }
    }

    /// A window that paid: whether a trial stretch is due now.
    pub(super) fn paid(&mut self) -> bool {
        self.since += 1;
        if self.since >= self.every {
            self.since = 0;
            return true;
        }
        false
    }

    /// After a stretch, compressing won by `beats` × storing's rate (none:
    /// no rate): the next trial after four times as many windows, or
    /// [`TRIAL_MAX`] at once where it was at least twice as fast.
    pub(super) fn won(&mut self, beats: Option<f64>) {
        self.every = if beats.is_some_and(|b| b >= 2.0) {
            TRIAL_MAX
        } else {
            (self.every * 4).min(TRIAL_MAX)
        };
    }

    /// Storing's rate is measured again from scratch.
    pub(super) fn restart(&mut self) {
        self.since = 0;
        self.every = TRIAL_FIRST;
    }
}
