//! Where the packer's stream goes ([`PackOut`]), and how a file's data gets
//! into it. [`Writing`] writes everything into any `Write` from the packing
//! thread (tests, the in-memory tools); [`super::handoff`] hands big files to
//! the transfer's own thread, which reads them straight into its chunk
//! buffer.

use crate::direct::{self, Aligned, BLOCK, DIRECT_MIN};
use rdpipe_wire::StreamHasher;
use std::fs::File;
use std::io::{self, Read, Write};

/// The read size of a file's data on the packing thread.
pub(super) const BUF: usize = 1 << 20;

/// What reading a file's data found.
#[derive(Debug)]
pub struct DataRead {
    /// xxh3-64 of the bytes put in the stream (zeros of padding included).
    pub hash: u64,
    /// The file ended before its size: the rest is zeros.
    pub short: bool,
    /// Reading failed part way: the rest is zeros.
    pub error: Option<io::Error>,
}

/// The stream a pack writes.
pub trait PackOut {
    /// Appends stream bytes (entry headers, trailers).
    fn put(&mut self, b: &[u8]) -> io::Result<()>;
    /// Appends the next `len` bytes of `f` (from its offset), zeros after a
    /// short read or an error; with `direct`, read with `O_DIRECT` where it
    /// can be. Errors are the stream's, not the file's.
    fn data(&mut self, f: &File, len: u64, direct: bool) -> io::Result<DataRead>;
    /// The end of the stream.
    fn flush(&mut self) -> io::Result<()>;
}

/// Reads `len` bytes of `f` through `buf`, passing each piece to `emit`
/// (see [`PackOut::data`]).
pub(super) fn read_through(
    f: &File,
    len: u64,
    direct: bool,
    buf: &mut Aligned,
    mut emit: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<DataRead> {
    let mut h = StreamHasher::new();
    let mut left = len;
    let (mut short, mut error) = (false, None);
    let mut src = f;
    // `--direct`: whole aligned blocks from an aligned offset (the kernel
    // returns the short last one).
    let mut direct_on = direct
        && left >= DIRECT_MIN
        && rustix::fs::seek(f, rustix::fs::SeekFrom::Current(0))
            .is_ok_and(|at| at % BLOCK as u64 == 0)
        && match direct::set(f, true) {
            Ok(()) => true,
            Err(e) => {
                direct::note_fallback("the filesystem refuses O_DIRECT", &e);
                false
            }
        };
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = if short || error.is_some() {
            // Padding after a short read or an error.
            buf[..want].fill(0);
            want
        } else {
            let ask = if direct_on {
                want.next_multiple_of(BLOCK)
            } else {
                want
            };
            match src.read(&mut buf[..ask]) {
                Ok(0) => {
                    short = true;
                    continue;
                }
                // A file grown since it was opened is cut at its size.
                Ok(n) => n.min(want),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if direct_on && direct::refused(&e) => {
                    direct::note_fallback("a device refused an O_DIRECT read", &e);
                    let _ = direct::set(f, false);
                    direct_on = false;
                    continue;
                }
                Err(e) => {
                    error = Some(e);
                    continue;
                }
            }
        };
        h.update(&buf[..n]);
        emit(&buf[..n])?;
        left -= n as u64;
    }
    Ok(DataRead {
        hash: h.digest(),
        short,
        error,
    })
}

/// Everything written into `W` by the packing thread.
pub struct Writing<'a, W: Write> {
    w: &'a mut W,
    buf: Aligned,
}

impl<'a, W: Write> Writing<'a, W> {
    /// A pack output into `w`.
    pub fn new(w: &'a mut W) -> Self {
        Writing {
            w,
            buf: Aligned::new(BUF),
        }
    }
}

impl<W: Write> PackOut for Writing<'_, W> {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.w.write_all(b)
    }

    fn data(&mut self, f: &File, len: u64, direct: bool) -> io::Result<DataRead> {
        let w = &mut *self.w;
        read_through(f, len, direct, &mut self.buf, |b| w.write_all(b))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}
