//! Blocking frame I/O on a byte stream: read a validated header, then exactly the
//! payload it announced; write a header and payload with one syscall.

use crate::error::GoneCause;
use crate::TransportError;
use rdpipe_wire::{Control, FrameHeader, FrameKind, WireError, FRAME_HEADER_LEN};
use std::io::{self, IoSlice, Read, Write};

/// Turns an I/O error on the connection into the matching transport error.
pub fn conn_error(peer: &str, e: io::Error) -> TransportError {
    let cause = match e.kind() {
        io::ErrorKind::UnexpectedEof => GoneCause::Closed,
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => GoneCause::TimedOut,
        _ => GoneCause::Io(e),
    };
    TransportError::PeerGone {
        peer: peer.to_string(),
        cause,
    }
}

/// Wraps a decoding error with the peer's address.
pub fn protocol(peer: &str, source: WireError) -> TransportError {
    TransportError::Protocol {
        peer: peer.to_string(),
        source,
    }
}

/// Reads and validates one frame header; `max_data` bounds data frames.
pub fn read_header<R: Read + ?Sized>(
    r: &mut R,
    peer: &str,
    max_data: u32,
) -> Result<FrameHeader, TransportError> {
    let mut h = [0u8; FRAME_HEADER_LEN];
    r.read_exact(&mut h).map_err(|e| conn_error(peer, e))?;
    FrameHeader::decode(&h, max_data).map_err(|e| protocol(peer, e))
}

/// Reads one control frame (a data frame here is a protocol error).
pub fn read_control<R: Read + ?Sized>(r: &mut R, peer: &str) -> Result<Control, TransportError> {
    let h = read_header(r, peer, 0)?;
    read_control_payload(r, peer, h)
}

/// Reads the payload of a control frame whose header was already read.
pub fn read_control_payload<R: Read + ?Sized>(
    r: &mut R,
    peer: &str,
    h: FrameHeader,
) -> Result<Control, TransportError> {
    if h.kind == FrameKind::Data {
        return Err(protocol(peer, WireError::Unexpected(FrameKind::Data)));
    }
    // Bounded by FrameHeader::decode: at most 1 KiB for control frames.
    let mut p = vec![0u8; h.len as usize];
    r.read_exact(&mut p).map_err(|e| conn_error(peer, e))?;
    Control::decode(h.kind, &p).map_err(|e| protocol(peer, e))
}

/// Writes one control frame.
pub fn write_control<W: Write + ?Sized>(
    w: &mut W,
    peer: &str,
    c: &Control,
) -> Result<(), TransportError> {
    w.write_all(&c.encode()).map_err(|e| conn_error(peer, e))?;
    w.flush().map_err(|e| conn_error(peer, e))
}

/// Writes a data frame (header and payload) with as few syscalls as possible.
pub fn write_data<W: Write + ?Sized>(w: &mut W, payload: &[u8]) -> io::Result<()> {
    let header = FrameHeader::data(payload.len() as u32).encode();
    let mut head: &[u8] = &header;
    let mut body: &[u8] = payload;
    while !head.is_empty() || !body.is_empty() {
        let n = if head.is_empty() {
            w.write(body)?
        } else {
            w.write_vectored(&[IoSlice::new(head), IoSlice::new(body)])?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        head = &head[from_head..];
        body = &body[n - from_head..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that accepts at most `step` bytes per call, to exercise partial writes.
    struct Dribble {
        out: Vec<u8>,
        step: usize,
    }
    impl Write for Dribble {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let n = b.len().min(self.step);
            self.out.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let mut left = self.step;
            let mut total = 0;
            for b in bufs {
                let n = b.len().min(left);
                self.out.extend_from_slice(&b[..n]);
                total += n;
                left -= n;
                if left == 0 {
                    break;
                }
            }
            Ok(total)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn data_frames_survive_partial_writes() {
        let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        for step in [1, 3, 7, 8, 9, 500, 2000] {
            let mut d = Dribble { out: vec![], step };
            write_data(&mut d, &payload).unwrap();
            let mut r = &d.out[..];
            let h = read_header(&mut r, "t", 1000).unwrap();
            assert_eq!(h.len, 1000);
            assert_eq!(r, &payload[..]);
        }
    }
}
