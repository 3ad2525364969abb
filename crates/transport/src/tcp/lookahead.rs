//! [`Lookahead`]: the receiver's socket, reading each data payload and the next
//! frame's header with one system call.
//!
//! Without it every data frame costs at least two reads (its 8-byte header, then
//! its payload). Reading the payload with `readv` into the payload buffer *and* an
//! 8-byte header slot takes whatever of the next header is already queued in the
//! same call; `readv` returns what is there and never waits for the second part, so
//! a slow sender's chunk is still handed on as soon as its own bytes arrived.

use rustix::event::{poll, PollFd, PollFlags};
use std::io::{self, IoSliceMut, Read};
use std::net::TcpStream;

/// The largest frame header (what may be read ahead).
const AHEAD: usize = rdpipe_wire::FRAME_HEADER_LEN;

/// A socket with up to one frame header read ahead.
pub struct Lookahead {
    sock: TcpStream,
    ahead: [u8; AHEAD],
    /// `ahead[at..have]` are read but not yet consumed.
    at: usize,
    have: usize,
}

impl Lookahead {
    /// Wraps a connected socket.
    pub fn new(sock: TcpStream) -> Self {
        Lookahead {
            sock,
            ahead: [0; AHEAD],
            at: 0,
            have: 0,
        }
    }

    /// The socket itself, for writing and shutting down.
    pub fn sock(&mut self) -> &mut TcpStream {
        &mut self.sock
    }

    /// Fills all of `buf` (a payload), reading the start of what follows into the
    /// look-ahead in the same calls. End of stream before `buf` is full is
    /// `UnexpectedEof`.
    pub fn read_payload(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut got = self.take_ahead(buf);
        while got < buf.len() {
            let want = buf.len() - got;
            let mut iov = [
                IoSliceMut::new(&mut buf[got..]),
                IoSliceMut::new(&mut self.ahead),
            ];
            match self.sock.read_vectored(&mut iov) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(k) if k <= want => got += k,
                Ok(k) => {
                    got = buf.len();
                    self.at = 0;
                    self.have = k - want;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether a read would return without waiting: bytes read ahead, or
    /// bytes (or the end, or an error) queued on the socket.
    pub fn ready(&self) -> bool {
        let mut fds = [PollFd::new(&self.sock, PollFlags::IN)];
        self.have > self.at || matches!(poll(&mut fds, 0), Ok(1..))
    }

    /// Moves read-ahead bytes into the front of `buf`; returns how many.
    fn take_ahead(&mut self, buf: &mut [u8]) -> usize {
        let n = (self.have - self.at).min(buf.len());
        buf[..n].copy_from_slice(&self.ahead[self.at..self.at + n]);
        self.at += n;
        if self.at == self.have {
            (self.at, self.have) = (0, 0);
        }
        n
    }
}

impl Read for Lookahead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.have > self.at {
            return Ok(self.take_ahead(buf));
        }
        self.sock.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (a, l.accept().unwrap().0)
    }

    #[test]
    fn payloads_and_headers_come_out_in_order_whatever_the_split() {
        let (mut a, b) = pair();
        // Frames of a 3-byte "header" and payloads of 5, 1 and 9 bytes, written
        // in one piece so that reads see them back to back.
        let data: Vec<u8> = (0u8..40).collect();
        a.write_all(&data).unwrap();
        drop(a);
        let mut r = Lookahead::new(b);
        let mut out = Vec::new();
        for payload in [5usize, 1, 9, 7] {
            let mut h = [0u8; 3];
            r.read_exact(&mut h).unwrap();
            out.extend_from_slice(&h);
            let mut p = vec![0u8; payload];
            r.read_payload(&mut p).unwrap();
            out.extend_from_slice(&p);
        }
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        out.extend_from_slice(&rest);
        assert_eq!(out, data);
    }

    #[test]
    fn a_short_stream_is_unexpected_eof() {
        let (mut a, b) = pair();
        a.write_all(&[1, 2, 3]).unwrap();
        drop(a);
        let mut r = Lookahead::new(b);
        let mut p = [0u8; 10];
        let e = r.read_payload(&mut p).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_payload_is_returned_without_waiting_for_the_next_header() {
        let (mut a, b) = pair();
        a.write_all(&[9; 4]).unwrap();
        let mut r = Lookahead::new(b);
        let mut p = [0u8; 4];
        // The writer stays open and sends nothing more: this must not block.
        r.read_payload(&mut p).unwrap();
        assert_eq!(p, [9; 4]);
        drop(a);
    }
}
