//! Hostile and broken peers against the real rdrecv: an authenticated peer that
//! announces an oversized frame, a recorded handshake replayed to a new receiver,
//! a slow consumer that must not make rdrecv's memory grow, and endpoints
//! interrupted mid-stream (SIGINT): nothing half-written is left.

use crate::support::*;
use rdpipe_transport::handshake::handshake;
use rdpipe_wire::{FrameHeader, FrameKind};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn oversized_frame_after_authentication_is_rejected() {
    let r = Receiver::start(&["k"], &[], None);
    let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    handshake(&mut s, b"k", &sender_params(), Duration::from_secs(5)).unwrap();
    // Announce a 2 GiB data frame: must be refused before any allocation or read.
    let h = FrameHeader {
        kind: FrameKind::Data,
        len: 1 << 31,
    };
    s.write_all(&h.encode()).unwrap();
    let f = r.finish();
    f.expect_code(8).expect_stderr("exceeds the limit");
    assert!(f.stdout.is_empty());
}

#[test]
fn unknown_frame_type_and_early_eof_are_errors() {
    let r = Receiver::start(&["k"], &[], None);
    let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    handshake(&mut s, b"k", &sender_params(), Duration::from_secs(5)).unwrap();
    s.write_all(&[0xee, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    r.finish()
        .expect_code(8)
        .expect_stderr("unknown frame type 238");

    // Authenticated, some data, then a plain EOF without End: truncation, not success
    // (under the MAC, so that the fake sender's plaintext frames are data).
    let r = Receiver::start(&["k", "--integrity", "mac"], &[], None);
    let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    handshake(&mut s, b"k", &sender_params(), Duration::from_secs(5)).unwrap();
    s.write_all(&FrameHeader::data(5).encode()).unwrap();
    s.write_all(b"hello").unwrap();
    drop(s);
    let f = r.finish();
    f.expect_code(4)
        .expect_stderr("stream truncated after 5 bytes");
}

#[test]
fn replayed_handshake_is_rejected_and_nothing_is_written() {
    // Record what a real rdsend sends through a proxy.
    let r1 = Receiver::start(&["k"], &[], None);
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let pport = proxy.local_addr().unwrap().port();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let rec = recorded.clone();
    let target = r1.port;
    let h = std::thread::spawn(move || {
        let (mut c, _) = proxy.accept().unwrap();
        let mut up = TcpStream::connect(("127.0.0.1", target)).unwrap();
        let mut c2 = c.try_clone().unwrap();
        let mut up2 = up.try_clone().unwrap();
        let back = std::thread::spawn(move || {
            let _ = std::io::copy(&mut up2, &mut c2);
        });
        let mut buf = [0u8; 65536];
        loop {
            let n = c.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            rec.lock().unwrap().extend_from_slice(&buf[..n]);
            if up.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = up.shutdown(std::net::Shutdown::Write);
        let _ = back.join();
    });
    send(
        &["127.0.0.1", &pport.to_string(), "k"],
        &[],
        Some(b"top secret payload"),
    )
    .expect_code(0);
    assert_eq!(r1.finish().expect_code(0).stdout, b"top secret payload");
    h.join().unwrap();

    // Replay every byte the genuine sender sent to a fresh receiver with the same key.
    let bytes = recorded.lock().unwrap().clone();
    assert!(bytes.len() > 52, "nothing was recorded");
    // It cannot authenticate (fresh PAKE scalars on the receiver's side); the
    // receiver drops it, writes nothing, and keeps waiting for a real sender.
    let mut r2 = Receiver::start(&["-v", "k"], &[], None);
    let mut s = TcpStream::connect(("127.0.0.1", r2.port)).unwrap();
    let _ = s.write_all(&bytes);
    r2.wait_stderr("authentication failed");
    drop(s);
    let p2 = r2.port.to_string();
    send(&["127.0.0.1", &p2, "k"], &[], Some(b"genuine")).expect_code(0);
    let f = r2.finish();
    f.expect_code(0);
    assert_eq!(f.stdout, b"genuine", "replayed stream leaked to the output");
}

#[test]
fn slow_consumer_keeps_receiver_memory_flat() {
    // A consumer that reads 1 MiB every 20 ms; 200 MiB are offered as fast as possible.
    let mut slow = Command::new("sh")
        .args([
            "-c",
            "while [ \"$(dd bs=1048576 count=1 iflag=fullblock status=none | wc -c)\" -gt 0 ]; do sleep 0.02; done",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let r = Receiver::start(&["k"], &[], Some(Stdio::from(slow.stdin.take().unwrap())));
    let pid = r.child.id();
    let port = r.port.to_string();
    let sender = std::thread::spawn(move || {
        send(
            &["127.0.0.1", &port, "k"],
            &[],
            Some(&random_bytes(200 << 20, 11)),
        )
    });
    let mut peak = 0;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(k) = rss_kib(pid) {
            peak = peak.max(k);
        }
    }
    sender.join().unwrap().expect_code(0);
    r.finish().expect_code(0);
    wait_bounded(&mut slow, Duration::from_secs(30), "slow consumer");
    eprintln!("rdrecv peak RSS while the consumer lagged: {peak} KiB");
    assert!(peak > 0, "could not read rdrecv's RSS");
    assert!(
        peak < 32 * 1024,
        "rdrecv RSS grew to {peak} KiB with a slow consumer"
    );
}

/// Starts rdsend to the receiver at `port`, writes `data` into its stdin and
/// returns it with its stdin still open (the stream goes on). With
/// `--reconnect-timeout 5`: a sender whose receiver is gone tries that long to
/// reconnect (60 s by default) before it fails, within the tests' bounds.
fn open_sender(
    port: u16,
    key: &str,
    data: &[u8],
) -> (std::process::Child, std::process::ChildStdin) {
    children_get_default_signals();
    let mut s = Command::new(bin("rdsend"))
        .args([
            "--reconnect-timeout",
            "5",
            "127.0.0.1",
            &port.to_string(),
            key,
        ])
        .env_remove("RDPIPE_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = s.stdin.take().unwrap();
    w.write_all(data).unwrap();
    (s, w)
}

#[test]
fn interrupted_receiver_leaves_its_file_as_it_was_and_reports_it() {
    // Ctrl-C on rdrecv mid-stream: exit 130 with one line saying so, FILE keeps
    // its old content, no temporary file is left, and the --json report says
    // what happened; the sender fails too.
    const KEY: &str = "interrupt-test-key-0123";
    let dir = Scratch::new("intr-recv");
    let out = dir.path("image.bin");
    std::fs::write(&out, b"the old content").unwrap();
    let json = dir.s("recv.json");
    let r = Receiver::start(&["--json", &json, KEY, out.to_str().unwrap()], &[], None);
    let (mut s, w) = open_sender(r.port, KEY, &random_bytes(4 << 20, 7));
    wait_until(
        "data in the temporary file",
        Duration::from_secs(20),
        || dir.temp_has_data().then_some(()),
    );
    kill("-INT", r.child.id());
    let f = r.finish();
    f.expect_code(130)
        .expect_stderr("rdrecv: error: interrupted by SIGINT");
    assert_eq!(std::fs::read(&out).unwrap(), b"the old content");
    assert_eq!(
        dir.names(),
        ["image.bin", "recv.json"],
        "something was left"
    );
    let report = std::fs::read_to_string(dir.path("recv.json")).unwrap();
    assert!(report.contains("\"exit_status\": 130"), "{report}");
    assert!(report.contains("interrupted by SIGINT"), "{report}");
    drop(w);
    let status = wait_bounded(&mut s, Duration::from_secs(30), "rdsend");
    assert!(
        !status.success(),
        "the sender of a stream cut short succeeded"
    );
}

#[test]
fn interrupted_sender_fails_the_stream_and_exits_130() {
    const KEY: &str = "interrupt-test-key-4567";
    let dir = Scratch::new("intr-send");
    let out = dir.path("image.bin");
    let mut r = Receiver::start(&[KEY, out.to_str().unwrap()], &[], None);
    let (mut s, w) = open_sender(r.port, KEY, &random_bytes(4 << 20, 8));
    wait_until(
        "data in the temporary file",
        Duration::from_secs(20),
        || dir.temp_has_data().then_some(()),
    );
    kill("-INT", s.id());
    let status = wait_bounded(&mut s, Duration::from_secs(30), "rdsend");
    assert_eq!(status.code(), Some(130));
    let mut err = String::new();
    s.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(
        err.contains("rdsend: error: interrupted by SIGINT"),
        "{err}"
    );
    drop(w);
    r.wait_stderr("truncated");
    r.finish().expect_code(4);
    assert!(!out.exists(), "a truncated stream created the output file");
    assert_eq!(
        dir.names(),
        Vec::<String>::new(),
        "a temporary file was left"
    );
}
