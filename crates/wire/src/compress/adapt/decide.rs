//! The rules: what a window decides at its end ([`Adapt::decide`]), and
//! what a stretch's end decides ([`Adapt::pause_goes_on`],
//! [`Adapt::end_stretch`], [`Adapt::first_lost`]).

use super::phase::AfterLoss;
use super::{
    probe_pays_off_after, Adapt, Binding, Decision, Phase, Why, ADAPT_MIN, BOUND, CLEAR_WIN,
    FAR_SLOWER, FIRST_INCOMPRESSIBLE_OFF, FIRST_OFF, INCOMPRESSIBLE, KEEP_MARGIN, PACED_MIN,
    PAUSE_CHECKED_AFTER, WINDOW,
};

impl Adapt {
    /// The window under way ends: what bound it, and the rules of the module
    /// docs in their order. Starts the next window.
    pub(super) fn decide(&mut self) {
        self.phase.window_ended();
        let w = &self.window;
        let ratio = w.packed as f64 / w.raw.max(1) as f64;
        let total = w.elapsed.as_secs_f64().max(1e-9);
        let (link, cpu) = (w.link.as_secs_f64(), w.cpu.as_secs_f64());
        let rate = w.raw as f64 / total;
        // The raw bytes per second the link carries at this ratio, as far as
        // storing's rate tells.
        let link_carries = self.stored_rates.rate().map(|s| s / ratio.max(0.01));
        let binding = if link > cpu && link >= BOUND * total {
            Binding::Link
        } else if cpu > link && cpu >= BOUND * total && link_carries.is_none_or(|c| rate < c) {
            Binding::Cpu
        } else {
            // Also a window that waited on compression yet moved more than
            // the link carries at its ratio: it filled buffers, and the link
            // binds once they are full.
            Binding::Neither
        };
        self.binding = Some(binding);
        let fresh = self.stored_rates.take_fresh();
        let why = self.rule(binding, ratio, fresh);
        self.decided = Some(Decision {
            ratio,
            binding,
            link_share: link / total,
            rate,
            stored_rate: self.stored_rates.rate(),
            why,
            level: self.level.get(),
            store_for: self.phase.store_for(),
        });
        if why == Why::CpuFirst {
            self.phase.pause_mut().first = self.decided;
        }
        self.window = Default::default();
    }

    /// The first rule that applies to a window of compressed over raw
    /// `ratio` that `binding` bound; `fresh`: it is the first since a
    /// stretch measured storing.
    fn rule(&mut self, binding: Binding, ratio: f64, fresh: bool) -> Why {
        if ratio > INCOMPRESSIBLE {
            // The level stays: what the link and the cores allowed before
            // the data stopped compressing still holds when it starts again.
            self.phase.pause_mut().left = self.lengths.incompressible();
            return Why::Incompressible;
        }
        self.lengths.incompressible = FIRST_INCOMPRESSIBLE_OFF;
        self.span.add(self.window.packed, self.window.elapsed);
        if self.span.underrates(self.stored_rates.rate()) {
            self.stored_rates.forget();
            self.trials.restart();
            self.phase.pause_mut().left = WINDOW;
            return Why::StoringUnderrated;
        }
        // Compressing's rate over storing's, where a stretch was stored:
        // the rate of the last few windows at this level.
        let recent = self
            .recent
            .rate(self.level.get(), self.window.raw, self.window.elapsed);
        let beats = self.stored_rates.rate().map(|s| recent / s);
        match (binding, beats) {
            (Binding::Cpu, _) if self.level.get() > ADAPT_MIN => {
                self.level.lower();
                Why::CpuLower
            }
            (_, Some(b)) if b < KEEP_MARGIN => {
                self.level.cheapest();
                // The long pause only on storing's rate from two stretches
                // at least: one alone can have gone into empty buffers.
                let may_be_long = binding == Binding::Cpu && self.stored_rates.measured() >= 2;
                self.pause_after_losing(recent, b, may_be_long);
                Why::SlowerThanStoring
            }
            (Binding::Cpu, None) => {
                self.store_for_a_while(0);
                Why::CpuFirst
            }
            (b, _) => {
                if fresh {
                    // A narrow win leaves the pauses as long as they were.
                    if beats.is_none_or(|b| b >= CLEAR_WIN) {
                        self.lengths.lost = FIRST_OFF;
                    }
                    self.trials.won(beats);
                }
                if b == Binding::Link {
                    self.level.raise();
                }
                if self.trials.paid() {
                    self.phase.pause_mut().left = WINDOW;
                }
                Why::Pays
            }
        }
    }

    /// Stores the next chunks without trying, twice as many as last time
    /// and at least `least` (the next time twice as many as this time).
    fn store_for_a_while(&mut self, least: u32) {
        self.phase.pause_mut().left = self.lengths.lost(least);
        self.trials.since = 0;
    }

    /// Stores the next chunks without trying after a window that moved
    /// `rate`, `beats` × storing's: twice as many as the last pause, and,
    /// where `may_be_long` and the window was under [`FAR_SLOWER`] ×
    /// storing, at least as many as keep another such loss under
    /// `PROBE_SHARE` of them ([`probe_pays_off_after`]), such a long pause
    /// ending early where the link carries stored chunks slower than
    /// `rate`. It goes on while the link idles.
    fn pause_after_losing(&mut self, rate: f64, beats: f64, may_be_long: bool) {
        let least = if may_be_long && beats < FAR_SLOWER {
            probe_pays_off_after(beats)
        } else {
            0
        };
        self.store_for_a_while(least);
        let pause = self.phase.pause_mut();
        pause.after_loss = Some(AfterLoss {
            length: pause.left,
            bet: (least > 0).then_some(rate),
        });
    }

    /// While storing, asked for the next chunk's level: whether it goes
    /// stored too. A long pause ends early where its paced chunks show the
    /// link slower than the probe it bet against; a pause with units left
    /// goes on; one whose stretch saw a chunk wait on the link near its end
    /// goes on a few units to tell full buffers from a stall; one after a
    /// probe that lost goes on as long again where the link idled.
    pub(super) fn pause_goes_on(&mut self) -> bool {
        let paced_min = self.least(PACED_MIN);
        let checked_after = self.least(PAUSE_CHECKED_AFTER);
        let Phase::Storing(pause) = &mut self.phase else {
            return false;
        };
        let bet = pause.after_loss.and_then(|a| a.bet);
        if pause.left > 0 && bet.is_some_and(|b| self.stretch.lost_bet(b, checked_after)) {
            // Ended for the link: not renewed, and the next pause after a
            // probe that loses is twice what this one stored.
            pause.left = 0;
            pause.after_loss = None;
            self.lengths.lost_ended_after(self.stretch.leg_units());
        }
        if pause.left > 0 || self.stretch.needs_more(paced_min) {
            return true;
        }
        match pause.after_loss {
            Some(a) if self.stretch.link_idle() => {
                pause.left = a.length;
                self.stretch.renewed();
                true
            }
            _ => false,
        }
    }

    /// The stretch under way ends: its rate counts as storing's, the next
    /// window is a probe, and what compressed chunks were counted during it
    /// are no window's. The stream's first window, where the pause followed
    /// it ([`Adapt::first_lost`]).
    pub(super) fn end_stretch(&mut self) -> Option<Decision> {
        let pause = self.phase.end_stretch();
        self.recent.clear();
        if let Some(rate) = self.stretch.end(self.least(PACED_MIN)) {
            self.stored_rates.push(rate);
        }
        self.span = Default::default();
        self.window = Default::default();
        pause.first
    }

    /// At the end of the stream's first stretch, where compression bound in
    /// the `first` window before it ([`Why::CpuFirst`]): that window
    /// compressed into empty buffers, with nothing to wait for but the
    /// cores, so no probe moves more. Where the stretch stored faster (times
    /// [`KEEP_MARGIN`]), the pause goes on with no probe first, by the rules
    /// of a pause after a probe that lost, on this one stretch. Whether it
    /// did.
    pub(super) fn first_lost(&mut self, first: Option<Decision>) -> bool {
        let Some(first) = first else {
            return false;
        };
        let Some(stored) = self.stored_rates.rate() else {
            return false;
        };
        let beats = first.rate / stored;
        if beats >= KEEP_MARGIN {
            return false;
        }
        self.pause_after_losing(first.rate, beats, true);
        self.phase.begin_pause();
        self.decided = Some(Decision {
            stored_rate: Some(stored),
            why: Why::SlowerThanStoring,
            store_for: self.phase.store_for(),
            ..first
        });
        true
    }
}
