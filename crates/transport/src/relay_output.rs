//! The incoming stream's output on a relay host ([`RelayOutput`]): what both
//! of the relay's data paths write into, the copying one
//! ([`crate::relay`]) and the zero-copy one ([`crate::rdma::Forwarder`]),
//! apart from both so that each imports it.

use std::io::{self, Write};

/// The incoming stream's output on a relay host.
pub trait RelayOutput: Write + Send {
    /// The zero-copy path forwards the stream itself: from now on write only
    /// the local copy (if any), not into the queue to the sender.
    fn forwarding(&mut self);
    /// The outgoing transfer failed on the zero-copy path: `Ok` to go on
    /// receiving for the local copy, an error to fail the incoming stream too.
    fn forward_broke(&mut self) -> io::Result<()>;
    /// The outgoing transfer's input error when the incoming stream did not
    /// verify (the copying path's input fails with the same).
    fn unverified(&self) -> io::Error;
}
