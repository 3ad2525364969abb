//! The choices of `--transport` and `--integrity`: one definition each, the
//! value enums rdsend, rdrecv, rdpipe and the agent all parse (clap), with
//! what each choice means.

use clap::builder::TypedValueParser;
use rdpipe_wire::{Integrity, TransportPref};

/// `--transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Transport {
    /// RDMA when both ends have an active RDMA device that reaches the peer, else TCP.
    #[default]
    Auto,
    /// RDMA or fail (exit status 7).
    Rdma,
    /// TCP only.
    Tcp,
}

impl From<Transport> for TransportPref {
    fn from(t: Transport) -> Self {
        match t {
            Transport::Auto => TransportPref::Auto,
            Transport::Rdma => TransportPref::Rdma,
            Transport::Tcp => TransportPref::Tcp,
        }
    }
}

impl From<TransportPref> for Transport {
    fn from(t: TransportPref) -> Self {
        match t {
            TransportPref::Auto => Transport::Auto,
            TransportPref::Rdma => Transport::Rdma,
            TransportPref::Tcp => Transport::Tcp,
        }
    }
}

/// `--integrity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum IntegrityArg {
    /// `encrypt` where this CPU has AES instructions (it then costs less CPU
    /// than `mac`), `mac` where it has not.
    #[default]
    Auto,
    /// xxh3 checksum only: catches accidents, not an attacker on the path (for
    /// trusted fabrics; the fastest).
    Checksum,
    /// Keyed BLAKE3 MAC over the whole stream: nobody without the session keys
    /// can alter, reorder, drop or truncate data unnoticed.
    Mac,
    /// AES-256-GCM on every chunk: what `mac` guarantees, and nobody on the path
    /// can read the data (the same as `--encrypt`).
    Encrypt,
}

impl IntegrityArg {
    /// The protection this choice asks for (`auto`: this host's
    /// [`Integrity::preferred`]); `--encrypt` wins over it.
    pub fn resolve(self, encrypt: bool) -> Integrity {
        match (encrypt, self) {
            (true, _) | (false, IntegrityArg::Encrypt) => Integrity::Encrypt,
            (false, IntegrityArg::Auto) => Integrity::preferred(),
            (false, IntegrityArg::Mac) => Integrity::Mac,
            (false, IntegrityArg::Checksum) => Integrity::Checksum,
        }
    }
}

/// The value parser of a `--transport` whose field is a [`TransportPref`].
pub fn transport_parser() -> impl clap::builder::TypedValueParser<Value = TransportPref> {
    clap::builder::EnumValueParser::<Transport>::new().map(TransportPref::from)
}

/// The value parser of an `--integrity` whose field is an [`Integrity`]
/// (`auto` resolved on this host).
pub fn integrity_parser() -> impl clap::builder::TypedValueParser<Value = Integrity> {
    clap::builder::EnumValueParser::<IntegrityArg>::new().map(|a| a.resolve(false))
}

/// The protection named as [`Integrity::as_str`] spells it (a `DONE`
/// line's field).
pub fn integrity_named(s: &str) -> Option<Integrity> {
    [Integrity::Checksum, Integrity::Mac, Integrity::Encrypt]
        .into_iter()
        .find(|i| i.as_str() == s)
}

/// The spelling `--transport` reads.
pub fn transport_name(p: TransportPref) -> &'static str {
    match p {
        TransportPref::Auto => "auto",
        TransportPref::Tcp => "tcp",
        TransportPref::Rdma => "rdma",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn each_choice_is_spelled_as_parsed() {
        for t in Transport::value_variants() {
            let name = t.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(transport_name((*t).into()), name);
        }
        for i in [Integrity::Checksum, Integrity::Mac, Integrity::Encrypt] {
            let a = IntegrityArg::from_str(i.as_str(), false).unwrap();
            assert_eq!(a.resolve(false), i);
            assert_eq!(integrity_named(i.as_str()), Some(i));
        }
    }

    #[test]
    fn encrypt_wins_and_auto_is_this_hosts() {
        use IntegrityArg::*;
        assert_eq!(Auto.resolve(false), Integrity::preferred());
        assert_eq!(Checksum.resolve(false), Integrity::Checksum);
        assert_eq!(Mac.resolve(false), Integrity::Mac);
        assert_eq!(Encrypt.resolve(false), Integrity::Encrypt);
        for arg in [Auto, Checksum, Mac, Encrypt] {
            assert_eq!(arg.resolve(true), Integrity::Encrypt, "{arg:?}");
        }
        assert_eq!(IntegrityArg::default(), Auto);
    }
}
