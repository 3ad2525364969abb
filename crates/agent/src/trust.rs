//! The agent's side of an srun agent's sealed control channel
//! ([`rdpipe_control::seal`], the agent's `--munge`): rdpipe's `MUNGE` offer
//! is decoded and checked, the agent's own credential goes back, and the
//! [`Opener`] that opens every later line of stdin comes out.

use super::say::Say;
use rdpipe_control::munge::{self, MungeError};
use rdpipe_control::seal::{Answer, Ephemeral, Offer, Opener, SealError};
use rdpipe_control::{CredLine, FromAgent};
use std::io::{BufRead, Read};
use std::path::Path;

/// Why the channel could not be agreed (each message names the host).
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// munge failed on this host.
    #[error(transparent)]
    Munge(#[from] MungeError),
    /// The first line is not a credential, or its payload not an offer.
    #[error("{host}: {source}: is rdpipe the same version as this agent?")]
    Handshake {
        /// This host.
        host: String,
        /// What was wrong.
        source: SealError,
    },
    /// The offer was made by another user.
    #[error(
        "{host}: the control channel's munge credential was made by uid {made_by}, not by \
         this agent's uid {mine}: refused (someone else is on Slurm's step I/O)"
    )]
    Stranger {
        /// This host.
        host: String,
        /// Who made it.
        made_by: u32,
        /// This process's uid.
        mine: u32,
    },
    /// stdin ended before the offer.
    #[error("the control channel closed before rdpipe's munge credential")]
    Closed,
}

/// Reads rdpipe's offer from `stdin`, answers on `say`, and returns the
/// opener of the lines that follow. `socket`: munged's (the agent's
/// `--munge-socket`).
pub fn accept(
    stdin: &mut impl BufRead,
    say: &Say,
    socket: Option<&Path>,
) -> Result<Opener, TrustError> {
    let host = munge::host_name();
    let handshake = |source| TrustError::Handshake {
        host: host.clone(),
        source,
    };
    let mut line = String::new();
    let max = rdpipe_control::seal::MAX_CRED as u64 + 16;
    if (&mut *stdin).take(max).read_line(&mut line).unwrap_or(0) == 0 {
        return Err(TrustError::Closed);
    }
    let cred: CredLine = line.trim_end().parse().map_err(handshake)?;
    let got = munge::decode(&host, socket, &cred.0)?;
    let mine = rustix::process::getuid().as_raw();
    if got.uid != mine {
        return Err(TrustError::Stranger {
            host,
            made_by: got.uid,
            mine,
        });
    }
    let offer: Offer = std::str::from_utf8(&got.payload)
        .map_err(|_| SealError::Malformed("offer"))
        .and_then(str::parse)
        .map_err(handshake)?;
    let me = Ephemeral::new().map_err(handshake)?;
    let answer = Answer {
        public: me.public,
        binding: Answer::binding(&offer),
    };
    let cred = munge::encode(&host, socket, mine, answer.to_string().as_bytes())?;
    let cred = CredLine::new(&cred).map_err(handshake)?;
    let key = me
        .agree(&offer.public, &offer, &answer.public)
        .map_err(handshake)?;
    say.send(&FromAgent::Munge(cred));
    tracing::debug!(
        "control channel sealed (munge credential of uid {mine} from {}s since the epoch)",
        got.encoded
    );
    Ok(Opener::new(&key))
}
