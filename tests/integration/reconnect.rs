//! Hops that survive the loss of their connection (`--reconnect-timeout`),
//! with the real binaries over loopback TCP (root: `ss -K` resets a socket,
//! nftables answers a port with resets; SKIPPED otherwise): rdsend and
//! rdrecv through five resets of one 4 GiB stream, byte-exact, and through
//! three of a compressed stream (its receiver decompressing several chunks
//! at once); a path that
//! answers with resets for a while, then recovers (the receiver never saw
//! the loss: the returning sender replaces its connection); one that stays
//! broken past the timeout fails within the bound, leaving `FILE` as it
//! was; an rdpipe pipeline whose hop is reset mid-stream, byte-exact, with
//! the reconnect in `--json`, and one reset while its command prints
//! nothing for longer than the timeout; and an rdcp copy of a tree (small files and
//! big ones) reset the same way, equal to its source.

use crate::support::*;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Resets (RST both ways, `ss -K`) the established TCP connections whose
/// either end is local port `port`; returns how many sockets it killed.
pub(crate) fn reset_port(port: u16) -> usize {
    let out = Command::new("ss")
        .args(["-K", "-tnH", "state", "established"])
        .arg(format!("( sport = :{port} or dport = :{port} )"))
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// Whether this kernel lets `ss -K` destroy sockets (CONFIG_INET_DIAG_DESTROY).
pub(crate) fn can_reset() -> bool {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let _c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (_s, _) = l.accept().unwrap();
    reset_port(port) > 0
}

macro_rules! need_reset {
    () => {
        need_root!("ss -K and nftables");
        if !can_reset() {
            skip(
                &test_name(),
                "ss -K cannot destroy sockets here (kernel without INET_DIAG_DESTROY)",
            );
            return;
        }
    };
}

/// A cheap, repeatable byte stream.
struct Gen(u64);

impl Gen {
    fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            c.copy_from_slice(&self.0.to_le_bytes()[..c.len()]);
        }
    }
}

#[test]
fn five_resets_in_a_4_gib_stream_resume_byte_exact() {
    need_reset!();
    resets_resume(4 << 30, 700 << 20, 5, &["--integrity", "checksum"], false);
}

/// A compressed stream's receiver decompresses several chunks at once: what
/// it holds in flight when the connection dies is written before it tells
/// where to resume, and the stream stays byte-exact.
#[test]
fn resets_of_a_compressed_stream_resume_byte_exact() {
    need_reset!();
    resets_resume(768 << 20, 200 << 20, 3, &["--compress=zstd:1"], true);
}

/// rdsend | rdrecv over loopback, `len` bytes (every other 64 KiB of them
/// zeros when `compressible`), the hop's connection reset after every
/// `every` bytes received, `resets` times; byte-exact, and each end reports
/// its reconnects.
fn resets_resume(len: u64, every: u64, resets: usize, args: &[&str], compressible: bool) {
    const KEY: &str = "reconnect-five-resets-key";
    let mut rargs = vec!["-v"];
    rargs.extend(args);
    rargs.push(KEY);
    let mut r = Receiver::start(&rargs, &[], Some(Stdio::piped()));
    let mut out = r.child.stdout.take().unwrap();
    let port = r.port;
    let mut s = Command::new(bin("rdsend"))
        .arg("-v")
        .args(args)
        .arg("127.0.0.1")
        .arg(port.to_string())
        .arg(KEY)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = s.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let mut g = Gen(0x1234_5678_9abc_def1);
        let mut h = rdpipe_wire::checksum::StreamHasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            g.fill(&mut buf[..n]);
            if compressible {
                for c in buf[..n].chunks_mut(128 << 10) {
                    let half = c.len() / 2;
                    c[..half].fill(0);
                }
            }
            h.update(&buf[..n]);
            if sin.write_all(&buf[..n]).is_err() {
                return None;
            }
            left -= n as u64;
        }
        Some(h.digest())
    });
    // Read the output; after every `every` bytes, reset the hop's connection.
    let mut h = rdpipe_wire::checksum::StreamHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let (mut got, mut next, mut done) = (0u64, every, 0);
    loop {
        let n = out.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        got += n as u64;
        if got >= next && done < resets {
            next += every;
            if reset_port(port) > 0 {
                done += 1;
            }
        }
    }
    let sent = feeder.join().unwrap();
    let status = wait_bounded(&mut s, Duration::from_secs(60), "rdsend");
    let mut serr = String::new();
    s.stderr.take().unwrap().read_to_string(&mut serr).unwrap();
    let f = r.finish();
    assert!(
        status.success(),
        "rdsend: {status:?}\n{serr}\nrdrecv:\n{}",
        f.stderr
    );
    f.expect_code(0);
    assert_eq!(got, len, "{}", f.stderr);
    assert_eq!(Some(h.digest()), sent, "the output differs from the input");
    assert_eq!(done, resets, "the resets found no connection to kill");
    // At least one reconnect per reset: `ss -K` kills every socket on the
    // port, so it may also catch a connection that was just re-established.
    let lines = |e: &str| e.matches("reconnected at byte").count();
    assert!(lines(&f.stderr) >= resets, "{}", f.stderr);
    assert!(lines(&serr) >= resets, "{serr}");
}

/// An nftables table of this test's own that answers TCP to `port` with
/// resets (both the data of a live connection and new ones); dropped with
/// the value.
struct ResetRule(String);

impl ResetRule {
    fn add(port: u16) -> ResetRule {
        let t = format!("rdpreset{}x{port}", std::process::id());
        let nft = |rule: String| {
            let ok = Command::new("nft")
                .arg(&rule)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "nft {rule}");
        };
        nft(format!("add table inet {t}"));
        nft(format!(
            "add chain inet {t} out {{ type filter hook output priority 0; }}"
        ));
        nft(format!(
            "add rule inet {t} out tcp dport {port} reject with tcp reset"
        ));
        ResetRule(t)
    }
}

impl Drop for ResetRule {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &self.0])
            .status();
    }
}

/// rdrecv into FILE (which holds `old`), rdsend of `data` paced at
/// 64 MiB/s; once FILE's temporary has data, the receiver's port answers
/// with resets for `outage`. Returns both ends and the run's scratch.
fn through_outage(
    data: &[u8],
    old: &[u8],
    outage: Duration,
    timeout: &'static str,
) -> (Finished, Finished, Scratch, Duration) {
    const KEY: &str = "reconnect-outage-test-key";
    let dir = Scratch::new("outage");
    let out = dir.path("out.bin");
    std::fs::write(&out, old).unwrap();
    let input = dir.path("in.bin");
    std::fs::write(&input, data).unwrap();
    let args = ["-v", "--reconnect-timeout", timeout];
    let mut ra: Vec<&str> = args.to_vec();
    ra.extend([KEY, out.to_str().unwrap()]);
    let r = Receiver::start(&ra, &[], None);
    let port = r.port.to_string();
    let s = std::thread::spawn({
        let input = input.clone();
        move || {
            let mut a: Vec<&str> = args.to_vec();
            a.extend(["--rate-limit", "64M", "127.0.0.1", &port, KEY]);
            a.push(input.to_str().unwrap());
            send(&a, &[], None)
        }
    });
    wait_until(
        "data in the temporary file",
        Duration::from_secs(30),
        || dir.temp_has_data().then_some(()),
    );
    let started = Instant::now();
    {
        let _rule = ResetRule::add(r.port);
        std::thread::sleep(outage);
    }
    let s = s.join().unwrap();
    let f = r.finish();
    (s, f, dir, started.elapsed())
}

#[test]
fn a_port_answering_resets_for_three_seconds_is_ridden_out() {
    need_reset!();
    let data = random_bytes(160 << 20, 23);
    let (s, r, dir, _) = through_outage(&data, b"old", Duration::from_secs(3), "30");
    s.expect_code(0);
    r.expect_code(0);
    assert!(read(&dir.path("out.bin")) == data, "output differs");
    // The sender saw the resets; the receiver saw nothing until the sender
    // came back and replaced the connection.
    assert!(s.stderr.contains("reconnected at byte"), "{}", s.stderr);
    assert!(r.stderr.contains("reconnected at byte"), "{}", r.stderr);
}

#[test]
fn an_outage_longer_than_the_reconnect_timeout_fails_within_the_bound() {
    need_reset!();
    let data = random_bytes(400 << 20, 29);
    let (s, r, dir, took) = through_outage(&data, b"old", Duration::from_secs(6), "2");
    // The sender gives up 2 s after the first reset; the receiver, which
    // never saw a reset, notices the dead connection by keepalive (10 s of
    // silence) and gives up 2 s later.
    s.expect_code(4).expect_stderr("--reconnect-timeout");
    r.expect_code(4).expect_stderr("--reconnect-timeout");
    assert!(took < Duration::from_secs(40), "took {took:?}");
    assert_eq!(read(&dir.path("out.bin")), b"old", "FILE was replaced");
    assert_eq!(
        dir.names(),
        vec!["in.bin", "out.bin"],
        "a temporary was left"
    );
}

/// The pids of `parent`'s children.
fn children(parent: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Resets the established TCP connections of process `pid`; how many.
pub(crate) fn reset_process(pid: u32) -> usize {
    let out = Command::new("ss")
        .args(["-tnpH", "state", "established"])
        .output()
        .unwrap();
    let mut n = 0;
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if !l.contains(&format!("pid={pid},")) {
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let Some(local) = f.get(2).and_then(|a| a.rsplit_once(':')) else {
            continue;
        };
        n += reset_port(local.1.parse().unwrap_or(0));
    }
    n
}

/// Resets the hop connections of the agents that process `pid` started.
fn reset_agents(pid: u32) {
    let agents = children(pid);
    let killed: usize = agents.iter().map(|&a| reset_process(a)).sum();
    assert!(killed > 0, "no hop connection found among {agents:?}");
}

#[test]
fn an_rdpipe_hop_reset_mid_stream_resumes_and_reports_it() {
    need_reset!();
    let dir = Scratch::new("rdpreconnect");
    let data = random_bytes(96 << 20, 31);
    let src = dir.path("src");
    std::fs::write(&src, &data).unwrap();
    let json = dir.path("run.json");
    let out = dir.path("out");
    let args: Vec<String> = [
        "--rate-limit",
        "48M",
        "--json",
        json.to_str().unwrap(),
        &format!("-:cat {}", src.display()),
        &format!("-:cat > {}", out.display()),
    ]
    .map(String::from)
    .into();
    let started = start(&[], &args, None);
    let pid = started.child.id();
    wait_until("data at the sink", Duration::from_secs(30), || {
        (std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) > 8 << 20).then_some(())
    });
    // The first segment's agent sends the hop: reset its connection.
    reset_agents(pid);
    let r = started.finish(Duration::from_secs(60));
    r.ok();
    assert!(read(&out) == data, "output differs");
    let reconnects = json_reconnects(&json);
    assert!(
        reconnects >= 1,
        "{}",
        std::fs::read_to_string(&json).unwrap()
    );
}

/// The last command prints nothing for longer than `--reconnect-timeout`
/// after its hop was reset (as `zfs recv` feeding rdpipe's stdout does for
/// a whole replication): its agent notices the loss while it waits on the
/// command, not at the next byte, and the hop resumes at once; the output
/// is whole and the run succeeds.
#[test]
fn a_hop_reset_while_its_command_is_silent_resumes_at_once() {
    need_reset!();
    let dir = Scratch::new("rdpidle");
    let json = dir.path("run.json");
    let args: Vec<String> = [
        "--reconnect-timeout",
        "3",
        // A receiver waits this long for the sender's answer on each new
        // connection: the silence outlasts both.
        "--handshake-timeout",
        "2",
        "--json",
        json.to_str().unwrap(),
        "-:printf first; sleep 8; printf second",
    ]
    .map(String::from)
    .into();
    let started = start(&[], &args, None);
    let pid = started.child.id();
    assert!(
        started.wait_stdout_ends_with(b"first", Duration::from_secs(30)),
        "the first output did not arrive"
    );
    reset_agents(pid);
    let r = started.finish(Duration::from_secs(60));
    r.ok();
    assert_eq!(r.stdout, b"firstsecond", "{}", r.stderr);
    assert!(
        json_reconnects(&json) >= 1,
        "{}",
        std::fs::read_to_string(&json).unwrap()
    );
}

/// rdcp's stream mixes pieces the packing thread batched (entries, small
/// files) with big files the transfer's thread reads itself; a reset in the
/// middle makes the sender resend from its window across both kinds.
#[test]
fn an_rdcp_copy_reset_mid_stream_resumes_byte_exact() {
    need_reset!();
    let dir = Scratch::new("rdcpreconnect");
    let src = dir.path("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..40 {
        std::fs::write(
            src.join(format!("a{i:02}")),
            random_bytes(1000 + i * 97, i as u64),
        )
        .unwrap();
    }
    std::fs::write(src.join("big1"), random_bytes(40 << 20, 41)).unwrap();
    std::fs::write(src.join("sub/big2"), random_bytes(24 << 20, 42)).unwrap();
    for i in 0..40 {
        std::fs::write(
            src.join(format!("sub/z{i:02}")),
            random_bytes(3000 + i * 31, 100 + i as u64),
        )
        .unwrap();
    }
    let json = dir.path("run.json");
    let dst = dir.path("dst");
    let args: Vec<String> = [
        "-r",
        "--rate-limit",
        "32M",
        "--json",
        json.to_str().unwrap(),
        src.to_str().unwrap(),
        dst.to_str().unwrap(),
    ]
    .map(String::from)
    .into();
    let started = start_tool(&rdcp(), &[], &args, None);
    let pid = started.child.id();
    // Readiness: the first big file is partly written (under its
    // temporary name).
    wait_until("big1 partly copied", Duration::from_secs(30), || {
        std::fs::read_dir(&dst)
            .ok()?
            .filter_map(Result::ok)
            .find(|e| e.file_name().to_string_lossy().starts_with(".big1.rdcp-"))
            .filter(|e| e.metadata().is_ok_and(|m| m.len() > 8 << 20))
    });
    reset_agents(pid);
    let r = started.finish(Duration::from_secs(90));
    r.ok();
    crate::rdcp::assert_same_tree(&src, &dst);
    assert!(
        json_reconnects(&json) >= 1,
        "{}",
        std::fs::read_to_string(&json).unwrap()
    );
}

/// Whether a thread of process `pid` is blocked writing into a full pipe.
fn blocked_on_a_pipe(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("wchan")).is_ok_and(|w| w.contains("pipe_write"))
    })
}

/// The receiver's consumer stops reading (as `zfs recv` does while it
/// commits) and the hop's connection is reset while rdrecv is blocked
/// writing into it, for longer than both ends' `--reconnect-timeout` and
/// `--handshake-timeout`: the sender's new connection is authenticated by
/// the receiver's acceptor and waits there for the receiver to ask, so the
/// stream resumes once the consumer reads again; byte-exact, both exit 0.
#[test]
fn a_reset_while_the_receivers_consumer_is_stalled_resumes() {
    need_reset!();
    const KEY: &str = "reconnect-stalled-consumer-key";
    let dir = Scratch::new("stalled");
    let data = random_bytes(96 << 20, 31);
    let input = dir.path("in.bin");
    std::fs::write(&input, &data).unwrap();
    let args = ["-v", "--reconnect-timeout", "2", "--handshake-timeout", "1"];
    let mut ra: Vec<&str> = args.to_vec();
    ra.push(KEY);
    let mut r = Receiver::start(&ra, &[], Some(Stdio::piped()));
    let mut out = r.child.stdout.take().unwrap();
    let port = r.port.to_string();
    let s = std::thread::spawn({
        let input = input.clone();
        move || {
            let mut a: Vec<&str> = args.to_vec();
            a.extend(["127.0.0.1", &port, KEY, input.to_str().unwrap()]);
            send(&a, &[], None)
        }
    });
    let mut got = vec![0u8; 8 << 20];
    out.read_exact(&mut got).unwrap();
    // Stop reading: rdrecv fills the pipe and blocks on it.
    let pid = r.child.id();
    wait_until(
        "rdrecv blocked on its output",
        Duration::from_secs(30),
        || blocked_on_a_pipe(pid).then_some(()),
    );
    assert!(reset_port(r.port) > 0, "no connection to reset");
    // The stall outlasts both timeouts (2 s + 1 s) before the consumer reads.
    std::thread::sleep(Duration::from_secs(5));
    out.read_to_end(&mut got).unwrap();
    let s = s.join().unwrap();
    let f = r.finish();
    s.expect_code(0);
    f.expect_code(0);
    assert!(
        got == data,
        "the output differs from the input ({} bytes)",
        got.len()
    );
    assert!(s.stderr.contains("reconnected"), "{}", s.stderr);
    assert!(f.stderr.contains("reconnected"), "{}", f.stderr);
}

/// The same stall where the receiving end dials: rdpipe's own stdout, fed
/// by a local segment's agent that listens. While rdpipe is blocked writing
/// its stdout, a thread of its hop watches the connection and dials again
/// as soon as it is lost, so the agent's acceptor gets an authenticated
/// connection within its `--reconnect-timeout` and waits there; the stream
/// resumes once the consumer reads again.
#[test]
fn a_reset_while_rdpipes_stdout_is_stalled_resumes() {
    need_reset!();
    let dir = Scratch::new("stalledout");
    let data = random_bytes(96 << 20, 37);
    let src = dir.path("src");
    std::fs::write(&src, &data).unwrap();
    let mut p = Command::new(crate::support::rdpipe())
        .args(["-v", "--reconnect-timeout", "2", "--handshake-timeout", "1"])
        .arg(format!("-:cat {}", src.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = p.stdout.take().unwrap();
    let mut err = p.stderr.take().unwrap();
    let errs = std::thread::spawn(move || {
        let mut e = String::new();
        let _ = err.read_to_string(&mut e);
        e
    });
    let mut got = vec![0u8; 8 << 20];
    out.read_exact(&mut got).unwrap();
    let pid = p.id();
    wait_until(
        "rdpipe blocked on its stdout",
        Duration::from_secs(30),
        || blocked_on_a_pipe(pid).then_some(()),
    );
    assert!(reset_process(pid) > 0, "no connection of rdpipe to reset");
    std::thread::sleep(Duration::from_secs(5));
    out.read_to_end(&mut got).unwrap();
    let status = wait_bounded(&mut p, Duration::from_secs(60), "rdpipe");
    let e = errs.join().unwrap();
    assert!(status.success(), "rdpipe: {status:?}\n{e}");
    assert!(got == data, "the output differs ({} bytes)\n{e}", got.len());
}
