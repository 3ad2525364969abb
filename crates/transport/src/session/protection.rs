//! The stream's protection as the handshake settled it, in the form the send
//! and receive loops take ([`crate::pump::Protection`]).

use crate::handshake::Negotiated;
use crate::pump::Protection;
use crate::select;

/// What `n` negotiated for the stream: integrity, keys, compression, and the
/// largest chunk any transport of it may carry.
pub(crate) fn protection(n: &Negotiated) -> Protection<'_> {
    Protection {
        integrity: n.integrity,
        keys: &n.keys,
        compress: n.compress,
        chunk_size: select::largest_chunk(n),
        peer: &n.peer_addr,
    }
}
