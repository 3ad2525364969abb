//! The level compressed chunks get and the most the link may raise it to
//! ([`Level`]).

use super::super::tuning::{ADAPT_MAX, ADAPT_MIN, ADAPT_START, CEILING_HELD};

/// The level, and its ceiling: one below the last level compression bound
/// at ([`ADAPT_MAX`] before it first did).
#[derive(Debug, Clone)]
pub(super) struct Level {
    now: i32,
    ceiling: i32,
    /// Link-bound windows spent at the ceiling.
    at_ceiling: u32,
}

impl Level {
    /// [`ADAPT_START`], the ceiling at [`ADAPT_MAX`].
    pub(super) fn new() -> Level {
        Level {
            now: ADAPT_START,
            ceiling: ADAPT_MAX,
            at_ceiling: 0,
        }
    }

    /// The level now.
    pub(super) fn get(&self) -> i32 {
        self.now
    }

    /// The link bound: one level up, to at most the ceiling; after
    /// [`CEILING_HELD`] such windows at the ceiling, the ceiling goes up one
    /// (the data or the load may have changed).
    pub(super) fn raise(&mut self) {
        if self.now >= self.ceiling {
            self.at_ceiling += 1;
            if self.at_ceiling >= CEILING_HELD {
                self.ceiling = (self.ceiling + 1).min(ADAPT_MAX);
                self.at_ceiling = 0;
            }
        }
        self.now = (self.now + 1).min(self.ceiling);
    }

    /// Compression bound: the ceiling one below this level, the level
    /// halfway down to [`ADAPT_MIN`].
    pub(super) fn lower(&mut self) {
        self.ceiling = self.now - 1;
        self.at_ceiling = 0;
        self.now = ADAPT_MIN + (self.now - ADAPT_MIN) / 2;
    }

    /// The next probe at [`ADAPT_MIN`], the level most likely to beat
    /// storing (the link raises it again if it binds).
    pub(super) fn cheapest(&mut self) {
        self.now = ADAPT_MIN;
    }
}
