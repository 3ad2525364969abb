//! What every transfer shares, whichever loop drives it: the one connection
//! of [`crate::endpoint`], the reconnecting hop of [`crate::reconnect`], the
//! hops of [`crate::chain`] and the two sides of [`crate::relay`]. Where the
//! connection comes from ([`Endpoint`]), what the transfer is asked to do
//! ([`Options`], and this end's half of the handshake made from them), the
//! stream's protection, the caller's hooks, and what the transfer reports
//! ([`Report`]). Those loops import it rather than one another.

mod callbacks;
mod connection;
mod options;
mod protection;
mod report;

pub(crate) use callbacks::{open_or_abort, progress_of};
pub(crate) use connection::{explain_mismatch, listen_announced};
pub use connection::{Announce, Endpoint};
pub(crate) use options::local_params;
pub use options::{Options, RECONNECT_TIMEOUT, REPLAY_WINDOW};
pub(crate) use protection::protection;
pub use report::{HopState, Reconnect, Report};
