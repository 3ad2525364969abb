//! The spellings of the agent's `--transport` and `--integrity` (the one
//! parser of each, used by the agent's arguments and rdpipe's flags).

use rdpipe_wire::{Integrity, TransportPref};

/// Parses `auto`, `tcp` or `rdma` (the agent's `--transport`).
pub fn parse_transport(s: &str) -> Result<TransportPref, String> {
    match s {
        "auto" => Ok(TransportPref::Auto),
        "tcp" => Ok(TransportPref::Tcp),
        "rdma" => Ok(TransportPref::Rdma),
        _ => Err(format!("'{s}' is not auto, tcp or rdma")),
    }
}

/// Parses `auto` (this host's [`Integrity::preferred`]), `checksum`, `mac` or
/// `encrypt` (the agent's `--integrity`).
pub fn parse_integrity(s: &str) -> Result<Integrity, String> {
    match s {
        "auto" => Ok(Integrity::preferred()),
        "checksum" => Ok(Integrity::Checksum),
        "mac" => Ok(Integrity::Mac),
        "encrypt" => Ok(Integrity::Encrypt),
        _ => Err(format!("'{s}' is not auto, checksum, mac or encrypt")),
    }
}

/// The spelling [`parse_transport`] reads.
pub fn transport_name(p: TransportPref) -> &'static str {
    match p {
        TransportPref::Auto => "auto",
        TransportPref::Tcp => "tcp",
        TransportPref::Rdma => "rdma",
    }
}
