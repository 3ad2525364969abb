//! Chain hops that re-link ([`rdpipe_transport::chain`]) on loopback: a relay
//! sends a stream to a sink through a proxy that cuts the connection mid-way
//! (as a dead relay host between them would); the relay then connects to the
//! sink anew with another key, and the sink resumes at the byte it had
//! reached. The sink's output is byte-exact; a resume offset that has left
//! the relay's replay window fails both ends with `BeyondWindow`; a byte the
//! cut hop altered before the cut fails the sink's check of the whole stream.

use rdpipe_transport::chain::{run_recv_chain, run_send_chain, Chain, RelinkPoll};
use rdpipe_transport::replay::Recorded;
use rdpipe_transport::{Endpoint, Options, Report, TransportError};
use rdpipe_wire::{Compress, Integrity, TransportPref};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn opts(key: &[u8], integrity: Integrity) -> Options {
    Options {
        key: key.to_vec(),
        chunk_size: 1 << 20,
        slots: 2,
        transport: TransportPref::Tcp,
        handshake_timeout: Duration::from_secs(5),
        integrity,
        rate_limit: None,
        compress: rdpipe_wire::Compress::None,
        progress: None,
        reconnect_timeout: Duration::ZERO,
        replay_window: 0,
        notice: None,
    }
}

/// An output the test can read afterwards.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Forwards one connection to `port`, the first `cut` bytes from client to
/// server (flipping the one at `flip`), then closes both sides. Returns its
/// own port.
fn cutting_proxy(port: u16, cut: usize, flip: Option<usize>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let me = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut client, _) = l.accept().unwrap();
        let mut server = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut s2, &mut c2);
        });
        let mut seen = 0;
        let mut buf = vec![0u8; 64 << 10];
        while seen < cut {
            let n = match client.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n.min(cut - seen),
            };
            if let Some(f) = flip.filter(|f| (seen..seen + n).contains(f)) {
                buf[f - seen] ^= 0x40;
            }
            if server.write_all(&buf[..n]).is_err() {
                break;
            }
            seen += n;
        }
        let _ = client.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
    });
    me
}

/// Sends `data` from a relay keeping `window` bytes to a sink, through a
/// proxy that cuts after `cut` bytes (flipping the byte at `flip`); both
/// re-link directly. Returns both ends' results and the sink's output.
fn relinked(
    data: &[u8],
    window: usize,
    cut: usize,
    flip: Option<usize>,
    integrity: Integrity,
    compress: Compress,
) -> (
    Result<Report, TransportError>,
    Result<Report, TransportError>,
    Vec<u8>,
) {
    let secret = b"chain secret".to_vec();
    let (port_tx, port_rx) = mpsc::channel();
    let (relink_tx, relink_rx) = mpsc::channel();
    let out = Shared::default();
    let sink = {
        let (out, secret) = (out.clone(), secret.clone());
        std::thread::spawn(move || {
            let announce = move |port| {
                port_tx.send(port).unwrap();
                Ok(())
            };
            let ep = Endpoint::Listen {
                bind: Some("127.0.0.1".into()),
                port: 0,
                announce: Some(Box::new(announce)),
            };
            let mut relink = move |_at: u64, _wait: Duration| {
                let tx = relink_tx.clone();
                let announce = move |port| {
                    tx.send(port).unwrap();
                    Ok(())
                };
                let ep = Endpoint::Listen {
                    bind: Some("127.0.0.1".into()),
                    port: 0,
                    announce: Some(Box::new(announce)),
                };
                RelinkPoll::To(ep, b"second key".to_vec())
            };
            let chain = Chain {
                secret: &secret,
                relink: &mut relink,
                wait: Duration::from_secs(5),
            };
            let mut o = opts(b"first key", integrity);
            o.compress = compress;
            run_recv_chain(ep, o, || Ok(out), chain)
        })
    };
    let proxy = cutting_proxy(port_rx.recv().unwrap(), cut, flip);
    // A pipe, as a relay's input is: the replay window holds copies (a
    // regular file would be read again instead, from any offset).
    let (file, w) = rustix::pipe::pipe().unwrap();
    let file = std::fs::File::from(file);
    let feed = data.to_vec();
    std::thread::spawn(move || {
        let _ = std::fs::File::from(w).write_all(&feed);
    });
    let mut relink = move |_at: u64, wait: Duration| {
        let Ok(port) = relink_rx.recv_timeout(wait) else {
            return RelinkPoll::NotYet;
        };
        let ep = Endpoint::Connect {
            host: "127.0.0.1".into(),
            port,
            timeout: Duration::from_secs(5),
        };
        RelinkPoll::To(ep, b"second key".to_vec())
    };
    let chain = Chain {
        secret: &secret,
        relink: &mut relink,
        wait: Duration::from_secs(10),
    };
    let ep = Endpoint::Connect {
        host: "127.0.0.1".into(),
        port: proxy,
        timeout: Duration::from_secs(5),
    };
    let mut o = opts(b"first key", integrity);
    o.compress = compress;
    let sent = run_send_chain(ep, o, &mut Recorded::new(file, window), chain);
    let got = sink.join().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    (sent, got, bytes)
}

fn stream(n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 13) as u8)
        .collect()
}

#[test]
fn a_cut_hop_relinks_and_the_sink_gets_the_whole_stream() {
    let data = stream(16 << 20);
    for integrity in [Integrity::Mac, Integrity::Checksum, Integrity::Encrypt] {
        let (sent, got, out) = relinked(&data, 16 << 20, 4 << 20, None, integrity, Compress::None);
        let (sent, got) = (sent.unwrap(), got.unwrap());
        assert_eq!(out.len(), data.len(), "{integrity:?}");
        assert!(out == data, "{integrity:?}: the output differs");
        assert_eq!((sent.bytes, sent.checksum), (got.bytes, got.checksum));
        assert!(
            got.transport.contains("re-linked at byte"),
            "{}",
            got.transport
        );
    }
}

#[test]
fn a_cut_compressed_hop_relinks_and_the_sink_gets_the_whole_stream() {
    // Half random, half runs: about 2:1, so the cut lands mid-stream.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..16usize << 20)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i & 4096 == 0 {
                x as u8
            } else {
                b'r'
            }
        })
        .collect();
    for (integrity, compress) in [
        (Integrity::Mac, Compress::Auto),
        (Integrity::Encrypt, Compress::Zstd(3)),
    ] {
        let (sent, got, out) = relinked(&data, 16 << 20, 2 << 20, None, integrity, compress);
        let (sent, got) = (sent.unwrap(), got.unwrap());
        assert!(out == data, "{integrity:?} {compress}: the output differs");
        assert_eq!((sent.bytes, sent.checksum), (got.bytes, got.checksum));
        assert!(
            got.transport.contains("re-linked at byte"),
            "{}",
            got.transport
        );
        assert!(
            got.compress.as_ref().is_some_and(|c| c.wire < c.raw),
            "{:?}",
            got.compress
        );
    }
}

#[test]
fn a_byte_altered_in_a_compressed_hop_fails_the_sink() {
    let data = stream(16 << 20);
    let (sent, got, _) = relinked(
        &data,
        16 << 20,
        4 << 20,
        Some(1 << 16),
        Integrity::Mac,
        Compress::Zstd(3),
    );
    assert!(
        matches!(
            got,
            Err(TransportError::BadChunk { .. }
                | TransportError::ChecksumMismatch { .. }
                | TransportError::Tampered { .. })
        ),
        "{got:?}"
    );
    assert!(sent.is_err());
}

#[test]
fn a_resume_offset_beyond_the_window_fails_both_ends() {
    let data = stream(16 << 20);
    let (sent, got, out) = relinked(&data, 4096, 4 << 20, None, Integrity::Mac, Compress::None);
    for r in [sent, got] {
        match r {
            Err(TransportError::BeyondWindow { offset, start, end }) => {
                assert!(offset < start && start < end, "{offset} {start} {end}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(out.len() < 4 << 20);
}

#[test]
fn bytes_altered_before_the_cut_fail_the_whole_streams_check() {
    let data = stream(16 << 20);
    let (sent, got, _) = relinked(
        &data,
        16 << 20,
        4 << 20,
        Some(1 << 20),
        Integrity::Mac,
        Compress::None,
    );
    // (One flipped byte already changes the checksum; the MAC under the
    // chain's key is what an attacker who can fix up the checksum meets.)
    assert!(
        matches!(
            got,
            Err(TransportError::ChecksumMismatch { .. } | TransportError::Tampered { .. })
        ),
        "{got:?}"
    );
    assert!(sent.is_err());
}
