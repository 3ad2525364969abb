//! `rdpipe forward` across network-namespace hosts with their own sshd (root
//! only; SKIPPED otherwise), with unchanged Python servers and clients
//! (`forward/fwd.py`) and iperf3: a 256 MiB `sendall` byte-exact with the
//! server's digest back after the client's half-close (`--once`, `--json`);
//! 20 concurrent connections; a client's reset reaching the server as one;
//! a refused target closing the client's connection with a warning; a
//! stalled target holding the client back with bounded memory; Ctrl-C with
//! a connection open (reset on both sides, exit 0, no process left); the
//! listening port taken; iperf3 both ways; a tap on the hops that sees the
//! connections' bytes only when they are not encrypted.

use crate::support::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const FWD_PY: &str = include_str!("forward/fwd.py");

/// The helper script, written once into the network's directory.
fn script(net: &Netns) -> PathBuf {
    let p = net.dir.path("fwd.py");
    if !p.exists() {
        std::fs::write(&p, FWD_PY).unwrap();
    }
    p
}

/// A `fwd.py serve` (or any server) in host `n`'s namespace, killed on drop.
struct Server {
    child: Child,
    dir: PathBuf,
}

impl Server {
    fn start(net: &Netns, n: usize, mode: &str, port: u16) -> Server {
        let dir = net.dir.path(&format!("srv-{mode}-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &net.ns(n), "python3"])
            .arg(script(net))
            .args(["serve", mode, &port.to_string()])
            .arg(&dir)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let ready = dir.join("ready");
        wait_until("the server listening", Duration::from_secs(10), || {
            ready.exists().then_some(())
        });
        Server { child, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fwd.py ARGS` in rdpipe's namespace (where the forward listens).
fn client(net: &Netns, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &net.ns(0), "python3"])
        .arg(script(net))
        .args(args);
    c
}

fn client_ok(net: &Netns, args: &[&str]) -> String {
    let o = client(net, args).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "fwd.py {args:?}: {}\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// `rdpipe forward` with the network's ssh options, and the port it
/// listens on (from its `forwarding ADDR:PORT` line).
fn forward(net: &Netns, extra: &[&str]) -> (Started, u16) {
    let mut a: Vec<String> = vec!["forward".into()];
    a.extend(net.base_args());
    a.extend(extra.iter().map(|s| s.to_string()));
    let p = net.exec_prefix();
    let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
    let s = start(&p, &a, None);
    let line = s.wait_stderr_line("forwarding ", Duration::from_secs(60));
    let port = line
        .split("forwarding ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (s, port)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn forward_carries_a_python_sendall_byte_exact_with_its_half_close() {
    need_root!("network namespaces");
    let net = Netns::start("fa");
    let srv = Server::start(&net, 1, "sha", 7100);
    let report = net.dir.path("fwd.json");
    let (s, port) = forward(
        &net,
        &[
            "--once",
            "--json",
            report.to_str().unwrap(),
            "0",
            "n1:localhost:7100",
        ],
    );
    let size = 256usize << 20;
    client_ok(&net, &["sha", &port.to_string(), &size.to_string()]);
    let r = s.finish(Duration::from_secs(60));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(srv.log().trim(), format!("sha {size}"));
    let j = json(&report);
    let c = &j["forward"]["connections"];
    assert_eq!(c.as_array().unwrap().len(), 1, "{j}");
    assert_eq!(c[0]["bytes_up"], size as u64);
    // "SHA256HEX LEN\n".
    assert_eq!(
        c[0]["bytes_down"],
        64 + 1 + size.to_string().len() as u64 + 1
    );
    assert_eq!(c[0]["end"], "closed");
    assert_eq!(j["forward"]["target"], "localhost:7100");
    assert!(
        j["hops"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["verified"] == true),
        "{j}"
    );
    drop(srv);
    net.assert_clean();
}

#[test]
fn forward_many_connections_a_client_reset_and_ctrl_c_with_one_open() {
    need_root!("network namespaces");
    let net = Netns::start("fb");
    let srv = Server::start(&net, 1, "sha", 7200);
    let report = net.dir.path("fwd.json");
    let (s, port) = forward(
        &net,
        &[
            "-v",
            "--json",
            report.to_str().unwrap(),
            "0",
            "n1:localhost:7200",
        ],
    );
    let p = port.to_string();
    // Twenty at once, each byte-exact and answered.
    assert_eq!(client_ok(&net, &["many", &p, "20"]).trim(), "OK 20");
    // A client that resets mid-stream: the server sees a reset, not an end.
    client_ok(&net, &["reset", &p]);
    wait_until(
        "the server seeing the reset",
        Duration::from_secs(20),
        || srv.log().contains("reset").then_some(()),
    );
    // Still forwarding after that.
    client_ok(&net, &["sha", &p, "100000"]);
    // A connection open at Ctrl-C is reset on both sides; the forward ends 0.
    let open_dir = net.dir.path("open");
    std::fs::create_dir_all(&open_dir).unwrap();
    let waiting = client(&net, &["open", &p, open_dir.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the open connection", Duration::from_secs(20), || {
        open_dir.join("open").exists().then_some(())
    });
    let resets_before = srv.log().matches("reset").count();
    // (The server has read the hello: the connection is through.)
    std::thread::sleep(Duration::from_millis(300));
    s.signal("-INT");
    let r = s.finish(Duration::from_secs(30));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let o = waiting.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "reset");
    wait_until("the server seeing the cut", Duration::from_secs(20), || {
        (srv.log().matches("reset").count() > resets_before).then_some(())
    });
    let j = json(&report);
    let conns = j["forward"]["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 23, "{j}");
    let ends: Vec<&str> = conns.iter().map(|c| c["end"].as_str().unwrap()).collect();
    assert_eq!(
        ends.iter().filter(|e| **e == "closed").count(),
        21,
        "{ends:?}"
    );
    assert!(
        ends.contains(&"client-reset") && ends.contains(&"cut"),
        "{ends:?}"
    );
    assert!(
        r.stderr.contains("connection 1 from 127.0.0.1:"),
        "{}",
        r.stderr
    );
    drop(srv);
    net.assert_clean();
}

#[test]
fn forward_refused_target_closes_the_client_and_warns() {
    need_root!("network namespaces");
    let net = Netns::start("fc");
    // Nothing listens at n1's port 7300.
    let (s, port) = forward(&net, &["0", "n1:localhost:7300"]);
    let p = port.to_string();
    assert_eq!(client_ok(&net, &["closed", &p]).trim(), "CLOSED");
    let w = s.wait_stderr_line("refused", Duration::from_secs(10));
    assert!(
        w.contains("warning:") && w.contains("n1 localhost:7300"),
        "{w}"
    );
    // The listening port taken: a second forward fails with one line.
    let mut a: Vec<String> = vec!["forward".into()];
    a.extend(net.base_args());
    a.extend([p.clone(), "n1:localhost:7300".into()]);
    let pre = net.exec_prefix();
    let pre: Vec<&str> = pre.iter().map(|s| s.as_str()).collect();
    let second = start(&pre, &a, None).finish(Duration::from_secs(60));
    assert_eq!(second.code(), Some(1), "{}", second.stderr);
    assert!(
        second
            .stderr
            .contains(&format!("cannot listen on 127.0.0.1:{p}")),
        "{}",
        second.stderr
    );
    // SIGTERM ends it as Ctrl-C does.
    s.signal("-TERM");
    let r = s.finish(Duration::from_secs(30));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    net.assert_clean();
}

#[test]
fn forward_stalled_target_holds_the_client_back_in_bounded_memory() {
    need_root!("network namespaces");
    let net = Netns::start("fd");
    let srv = Server::start(&net, 1, "stall", 7400);
    let (s, port) = forward(&net, &["--once", "0", "n1:localhost:7400"]);
    let size = 512usize << 20;
    let d = net.dir.path("stall");
    std::fs::create_dir_all(&d).unwrap();
    let c = client(
        &net,
        &[
            "stall",
            &port.to_string(),
            &size.to_string(),
            d.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let sent: u64 = wait_until("the client held back", Duration::from_secs(60), || {
        std::fs::read_to_string(d.join("sent"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
    });
    // What is in flight: the connection's window, the queues and the
    // socket buffers on both hosts, not the stream.
    assert!(
        sent < 96 << 20,
        "the client sent {sent} bytes into a stalled target"
    );
    let agents: Vec<u32> = [0, 1]
        .iter()
        .flat_map(|&n| net.stray_pids(n))
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--forward-"))
        })
        .collect();
    assert_eq!(agents.len(), 2, "{}", ps(&agents));
    for pid in &agents {
        let rss = rss_kib(*pid).unwrap_or(0);
        assert!(rss < 256 << 10, "agent {pid}: {rss} KiB\n{}", ps(&agents));
    }
    std::fs::write(srv.dir.join("go"), "").unwrap();
    std::fs::write(d.join("go"), "").unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = s.finish(Duration::from_secs(60));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(srv.log().trim(), format!("sha {size}"));
    drop(srv);
    net.assert_clean();
}

#[test]
fn forward_carries_iperf3_both_ways() {
    need_root!("network namespaces");
    if Command::new("iperf3").arg("--version").output().is_err() {
        skip(&test_name(), "needs iperf3 (scripts/install-deps)");
        return;
    }
    let net = Netns::start("fe");
    let mut srv = Command::new("ip")
        .args([
            "netns",
            "exec",
            &net.ns(1),
            "iperf3",
            "-s",
            "-B",
            "127.0.0.1",
            "-p",
            "7500",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("iperf3 listening", Duration::from_secs(10), || {
        netns_listeners(&net.ns(1))
            .iter()
            .any(|l| l.contains(":7500"))
            .then_some(())
    });
    let (s, port) = forward(&net, &["0", "n1:localhost:7500"]);
    for reverse in [false, true] {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &net.ns(0),
            "iperf3",
            "-c",
            "127.0.0.1",
            "-t",
            "2",
            "-J",
        ])
        .args(["-p", &port.to_string()]);
        if reverse {
            c.arg("-R");
        }
        let o = c.output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "iperf3 -R={reverse}: {text}");
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        let got = j["end"]["sum_received"]["bytes"].as_u64().unwrap();
        assert!(got > 0, "iperf3 -R={reverse}: nothing received: {text}");
    }
    s.signal("-INT");
    let r = s.finish(Duration::from_secs(30));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let _ = srv.kill();
    let _ = srv.wait();
    net.assert_clean();
}

#[test]
fn forward_plan_and_bad_arguments() {
    let r = run(
        &[
            "forward".into(),
            "-n".into(),
            "8080".into(),
            "h2:localhost:5432".into(),
        ],
        None,
        Duration::from_secs(30),
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let plan = r.stdout_str();
    assert!(
        plan.contains("accept TCP connections on 127.0.0.1:8080"),
        "{plan}"
    );
    assert!(
        plan.contains("connect each forwarded connection to localhost:5432"),
        "{plan}"
    );
    for (args, needle) in [
        (vec!["99999", "h2:localhost:1"], "port must be a number"),
        (vec!["80", "h2:localhost"], "is not TARGET_HOST:ADDR:PORT"),
        (vec!["80"], "TARGET_HOST:ADDR:PORT"),
    ] {
        let mut a: Vec<String> = vec!["forward".into()];
        a.extend(args.iter().map(|s| s.to_string()));
        let r = run(&a, None, Duration::from_secs(30));
        assert_eq!(r.code(), Some(2), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
}

/// A passive tap in rdpipe's namespace (every byte between it and the
/// target's host): a connection's bytes never cross the hops in clear under
/// the default protection; under `--integrity checksum` (no encryption)
/// they do, which shows that the tap sees the hops.
#[test]
fn forward_tapped_hops_carry_no_plaintext_under_the_default_protection() {
    need_root!("network namespaces");
    let net = Netns::start("ff");
    let srv = Server::start(&net, 1, "sha", 7600);
    let mark = format!("FWDSECRET{}", std::process::id());
    for (extra, clear) in [(None, false), (Some("checksum"), true)] {
        let tap = Tap::start(&net.ns(0));
        let mut args = vec!["--once"];
        if let Some(i) = extra {
            args.extend(["--integrity", i]);
        }
        args.extend(["0", "n1:localhost:7600"]);
        let (s, port) = forward(&net, &args);
        client_ok(&net, &["text", &port.to_string(), &mark, "1000"]);
        let r = s.finish(Duration::from_secs(60));
        assert_eq!(r.code(), Some(0), "{}", r.stderr);
        let cap = tap.stop();
        // Only the hops: the client's own connection is on the loopback.
        let on_hops = cap
            .flows
            .iter()
            .filter(|((a, b), _)| !a.ip().is_loopback() && !b.ip().is_loopback())
            .any(|(_, s)| s.windows(mark.len()).any(|w| w == mark.as_bytes()));
        assert_eq!(
            on_hops, clear,
            "--integrity {extra:?}: plaintext on the hops: {on_hops}"
        );
    }
    drop(srv);
    net.assert_clean();
}

/// A connection open across a lost data connection: the hops' connections
/// reset mid-stream (twice) reconnect and resume from their replay window,
/// and the forwarded connection goes on byte-exact, none the wiser.
#[test]
fn forward_connection_survives_its_hops_being_reset() {
    need_root!("network namespaces and ss -K");
    if !crate::reconnect::can_reset() {
        skip(
            &test_name(),
            "ss -K cannot destroy sockets here (kernel without INET_DIAG_DESTROY)",
        );
        return;
    }
    let net = Netns::start("fg");
    let srv = Server::start(&net, 1, "sha", 7700);
    let report = net.dir.path("fwd.json");
    let (s, port) = forward(
        &net,
        &[
            "-v",
            "--once",
            "--rate-limit",
            "24M",
            "--json",
            report.to_str().unwrap(),
            "0",
            "n1:localhost:7700",
        ],
    );
    let size = 96usize << 20;
    let c = client(&net, &["sha", &port.to_string(), &size.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let agent = wait_until("the target's agent", Duration::from_secs(20), || {
        net.stray_pids(1).into_iter().find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--forward-target"))
        })
    });
    for _ in 0..2 {
        // Mid-stream: the server has part of it.
        std::thread::sleep(Duration::from_millis(800));
        // (Its hop connections, not its connection to the server.)
        let n = reset_connections_of(&net.ns(1), agent, false);
        assert!(n > 0, "no hop connection of the target's agent found");
    }
    let o = c.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let r = s.finish(Duration::from_secs(60));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("reconnected"), "{}", r.stderr);
    assert_eq!(srv.log().trim(), format!("sha {size}"));
    let j = json(&report);
    assert_eq!(j["forward"]["connections"][0]["end"], "closed", "{j}");
    drop(srv);
    net.assert_clean();
}
