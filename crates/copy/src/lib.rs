//! rdcp's file trees: [`pack`] walks the source operands and writes them as an
//! entry stream ([`rdpipe_wire::entry`]); [`unpack`] reads one and creates the
//! files beneath the destination, each under a temporary name until its
//! checksum matched, without ever following a symbolic link out of it
//! ([`beneath`]).
//!
//! Both sides run inside an rdpipe endpoint agent: the packer writes into the
//! outgoing transfer, the unpacker is the incoming transfer's output. Neither
//! does I/O on the network itself.

pub mod beneath;
pub mod direct;
pub mod list;
pub mod pack;
pub mod unpack;
pub mod write;
pub mod xattr;

pub use list::{list, Manifest};
pub use pack::{pack, PackOptions, PackStats};
pub use unpack::{Dest, Unpacker};

/// One line about a file that was not copied (or copied while it changed),
/// printed on the side that saw it.
pub(crate) fn warn(what: std::fmt::Arguments<'_>) {
    eprintln!("rdcp: {what}");
}

/// A path's bytes for a message (lossy: messages are text).
pub(crate) fn shown(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

#[cfg(test)]
mod tests;
