//! `--rate-limit`: rdsend → rdrecv over loopback paced by the sender's limit and
//! by the receiver's (carried to the sender in the handshake), rdpipe with local
//! segments paced on every hop, and bad values refused. Each timed check asserts
//! the limiter's accuracy (the rate between the first and the last byte at the
//! receiving end within 5% of the limit), not a speed: the rates are low enough
//! for a loaded 2-core machine. The timed tests take turns ([`TIMED`]), so they
//! do not starve each other.

use crate::support::*;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// Held by each timed test: one at a time.
static TIMED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn timed_turn() -> std::sync::MutexGuard<'static, ()> {
    TIMED.lock().unwrap_or_else(|p| p.into_inner())
}

/// What came out of a stream, and when its first and last bytes arrived.
struct Timed {
    data: Vec<u8>,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Timed {
    /// Bytes per second between the first and the last byte.
    fn rate(&self) -> f64 {
        let (Some(a), Some(b)) = (self.first, self.last) else {
            panic!("no data arrived")
        };
        self.data.len() as f64 / (b - a).as_secs_f64().max(1e-6)
    }
}

/// Reads `r` to its end in a thread, noting when bytes arrive.
fn read_timed(mut r: impl Read + Send + 'static) -> JoinHandle<Timed> {
    std::thread::spawn(move || {
        let mut t = Timed {
            data: Vec::new(),
            first: None,
            last: None,
        };
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => return t,
                Ok(n) => {
                    let now = Instant::now();
                    t.first.get_or_insert(now);
                    t.last = Some(now);
                    t.data.extend_from_slice(&buf[..n]);
                }
            }
        }
    })
}

/// Runs `attempt` (one timed transfer, returning its rate in bytes/s) and
/// asserts that the rate is at most 5% over `limit` MiB/s and at least `low` of
/// it. A run that is too fast fails at once; one that is too slow gets one more
/// try: stalls of a loaded machine (another process holding the CPU longer than
/// the bucket's 50 ms) can only slow a paced stream, never speed it up.
fn assert_paced(what: &str, limit_mib: usize, low: f64, mut attempt: impl FnMut() -> f64) {
    let want = (limit_mib * MIB) as f64;
    let mut seen = Vec::new();
    for _ in 0..2 {
        let got = attempt();
        let ratio = got / want;
        let line = format!(
            "{what}: {:.3} MiB/s at a limit of {limit_mib} MiB/s (ratio {ratio:.4})",
            got / MIB as f64
        );
        eprintln!("{line}");
        assert!(ratio <= 1.05, "faster than the limit: {line}");
        seen.push(line);
        if ratio >= low {
            return;
        }
    }
    panic!("slower than {low} of the limit twice: {seen:?}");
}

/// rdrecv with `args` writing to a timed reader; rdsend with `sargs` sending
/// `data` (from a file, so no feeding thread can stall it). Returns both ends'
/// outcomes and what arrived.
fn transfer(rargs: &[&str], sargs: &[&str], data: &[u8]) -> (Finished, Finished, Timed) {
    let dir = Scratch::new("rate");
    let input = dir.s("in");
    std::fs::write(&input, data).unwrap();
    let mut r = Receiver::start(rargs, &[], Some(Stdio::piped()));
    let out = read_timed(r.child.stdout.take().unwrap());
    let port = r.port.to_string();
    let mut args = vec!["127.0.0.1", port.as_str()];
    args.extend_from_slice(sargs);
    args.push(&input);
    let s = send(&args, &[], None);
    let f = r.finish();
    (s, f, out.join().unwrap())
}

#[test]
fn the_senders_limit_paces_the_stream() {
    // 16 MiB/s for 10 s.
    let _turn = timed_turn();
    let data = random_bytes(160 * MIB, 141);
    let key = "0123456789abcdef";
    assert_paced("sender's limit", 16, 0.95, || {
        let (s, r, t) = transfer(&["-v", key], &["-v", "--rate-limit", "16M", key], &data);
        s.expect_code(0).expect_stderr("rate limit 16 MiB/s");
        r.expect_code(0)
            .expect_stderr("rate limit 16 MiB/s (the sender's)");
        assert!(
            t.data == data,
            "the bytes differ ({} arrived)",
            t.data.len()
        );
        t.rate()
    });
}

#[test]
fn the_receivers_limit_reaches_the_sender_and_the_lower_one_wins() {
    // The receiver asks for 8 MiB/s, the sender for 64: 8 for 5 s.
    let _turn = timed_turn();
    let data = random_bytes(40 * MIB, 142);
    let key = "0123456789abcdef";
    assert_paced("receiver's limit", 8, 0.95, || {
        let (s, r, t) = transfer(
            &["-v", "--rate-limit", "8MiB/s", key],
            &["-v", "--rate-limit", "64M", key],
            &data,
        );
        s.expect_code(0)
            .expect_stderr("rate limit 8 MiB/s (the receiver's)");
        r.expect_code(0).expect_stderr("rate limit 8 MiB/s");
        assert!(
            t.data == data,
            "the bytes differ ({} arrived)",
            t.data.len()
        );
        t.rate()
    });

    // Only the receiver limits: the same.
    let data = random_bytes(20 * MIB, 143);
    assert_paced("receiver's limit alone", 4, 0.95, || {
        let (s, r, t) = transfer(&["--rate-limit", "4M", key], &["-v", key], &data);
        s.expect_code(0)
            .expect_stderr("rate limit 4 MiB/s (the receiver's)");
        r.expect_code(0);
        assert!(
            t.data == data,
            "the bytes differ ({} arrived)",
            t.data.len()
        );
        t.rate()
    });
}

#[test]
fn a_low_rate_is_smooth_not_one_buffer_at_a_time() {
    // 192 KiB at 64 KiB/s: less than one 256 KiB TCP buffer, yet it takes 3 s
    // (the sender reads 50 ms of the rate at a time; the bucket holds 50 ms).
    let _turn = timed_turn();
    let data = random_bytes(192 << 10, 145);
    let key = "0123456789abcdef";
    let (s, r, t) = transfer(&[key], &["--rate-limit", "64K", key], &data);
    s.expect_code(0);
    r.expect_code(0);
    assert!(
        t.data == data,
        "the bytes differ ({} arrived)",
        t.data.len()
    );
    let got = t.rate();
    let ratio = got / (64 << 10) as f64;
    assert!(
        (0.90..=1.05).contains(&ratio),
        "{got:.0} B/s against a limit of 64 KiB/s (ratio {ratio:.4})"
    );
}

fn rdpipe_timed(args: &[&str], data: Vec<u8>) -> (Child, JoinHandle<Timed>, JoinHandle<String>) {
    let mut cmd = Command::new(rdpipe());
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run rdpipe");
    let mut sin = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        let _ = std::io::Write::write_all(&mut sin, &data);
    });
    let out = read_timed(child.stdout.take().unwrap());
    let mut se = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    (child, out, err)
}

#[test]
fn rdpipe_paces_every_hop() {
    // stdin -> [1] cat -> [2] cat -> stdout: three hops, each paced to 8 MiB/s.
    // Never faster than the limit; slower only by what stalls of this machine
    // cost: a hop whose input or output stalls longer than its bucket (50 ms)
    // does not make up the time (no hop may burst), so with three paced hops and
    // their commands on a loaded 2-core machine the lower bound is looser.
    let _turn = timed_turn();
    let data = random_bytes(40 * MIB, 144);
    let dir = Scratch::new("rate-json");
    let json = dir.s("run.json");
    assert_paced("rdpipe", 8, 0.90, || {
        let (mut child, out, err) = rdpipe_timed(
            &[
                "-v",
                "--rate-limit",
                "8M",
                "--json",
                &json,
                "-:cat",
                "-:cat",
            ],
            data.clone(),
        );
        let status = wait_bounded(&mut child, Duration::from_secs(60), "rdpipe --rate-limit");
        let (t, stderr) = (out.join().unwrap(), err.join().unwrap());
        assert!(status.success(), "rdpipe failed ({status:?}):\n{stderr}");
        assert!(
            stderr.contains("rdpipe: rate limit 8 MiB/s on every hop"),
            "{stderr}"
        );
        let report = std::fs::read_to_string(&json).unwrap();
        assert!(
            report.contains("\"rate_limit_bytes_per_second\": 8388608"),
            "{report}"
        );
        assert!(
            t.data == data,
            "the bytes differ ({} arrived)",
            t.data.len()
        );
        t.rate()
    });

    // The plan says so.
    let r = run(
        &["-n", "--rate-limit", "1.5G/s", "-:cat", "-:cat"].map(String::from),
        None,
        Duration::from_secs(10),
    );
    r.ok();
    assert!(
        r.stdout_str()
            .contains("rate limit: 1.50 GiB/s on every transfer"),
        "{}",
        r.stdout_str()
    );
}

#[test]
fn bad_rates_are_refused_with_one_line_naming_the_flag() {
    for (tool, pre) in [
        ("rdsend", &["h", "1", "k"][..]),
        ("rdrecv", &["0", "k"][..]),
        ("rdpipe", &["-:cat"][..]),
    ] {
        for (bad, needle) in [
            ("0", "no rate at all"),
            ("0K/s", "no rate at all"),
            ("0.0001K", "no rate at all"),
            ("fast", "'fast' is not a rate"),
            ("16X", "not a rate"),
            ("-5M", "not a rate"),
        ] {
            let out = Command::new(bin(tool))
                .arg(format!("--rate-limit={bad}"))
                .args(pre)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{tool} {bad}: {stderr}");
            // clap's one error line (it adds a hint line: `For more information`).
            let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
            assert_eq!(errors.len(), 1, "{tool} {bad}: {stderr}");
            assert!(
                errors[0].contains("--rate-limit") && errors[0].contains(needle),
                "{tool} {bad}: {stderr}"
            );
            assert!(out.stdout.is_empty(), "{tool} {bad}");
        }
    }
}
