//! An agent's CPU use, reported once before `END`: `USAGE AU AS CU CS`, the
//! agent process's own user and system CPU time (all its threads) and that of
//! the processes it waited for (its command: the shell and what the shell
//! waited for), each in whole microseconds. rdpipe shows it per host in
//! `--json` and at `-v` (the relay hosts' cost per GB of a fan-out).

use super::ParseError;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// User and system CPU time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// In user mode.
    pub user: Duration,
    /// In the kernel.
    pub system: Duration,
}

impl CpuTimes {
    /// User + system.
    pub fn total(self) -> Duration {
        self.user + self.system
    }
}

/// What an agent used: itself, and its command (the children it waited for).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// The agent process (every thread: transfers, relay, control).
    pub agent: CpuTimes,
    /// The processes the agent waited for: its command.
    pub command: CpuTimes,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl fmt::Display for Usage {
    /// The fields after `USAGE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {}",
            micros(self.agent.user),
            micros(self.agent.system),
            micros(self.command.user),
            micros(self.command.system)
        )
    }
}

impl FromStr for Usage {
    type Err = ParseError;
    /// The fields after `USAGE`.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let v: Vec<u64> = s
            .split(' ')
            .map(|w| w.parse().map_err(|_| ParseError::Field("usage")))
            .collect::<Result<_, _>>()?;
        let [au, asys, cu, cs] = v[..] else {
            return Err(ParseError::Field("usage"));
        };
        let t = |u, s| CpuTimes {
            user: Duration::from_micros(u),
            system: Duration::from_micros(s),
        };
        Ok(Usage {
            agent: t(au, asys),
            command: t(cu, cs),
        })
    }
}
