//! The stored chunks since the last stretch ended ([`Stretch`]): the rate
//! they store at, and what tells a pause to go on, renew or end early.

use super::super::tuning::{units, KEEP_MARGIN, LINK_IDLE_SHARE};
use std::time::Duration;

/// What the chunks stored since the last stretch ended measured.
#[derive(Debug, Clone, Default)]
pub(super) struct Stretch {
    /// Raw bytes and time of all of them.
    raw: u64,
    time: Duration,
    /// The paced part: from the first chunk that waited on the link for
    /// half its time on (none yet while `paced_time` is zero). The buffers
    /// between here and the receiver were full from then on, so this is the
    /// link's rate for stored chunks.
    paced_raw: u64,
    paced_time: Duration,
    /// Units counted in the paced part, and how many of them waited on the
    /// link for half their time: where most did not, the one that started
    /// it was a stall, not full buffers.
    paced_units: u32,
    paced_waited: u32,
    /// Units stored past the pause's length, to see [`PACED_MIN`](super::PACED_MIN)
    /// units of the paced part.
    extended: u32,
    /// Units stored since the pause began or was renewed, and of them those
    /// that waited on the link for half their time ([`Stretch::link_idle`]).
    leg_units: u32,
    leg_waited: u32,
}

impl Stretch {
    /// A chunk of `raw` bytes went stored; `past_pause`: after its pause's
    /// length.
    pub(super) fn stored(&mut self, raw: u64, past_pause: bool) {
        if past_pause {
            self.extended += units(raw as usize);
        }
        self.raw += raw;
    }

    /// The time of a stored chunk of `raw` bytes: `link` of it waiting on
    /// the link, `elapsed` in all.
    pub(super) fn waited(&mut self, raw: u64, link: Duration, elapsed: Duration) {
        self.time += elapsed;
        let waited = !elapsed.is_zero() && link * 2 >= elapsed;
        let u = units(raw as usize);
        self.leg_units = self.leg_units.saturating_add(u);
        self.leg_waited = self.leg_waited.saturating_add(u * u32::from(waited));
        if !self.paced_time.is_zero() || waited {
            self.paced_raw += raw;
            self.paced_time += elapsed;
            self.paced_units = self.paced_units.saturating_add(u);
            self.paced_waited = self.paced_waited.saturating_add(u * u32::from(waited));
        }
    }

    /// At the pause's end: a chunk waited on the link near it, and fewer
    /// than `paced_min` units count from there, nor were that many stored
    /// past the end to see. A few more go stored to tell full buffers from
    /// a stall.
    pub(super) fn needs_more(&self, paced_min: u32) -> bool {
        (1..paced_min).contains(&self.paced_units) && self.extended < paced_min
    }

    /// A pause after a probe slower than storing, at its end: fewer than
    /// [`LINK_IDLE_SHARE`] of the units stored since it began (or was
    /// renewed) waited on the link for half their time. Then the link is
    /// not what the stream waits for (the sender's own CPU or its input is),
    /// no level moves it faster, and the pause goes on rather than end in a
    /// probe. A pause into buffers that an earlier probe let drain goes on
    /// only until they are full again: its stored chunks then wait.
    pub(super) fn link_idle(&self) -> bool {
        (self.leg_waited as f64) < LINK_IDLE_SHARE * self.leg_units as f64
    }

    /// The pause goes on as long again: a new leg.
    pub(super) fn renewed(&mut self) {
        (self.leg_units, self.leg_waited) = (0, 0);
    }

    /// The units stored since the pause began or was renewed.
    pub(super) fn leg_units(&self) -> u32 {
        self.leg_units
    }

    /// A long pause after probes that moved `probe` (bytes per second),
    /// once at least `checked_after` units are paced, three in four of them
    /// waiting on the link: whether they show the link carrying stored
    /// chunks slower than those probes (times [`KEEP_MARGIN`]). Then
    /// storing's rate was measured high, and the pause ends. A stall (one
    /// chunk that waits among many that do not) ends nothing.
    pub(super) fn lost_bet(&self, probe: f64, checked_after: u32) -> bool {
        self.paced_units >= checked_after
            && u64::from(self.paced_waited) * 4 >= u64::from(self.paced_units) * 3
            && !self.paced_time.is_zero()
            && self.paced_raw as f64 / self.paced_time.as_secs_f64() * KEEP_MARGIN < probe
    }

    /// The stretch ends: its rate (raw bytes per second, none where it
    /// stored nothing or took no time), and all counts start again. The
    /// rate of the paced part where at least `paced_min` units count in it,
    /// half of them waiting; else the whole stretch's (one chunk that
    /// waited was a stall).
    pub(super) fn end(&mut self, paced_min: u32) -> Option<f64> {
        let paced = self.paced_units >= paced_min
            && self.paced_waited * 2 >= self.paced_units
            && !self.paced_time.is_zero();
        let (raw, time) = if paced {
            (self.paced_raw, self.paced_time)
        } else {
            (self.raw, self.time)
        };
        *self = Stretch::default();
        (raw > 0 && !time.is_zero()).then(|| raw as f64 / time.as_secs_f64())
    }
}
