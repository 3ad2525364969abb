//! The send and receive loops ([`rdpipe_transport::pump`]) under `--encrypt`
//! with buffers as large as RDMA's slots (1 MiB, the default, and 4 MiB), so
//! each chunk is sealed in several 256 KiB pieces (over TCP a frame is at
//! most 256 KiB: one piece). The transport between them is an in-memory queue
//! that carries each sealed chunk as the sender filled it, as a slot does: the
//! stream arrives byte-exact, every chunk uses the whole buffer, and a byte
//! altered in any piece or tag fails the receiver as tampered and the sender
//! with it.

use rdpipe_transport::error::GoneCause;
use rdpipe_transport::pump::{recv_stream, send_stream, Protection};
use rdpipe_transport::{ChunkReceiver, ChunkSender, Received, TransportError};
use rdpipe_wire::seal::{plain_room, seal_pieces, sealed_len};
use rdpipe_wire::{Integrity, SessionKeys, StreamEnd};
use std::io::{self, Write};
use std::sync::mpsc::{channel, Receiver, Sender};

enum Msg {
    Chunk(Vec<u8>),
    End(StreamEnd),
    Abort,
}

struct MemSender {
    cap: usize,
    tx: Sender<Msg>,
    done: Receiver<Option<StreamEnd>>,
}

fn gone() -> TransportError {
    TransportError::PeerGone {
        peer: "memory".into(),
        cause: GoneCause::Closed,
    }
}

impl ChunkSender for MemSender {
    fn send_chunk(
        &mut self,
        fill: &mut dyn FnMut(&mut [u8]) -> io::Result<usize>,
    ) -> Result<usize, TransportError> {
        let mut buf = vec![0u8; self.cap];
        let n = fill(&mut buf).map_err(TransportError::Input)?;
        if n > 0 {
            buf.truncate(n);
            self.tx.send(Msg::Chunk(buf)).map_err(|_| gone())?;
        }
        Ok(n)
    }

    fn finish(&mut self, end: &StreamEnd) -> Result<StreamEnd, TransportError> {
        self.tx.send(Msg::End(*end)).map_err(|_| gone())?;
        self.done.recv().ok().flatten().ok_or_else(gone)
    }

    fn abort(&mut self, _reason: &str) {
        let _ = self.tx.send(Msg::Abort);
    }

    fn gone(&mut self) -> TransportError {
        gone()
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}

struct MemReceiver {
    rx: Receiver<Msg>,
    done: Sender<Option<StreamEnd>>,
    /// Flip this byte of the first chunk.
    flip: Option<usize>,
    /// Sealed length of each chunk received.
    sizes: Vec<usize>,
}

impl ChunkReceiver for MemReceiver {
    fn recv_chunk(
        &mut self,
        drain: &mut dyn FnMut(&mut [u8]) -> Result<(), TransportError>,
    ) -> Result<Received, TransportError> {
        match self.rx.recv() {
            Ok(Msg::Chunk(mut b)) => {
                if let Some(at) = self.flip.take() {
                    b[at] ^= 0x10;
                }
                self.sizes.push(b.len());
                drain(&mut b)?;
                Ok(Received::Chunk(b.len()))
            }
            Ok(Msg::End(end)) => Ok(Received::End(end)),
            Ok(Msg::Abort) | Err(_) => Err(gone()),
        }
    }

    fn confirm(&mut self, done: &StreamEnd) -> Result<(), TransportError> {
        self.done.send(Some(*done)).map_err(|_| gone())
    }

    fn abort(&mut self, _reason: &str) {
        let _ = self.done.send(None);
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}

type Outcome = (
    Result<u64, TransportError>,
    Result<Vec<u8>, TransportError>,
    Vec<usize>,
);

/// Streams `data` from a file through a `cap`-byte buffer transport under
/// `--encrypt`, flipping byte `flip` of the first sealed chunk.
fn stream(data: &[u8], cap: usize, flip: Option<usize>) -> Outcome {
    let keys = SessionKeys::derive(b"shared secret", b"transcript");
    let mut input = tempfile::tempfile().unwrap();
    input.write_all(data).unwrap();
    std::io::Seek::rewind(&mut input).unwrap();
    let (tx, rx) = channel();
    let (done_tx, done) = channel();
    let mut s = MemSender { cap, tx, done };
    let mut r = MemReceiver {
        rx,
        done: done_tx,
        flip,
        sizes: Vec::new(),
    };
    let prot = Protection {
        integrity: Integrity::Encrypt,
        keys: &keys,
        compress: rdpipe_wire::Compress::None,
        chunk_size: cap,
        peer: "peer",
    };
    std::thread::scope(|sc| {
        let sent = sc.spawn(|| {
            let r = send_stream(&mut input, &mut s, prot, None, &mut |_| {}).map(|t| t.bytes);
            drop(s);
            r
        });
        let mut out = Vec::new();
        let got = recv_stream(&mut r, &mut out, prot, &mut |_| {}).map(|_| out);
        drop(r.done);
        (sent.join().unwrap(), got, r.sizes)
    })
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn multi_piece_chunks_arrive_byte_exact_and_fill_the_buffer() {
    for (cap, pieces) in [(1usize << 20, 4), (4 << 20, 16)] {
        let room = plain_room(cap);
        assert_eq!(seal_pieces(room), pieces);
        for len in [1, room - 1, room, room + 1, 3 * room + 12345] {
            let data = random(len, len as u64);
            let (sent, got, sizes) = stream(&data, cap, None);
            assert_eq!(sent.unwrap(), len as u64, "cap {cap} len {len}");
            assert!(got.unwrap() == data, "cap {cap} len {len}: bytes differ");
            // Every chunk but the last is a full buffer, sealed.
            let (last, full) = sizes.split_last().unwrap();
            assert!(full.iter().all(|&s| s == cap), "{sizes:?}");
            assert_eq!(*last, sealed_len(len - full.len() * room));
        }
    }
}

#[test]
fn an_altered_byte_in_any_piece_or_tag_fails_both_ends() {
    let cap = 1 << 20;
    let room = plain_room(cap);
    let data = random(2 * room, 5);
    // The first, a middle and the last piece's data, and the first and last tag.
    for at in [0, 2 * (256 << 10) + 99, room - 1, room, cap - 1] {
        let (sent, got, _) = stream(&data, cap, Some(at));
        assert!(
            matches!(got, Err(TransportError::Tampered { .. })),
            "byte {at}: receiver got {:?}",
            got.as_ref().err()
        );
        assert!(sent.is_err(), "byte {at}: the sender reported success");
    }
}
