//! `--compress` through the real binaries: every mode and kind of data
//! round-trips byte-exact over TCP, through rdpipe's hops, a relay-only host
//! and a `--to` chain; `-v` and `--json` report it; a peer from before
//! compression is refused with one line; decompression bombs and corrupt
//! frames from an authenticated sender (this test speaks the wire) are
//! refused with a clear error and nothing of them is written.

use crate::support::*;
use rdpipe_transport::frame_io::write_data;
use rdpipe_transport::handshake::{handshake, LocalParams};
use rdpipe_wire::compress::{put_trailer, Encoder, Packed, KIND_ZSTD, TRAILER_LEN};
use rdpipe_wire::{Caps, Compress, Integrity, Role, TransportPref};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

const KEY: &str = "compress-test-key-0123456789";

/// The kinds of data the issue names.
fn kinds() -> Vec<(&'static str, Vec<u8>)> {
    let mut mixed = random_bytes(3 << 20, 9);
    for i in (0..mixed.len()).step_by(512 << 10) {
        let end = (i + (200 << 10)).min(mixed.len());
        mixed[i..end].fill(0);
    }
    let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog\n"
        .iter()
        .cycle()
        .take(2 << 20)
        .copied()
        .collect();
    vec![
        ("empty", vec![]),
        ("one byte", vec![b'x']),
        ("tcp-buffer-sized", random_bytes(256 << 10, 1)),
        ("chunk-sized", text[..1 << 20].to_vec()),
        ("random", random_bytes(3 << 20, 2)),
        ("all-zero", vec![0; 3 << 20]),
        ("text", text),
        ("mixed", mixed),
    ]
}

/// rdsend → rdrecv over loopback with `args` on both; the receiver's output
/// and both ends' stderr.
fn transfer(args: &[&str], data: &[u8]) -> (Finished, Finished) {
    let mut rargs = vec!["-v", KEY];
    rargs.extend(args);
    let r = Receiver::start(&rargs, &[], None);
    let p = r.port.to_string();
    let mut sargs = vec!["-v", "127.0.0.1", &p, KEY];
    sargs.extend(args);
    let s = send(&sargs, &[], Some(data));
    (s, r.finish())
}

#[test]
fn every_mode_and_kind_round_trips_over_tcp() {
    for mode in [
        "--compress",
        "--compress=zstd:1",
        "--compress=zstd",
        "--compress=zstd:19",
    ] {
        for (kind, data) in kinds() {
            let (s, r) = transfer(&[mode], &data);
            s.expect_code(0);
            r.expect_code(0);
            assert!(r.stdout == data, "{mode} {kind}: the output differs");
            let line = s
                .stderr
                .lines()
                .find(|l| l.starts_with("rdsend: compress "))
                .unwrap_or_else(|| panic!("{mode} {kind}: no compress line:\n{}", s.stderr));
            assert!(line.contains(&format!("{} bytes as", data.len())), "{line}");
            if kind == "all-zero" || kind == "text" {
                let ratio: f64 = line
                    .split('(')
                    .nth(1)
                    .and_then(|r| r.split('x').next())
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0.0);
                // auto may store some chunks where compression is what
                // binds (loopback); a fixed level compresses every one.
                let least = if mode == "--compress" { 2.0 } else { 20.0 };
                assert!(ratio > least, "{mode} {kind}: {line}");
            }
            if kind == "random" {
                assert!(line.contains("as 3145"), "{mode} {kind}: {line}");
            }
        }
    }
}

#[test]
fn either_end_asking_is_enough_and_the_sender_chooses() {
    let data = vec![7u8; 1 << 20];
    // Only the receiver asks: compressed, at its level.
    let r = Receiver::start(&["-v", KEY, "--compress=zstd:5"], &[], None);
    let p = r.port.to_string();
    let s = send(&["-v", "127.0.0.1", &p, KEY], &[], Some(&data));
    s.expect_code(0)
        .expect_stderr("rdsend: compress zstd:5, level 5:");
    let r = r.finish();
    r.expect_code(0).expect_stderr("rdrecv: compress zstd:5:");
    assert!(r.stdout == data);
    // Both ask: the sender's wins.
    let r = Receiver::start(&["-v", KEY, "--compress=zstd:5"], &[], None);
    let p = r.port.to_string();
    let s = send(
        &["-v", "127.0.0.1", &p, KEY, "--compress=zstd:2"],
        &[],
        Some(&data),
    );
    s.expect_code(0)
        .expect_stderr("rdsend: compress zstd:2, level 2:");
    r.finish().expect_code(0);
    // A bad value is a usage error naming the flag.
    let s = send(&["127.0.0.1", "1", KEY, "--compress=gzip"], &[], None);
    s.expect_code(2).expect_stderr("--compress");
}

#[test]
fn json_reports_mode_levels_bytes_and_ratio() {
    let d = Scratch::new("compress-json");
    let data = vec![1u8; 2 << 20];
    let rj = d.s("recv.json");
    let sj = d.s("send.json");
    let r = Receiver::start(&[KEY, "--json", &rj], &[], None);
    let p = r.port.to_string();
    let s = send(
        &["127.0.0.1", &p, KEY, "--compress=zstd:3", "--json", &sj],
        &[],
        Some(&data),
    );
    s.expect_code(0);
    r.finish().expect_code(0);
    for (path, levels) in [(&sj, true), (&rj, false)] {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let c = &v["compress"];
        assert_eq!(c["mode"], "zstd:3", "{v}");
        assert_eq!(c["bytes_before"], 2u64 << 20, "{v}");
        assert!(c["bytes_after"].as_u64().unwrap() < 10_000, "{v}");
        assert!(c["ratio"].as_f64().unwrap() > 100.0, "{v}");
        assert_eq!(c["level_min"].is_null(), !levels, "{v}");
    }
}

#[test]
fn rdpipe_compresses_every_local_hop() {
    let (_, data) = kinds().pop().unwrap();
    let d = Scratch::new("compress-rdpipe");
    let json = d.s("report.json");
    let args: Vec<String> = ["-v", "--compress=zstd:3", "--json", &json, "-:cat", "-:cat"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let r = run(&args, Some(data.clone()), Duration::from_secs(60));
    r.ok();
    assert!(r.stdout == data, "the output differs");
    let hops = r
        .stderr
        .lines()
        .filter(|l| l.contains("compress zstd:3"))
        .count();
    assert_eq!(hops, 3, "{}", r.stderr);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for h in v["hops"].as_array().unwrap() {
        assert_eq!(h["compress"]["mode"], "zstd:3", "{h}");
        assert!(h["compress"]["ratio"].as_f64().unwrap() > 1.2, "{h}");
    }
    // The plan says so.
    let r = run(
        &["-n", "--compress=zstd:7", "-:cat", "-:cat"].map(String::from),
        None,
        Duration::from_secs(10),
    );
    r.ok();
    assert!(
        r.stdout_str()
            .contains("compression: zstd:7 on every transfer"),
        "{}",
        r.stdout_str()
    );
}

#[test]
fn rdpipe_relay_and_chain_carry_compressed_hops() {
    need_root!("network namespaces");
    let net = Netns::start_with("cz", 3);
    let d = &net.dir;
    let (_, data) = kinds().pop().unwrap();
    let sum = xxh3_hex(&data);
    std::fs::write(d.path("src"), &data).unwrap();
    // A relay-only host between two hops.
    let a = vec![
        "-v".to_string(),
        "--compress".into(),
        format!("n1:< {}", d.s("src")),
        "n2:".into(),
        format!("n3:> {}", d.s("out")),
    ];
    let r = net.rdpipe(&a, None, 120);
    r.ok();
    assert_eq!(file_xxh3(&d.path("out")), sum, "n3's copy differs");
    for hop in ["[1] n1 -> [2] n2: tcp", "[2] n2 -> [3] n3: tcp"] {
        assert!(
            r.stderr
                .lines()
                .any(|l| l.contains(hop) && l.contains("compress auto")),
            "no compressed hop line '{hop}':\n{}",
            r.stderr
        );
    }
    // A --to chain through the three hosts.
    let mut a = vec!["-v".to_string(), "--compress=zstd:2".into()];
    for h in 1..=3 {
        a.push("--to".into());
        a.push(format!("n{h}:> {}", d.s(&format!("sink{h}"))));
    }
    let r = net.rdpipe(&a, Some(data.clone()), 120);
    r.ok();
    for h in 1..=3 {
        assert_eq!(
            file_xxh3(&d.path(&format!("sink{h}"))),
            sum,
            "sink n{h} differs"
        );
    }
    assert!(
        r.stderr
            .lines()
            .filter(|l| l.contains("compress zstd:2"))
            .count()
            >= 3,
        "{}",
        r.stderr
    );
    net.assert_clean();
}

/// Handshake parameters of a fake peer in `role` that announces `caps`: a
/// build from before compression has no [`Caps::COMPRESS`] and asks for none.
fn fake(role: Role, compress: Compress, caps: Caps) -> LocalParams {
    LocalParams {
        role,
        transport: TransportPref::Tcp,
        caps,
        chunk_size: 1 << 20,
        slots: 2,
        integrity: Integrity::Mac,
        rate_limit: None,
        compress,
    }
}

#[test]
fn a_peer_from_before_compression_is_refused_with_one_line() {
    // rdrecv --compress against an old sender.
    let r = Receiver::start(&[KEY, "--compress"], &[], None);
    let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    let old = fake(Role::Sender, Compress::None, Caps::default());
    let _ = handshake(&mut s, KEY.as_bytes(), &old, Duration::from_secs(5));
    let f = r.finish();
    f.expect_code(8)
        .expect_stderr("does not support --compress (it runs an rdma-pipe from before compression): upgrade it there, or run without --compress");
    assert_eq!(f.stderr.lines().count(), 1, "{}", f.stderr);
    assert!(f.stdout.is_empty());
    // rdsend --compress against an old receiver.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let h = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let old = fake(Role::Receiver, Compress::None, Caps::default());
        let _ = handshake(&mut c, KEY.as_bytes(), &old, Duration::from_secs(5));
        // What the old build reads next: our Abort, with its reason.
        rdpipe_transport::frame_io::read_control(&mut c, "rdsend")
    });
    let s = send(
        &["127.0.0.1", &port, KEY, "--compress=zstd:3"],
        &[],
        Some(b"x"),
    );
    s.expect_code(8)
        .expect_stderr("does not support --compress");
    assert_eq!(s.stderr.lines().count(), 1, "{}", s.stderr);
    match h.join().unwrap() {
        Ok(rdpipe_wire::Control::Abort { message, .. }) => {
            assert!(message.contains("--compress zstd:3"), "{message}")
        }
        other => panic!("the old peer read {other:?}"),
    }
    // Without --compress, an old peer still works.
    let r = Receiver::start(&[KEY], &[], None);
    let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    let old = fake(Role::Sender, Compress::None, Caps::default());
    handshake(&mut s, KEY.as_bytes(), &old, Duration::from_secs(5)).unwrap();
    drop(s);
    let f = r.finish();
    assert!(!f.stderr.contains("compress"), "{}", f.stderr);
}

/// The lengths of the data frames real rdsend (with `flags`) sends a fake
/// receiver that announces `caps` (and a chunk size of 1 MiB), for a file
/// holding `input` (a file is always ready to read: each chunk is as large
/// as the sender makes it).
fn frame_lengths(caps: Caps, flags: &[&str], input: &[u8]) -> Vec<u32> {
    use rdpipe_transport::frame_io::{read_control_payload, read_header};
    use rdpipe_wire::{Control, FrameKind};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let h = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let p = fake(Role::Receiver, Compress::None, caps);
        handshake(&mut c, KEY.as_bytes(), &p, Duration::from_secs(5)).unwrap();
        let mut lengths = Vec::new();
        loop {
            let h = read_header(&mut c, "rdsend", 64 << 20).unwrap();
            if h.kind == FrameKind::Data {
                let mut payload = vec![0u8; h.len as usize];
                std::io::Read::read_exact(&mut c, &mut payload).unwrap();
                lengths.push(h.len);
                continue;
            }
            match read_control_payload(&mut c, "rdsend", h).unwrap() {
                Control::Keepalive => {}
                Control::End(_) => return lengths,
                other => panic!("the sender sent {other:?}"),
            }
        }
    });
    let dir = Scratch::new("frames");
    std::fs::write(dir.path("in"), input).unwrap();
    let input = dir.s("in");
    let mut args = vec!["127.0.0.1", &port, KEY, &input, "--reconnect-timeout", "0"];
    args.extend(flags);
    // The fake never confirms: rdsend fails once it has sent End.
    let _ = send(&args, &[], None);
    h.join().unwrap()
}

/// `len` bytes that shrink to about 0.82 of their size: in each 64, 52
/// random bytes and 12 spaces (so compressed chunks of more than 1.3 MiB
/// still take frames larger than 1 MiB).
fn partly_random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = random_bytes(len, seed);
    for (i, b) in v.iter_mut().enumerate() {
        if i % 64 >= 52 {
            *b = b' ';
        }
    }
    v
}

#[test]
fn a_compressed_stream_uses_larger_tcp_frames_only_where_both_ends_take_them() {
    let (narrow, wide, large) = (256 << 10, 1 << 20, 4 << 20);
    let wide_only = Caps::COMPRESS.union(Caps::WIDE_COMPRESSED);
    let both = wide_only.union(Caps::LARGE_COMPRESSED);
    let random = random_bytes(9 << 20, 4);
    // `auto` on a link it waits on (a rate limit far below what it
    // compresses at) compresses chunks as large as its buffer: 4 MiB, or
    // the rate limit's pacing piece (a twentieth of a second: 1.6 MiB).
    let paced = ["--compress=auto", "--rate-limit=32M"];
    let text = partly_random(40 << 20, 5);
    let l = frame_lengths(both, &paced, &text);
    assert!(l.iter().all(|n| *n as usize <= large), "{l:?}");
    assert!(l.iter().any(|n| *n as usize > wide), "{l:?}");
    let l = frame_lengths(wide_only, &paced, &text);
    assert!(l.iter().all(|n| *n as usize <= wide), "{l:?}");
    // A fixed level keeps to 1 MiB chunks, in frames of more than 256 KiB.
    let zstd = ["--compress=zstd:3"];
    let l = frame_lengths(both, &zstd, &random);
    assert!(l.len() >= 9, "{l:?}");
    assert!(l.iter().all(|n| *n as usize <= large), "{l:?}");
    assert!(l.iter().any(|n| *n as usize > narrow), "{l:?}");
    // A smaller --chunk-size keeps every frame within it.
    let l = frame_lengths(both, &["--compress=zstd:3", "--chunk-size=256K"], &random);
    assert!(l.len() >= 36, "{l:?}");
    assert!(l.iter().all(|n| *n as usize <= narrow), "{l:?}");
    // A build that takes compressed chunks in 1 MiB frames, not 4 MiB.
    let l = frame_lengths(wide_only, &zstd, &random);
    assert!(l.len() >= 9, "{l:?}");
    assert!(l.iter().all(|n| *n as usize <= wide), "{l:?}");
    assert!(l.iter().any(|n| *n as usize > narrow), "{l:?}");
    // A build that takes compressed chunks only in 256 KiB frames.
    let l = frame_lengths(Caps::COMPRESS, &zstd, &random);
    assert!(l.len() >= 36, "{l:?}");
    assert!(l.iter().all(|n| *n as usize <= narrow), "{l:?}");
    // Without compression, 256 KiB frames whatever the peer takes.
    let l = frame_lengths(both, &[], &random);
    assert!(l.len() >= 36, "{l:?}");
    assert!(l.iter().all(|n| *n as usize <= narrow), "{l:?}");
}

/// A chunk whose body is `body` and whose trailer says `raw_len`, kind zstd.
fn chunk(body: &[u8], raw_len: u32) -> Vec<u8> {
    let mut c = body.to_vec();
    c.resize(body.len() + TRAILER_LEN, 0);
    put_trailer(&mut c, body.len(), raw_len as usize, KIND_ZSTD);
    c
}

fn zstd_frame(raw: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; raw.len()];
    match Encoder::new().compress(raw, 3, &mut out) {
        Packed::Zstd(n) => out[..n].to_vec(),
        Packed::Stored => panic!("does not compress"),
    }
}

#[test]
fn bombs_and_corrupt_frames_from_an_authenticated_sender_are_refused() {
    let zeros_64m = zstd_frame(&vec![0u8; 64 << 20]);
    let zeros_1m = zstd_frame(&vec![0u8; 1 << 20]);
    let text = zstd_frame(&b"a fine line of text\n".repeat(10_000));
    let mut flipped = text.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x5a;
    let mut window = zeros_1m.clone();
    // Announce a 1 GiB window in a frame header that has a window byte.
    window[4] &= !0x20;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "64 MiB of zeros claiming 64 MiB",
            chunk(&zeros_64m, 64 << 20),
            "above the chunk size",
        ),
        (
            "1 MiB of zeros claiming 4 KiB",
            chunk(&zeros_1m, 4096),
            "declares",
        ),
        (
            "a flipped byte",
            chunk(&flipped, 200_000),
            "does not decompress",
        ),
        (
            "a cut frame",
            chunk(&text[..text.len() / 2], 200_000),
            "refused",
        ),
        (
            "two frames",
            chunk(&[&text[..], &text[..]].concat(), 200_000),
            "not exactly one zstd frame",
        ),
        ("a stray window", chunk(&window, 1 << 20), "refused"),
    ];
    for (what, bad, needle) in cases {
        // Checksum here, Mac the fake's: data frames go unsealed.
        let r = Receiver::start(&[KEY, "--integrity", "checksum"], &[], None);
        let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
        let p = fake(Role::Sender, Compress::Zstd(3), Caps::COMPRESS);
        let n = handshake(&mut s, KEY.as_bytes(), &p, Duration::from_secs(5)).unwrap();
        assert_eq!(n.compress, Compress::Zstd(3));
        // A good chunk first: written only once the stream verifies, so
        // nothing at all reaches the output.
        let mut good = vec![0u8; 1000 + TRAILER_LEN];
        let (len, _) = Encoder::new().pack(&[b'g'; 1000], Some(3), &mut good);
        write_data(&mut s, &good[..len]).unwrap();
        let _ = write_data(&mut s, &bad);
        let f = r.finish();
        drop(s);
        f.expect_code(8)
            .expect_stderr("a compressed chunk from 127.0.0.1")
            .expect_stderr("after byte 1000 was refused")
            .expect_stderr(needle);
        assert_eq!(f.stderr.lines().count(), 1, "{what}: {}", f.stderr);
        assert!(
            f.stdout.len() <= 1000,
            "{what}: {} bytes written",
            f.stdout.len()
        );
    }
}

/// The receiver decompresses on a pool, but a chunk never waits there for
/// the next one: with the sender's input still open and nothing more
/// written, the first chunk's bytes come out.
#[test]
fn a_compressed_chunk_comes_out_before_the_next_one_is_sent() {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    let mut r = Receiver::start(&[KEY], &[], Some(Stdio::piped()));
    let mut out = r.child.stdout.take().unwrap();
    let p = r.port.to_string();
    let mut cmd = Command::new(bin("rdsend"));
    cmd.args(["--compress=zstd:3", "127.0.0.1", &p, KEY])
        .env_remove("RDPIPE_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let cmdline = describe(&cmd);
    children_get_default_signals();
    let mut s = cmd.spawn().expect("spawn rdsend");
    let mut input = s.stdin.take().unwrap();
    let text: Vec<u8> = b"a line of text that compresses well\n"
        .iter()
        .cycle()
        .take(64 << 10)
        .copied()
        .collect();
    input.write_all(&text).unwrap();
    // Read the first piece on a thread; the input stays open meanwhile.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut first = vec![0u8; text.len()];
        let r = out.read_exact(&mut first).map(|()| first);
        let _ = tx.send(r);
        let mut rest = Vec::new();
        let _ = out.read_to_end(&mut rest);
        rest
    });
    let first = rx.recv_timeout(Duration::from_secs(30));
    let got_first = matches!(&first, Ok(Ok(b)) if b.starts_with(b"a line of text"));
    input.write_all(b"the end\n").unwrap();
    drop(input);
    let status = wait_bounded(&mut s, Duration::from_secs(60), &cmdline);
    let rest = reader.join().unwrap();
    let fin = r.finish();
    assert!(
        got_first,
        "the first 64 KiB did not come out while the input stayed open: {first:?}"
    );
    assert!(status.success(), "`{cmdline}`: {status}");
    fin.expect_code(0);
    assert_eq!(rest, b"the end\n");
}
