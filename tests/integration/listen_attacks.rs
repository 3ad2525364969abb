//! Playing the attacker against a listening endpoint (docs/security.md,
//! "Tests that play the attacker"): a flood of at least 256 unauthenticated connections
//! (silent ones, ones that trickle a byte a second, ones that send garbage),
//! each opened again as soon as the endpoint closes it and held for the
//! whole run, while a real sender connects, and while a hop whose connection
//! is reset mid-stream reconnects; and a second peer holding the hop's key
//! that connects mid-transfer, to a listening receiver (a second rdsend) and
//! to a listening sender (a second receiver dialing an rdpipe agent). The
//! live transfer completes byte-exact every time and the intruder is refused.

use crate::reconnect::{can_reset, reset_process};
use crate::support::*;
use rdpipe_transport::endpoint::{Endpoint, Options, REPLAY_WINDOW};
use rdpipe_wire::{Compress, Integrity, TransportPref, MAGIC, PROTOCOL_VERSION};
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const KEY: &str = "listen-attack-test-key-0123456789";

/// How many connections a flood holds: past the 256 the endpoint must
/// survive.
const FLOOD: usize = 258;

/// What one connection of a [`Flood`] does.
#[derive(Clone, Copy)]
enum Kind {
    /// Connects and says nothing.
    Silent,
    /// Sends a hello's first bytes (magic, version), then zeros, one byte a
    /// second.
    Trickle,
    /// Sends a kilobyte of garbage, then waits.
    Garbage,
}

/// A flood of unauthenticated connections to `127.0.0.1:port`, one thread
/// each, every one opened again as soon as the endpoint closes it, until the
/// value is dropped.
struct Flood {
    stop: Arc<AtomicBool>,
    /// Threads whose connection was established at least once.
    connected: Arc<AtomicUsize>,
    /// Connections opened in all.
    opened: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

impl Flood {
    /// Starts `n` connections, the three kinds in turn.
    fn start(port: u16, n: usize) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let connected = Arc::new(AtomicUsize::new(0));
        let opened = Arc::new(AtomicUsize::new(0));
        let kinds = [Kind::Silent, Kind::Trickle, Kind::Garbage];
        let threads = (0..n)
            .map(|i| {
                let (stop, connected, opened) = (stop.clone(), connected.clone(), opened.clone());
                let kind = kinds[i % kinds.len()];
                std::thread::Builder::new()
                    .stack_size(64 << 10)
                    .spawn(move || flood_one(port, kind, i as u64, &stop, &connected, &opened))
                    .expect("a flood thread")
            })
            .collect();
        Flood {
            stop,
            connected,
            opened,
            threads,
        }
    }

    /// Waits until every connection of the flood was established (the
    /// readiness signal that the flood is in place).
    fn wait_in_place(&self) {
        let n = self.threads.len();
        wait_until(
            format!("{n} flood connections"),
            Duration::from_secs(30),
            || (self.connected.load(Ordering::SeqCst) >= n).then_some(()),
        );
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        loud(&format!(
            "flood: {} connections opened in all",
            self.opened.load(Ordering::SeqCst)
        ));
    }
}

/// One connection of a flood, again and again.
fn flood_one(
    port: u16,
    kind: Kind,
    seed: u64,
    stop: &AtomicBool,
    connected: &AtomicUsize,
    opened: &AtomicUsize,
) {
    let mut first = true;
    let mut prefix = MAGIC.to_vec();
    prefix.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    while !stop.load(Ordering::SeqCst) {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            // The port is gone (the endpoint ended) or its backlog is full.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        opened.fetch_add(1, Ordering::SeqCst);
        if first {
            first = false;
            connected.fetch_add(1, Ordering::SeqCst);
        }
        let _ = c.set_read_timeout(Some(Duration::from_millis(100)));
        if let Kind::Garbage = kind {
            if c.write_all(&random_bytes(1000, seed)).is_err() {
                continue;
            }
        }
        // Until the endpoint closes it: for a trickler one byte a second.
        let mut sent = 0usize;
        let mut ticks = 0u32;
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            match c.read(&mut [0u8; 256]) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
            ticks += 1;
            if let Kind::Trickle = kind {
                if ticks % 10 == 0 {
                    let b = prefix.get(sent).copied().unwrap_or(0);
                    if c.write_all(&[b]).is_err() {
                        break;
                    }
                    sent += 1;
                }
            }
        }
    }
}

/// The number of descriptors and of threads of process `pid`.
fn fds_and_threads(pid: u32) -> (usize, usize) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0);
    (fds, threads)
}

#[test]
fn a_flood_of_idle_trickling_and_garbage_connections_does_not_keep_a_sender_out() {
    let data = random_bytes(16 << 20, 61);
    let mut r = Receiver::start(&["-v", KEY], &[], None);
    let (port, pid) = (r.port, r.child.id());
    let flood = Flood::start(port, FLOOD);
    flood.wait_in_place();
    // The endpoint's bounds hold under the flood (listen.rs states them):
    // the most rdrecv holds while the sender connects and streams.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = std::thread::spawn({
        let sampling = sampling.clone();
        move || {
            let mut most = (0, 0);
            while sampling.load(Ordering::SeqCst) {
                let (f, t) = fds_and_threads(pid);
                most = (most.0.max(f), most.1.max(t));
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        }
    });
    let s = send(&["127.0.0.1", &port.to_string(), KEY], &[], Some(&data));
    sampling.store(false, Ordering::SeqCst);
    let (fds, threads) = sampler.join().unwrap();
    if s.status.code() != Some(0) {
        // It would wait for a sender for ever.
        let _ = r.child.kill();
    }
    let f = r.finish();
    drop(flood);
    loud(&format!(
        "under the flood rdrecv held at most {fds} descriptors and {threads} threads"
    ));
    s.expect_code(0);
    f.expect_code(0);
    assert!(
        f.stdout == data,
        "output differs ({} bytes)",
        f.stdout.len()
    );
    assert!(
        fds <= 300 && threads <= 48,
        "rdrecv held {fds} descriptors and {threads} threads under the flood"
    );
}

macro_rules! need_reset {
    () => {
        need_root!("ss -K");
        if !can_reset() {
            skip(
                &test_name(),
                "ss -K cannot destroy sockets here (kernel without INET_DIAG_DESTROY)",
            );
            return;
        }
    };
}

#[test]
fn a_hop_reset_under_a_flood_reconnects_and_completes() {
    need_reset!();
    let len: usize = 64 << 20;
    let data = random_bytes(len, 67);
    let args = ["-v", "--reconnect-timeout", "15"];
    let mut ra = args.to_vec();
    ra.push(KEY);
    let mut r = Receiver::start(&ra, &[], Some(Stdio::piped()));
    let mut out = r.child.stdout.take().unwrap();
    let port = r.port;
    let got = Arc::new(AtomicU64::new(0));
    let reader = std::thread::spawn({
        let got = got.clone();
        move || {
            let (mut v, mut buf) = (Vec::new(), vec![0u8; 1 << 20]);
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                v.extend_from_slice(&buf[..n]);
                got.store(v.len() as u64, Ordering::SeqCst);
            }
            v
        }
    });
    let mut s = Command::new(bin("rdsend"))
        .args(args)
        .args(["--rate-limit", "16M", "127.0.0.1", &port.to_string(), KEY])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = s.stdin.take().unwrap();
    let feed = data.clone();
    let feeder = std::thread::spawn(move || {
        let _ = sin.write_all(&feed);
    });
    let mut serr = s.stderr.take().unwrap();
    let serr = std::thread::spawn(move || {
        let mut e = String::new();
        let _ = serr.read_to_string(&mut e);
        e
    });
    // Readiness: 8 MiB arrived (or rdsend gave up before).
    let flowing = poll(Duration::from_secs(60), Duration::from_millis(20), || {
        if got.load(Ordering::SeqCst) >= 8 << 20 {
            return Some(true);
        }
        s.try_wait().ok().flatten().map(|_| false)
    })
    .unwrap_or(false);
    // The flood comes while the stream flows, and stays.
    let flood = Flood::start(port, FLOOD);
    flood.wait_in_place();
    let before_reset = got.load(Ordering::SeqCst);
    // The hop's connection goes (rdsend's only one), the flood stays.
    let reset = flowing && reset_process(s.id()) > 0;
    if !reset {
        let _ = s.kill();
        let _ = r.child.kill();
    }
    // rdsend first: once it ended, a feeder it no longer reads from ends too.
    let status = wait_bounded(&mut s, Duration::from_secs(60), "rdsend");
    feeder.join().unwrap();
    let serr = serr.join().unwrap();
    let f = r.finish();
    let got = reader.join().unwrap();
    drop(flood);
    assert!(
        flowing,
        "the stream never flowed: rdsend {status:?}\n{serr}\nrdrecv:\n{}",
        f.stderr
    );
    assert!(reset, "no connection to reset");
    assert!(
        before_reset < len as u64,
        "the stream was over before the reset"
    );
    assert!(
        status.success(),
        "rdsend: {status:?}\n{serr}\nrdrecv:\n{}",
        f.stderr
    );
    f.expect_code(0);
    assert!(got == data, "the output differs ({} bytes)", got.len());
    assert!(serr.contains("reconnected at byte"), "{serr}");
    assert!(f.stderr.contains("reconnected at byte"), "{}", f.stderr);
}

#[test]
fn a_second_sender_with_the_key_cannot_take_a_live_transfer_over() {
    let dir = Scratch::new("intruder");
    let out = dir.path("out.bin");
    let data = random_bytes(64 << 20, 71);
    let mut r = Receiver::start(&["-v", KEY, out.to_str().unwrap()], &[], None);
    let port = r.port.to_string();
    let live = std::thread::spawn({
        let (port, data) = (port.clone(), data.clone());
        move || {
            send(
                &["--rate-limit", "16M", "127.0.0.1", &port, KEY],
                &[],
                Some(&data),
            )
        }
    });
    wait_until(
        "data in the temporary file",
        Duration::from_secs(30),
        || dir.temp_has_data().then_some(()),
    );
    // Another rdsend holding the same key, as a person who runs the same
    // command twice would: refused, whether it comes as a new stream or
    // dials again as a returning sender of its own stream.
    let intruder = send(
        &["--reconnect-timeout", "2", "127.0.0.1", &port, KEY],
        &[],
        Some(b"not this stream"),
    );
    assert_ne!(
        intruder.status.code(),
        Some(0),
        "the intruder succeeded:\n{}",
        intruder.stderr
    );
    assert!(!intruder.stderr.contains("panicked"), "{}", intruder.stderr);
    let s = live.join().unwrap();
    if s.status.code() != Some(0) {
        let _ = r.child.kill();
    }
    let f = r.finish();
    s.expect_code(0);
    f.expect_code(0);
    assert!(read(&out) == data, "the output differs");
}

/// A receiver's options for a test that dials as rdpipe does: `key`, TCP,
/// the defaults otherwise.
fn recv_options(key: &[u8], reconnect: Duration, progress: Arc<AtomicU64>) -> Options {
    Options {
        key: key.to_vec(),
        chunk_size: rdpipe_wire::DEFAULT_CHUNK_SIZE,
        slots: 4,
        transport: TransportPref::Tcp,
        handshake_timeout: Duration::from_secs(10),
        integrity: Integrity::Mac,
        rate_limit: None,
        compress: Compress::None,
        progress: Some(Box::new(move |n| progress.store(n, Ordering::SeqCst))),
        reconnect_timeout: reconnect,
        replay_window: REPLAY_WINDOW,
        notice: None,
    }
}

/// Receives from `127.0.0.1:port` into memory.
fn dial_recv(port: u16, opts: Options) -> Result<Vec<u8>, rdpipe_transport::TransportError> {
    let ep = Endpoint::Connect {
        host: "127.0.0.1".into(),
        port,
        timeout: Duration::from_secs(10),
    };
    let mut v = Vec::new();
    rdpipe_transport::run_recv(ep, opts, || Ok(&mut v))?;
    Ok(v)
}

#[test]
fn a_second_receiver_with_the_key_cannot_take_a_listening_senders_transfer_over() {
    // An rdpipe agent whose outgoing hop listens (the end rdpipe's own
    // stdout dials), sending a file paced; the test dials it as rdpipe does.
    let dir = Scratch::new("intruder-recv");
    let src = dir.path("src.bin");
    let data = random_bytes(48 << 20, 73);
    std::fs::write(&src, &data).unwrap();
    let key = [0x33u8; 32];
    let mut agent = Command::new(bin("rdpipe"))
        .args([
            "--agent", "--label", "t", "--input", "none", "--output", "listen",
        ])
        .args(["--out-addr", "127.0.0.1", "--transport", "tcp"])
        .args(["--rate-limit", "16M", "--read", src.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = agent.stdin.take().unwrap();
    writeln!(stdin, "- {}", "33".repeat(32)).unwrap();
    let mut lines = std::io::BufReader::new(agent.stdout.take().unwrap());
    let port: u16 = loop {
        let mut l = String::new();
        assert!(lines.read_line(&mut l).unwrap() > 0, "agent ended");
        if let Some(p) = l.trim().strip_prefix("PORT out ") {
            break p.parse().unwrap();
        }
    };
    let got = Arc::new(AtomicU64::new(0));
    let live = std::thread::spawn({
        let got = got.clone();
        move || dial_recv(port, recv_options(&key, Duration::from_secs(60), got))
    });
    wait_until("the stream flowing", Duration::from_secs(30), || {
        (got.load(Ordering::SeqCst) > 1 << 20).then_some(())
    });
    let intruder = dial_recv(
        port,
        recv_options(&key, Duration::from_secs(2), Arc::new(AtomicU64::new(0))),
    );
    assert!(intruder.is_err(), "the intruder received a stream");
    let live = live.join().unwrap();
    let v = live.unwrap_or_else(|e| panic!("the live transfer failed: {e}"));
    assert!(v == data, "the output differs ({} bytes)", v.len());
    let mut done = String::new();
    while lines.read_line(&mut done).unwrap_or(0) > 0 {
        if done.contains("END") {
            break;
        }
    }
    assert!(done.contains("END ok"), "{done}");
    drop(stdin);
    let _ = wait_bounded(&mut agent, Duration::from_secs(30), "rdpipe --agent");
}
