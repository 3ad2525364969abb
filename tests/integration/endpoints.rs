//! rdsend -> rdrecv over loopback with the real binaries: byte-exactness at chunk
//! boundaries, the three ways to give the key, files on both ends, port 0, wrong
//! keys, a killed sender, a consumer that exits early, and garbage on the port.

use crate::support::*;
use rdpipe_wire::PROTOCOL_VERSION;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHUNK: usize = 64 * 1024;

/// Sends `data` through stdin -> rdsend -> rdrecv -> stdout and checks every byte.
fn roundtrip(data: &[u8], extra: &[&str]) {
    let mut rargs = vec!["k3y"];
    rargs.extend_from_slice(extra);
    let r = Receiver::start(&rargs, &[], None);
    let port = r.port.to_string();
    let mut sargs = vec!["127.0.0.1", port.as_str(), "k3y"];
    sargs.extend_from_slice(extra);
    let s = send(&sargs, &[], Some(data));
    let f = r.finish();
    s.expect_code(0);
    f.expect_code(0);
    assert_eq!(
        f.stdout.len(),
        data.len(),
        "length differs for {} bytes",
        data.len()
    );
    assert!(f.stdout == data, "content differs for {} bytes", data.len());
}

#[test]
fn sizes_around_chunk_boundaries_are_byte_exact() {
    let chunk = "--chunk-size=64K";
    for (i, len) in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 17]
        .into_iter()
        .enumerate()
    {
        roundtrip(&random_bytes(len, i as u64 + 1), &[chunk]);
    }
}

#[test]
fn default_chunk_boundaries_are_byte_exact() {
    let mib = 1 << 20;
    for (i, len) in [mib - 1, mib, mib + 1].into_iter().enumerate() {
        roundtrip(&random_bytes(len, 100 + i as u64), &[]);
    }
}

#[test]
fn deeper_ring_is_byte_exact() {
    roundtrip(
        &random_bytes(3 << 20, 7),
        &["--slots=8", "--chunk-size=128K"],
    );
}

/// `--chunk-size 4M` on both ends under the default protection (AES-256-GCM
/// where this CPU has AES instructions, sealed in 256 KiB pieces) and under
/// `--encrypt`: byte-exact. Over TCP a frame is at most 256 KiB, so each is
/// one piece (the multi-piece chunks of RDMA's slots are covered by
/// `crates/transport/tests/pump_pieces.rs` and the Soft-RoCE guest suite).
#[test]
fn four_mib_chunks_under_the_default_protection_are_byte_exact() {
    let data = random_bytes((9 << 20) + 12345, 4);
    for extra in [
        &["--chunk-size", "4M"][..],
        &["--chunk-size", "4M", "--encrypt"][..],
    ] {
        let mut rargs = vec!["-v", "k3y"];
        rargs.extend_from_slice(extra);
        let r = Receiver::start(&rargs, &[], None);
        let port = r.port.to_string();
        let mut sargs = vec!["127.0.0.1", port.as_str(), "k3y"];
        sargs.extend_from_slice(extra);
        let s = send(&sargs, &[], Some(&data));
        let f = r.finish();
        s.expect_code(0);
        f.expect_code(0);
        if extra.contains(&"--encrypt") || rdpipe_wire::seal::aes_in_hardware() {
            f.expect_stderr("integrity encrypt");
        }
        assert!(f.stdout == data, "{extra:?}: the bytes differ");
    }
}

#[test]
fn hundred_mib_of_random_data_file_to_file() {
    let dir = Scratch::new("100m");
    let src = dir.path("in.bin");
    let dst = dir.path("out.bin");
    let data = random_bytes(100 << 20, 42);
    std::fs::write(&src, &data).unwrap();
    let r = Receiver::start(&["-v", "k", dst.to_str().unwrap()], &[], None);
    let port = r.port.to_string();
    let s = send(
        &["-v", "localhost", &port, "k", src.to_str().unwrap()],
        &[],
        None,
    );
    let f = r.finish();
    s.expect_code(0).expect_stderr("Bandwidth ");
    f.expect_code(0).expect_stderr("received 104857600 bytes");
    s.expect_stderr("over tcp");
    assert!(
        f.stdout.is_empty(),
        "rdrecv wrote to stdout although FILE was given"
    );
    assert!(read(&dst) == data, "100 MiB file differs");
}

/// The TCP sender's two ways of writing, each pinned, and the default that times
/// both (see `tcp.rs`): the same bytes either way.
#[test]
fn tcp_sender_modes_are_byte_exact() {
    let dir = Scratch::new("modes");
    let src = dir.path("in.bin");
    // Many chunks and an odd tail.
    let data = random_bytes((20 << 20) + 1, 7);
    std::fs::write(&src, &data).unwrap();
    for mode in ["threaded", "inline", "adaptive"] {
        let dst = dir.path(&format!("out-{mode}.bin"));
        let r = Receiver::start(&["k", dst.to_str().unwrap()], &[], None);
        let port = r.port.to_string();
        let env = [("RDPIPE_TCP_SEND", mode)];
        let s = send(
            &["127.0.0.1", &port, "k", src.to_str().unwrap()],
            &env,
            None,
        );
        let f = r.finish();
        s.expect_code(0);
        f.expect_code(0);
        assert!(read(&dst) == data, "{mode}: output differs from input");
    }
}

/// The adaptive sender switching ways mid-stream (each way gets a measured phase
/// of at least 30 ms): a paced producer makes the stream last long enough for a
/// warm-up, both probes and the phases after them, whatever the machine's speed.
#[test]
fn adaptive_tcp_sender_switches_ways_mid_stream_byte_exact() {
    let data = random_bytes((24 << 20) + 3, 9);
    let r = Receiver::start(&["k"], &[], None);
    let port = r.port.to_string();
    // 24 MiB in 192 KiB pieces, 3 ms apart: at least 0.4 s of streaming.
    let s = send_paced(
        &["-vv", "127.0.0.1", &port, "k"],
        &[("RDPIPE_TCP_SEND", "adaptive")],
        Some(&data),
        Some((192 << 10, Duration::from_millis(3))),
    );
    let f = r.finish();
    s.expect_code(0);
    f.expect_code(0);
    assert!(f.stdout == data, "output differs from input");
    // It did switch: at least one probe of the other way was timed and decided on
    // (the way under probe is marked).
    s.expect_stderr("tcp sender: threaded ")
        .expect_stderr(" (probe)");
}

#[test]
fn key_from_positional_file_and_environment() {
    let dir = Scratch::new("keys");
    let keyfile = dir.path("key");
    std::fs::write(&keyfile, "from-file\n").unwrap();
    let data = random_bytes(300_000, 9);
    let kf = keyfile.to_str().unwrap();
    // Positional on one side, key file on the other.
    let r = Receiver::start(&["from-file"], &[], None);
    let p = r.port.to_string();
    send(&["--key-file", kf, "127.0.0.1", &p], &[], Some(&data)).expect_code(0);
    assert!(r.finish().expect_code(0).stdout == data);
    // Environment on both sides, KEY given as `-`.
    let env = [("RDPIPE_KEY", "from-env")];
    let r = Receiver::start(&["-"], &env, None);
    let p = r.port.to_string();
    send(&["127.0.0.1", &p, "-"], &env, Some(&data)).expect_code(0);
    assert!(r.finish().expect_code(0).stdout == data);
    // Environment on the receiver, key file on the sender: same secret.
    let r = Receiver::start(&[], &[("RDPIPE_KEY", "from-file")], None);
    let p = r.port.to_string();
    send(&["--key-file", kf, "127.0.0.1", &p], &[], Some(&data)).expect_code(0);
    assert!(r.finish().expect_code(0).stdout == data);
}

#[test]
fn missing_or_unreadable_key_is_a_usage_error() {
    let s = send(&["127.0.0.1", "1"], &[], None);
    s.expect_code(2).expect_stderr("no key given");
    let s = send(
        &["--key-file", "/nonexistent/key", "127.0.0.1", "1"],
        &[],
        None,
    );
    s.expect_code(2)
        .expect_stderr("cannot read key file /nonexistent/key");
}

#[test]
fn wrong_key_fails_the_sender_and_the_receiver_keeps_waiting() {
    // A sender with the wrong key exits 3; the receiver warns, writes nothing,
    // and goes on waiting (one stray or wrong connection must not end it), so
    // the right sender still gets through.
    let dir = Scratch::new("wrongkey");
    let dst = dir.path("out.bin");
    let mut r = Receiver::start(&["right-key-0123456", dst.to_str().unwrap()], &[], None);
    let p = r.port.to_string();
    let s = send(
        &["127.0.0.1", &p, "wrong-key-0123456"],
        &[],
        Some(b"secret data"),
    );
    s.expect_code(3).expect_stderr("authentication failed");
    r.wait_stderr("authentication failed");
    assert!(
        !dst.exists(),
        "rdrecv created its output file for an unauthenticated peer"
    );
    send(
        &["127.0.0.1", &p, "right-key-0123456"],
        &[],
        Some(b"real data"),
    )
    .expect_code(0);
    let f = r.finish();
    f.expect_code(0).expect_stderr("warning");
    assert_eq!(std::fs::read(&dst).unwrap(), b"real data");
}

#[test]
fn sender_retries_until_receiver_is_up_and_gives_up_clearly() {
    // Nothing listens on this port (we bind and drop it to find a free one).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = send(
        &[
            "--connect-timeout",
            "0.5",
            "127.0.0.1",
            &port.to_string(),
            "k",
        ],
        &[],
        Some(b"x"),
    );
    s.expect_code(6)
        .expect_stderr("cannot connect to 127.0.0.1:");
    let s = send(&["no-such-host.invalid", "1", "k"], &[], Some(b"x"));
    s.expect_code(6)
        .expect_stderr("cannot resolve host no-such-host.invalid");
}

#[test]
fn killed_sender_makes_receiver_report_truncation() {
    let r = Receiver::start(&["k", "--chunk-size=64K"], &[], None);
    let p = r.port.to_string();
    let mut cmd = Command::new(bin("rdsend"));
    cmd.args(["127.0.0.1", &p, "k", "--chunk-size=64K"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null());
    let mut s = cmd.spawn().unwrap();
    let mut w = s.stdin.take().unwrap();
    // Feed 1 MiB, make sure it went through, then kill the sender mid-stream.
    w.write_all(&random_bytes(1 << 20, 3)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    s.kill().unwrap();
    s.wait().unwrap();
    drop(w);
    let f = r.finish();
    f.expect_code(4).expect_stderr("stream truncated after ");
}

#[test]
fn consumer_exiting_early_fails_both_ends() {
    // rdrecv | head -c 1000: rdrecv gets EPIPE, says so, and rdsend learns of it.
    let mut head = Command::new("head")
        .args(["-c", "1000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let head_in = head.stdin.take().unwrap();
    let r = Receiver::start(&["k"], &[], Some(Stdio::from(head_in)));
    let p = r.port.to_string();
    let s = send(
        &["127.0.0.1", &p, "k"],
        &[],
        Some(&random_bytes(20 << 20, 5)),
    );
    let f = r.finish();
    let mut got = Vec::new();
    head.stdout.take().unwrap().read_to_end(&mut got).unwrap();
    head.wait().unwrap();
    assert_eq!(got.len(), 1000);
    f.expect_code(5).expect_stderr("Broken pipe");
    s.expect_code(5).expect_stderr("output was closed");
}

#[test]
fn garbage_on_the_port_is_rejected_without_panic() {
    let cases: Vec<Vec<u8>> = vec![
        random_bytes(4096, 77),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        // Right magic, future version.
        [b"RDPP".as_slice(), &9u16.to_le_bytes(), &[0u8; 46]].concat(),
        // A truncated hello, then EOF.
        [b"RDPP".as_slice(), &PROTOCOL_VERSION.to_le_bytes(), &[1]].concat(),
    ];
    let future = format!("peer speaks protocol 9, we speak {PROTOCOL_VERSION}");
    let expect = [
        "not an rdma-pipe endpoint",
        "not an rdma-pipe endpoint",
        future.as_str(),
        "connection closed",
    ];
    // One receiver sees every case (-v: each dropped peer is a line), then
    // still takes the real sender.
    let mut r = Receiver::start(&["-v", "k"], &[], None);
    for (data, needle) in cases.iter().zip(expect) {
        let mut c = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
        let _ = c.write_all(data);
        let _ = c.shutdown(std::net::Shutdown::Write);
        r.wait_stderr(needle);
    }
    let p = r.port.to_string();
    send(&["127.0.0.1", &p, "k"], &[], Some(b"after the garbage")).expect_code(0);
    let f = r.finish();
    f.expect_code(0);
    assert_eq!(f.stdout, b"after the garbage");
    assert!(!f.stderr.contains("panicked"));
}

#[test]
fn silent_and_trickling_peers_time_out_and_the_receiver_keeps_waiting() {
    let mut r = Receiver::start(&["-v", "k", "--handshake-timeout", "1"], &[], None);
    let _silent = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    r.wait_stderr("timed out");
    // A byte every 300 ms: the deadline is for the whole handshake, not per read.
    let mut trickle = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    let t = std::time::Instant::now();
    let port = r.port;
    let h = std::thread::spawn(move || {
        let hello = [b"RDPP".as_slice(), &PROTOCOL_VERSION.to_le_bytes(), &[1, 0]].concat();
        for b in hello {
            if trickle.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    r.wait_stderr("timed out");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    h.join().unwrap();
    send(&["127.0.0.1", &port.to_string(), "k"], &[], Some(b"x")).expect_code(0);
    r.finish().expect_code(0);
}

#[test]
fn bad_options_are_one_line_errors() {
    for (args, needle) in [
        (vec!["--chunk-size", "0", "h", "1", "k"], "out of range"),
        (vec!["--chunk-size", "1Q", "h", "1", "k"], "unknown unit"),
        (vec!["--slots", "0", "h", "1", "k"], "out of range"),
        (vec!["h", "99999", "k"], "99999"),
    ] {
        let s = send(&args, &[], None);
        s.expect_code(2).expect_stderr(needle);
    }
}

#[test]
fn port_in_use_is_a_clear_error() {
    let busy = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let mut cmd = Command::new(bin("rdrecv"));
    // A key long enough not to be warned about: only the error line is expected.
    cmd.args([port.as_str(), "0123456789abcdef"])
        .stdin(Stdio::null());
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on port {port}")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
}

#[test]
fn progress_without_a_terminal_is_plain_lines_ending_with_the_total() {
    let dir = Scratch::new("prog");
    let src = dir.path("in.bin");
    let data = random_bytes(2 << 20, 21);
    std::fs::write(&src, &data).unwrap();
    let r = Receiver::start(&["--progress", "k"], &[], None);
    let port = r.port.to_string();
    let s = send(
        &["--progress", "localhost", &port, "k", src.to_str().unwrap()],
        &[],
        None,
    );
    let f = r.finish();
    s.expect_code(0);
    assert!(f.expect_code(0).stdout == data);
    for (out, pct) in [(&s.stderr, true), (&f.stderr, false)] {
        let last = out.lines().last().unwrap_or("");
        assert!(last.contains(" 2.00 MiB "), "{out:?}");
        // The sender knows the file's size; the receiver does not.
        assert_eq!(last.contains("100.0% ETA 0:00:00"), pct, "{out:?}");
        assert!(!out.contains('\x1b') && !out.contains('\r'), "{out:?}");
    }
}
