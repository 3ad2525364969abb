//! What an agent binary says to `--agent-protocol`: the control and wire
//! protocols it speaks and its release, which self-install compares with
//! this build's before it runs a found binary.

use crate::PROTOCOL;
use std::fmt;
use std::str::FromStr;

/// This build's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What an agent binary says to `--agent-protocol`: `AGENT WIRE VERSION`, its
/// control protocol ([`PROTOCOL`]), its data wire protocol
/// ([`rdpipe_wire::hello::PROTOCOL_VERSION`]) and its release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentId {
    /// The control protocol.
    pub protocol: u32,
    /// The wire protocol of the transfers.
    pub wire: u16,
    /// The release, e.g. `0.1.0`.
    pub version: String,
}

impl AgentId {
    /// This build's.
    pub fn this() -> AgentId {
        AgentId {
            protocol: PROTOCOL,
            wire: rdpipe_wire::hello::PROTOCOL_VERSION,
            version: VERSION.to_string(),
        }
    }

    /// Whether an agent of this id can work with this rdpipe (same control and
    /// wire protocols; the release may differ).
    pub fn compatible(&self) -> bool {
        let me = AgentId::this();
        self.protocol == me.protocol && self.wire == me.wire
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.protocol, self.wire, self.version)
    }
}

impl FromStr for AgentId {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        let mut w = s.split_whitespace();
        let id = AgentId {
            protocol: w.next().and_then(|v| v.parse().ok()).ok_or(())?,
            wire: w.next().and_then(|v| v.parse().ok()).ok_or(())?,
            version: w.next().ok_or(())?.to_string(),
        };
        match w.next() {
            None => Ok(id),
            Some(_) => Err(()),
        }
    }
}

/// `rdrecv --agent-protocol` (and `rdpipe --agent-protocol`): this build's
/// [`AgentId`] on stdout.
pub fn print_agent_id() -> std::process::ExitCode {
    println!("{}", AgentId::this());
    std::process::ExitCode::SUCCESS
}
