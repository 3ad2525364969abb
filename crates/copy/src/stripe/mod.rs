//! `rdcp --streams N`: big files striped over N streams.
//!
//! rdcp then runs N copies side by side between the same two hosts, each a
//! whole transfer of its own (connection, keys, send and receive loop,
//! reconnect), so that the CPU of keyed protection spreads over N cores on
//! each end. Stream 0 carries the tree as without `--streams`; a regular
//! file of [`STRIPE_MIN`] bytes or more (with one link) is cut into pieces
//! of [`PIECE_SIZE`] bytes, and stream k carries the pieces whose index is
//! k modulo N ([`Stripe::carries`]); the other streams carry nothing else.
//!
//! On the destination every stream writes its pieces into one temporary
//! file beside the target (`.NAME.rdcp-s<RUN>`, the same name on every
//! stream: [`Stripe::tmp_name`]; every such name is made and parsed in
//! [`crate::names`]), each piece verified on its own (xxh3 in its trailer)
//! and then marked done in the file's ledger ([`Ledger`], `TMP.pieces`).
//! Stream 0 announced the file ([`Entry::Striped`](rdpipe_wire::entry::Entry)) and
//! publishes it: at its end it waits for the other streams to end (each
//! holds a lock on its marker file `.rdcp-s<RUN>.K` in the destination,
//! [`Marker`], while it runs, and writes one byte into it when its stream was verified
//! whole), then renames every striped file whose pieces are all done into
//! place with its metadata, and only then gives the directories theirs.
//! A file with a piece missing stays under its temporary name with its
//! ledger, for `rdcp --resume`, which sends only the pieces not done.

use crate::names;
use rdpipe_wire::entry::PIECE_SIZE;
use std::time::Duration;

mod ledger;
mod marker;
mod shared;
pub use ledger::{Ledger, PieceState};
pub use marker::{
    release, remove_stale_markers, remove_superseded, wait_others, Marker, Published,
};
pub use shared::open_tmp;

/// Files of at least this many bytes are striped (two pieces).
pub const STRIPE_MIN: u64 = 2 * PIECE_SIZE;

/// Whether a file of `size` bytes with `nlink` names is striped: big (up
/// to [`MAX_STRIPED`](rdpipe_wire::entry::MAX_STRIPED)), and one name (a
/// file with several stays whole on the first stream, where its hard links
/// are made right after it).
pub fn striped(size: u64, nlink: u64) -> bool {
    (STRIPE_MIN..=rdpipe_wire::entry::MAX_STRIPED).contains(&size) && nlink == 1
}

/// How long stream 0, at its end, waits for another stream that has not
/// shown up at all (its agent never started, or its connection never came).
pub(crate) const ARRIVAL: Duration = Duration::from_secs(60);

/// Which of N streams this side is, and the run they belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripe {
    /// This stream, 0..count.
    pub index: u32,
    /// How many streams.
    pub count: u32,
    /// The run's random id: in every temporary and marker name.
    pub run: u64,
}

impl Stripe {
    /// Parses `K/N/RUN` (RUN in hex), as the agents get it.
    pub fn parse(s: &str) -> Option<Stripe> {
        let mut it = s.split('/');
        let index = it.next()?.parse().ok()?;
        let count = it.next()?.parse().ok()?;
        let run = u64::from_str_radix(it.next()?, 16).ok()?;
        (it.next().is_none() && index < count && count >= 2).then_some(Stripe { index, count, run })
    }

    /// Whether this stream carries piece `i`.
    pub fn carries(&self, i: u64) -> bool {
        i % u64::from(self.count) == u64::from(self.index)
    }

    /// The temporary name of `leaf`'s striped copy ([`names::striped`]).
    pub fn tmp_name(&self, leaf: &[u8]) -> Vec<u8> {
        names::striped(leaf, self.run)
    }

    /// The name of stream `k`'s marker in this run ([`names::marker`]).
    pub(crate) fn marker(&self, k: u32) -> Vec<u8> {
        names::marker(self.run, k)
    }
}

impl std::fmt::Display for Stripe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{:x}", self.index, self.count, self.run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::is_striped_tmp;

    #[test]
    fn stripes_parse_and_share_out_the_pieces() {
        let s = Stripe::parse("1/3/ab").unwrap();
        assert_eq!((s.index, s.count, s.run), (1, 3, 0xab));
        assert_eq!(Stripe::parse(&s.to_string()), Some(s));
        assert!(Stripe::parse("3/3/ab").is_none());
        assert!(Stripe::parse("0/1/ab").is_none());
        assert!(Stripe::parse("0/2").is_none());
        assert!(Stripe::parse("0/2/zz").is_none());
        let carried: Vec<u64> = (0..7).filter(|&i| s.carries(i)).collect();
        assert_eq!(carried, [1, 4]);
        let t = s.tmp_name(b"big.img");
        assert!(is_striped_tmp(&t, b"big.img"));
        assert!(!is_striped_tmp(&t, b"other"));
        assert!(!is_striped_tmp(b".big.img.rdcp-12-3", b"big.img"));
        assert_eq!(
            names::dest_tmp(&t, b"copy.img"),
            Some(s.tmp_name(b"copy.img"))
        );
        assert_eq!(names::dest_tmp(b".big.img.rdcp-12-3", b"copy.img"), None);
        assert_eq!(names::dest_tmp(b"big.img", b"copy.img"), None);
    }
}
