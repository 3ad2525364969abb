//! Playing the attacker (docs/security.md): a relay that passes the handshake
//! through and rewrites data plus the End it can forge, a passive tap, port
//! scans and garbage around a real transfer, fake peers fishing for something
//! to test key guesses against, another hop's key, and a killed sender against
//! an output file.

use crate::support::*;
use rdpipe_transport::handshake::handshake;
use rdpipe_wire::{Control, FrameHeader, FrameKind};
use rdpipe_wire::{FRAME_HEADER_LEN, HELLO_LEN};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KEY: &str = "attack-test-key-0123456789";

/// Reads one frame (header and payload) from `r`; None at end of stream.
fn read_frame(r: &mut TcpStream) -> Option<(FrameHeader, Vec<u8>)> {
    let mut h = [0u8; FRAME_HEADER_LEN];
    r.read_exact(&mut h).ok()?;
    let header = FrameHeader::decode(&h, 64 << 20).ok()?;
    let mut p = vec![0u8; header.len as usize];
    r.read_exact(&mut p).ok()?;
    Some((header, p))
}

/// Accepts the sender under test: the first connection that delivers a hello
/// that decodes, within 10 s. A stray connection on this loopback (a scanner,
/// another parallel test's client dialing a port since reused) is dropped, as
/// rdrecv drops it.
fn accept_hello(l: &TcpListener) -> (TcpStream, [u8; HELLO_LEN]) {
    loop {
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut hello = [0u8; HELLO_LEN];
        if c.read_exact(&mut hello).is_ok() && rdpipe_wire::hello::Hello::decode(&hello).is_ok() {
            c.set_read_timeout(None).unwrap();
            return (c, hello);
        }
    }
}

/// A relay between a client and `target`: the client-to-target direction goes
/// through `rewrite` frame by frame after the hello (what an on-path attacker
/// without the key can do), the other direction is copied. Everything the client
/// sent is recorded. Returns the relay's port and the record.
fn relay(
    target: u16,
    mut rewrite: impl FnMut(FrameHeader, Vec<u8>) -> Vec<u8> + Send + 'static,
) -> (u16, Arc<Mutex<Vec<u8>>>, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let record = Arc::new(Mutex::new(Vec::new()));
    let rec = record.clone();
    let h = std::thread::spawn(move || {
        let (mut c, hello) = accept_hello(&l);
        let mut up = TcpStream::connect(("127.0.0.1", target)).unwrap();
        let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
        let back = std::thread::spawn(move || {
            let _ = std::io::copy(&mut up2, &mut c2);
            let _ = c2.shutdown(Shutdown::Write);
        });
        rec.lock().unwrap().extend_from_slice(&hello);
        let _ = up.write_all(&hello);
        while let Some((h, p)) = read_frame(&mut c) {
            let mut frame = h.encode().to_vec();
            frame.extend_from_slice(&p);
            rec.lock().unwrap().extend_from_slice(&frame);
            if up.write_all(&rewrite(h, p)).is_err() {
                break;
            }
        }
        let _ = up.shutdown(Shutdown::Write);
        let _ = back.join();
    });
    (port, record, h)
}

fn frame(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    let mut v = FrameHeader {
        kind,
        len: payload.len() as u32,
    }
    .encode()
    .to_vec();
    v.extend_from_slice(payload);
    v
}

#[test]
fn a_relay_that_rewrites_data_and_fixes_the_checksum_is_caught_by_both_ends() {
    // Under the MAC (plaintext on the wire) and under the default (encrypted
    // on this CPU when it has AES instructions, else the MAC again).
    for flags in [&["--integrity", "mac"][..], &[][..]] {
        let dir = Scratch::new("relay");
        let out = dir.path("out.txt");
        let data = [b"PAY ALICE 100\n".repeat(1000), random_bytes(1 << 20, 9)].concat();
        let mut rargs = vec![KEY, out.to_str().unwrap()];
        rargs.extend_from_slice(flags);
        let r = Receiver::start(&rargs, &[], None);
        // The attacker rewrites PAY ALICE to PAY MALLO in every data frame (or,
        // where it cannot find it, flips a byte) and, knowing the stream,
        // recomputes the (unkeyed) checksum in End; the End tag it cannot
        // compute.
        let mut seen = Vec::new();
        let (port, _, h) = relay(r.port, move |h, mut p| {
            match h.kind {
                FrameKind::Data => {
                    let mut found = false;
                    for i in 0..p.len().saturating_sub(8) {
                        if &p[i..i + 9] == b"PAY ALICE" {
                            p[i + 4..i + 9].copy_from_slice(b"MALLO");
                            found = true;
                        }
                    }
                    if !found && !p.is_empty() {
                        p[0] ^= 1;
                    }
                    seen.extend_from_slice(&p);
                }
                FrameKind::End => {
                    let sum = rdpipe_wire::checksum::xxh3_64(&seen);
                    p[8..16].copy_from_slice(&sum.to_le_bytes());
                }
                _ => {}
            }
            frame(h.kind, &p)
        });
        let port = port.to_string();
        let mut sargs = vec!["127.0.0.1", &port, KEY];
        sargs.extend_from_slice(flags);
        let s = send(&sargs, &[], Some(&data));
        let f = r.finish();
        h.join().unwrap();
        f.expect_code(9).expect_stderr("integrity check");
        assert_ne!(
            s.status.code(),
            Some(0),
            "{flags:?}: the sender reported success"
        );
        assert!(
            !out.exists(),
            "{flags:?}: the altered stream was written to the output file"
        );
        assert!(
            std::fs::read_dir(dir.path("")).unwrap().next().is_none(),
            "{flags:?}: a temporary file was left"
        );
    }
}

#[test]
fn a_relay_that_drops_the_end_and_echoes_it_as_done_is_caught() {
    // The receiver never sees End (truncation); the attacker answers the sender
    // with the End turned into a Done. The Done tag is under another key.
    let r = Receiver::start(&[KEY], &[], None);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let target = r.port;
    let h = std::thread::spawn(move || {
        let (mut c, hello) = accept_hello(&l);
        let mut up = TcpStream::connect(("127.0.0.1", target)).unwrap();
        let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
        let back = std::thread::spawn(move || {
            let _ = std::io::copy(&mut up2, &mut c2);
        });
        up.write_all(&hello).unwrap();
        while let Some((h, p)) = read_frame(&mut c) {
            if h.kind == FrameKind::End {
                let _ = up.shutdown(Shutdown::Both);
                let _ = c.write_all(&frame(FrameKind::Done, &p));
                let _ = c.shutdown(Shutdown::Write);
                break;
            }
            up.write_all(&frame(h.kind, &p)).unwrap();
        }
        let _ = back.join();
    });
    let s = send(
        &["127.0.0.1", &port.to_string(), KEY],
        &[],
        Some(b"PAY ALICE 100"),
    );
    let f = r.finish();
    h.join().unwrap();
    assert_ne!(s.status.code(), Some(0), "rdsend accepted a forged Done");
    s.expect_stderr("integrity check");
    assert_ne!(
        f.status.code(),
        Some(0),
        "rdrecv accepted a stream without End"
    );
    assert!(f.stdout.is_empty() || f.status.code() != Some(0));
}

#[test]
fn with_encrypt_a_passive_tap_sees_no_plaintext() {
    let secret = b"TOP-SECRET-PAYLOAD-".repeat(20000);
    // The default encrypts where this CPU has AES instructions.
    let default_visible = rdpipe_wire::Integrity::preferred() != rdpipe_wire::Integrity::Encrypt;
    for (flags, visible) in [
        (&["--integrity", "mac"][..], true),
        (&["--integrity", "checksum"][..], true),
        (&[][..], default_visible),
        (&["--encrypt"][..], false),
        (&["--integrity", "encrypt"][..], false),
    ] {
        let mut args = vec![KEY];
        args.extend_from_slice(flags);
        let r = Receiver::start(&args, &[], None);
        let (port, record, h) = relay(r.port, |h, p| frame(h.kind, &p));
        let mut sargs = vec!["127.0.0.1".to_string(), port.to_string(), KEY.into()];
        sargs.extend(flags.iter().map(|f| f.to_string()));
        let sargs: Vec<&str> = sargs.iter().map(|s| s.as_str()).collect();
        send(&sargs, &[], Some(&secret)).expect_code(0);
        let f = r.finish();
        h.join().unwrap();
        f.expect_code(0);
        assert!(f.stdout == secret, "{flags:?}: output differs");
        let wire = record.lock().unwrap().clone();
        let found = wire.windows(19).any(|w| w == b"TOP-SECRET-PAYLOAD-");
        assert_eq!(found, visible, "{flags:?}: plaintext on the wire: {found}");
    }
}

#[test]
fn scans_garbage_and_trickles_around_a_real_transfer_do_not_disturb_it() {
    let data = random_bytes(32 << 20, 5);
    let mut r = Receiver::start(&["-v", KEY, "--handshake-timeout", "2"], &[], None);
    let port = r.port;
    // Before: a port scan (connect and close), an empty connection, garbage.
    drop(TcpStream::connect(("127.0.0.1", port)).unwrap());
    r.wait_stderr("dropped");
    let _idle = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut g = TcpStream::connect(("127.0.0.1", port)).unwrap();
    g.write_all(&random_bytes(1000, 1)).unwrap();
    // A trickler that keeps going while the real sender connects.
    let mut t = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let trickle = std::thread::spawn(move || {
        let prefix = [
            b"RDPP".as_slice(),
            &rdpipe_wire::PROTOCOL_VERSION.to_le_bytes(),
        ]
        .concat();
        for b in prefix {
            if t.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let sender = std::thread::spawn(move || {
        send(&["127.0.0.1", &port.to_string(), KEY], &[], Some(&data)).expect_code(0);
        data
    });
    // During: more scans (the port closes once the sender authenticated, so
    // these are refused or dropped).
    for _ in 0..20 {
        let _ = TcpStream::connect(("127.0.0.1", port));
        std::thread::sleep(Duration::from_millis(5));
    }
    let data = sender.join().unwrap();
    trickle.join().unwrap();
    let f = r.finish();
    f.expect_code(0);
    assert!(f.stdout == data, "output differs");
}

#[test]
fn a_fake_sender_gets_one_online_guess_and_the_receiver_keeps_waiting() {
    let mut r = Receiver::start(&["-v", KEY], &[], None);
    // Guesses fail (each is one connection; what rdrecv sends back is bound to
    // the guess the fake's own PAKE message was made from).
    for guess in ["guess-1", "password", "attack-test-key-0123456780"] {
        let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
        let e = handshake(
            &mut s,
            guess.as_bytes(),
            &sender_params(),
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(e.to_string().contains("authentication failed"), "{e}");
        r.wait_stderr("authentication failed");
    }
    // The right key still gets through.
    let p = r.port.to_string();
    send(&["127.0.0.1", &p, KEY], &[], Some(b"ok")).expect_code(0);
    r.finish().expect_code(0);
}

#[test]
fn a_fake_receiver_gets_no_tag_from_rdsend() {
    // A fake receiver that knows no key: it answers the hello and the PAKE
    // message with garbage of the right shapes. rdsend must give up without ever
    // sending a key-dependent tag (a Confirm frame): there is nothing to test
    // guesses against offline.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let rec = sent.clone();
    let h = std::thread::spawn(move || {
        let (mut c, hello) = accept_hello(&l);
        // Its own hello: rdsend's with the role flipped.
        let mut mine = hello;
        mine[6] = 2;
        c.write_all(&mine).unwrap();
        // rdsend may drop the connection as soon as it reads the bogus Pake:
        // a failed write here is rdsend doing its job.
        let _ = c.write_all(&Control::Pake([7u8; 33]).encode());
        let _ = c.write_all(
            &Control::Accept {
                transport: rdpipe_wire::frame::Chosen::Tcp,
                chunk_size: 1 << 20,
                slots: 2,
            }
            .encode(),
        );
        let _ = c.write_all(&Control::Confirm([1u8; 32]).encode());
        let mut rest = Vec::new();
        let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = c.read_to_end(&mut rest);
        rec.lock().unwrap().extend_from_slice(&rest);
    });
    let s = send(&["127.0.0.1", &port.to_string(), KEY], &[], Some(b"secret"));
    h.join().unwrap();
    assert!(matches!(s.status.code(), Some(3) | Some(8)), "{}", s.stderr);
    let mut rest = &sent.lock().unwrap()[..];
    let mut kinds = Vec::new();
    while rest.len() >= FRAME_HEADER_LEN {
        let hdr: [u8; FRAME_HEADER_LEN] = rest[..FRAME_HEADER_LEN].try_into().unwrap();
        let h = FrameHeader::decode(&hdr, 64 << 20).unwrap();
        kinds.push(h.kind);
        rest = &rest[FRAME_HEADER_LEN + h.len as usize..];
    }
    assert!(
        !kinds.contains(&FrameKind::Confirm),
        "rdsend sent a tag: {kinds:?}"
    );
    assert!(
        !kinds.contains(&FrameKind::Data),
        "rdsend sent data: {kinds:?}"
    );
}

#[test]
fn an_agent_accepts_only_its_own_hops_key() {
    // An rdpipe agent listening for its incoming hop, given that hop's key on
    // its stdin: another hop's key is refused (and the agent keeps waiting), the
    // right one gets through.
    let (k_in, k_other) = ("11".repeat(32), "22".repeat(32));
    let mut agent = std::process::Command::new(bin("rdpipe"))
        .args([
            "--agent", "--label", "t", "--input", "listen", "--output", "none",
        ])
        .args(["--in-addr", "127.0.0.1", "--cmd", "cat > /dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = agent.stdin.take().unwrap();
    writeln!(stdin, "{k_in} -").unwrap();
    let mut lines = std::io::BufReader::new(agent.stdout.take().unwrap());
    let port = loop {
        let mut l = String::new();
        assert!(
            std::io::BufRead::read_line(&mut lines, &mut l).unwrap() > 0,
            "agent ended"
        );
        if let Some(p) = l.trim().strip_prefix("PORT in ") {
            break p.to_string();
        }
    };
    send(&["127.0.0.1", &port, &k_other], &[], Some(b"x")).expect_code(3);
    // The hex key line is the key's bytes; rdsend takes the key as text, so
    // hand it the same bytes through a key file.
    let dir = Scratch::new("hopkey");
    let kf = dir.path("k");
    std::fs::write(&kf, [0x11u8; 32]).unwrap();
    send(
        &["--key-file", kf.to_str().unwrap(), "127.0.0.1", &port],
        &[],
        Some(b"right hop"),
    )
    .expect_code(0);
    let mut done = String::new();
    while std::io::BufRead::read_line(&mut lines, &mut done).unwrap_or(0) > 0 {
        if done.contains("END") {
            break;
        }
    }
    assert!(done.contains("END ok"), "{done}");
    drop(stdin);
    let _ = agent.wait();
}

#[test]
fn a_killed_sender_leaves_the_old_output_file_intact() {
    let dir = Scratch::new("atomic");
    let out = dir.path("image.bin");
    std::fs::write(&out, b"the old, good content").unwrap();
    let mut r = Receiver::start(&[KEY, out.to_str().unwrap()], &[], None);
    // A sender that streams slowly, killed mid-stream.
    let mut s = std::process::Command::new(bin("rdsend"))
        .args(["127.0.0.1", &r.port.to_string(), KEY])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut w = s.stdin.take().unwrap();
    w.write_all(&random_bytes(4 << 20, 3)).unwrap();
    // Readiness: the temporary file has data.
    wait_until(
        "data in the temporary file",
        Duration::from_secs(20),
        || dir.temp_has_data().then_some(()),
    );
    s.kill().unwrap();
    let _ = s.wait();
    drop(w);
    r.wait_stderr("truncated");
    let f = r.finish();
    f.expect_code(4);
    assert_eq!(std::fs::read(&out).unwrap(), b"the old, good content");
    assert_eq!(dir.names(), ["image.bin"], "a temporary file was left");
}

/// The TCP ports in LISTEN state on this host (from /proc/net/tcp and tcp6),
/// except those of this test process's own sockets: the racer below attacks
/// rdpipe's endpoints, not the fakes, relays and proxies other tests run in
/// this process at the same time (each accepts one connection and would take
/// the racer's for the one under test).
fn listening_ports() -> std::collections::HashSet<u16> {
    // (port, socket inode) of every listener, read before this process's
    // descriptors: a listener of ours that shows in the table is then among them.
    let mut listeners = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for l in text.lines().skip(1) {
            let w: Vec<&str> = l.split_whitespace().collect();
            // local_address is HEXIP:HEXPORT, st 0A is LISTEN, w[9] the inode.
            if w.len() > 9 && w[3] == "0A" {
                if let Some(Ok(p)) = w[1].rsplit(':').next().map(|p| u16::from_str_radix(p, 16)) {
                    listeners.push((p, format!("socket:[{}]", w[9])));
                }
            }
        }
    }
    let ours: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .collect();
    listeners
        .into_iter()
        .filter(|(_, inode)| !ours.contains(inode))
        .map(|(p, _)| p)
        .collect()
}

#[test]
fn a_connector_racing_rdpipes_endpoints_fails_no_pipeline() {
    // A process that connects to every new listener of another process on this
    // host as soon as it appears (empty connections and garbage) while local
    // pipelines run (rdpipe's and those of other tests' rdsend/rdrecv): with
    // accept-until-authenticated and per-hop keys, every pipeline still succeeds.
    let before = listening_ports();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let racer = {
        let (stop, hits) = (stop.clone(), hits.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for p in listening_ports().difference(&before) {
                    if let Ok(mut c) = TcpStream::connect(("127.0.0.1", *p)) {
                        hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        n += 1;
                        if n % 2 == 0 {
                            let _ = c.write_all(&random_bytes(64, n));
                        }
                    }
                }
                std::thread::yield_now();
            }
        })
    };
    // At least 15 pipelines, and on until the racer reached some endpoints (a
    // listener lives only milliseconds: from its announcement to its peer's
    // authentication).
    for i in 0..150 {
        if i >= 15 && hits.load(std::sync::atomic::Ordering::SeqCst) >= 3 {
            break;
        }
        let r = run(
            &["-:cat".to_string(), "-:cat".to_string()],
            Some(b"hello\n".to_vec()),
            Duration::from_secs(60),
        );
        assert_eq!(r.code(), Some(0), "pipeline {i} failed:\n{}", r.stderr);
        assert_eq!(r.stdout_str(), "hello\n", "pipeline {i}");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    racer.join().unwrap();
    // How often the racer got in is timing; that no pipeline failed is the
    // assertion. (An endpoint refusing a foreign connection and still taking its
    // own peer is asserted deterministically in an_agent_accepts_only_its_own_hops_key.)
    let n = hits.load(std::sync::atomic::Ordering::SeqCst);
    loud(&format!(
        "a_connector_racing_rdpipes_endpoints: the racer reached {n} endpoints"
    ));
}
