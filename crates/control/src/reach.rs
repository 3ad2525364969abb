//! Reachability of a listening host's RDMA-capable addresses from the host that
//! connects, for the second rule of data-address discovery ("routed and
//! answering"): what a probe of one address found ([`Reach`]) and the word for it
//! on the control channel, in rdpipe's `PROBE in|out PORT ADDR...` order and the
//! agent's `REACH in|out ADDR=RESULT...` answer.

use super::ParseError;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// What probing one address from the connecting host found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The route to it leaves from one of the prober's RDMA-capable addresses,
    /// and the listening port accepted a TCP connection.
    Answered,
    /// The route to it leaves from this address, which has no RDMA device: a
    /// connection would not cross the fabric.
    OffFabric(IpAddr),
    /// No route to it (network or host unreachable).
    Unreachable,
    /// Its host answered, but nothing listens on the port there.
    Refused,
    /// No answer within the probe's time limit.
    Silent,
}

impl Reach {
    /// Whether the address may be used.
    pub fn answered(self) -> bool {
        self == Reach::Answered
    }
}

impl fmt::Display for Reach {
    /// The word on the control channel, which `-v` also shows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reach::Answered => f.write_str("answered"),
            Reach::OffFabric(via) => write!(f, "off-fabric@{via}"),
            Reach::Unreachable => f.write_str("unreachable"),
            Reach::Refused => f.write_str("refused"),
            Reach::Silent => f.write_str("silent"),
        }
    }
}

impl FromStr for Reach {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s {
            "answered" => Reach::Answered,
            "unreachable" => Reach::Unreachable,
            "refused" => Reach::Refused,
            "silent" => Reach::Silent,
            _ => match s.strip_prefix("off-fabric@") {
                Some(ip) => Reach::OffFabric(ip.parse().map_err(|_| ParseError::Field("reach"))?),
                None => return Err(ParseError::Field("reach")),
            },
        })
    }
}

/// `ADDR=RESULT`, one probed address in a `REACH` line.
pub(super) fn fmt_result(f: &mut fmt::Formatter<'_>, (ip, r): &(IpAddr, Reach)) -> fmt::Result {
    write!(f, " {ip}={r}")
}

/// Parses the `ADDR=RESULT ...` of a `REACH` line.
pub(super) fn parse_results(rest: &str) -> Result<Vec<(IpAddr, Reach)>, ParseError> {
    rest.split_whitespace()
        .map(|w| {
            let (ip, r) = w.split_once('=').ok_or(ParseError::Field("reach"))?;
            let ip = ip.parse().map_err(|_| ParseError::Field("address"))?;
            Ok((ip, r.parse()?))
        })
        .collect()
}

/// Parses the `ADDR ...` of a `PROBE` line (at least one, at most
/// [`super::MAX_PROBE`]).
pub(super) fn parse_addrs<'a>(w: impl Iterator<Item = &'a str>) -> Result<Vec<IpAddr>, ParseError> {
    let v = w
        .map(|a| a.parse().map_err(|_| ParseError::Field("address")))
        .collect::<Result<Vec<IpAddr>, _>>()?;
    if v.is_empty() || v.len() > super::MAX_PROBE {
        return Err(ParseError::Field("address"));
    }
    Ok(v)
}
