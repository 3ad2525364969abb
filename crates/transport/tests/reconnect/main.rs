//! A hop that reconnects ([`rdpipe_transport::reconnect`]), over loopback
//! TCP through a proxy the test controls: the proxy resets every connection
//! it carries at moments the test picks (the receiver's output has grown
//! past a mark), and both ends must reconnect through it and resume
//! byte-exact under every protection. As the attacker, the proxy replays a
//! dead connection's bytes into the next one: nothing of it is accepted. A
//! peer that closes its end cleanly (its process ended) is not waited for. A
//! fan-out chain's hop reconnects the same way when no re-link comes. A
//! receiver blocked on its output when the connection goes: `stalled.rs`.

mod proxy;
mod stalled;

use proxy::{data, dial, listen_announcing, opts, test_chain, Proxy, Shared};
use rdpipe_transport::chain::{run_recv_chain, run_send_chain};
use rdpipe_transport::reconnect::HopState;
use rdpipe_transport::replay::Recorded;
use rdpipe_transport::{run_recv, run_send, Endpoint, Options, Report, TransportError};
use rdpipe_wire::{Compress, Integrity, TransportPref};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

type Ends = (
    Result<Report, TransportError>,
    Result<Report, TransportError>,
    Vec<u8>,
);

/// Sends `input` through a proxy that cuts the connection each time the
/// receiver's output passes one of `marks`; as a fan-out chain's hop
/// ([`rdpipe_transport::chain`]) with `chain`.
fn flapping(input: &[u8], integrity: Integrity, marks: &[usize], replay: bool) -> Ends {
    flapping_as(input, integrity, Compress::None, marks, replay, false)
}

/// [`flapping`] with both ends asking for `compress`, as a chain hop with `chain`.
fn flapping_as(
    input: &[u8],
    integrity: Integrity,
    compress: Compress,
    marks: &[usize],
    replay: bool,
    chain: bool,
) -> Ends {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, input).unwrap();
    let out = Shared::default();
    let (port_tx, port_rx) = mpsc::channel();
    let recv = {
        let out = out.clone();
        std::thread::spawn(move || {
            let ep = listen_announcing(port_tx);
            let mut o = opts(integrity, 32 << 20, Duration::from_secs(20));
            o.compress = compress;
            if chain {
                let chain = test_chain();
                return run_recv_chain(ep, o, move || Ok(out), chain);
            }
            run_recv(ep, o, move || Ok(out))
        })
    };
    let proxy = Proxy::start(port_rx.recv().unwrap(), replay);
    let send = {
        let port = proxy.port;
        std::thread::spawn(move || {
            let ep = Endpoint::Connect {
                host: "127.0.0.1".into(),
                port,
                timeout: Duration::from_secs(5),
            };
            let mut f = std::fs::File::open(path).unwrap();
            let mut o = opts(integrity, 32 << 20, Duration::from_secs(20));
            o.compress = compress;
            if chain {
                let chain = test_chain();
                return run_send_chain(ep, o, &mut Recorded::new(f, 32 << 20), chain);
            }
            run_send(ep, o, &mut f)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    for &m in marks {
        while out.len() < m && !send.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        proxy.cut();
    }
    let s = send.join().unwrap();
    let r = recv.join().unwrap();
    drop(dir);
    let got = out.0.lock().unwrap().clone();
    (s, r, got)
}

#[test]
fn five_cuts_resume_byte_exact_under_every_protection() {
    let input = data(24 << 20);
    let marks = [2 << 20, 6 << 20, 10 << 20, 15 << 20, 20 << 20];
    for integrity in [Integrity::Checksum, Integrity::Mac, Integrity::Encrypt] {
        let (s, r, got) = flapping(&input, integrity, &marks, false);
        let (s, r) = (s.unwrap(), r.unwrap());
        assert!(got == input, "{integrity:?}: output differs");
        assert_eq!(r.bytes, input.len() as u64);
        assert_eq!(s.checksum, r.checksum);
        assert!(
            s.reconnects.len() >= 4 && r.reconnects.len() >= 4,
            "{integrity:?}: {} / {} reconnects",
            s.reconnects.len(),
            r.reconnects.len()
        );
        for w in r.reconnects.windows(2) {
            assert!(w[0].offset <= w[1].offset);
        }
        assert!(r.reconnects.iter().all(|c| c.transport.starts_with("tcp")));
    }
}

#[test]
fn compressed_streams_resume_byte_exact_after_cuts() {
    // Random and compressible stretches, so that chunks go both ways. The
    // last cut leaves more than `auto`'s largest chunks (4 MiB) and the
    // sender's read-ahead to send: a cut after the receiver has it all
    // and confirmed may lose the confirmation, which fails the sender.
    let mut input = data(32 << 20);
    for i in (0..input.len()).step_by(3 << 20) {
        let end = (i + (1 << 20)).min(input.len());
        input[i..end].fill(b'z');
    }
    let marks = [2 << 20, 8 << 20, 14 << 20];
    for (integrity, compress) in [
        (Integrity::Encrypt, Compress::Auto),
        (Integrity::Mac, Compress::Zstd(3)),
        (Integrity::Checksum, Compress::Zstd(1)),
    ] {
        let (s, r, got) = flapping_as(&input, integrity, compress, &marks, false, false);
        let (s, r) = (s.unwrap(), r.unwrap());
        assert!(got == input, "{integrity:?} {compress}: output differs");
        assert_eq!(s.checksum, r.checksum);
        assert!(
            !r.reconnects.is_empty(),
            "{integrity:?} {compress}: no cut landed"
        );
        let c = r.compress.expect("the receiver reports compression");
        assert_eq!(c.mode, compress);
        assert!(c.wire < c.raw, "{integrity:?} {compress}: {c:?}");
    }
}

#[test]
fn a_fan_out_chain_hop_whose_ends_live_reconnects_without_a_relink() {
    let input = data(16 << 20);
    let marks = [2 << 20, 7 << 20, 12 << 20];
    for integrity in [Integrity::Mac, Integrity::Encrypt] {
        let (s, r, got) = flapping_as(&input, integrity, Compress::None, &marks, false, true);
        let (s, r) = (s.unwrap(), r.unwrap());
        assert!(got == input, "{integrity:?}: output differs");
        assert_eq!(s.checksum, r.checksum);
        assert!(
            s.reconnects.len() >= 2 && r.reconnects.len() >= 2,
            "{integrity:?}: {} / {} reconnects",
            s.reconnects.len(),
            r.reconnects.len()
        );
        assert!(!r.transport.contains("re-linked"), "{}", r.transport);
    }
}

#[test]
fn a_replayed_old_connection_is_refused_and_the_stream_still_ends_whole() {
    let input = data(12 << 20);
    let (s, r, got) = flapping(&input, Integrity::Mac, &[3 << 20, 7 << 20], true);
    let (s, r) = (s.unwrap(), r.unwrap());
    assert!(got == input, "output differs");
    assert_eq!(s.checksum, r.checksum);
    assert!(!r.reconnects.is_empty());
}

#[test]
fn a_hop_that_cannot_reconnect_fails_within_its_timeout_naming_the_peer() {
    let input = data(16 << 20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, &input).unwrap();
    let (port_tx, port_rx) = mpsc::channel();
    let out = Shared::default();
    let limit = Duration::from_secs(2);
    let recv = {
        let out = out.clone();
        std::thread::spawn(move || {
            let ep = listen_announcing(port_tx);
            run_recv(ep, opts(Integrity::Mac, 32 << 20, limit), move || Ok(out))
        })
    };
    let proxy = Proxy::start(port_rx.recv().unwrap(), false);
    let port = proxy.port;
    let send = std::thread::spawn(move || {
        let ep = Endpoint::Connect {
            host: "127.0.0.1".into(),
            port,
            timeout: Duration::from_secs(5),
        };
        let mut f = std::fs::File::open(path).unwrap();
        run_send(ep, opts(Integrity::Mac, 32 << 20, limit), &mut f)
    });
    while out.len() < 2 << 20 {
        std::thread::sleep(Duration::from_millis(2));
    }
    // The path stays down: both ends give up once the timeout ran out.
    let cut_at = Instant::now();
    proxy.closed.store(true, Ordering::SeqCst);
    proxy.cut();
    let (s, r) = (send.join().unwrap(), recv.join().unwrap());
    let bound = limit + Duration::from_secs(5);
    assert!(cut_at.elapsed() < bound, "took {:?}", cut_at.elapsed());
    for (end, e) in [("sender", s.unwrap_err()), ("receiver", r.unwrap_err())] {
        assert!(
            matches!(e, TransportError::NotReconnected { .. }),
            "{end}: {e}"
        );
        let m = e.to_string();
        assert!(
            m.contains("--reconnect-timeout") && m.contains("127.0.0.1"),
            "{m}"
        );
        assert_eq!(e.exit_code(), rdpipe_transport::error::EXIT_INCOMPLETE);
    }
    // Nothing past what arrived whole was declared good.
    let got = out.0.lock().unwrap().clone();
    assert!(got.len() < input.len() && got[..] == input[..got.len()]);
}

/// Tells `tx` each time the end named `end` resumed the stream.
fn on_resume(
    end: &'static str,
    tx: &mpsc::Sender<&'static str>,
) -> Option<Box<dyn FnMut(HopState) + Send>> {
    let tx = tx.clone();
    Some(Box::new(move |s| {
        if matches!(s, HopState::Resumed(_)) {
            let _ = tx.send(end);
        }
    }))
}

/// A sender whose input is idle when its connection is cut (a command that
/// prints nothing until it ends, like `zfs recv` feeding rdpipe's stdout)
/// notices the loss at once, not at its next byte: both ends resume while
/// the input is still idle, whichever end dials, and the stream ends whole.
#[test]
fn a_sender_with_an_idle_input_resumes_while_it_waits() {
    let input = data(3 << 20);
    for sender_listens in [true, false] {
        let (pipe_r, mut pipe_w) = std::io::pipe().unwrap();
        let mut pipe_r = std::fs::File::from(std::os::fd::OwnedFd::from(pipe_r));
        let out = Shared::default();
        let (port_tx, port_rx) = mpsc::channel();
        let listen = listen_announcing(port_tx);
        let (resumed_tx, resumed) = mpsc::channel();
        let mut so = opts(Integrity::Mac, 32 << 20, Duration::from_secs(30));
        so.notice = on_resume("sender", &resumed_tx);
        let mut ro = opts(Integrity::Mac, 32 << 20, Duration::from_secs(30));
        ro.notice = on_resume("receiver", &resumed_tx);
        let o = out.clone();
        let (send, recv, proxy);
        if sender_listens {
            send = std::thread::spawn(move || run_send(listen, so, &mut pipe_r));
            proxy = Proxy::start(port_rx.recv().unwrap(), false);
            let p = proxy.port;
            recv = std::thread::spawn(move || run_recv(dial(p), ro, move || Ok(o)));
        } else {
            recv = std::thread::spawn(move || run_recv(listen, ro, move || Ok(o)));
            proxy = Proxy::start(port_rx.recv().unwrap(), false);
            let p = proxy.port;
            send = std::thread::spawn(move || run_send(dial(p), so, &mut pipe_r));
        }
        pipe_w.write_all(&input[..1 << 20]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while out.len() < 1 << 20 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(out.len(), 1 << 20, "the first MiB did not arrive");
        proxy.cut();
        // The input stays idle until both ends have resumed.
        let mut ends: Vec<&str> = (0..2)
            .map(|_| {
                resumed
                    .recv_timeout(Duration::from_secs(15))
                    .unwrap_or_else(|_| {
                        panic!("sender listens {sender_listens}: no resume while the input idled")
                    })
            })
            .collect();
        ends.sort();
        assert_eq!(ends, ["receiver", "sender"]);
        pipe_w.write_all(&input[1 << 20..]).unwrap();
        drop(pipe_w);
        let (s, r) = (send.join().unwrap().unwrap(), recv.join().unwrap().unwrap());
        let got = out.0.lock().unwrap().clone();
        assert!(
            got == input,
            "sender listens {sender_listens}: output differs"
        );
        assert_eq!(s.checksum, r.checksum);
        assert_eq!(r.reconnects.len(), 1, "{:?}", r.reconnects);
        assert_eq!(r.reconnects[0].offset, 1 << 20);
    }
}

/// A holder of the key that is not this stream's receiver (a restarted
/// rdrecv, or another transfer under the same key) dials the sender that
/// waits for its receiver to come back, authenticates, and says nothing: it
/// sends no hold bound to this stream, so the sender drops it after
/// `handshake_timeout` as before and fails within its `--reconnect-timeout`,
/// instead of waiting on it for ever.
#[test]
fn a_silent_peer_with_the_key_does_not_hold_the_sender() {
    let input = data(16 << 20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, &input).unwrap();
    let (port_tx, port_rx) = mpsc::channel();
    let limit = Duration::from_secs(2);
    let quick = |mut o: Options| {
        o.handshake_timeout = Duration::from_secs(1);
        o
    };
    let send = std::thread::spawn(move || {
        let mut f = std::fs::File::open(path).unwrap();
        let o = quick(opts(Integrity::Mac, 32 << 20, limit));
        run_send(listen_announcing(port_tx), o, &mut f)
    });
    let port = port_rx.recv().unwrap();
    let proxy = Proxy::start(port, false);
    let out = Shared::default();
    let recv = {
        let (out, p) = (out.clone(), proxy.port);
        std::thread::spawn(move || {
            let o = quick(opts(Integrity::Mac, 32 << 20, limit));
            run_recv(dial(p), o, move || Ok(out))
        })
    };
    while out.len() < 2 << 20 {
        std::thread::sleep(Duration::from_millis(2));
    }
    // The receiver is cut off for good; the stranger dials the sender.
    proxy.closed.store(true, Ordering::SeqCst);
    proxy.cut();
    let cut_at = Instant::now();
    let mut stranger = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let params = rdpipe_transport::handshake::LocalParams {
        role: rdpipe_wire::Role::Receiver,
        transport: TransportPref::Tcp,
        caps: rdpipe_transport::select::local_caps(TransportPref::Tcp),
        chunk_size: 256 << 10,
        slots: 2,
        integrity: Integrity::Mac,
        rate_limit: None,
        compress: Compress::None,
    };
    let key = opts(Integrity::Mac, 0, limit).key;
    rdpipe_transport::handshake::handshake(&mut stranger, &key, &params, Duration::from_secs(5))
        .expect("the stranger holds the key");
    let s = send.join().unwrap();
    let took = cut_at.elapsed();
    drop(stranger);
    let _ = recv.join().unwrap();
    let e = s.unwrap_err();
    assert!(matches!(e, TransportError::NotReconnected { .. }), "{e}");
    assert!(took < limit + Duration::from_secs(4), "took {took:?}");
}
