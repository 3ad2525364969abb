//! rdcp's file trees: [`pack`](mod@pack) walks the source operands and
//! writes them as an entry stream ([`rdpipe_wire::entry`]); [`unpack`] reads
//! one and creates the files beneath the destination, each under a temporary
//! name ([`names`]) until its checksum matched, without ever following a
//! symbolic link out of it ([`beneath`]).
//!
//! Both sides run inside an rdpipe endpoint agent: the packer writes into the
//! outgoing transfer, the unpacker is the incoming transfer's output. Neither
//! does I/O on the network itself.

pub mod beneath;
pub mod direct;
pub mod glob;
pub mod list;
pub mod mirror;
pub mod names;
pub mod pack;
pub mod private;
pub mod stripe;
pub mod unpack;
pub mod write;
pub mod xattr;

pub use list::{list, list_mirror, Manifest};
pub use pack::{pack, pack_mirror_to, PackOptions, PackStats};
pub use unpack::{Dest, DestError, Unpacker};

/// One line about a file that was not copied (or copied while it changed),
/// printed on the side that saw it.
pub(crate) fn warn(what: std::fmt::Arguments<'_>) {
    // One line, whatever the sender named its files.
    eprintln!("rdcp: {}", rdpipe_term::escaped(&what.to_string()));
}

/// Reads `f` from its start with positioned reads until `limit` bytes or its
/// end: how many bytes that was, and their xxh3-64. The buffer is no larger
/// than the file (at most 1 MiB): `--checksum` hashes every file of a tree.
pub(crate) fn hash_file(f: &std::fs::File, limit: u64) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::FileExt;
    let len = f.metadata()?.len().min(limit).clamp(1, 1 << 20);
    let mut buf = vec![0; len as usize];
    let mut h = rdpipe_wire::StreamHasher::new();
    while h.bytes() < limit {
        let want = (limit - h.bytes()).min(buf.len() as u64) as usize;
        match f.read_at(&mut buf[..want], h.bytes()) {
            Ok(0) => break,
            Ok(k) => h.update(&buf[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((h.bytes(), h.digest()))
}

/// A path's bytes for a message (lossy: messages are text).
pub(crate) fn shown(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

#[cfg(test)]
mod tests;
