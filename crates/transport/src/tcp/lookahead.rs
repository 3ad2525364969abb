//! [`Lookahead`]: the receiver's socket, reading each data payload and the next
//! frame's header with one system call.
//!
//! Without it every data frame costs at least two reads (its 8-byte header, then
//! its payload). Reading the payload with `readv` into the payload buffer *and* an
//! 8-byte header slot takes whatever of the next header is already queued in the
//! same call; `readv` returns what is there and never waits for the second part, so
//! a slow sender's chunk is still handed on as soon as its own bytes arrived.

use rdpipe_wire::{FrameHeader, FrameKind};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::net::RecvFlags;
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

    /// The kind of the next frame when its whole header has arrived (read
    /// ahead, or queued on the socket: peeked, not taken); `None` while it has
    /// not, or when it is not a frame at all (the next read reports that).
    pub fn next_kind(&self) -> Option<FrameKind> {
        let mut h = [0u8; AHEAD];
        let have = self.have - self.at;
        h[..have].copy_from_slice(&self.ahead[self.at..self.have]);
        if have < AHEAD {
            // A pending socket error (a reset) is left for the next read: a
            // peek would take it (the kernel clears it for whoever asks
            // first), and the read after would see a plain end of stream.
            let mut fds = [PollFd::new(&self.sock, PollFlags::IN)];
            match poll(&mut fds, 0) {
                Ok(1..) if fds[0].revents() == PollFlags::IN => {}
                _ => return None,
            }
            let flags = RecvFlags::PEEK | RecvFlags::DONTWAIT;
            match rustix::net::recv(&self.sock, &mut h[have..], flags) {
                Ok(n) if n == AHEAD - have => {}
                _ => return None,
            }
        }
        FrameHeader::decode(&h, u32::MAX).ok().map(|h| h.kind)
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

    #[test]
    fn the_next_kind_is_known_once_its_whole_header_arrived_and_is_not_taken() {
        use rdpipe_wire::Control;
        let (mut a, b) = pair();
        let r = Lookahead::new(b);
        assert_eq!(r.next_kind(), None, "nothing sent");
        let keepalive = Control::Keepalive.encode();
        a.write_all(&keepalive[..3]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(r.next_kind(), None, "a part of a header");
        a.write_all(&keepalive[3..]).unwrap();
        a.write_all(&FrameHeader::data(4).encode()).unwrap();
        a.write_all(&[7; 4]).unwrap();
        let mut r = r;
        while r.next_kind().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(r.next_kind(), Some(FrameKind::Keepalive));
        // Peeking took nothing: the keepalive's bytes come first.
        let mut k = vec![0u8; keepalive.len()];
        r.read_exact(&mut k).unwrap();
        assert_eq!(k, keepalive);
        while r.next_kind().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(r.next_kind(), Some(FrameKind::Data));
    }
}
