//! Where a transfer's TCP connection comes from ([`Endpoint`]): it connects
//! or listens independently of the data direction, because rdpipe needs both
//! ways round; and what a failure to get one says.

use crate::connect::Listener;
use crate::TransportError;
use rdpipe_wire::TransportPref;
use std::io;
use std::time::Duration;

/// Called with the bound port once listening, before waiting for the peer.
pub type Announce = Box<dyn FnOnce(u16) -> io::Result<()> + Send>;

/// How the TCP connection comes about.
pub enum Endpoint {
    /// Connect to a listening peer, retrying until `timeout`.
    Connect {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
        /// How long to keep retrying a refused connection.
        timeout: Duration,
    },
    /// Listen on `port` (0 = ephemeral) and accept until a peer authenticates.
    Listen {
        /// The address to listen at (an address of this host; otherwise, and by
        /// default, all addresses).
        bind: Option<String>,
        /// The port.
        port: u16,
        /// Told the real port once listening (`--announce-fd`, rdpipe's agents).
        announce: Option<Announce>,
    },
}

/// Listens on `port` at `bind` and tells `announce` the port.
pub(crate) fn listen_announced(
    bind: Option<&str>,
    port: u16,
    announce: Option<Announce>,
) -> Result<Listener, TransportError> {
    let l = Listener::bind_at(bind, port)?;
    if let Some(a) = announce {
        a(l.port()).map_err(TransportError::Announce)?;
    }
    Ok(l)
}

/// A transport mismatch on a host that cannot load the RDMA libraries (while this
/// end allowed RDMA) becomes [`TransportError::RdmaLibraries`]: what to install.
pub(crate) fn explain_mismatch(e: TransportError, pref: TransportPref) -> TransportError {
    match e {
        TransportError::TransportMismatch(m) if pref != TransportPref::Tcp => {
            match rdpipe_verbs::load() {
                Err(v) => TransportError::RdmaLibraries(v),
                Ok(()) => TransportError::TransportMismatch(m),
            }
        }
        e => e,
    }
}
