//! A run that outlives its ssh sessions (namespace hosts with sshd; root):
//! the ssh master for one host SIGKILLed mid-stream; every TCP segment into
//! one host (ssh's included) answered with a reset for 3 s; the same
//! segments dropped instead, so that the ssh connection stalls without
//! breaking: all complete byte-exact with the re-attach reported. An outage
//! longer than `--reconnect-timeout` fails within the bound, names the
//! host, leaves no process and no `> FILE`; Ctrl-C while a host's session
//! is down still ends everything; another uid cannot attach to an agent,
//! nor a process without its secret; a normal run leaves no socket behind.

use crate::support::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// The pids of rdpipe's ssh master processes for `host` (not their guards),
/// once there are some.
fn masters_of(host: &str) -> Vec<u32> {
    wait_until(
        format!("{host}'s ssh master"),
        Duration::from_secs(20),
        || {
            let m = pgrep(&format!("^ssh .* -M -S .* -- {host}$"));
            (!m.is_empty()).then_some(m)
        },
    )
}

/// Every TCP segment into namespace `ns` handled by `verdict` (`reject with
/// tcp reset`: answered with a reset; `drop`: connections stall without
/// breaking) in the nftables table `rdpreset`, until [`unreset`]. Nothing is
/// spared, so no separate `accept` lines.
fn block_tcp(ns: &str, verdict: &str) {
    for args in [
        "add table inet rdpreset".to_string(),
        "add chain inet rdpreset in { type filter hook input priority 0; }".to_string(),
        format!("add rule inet rdpreset in meta l4proto tcp {verdict}"),
    ] {
        let ok = Command::new("ip")
            .args(["netns", "exec", ns, "nft", &args])
            .status()
            .unwrap()
            .success();
        assert!(ok, "nft {args}");
    }
}

fn reset_all(ns: &str) {
    block_tcp(ns, "reject with tcp reset");
}

fn unreset(ns: &str) {
    let _ = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "delete table inet rdpreset"])
        .status();
}

/// `--json FILE`'s re-attaches: (host, downtime) each.
fn json_reattaches(path: &std::path::Path) -> Vec<(String, f64)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["reattaches"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["host"].as_str().unwrap_or("").to_string(),
                        r["downtime_seconds"].as_f64().unwrap_or(-1.0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A stream through n1 and n2, paced so that it lasts a few seconds.
fn paced_run(net: &Netns, data: &[u8], json: &std::path::Path, extra: &[&str]) -> Started {
    let mut args: Vec<String> = vec![
        "-vv".into(),
        "--rate-limit".into(),
        "40M".into(),
        "--json".into(),
        json.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["n1:cat".to_string(), "n2:cat".to_string()]);
    net.start_rdpipe(&args, Some(data.to_vec()))
}

#[test]
fn ssh_master_killed_mid_stream_reattaches_and_completes() {
    need_root!("network namespaces");
    need_ssh!();
    let net = Netns::start_with("rak", 2);
    let data = random_bytes(160 << 20, 61);
    let json = net.dir.path("run.json");
    let p = paced_run(&net, &data, &json, &[]);
    assert!(
        p.wait_stdout_len(4 << 20, Duration::from_secs(30)),
        "no data flows"
    );
    let masters = masters_of("n1");
    std::thread::sleep(Duration::from_millis(800));
    for m in masters {
        kill("-KILL", m);
    }
    let r = p.finish(Duration::from_secs(120));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert!(
        r.stdout == data,
        "output differs ({} bytes)",
        r.stdout.len()
    );
    assert!(r.stderr.contains("re-attached after"), "{}", r.stderr);
    let re = json_reattaches(&json);
    assert!(
        !re.is_empty() && re.iter().all(|(h, s)| h == "n1" && *s >= 0.0),
        "{re:?}"
    );
    net.assert_clean();
}

#[test]
fn a_host_resetting_every_connection_for_3_s_completes_byte_exact() {
    need_root!("network namespaces and nftables");
    need_ssh!();
    let net = Netns::start_with("rar", 2);
    let data = random_bytes(256 << 20, 62);
    let json = net.dir.path("run.json");
    let p = paced_run(&net, &data, &json, &["--progress"]);
    assert!(
        p.wait_stdout_len(4 << 20, Duration::from_secs(30)),
        "no data flows"
    );
    std::thread::sleep(Duration::from_millis(1000));
    let ns = net.ns(1);
    reset_all(&ns);
    std::thread::sleep(Duration::from_secs(3));
    unreset(&ns);
    let r = p.finish(Duration::from_secs(180));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert!(
        r.stdout == data,
        "output differs ({} bytes)",
        r.stdout.len()
    );
    // The progress line's byte counts keep the ssh connection busy: the
    // resets reach it.
    let re = json_reattaches(&json);
    eprintln!("re-attaches: {re:?}");
    assert!(re.iter().any(|(h, _)| h == "n1"), "{re:?}\n{}", r.stderr);
    net.assert_clean();
}

/// Packets dropped rather than reset: the ssh connection stalls without
/// breaking (ssh's keepalive would end it only after 90 s). The agent's
/// channel carries no `PONG` for 12 s, so rdpipe re-attaches through a new
/// master; the data hop rides the 20 s out on TCP retransmits.
#[test]
fn a_stalled_ssh_connection_is_replaced_and_the_run_completes() {
    need_root!("network namespaces and nftables");
    need_ssh!();
    let net = Netns::start_with("ras", 2);
    let data = random_bytes(192 << 20, 64);
    let json = net.dir.path("run.json");
    let args: Vec<String> = [
        "-v",
        "--rate-limit",
        "5M",
        "--json",
        &json.display().to_string(),
        "n1:cat",
        "n2:cat",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let p = net.start_rdpipe(&args, Some(data[..96 << 20].to_vec()));
    assert!(
        p.wait_stdout_len(4 << 20, Duration::from_secs(30)),
        "no data flows"
    );
    let ns = net.ns(1);
    block_tcp(&ns, "drop");
    p.wait_stderr_line("nothing on it for 12 s", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));
    unreset(&ns);
    let r = p.finish(Duration::from_secs(120));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert!(
        r.stdout == data[..96 << 20],
        "output differs ({} bytes)",
        r.stdout.len()
    );
    let re = json_reattaches(&json);
    assert!(re.iter().any(|(h, _)| h == "n1"), "{re:?}\n{}", r.stderr);
    net.assert_clean();
}

#[test]
fn an_outage_past_the_reconnect_timeout_fails_in_bound_and_leaves_nothing() {
    need_root!("network namespaces and nftables");
    need_ssh!();
    let net = Netns::start_with("rao", 2);
    let data = random_bytes(128 << 20, 63);
    let dir = Scratch::new("reattach-out");
    let out = dir.path("out.bin");
    std::fs::write(&out, b"the old contents\n").unwrap();
    let args = vec![
        "--rate-limit".to_string(),
        "20M".into(),
        "--reconnect-timeout".into(),
        "5".into(),
        "n1:cat".into(),
        format!("n2:> {}", out.display()),
    ];
    let p = net.start_rdpipe(&args, Some(data));
    wait_until("data in the file", Duration::from_secs(30), || {
        let tmp = std::fs::read_dir(dir.path(".")).ok()?.flatten().any(|e| {
            e.file_name().to_string_lossy().contains("rdpipe")
                && e.metadata().map(|m| m.len() > (4 << 20)).unwrap_or(false)
        });
        tmp.then_some(())
    });
    let ns = net.ns(1);
    reset_all(&ns);
    let t = Instant::now();
    let r = p.finish(Duration::from_secs(90));
    let took = t.elapsed();
    unreset(&ns);
    eprintln!("failed after {took:?}:\n{}", r.stderr);
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("n1"), "names the host:\n{}", r.stderr);
    // The hop's dead-peer time (30 s) plus the timeout bounds it.
    assert!(
        took < Duration::from_secs(60),
        "took {took:?}:\n{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        b"the old contents\n",
        "> FILE replaced"
    );
    let left = net.wait_clean(Duration::from_secs(15));
    assert!(left.is_empty(), "processes left over: {left:?}");
}

#[test]
fn ctrl_c_while_a_hosts_session_is_down_ends_everything() {
    need_root!("network namespaces and nftables");
    need_ssh!();
    let net = Netns::start_with("rac", 2);
    let args = vec![
        "-v".to_string(),
        "--reconnect-timeout".into(),
        "8".into(),
        "n1:yes".into(),
        "n2:cat".into(),
    ];
    let p = net.start_rdpipe(&args, None);
    assert!(
        p.wait_stdout_len(4 << 20, Duration::from_secs(30)),
        "no data flows"
    );
    let masters = masters_of("n1");
    let ns = net.ns(1);
    reset_all(&ns);
    for m in masters {
        kill("-KILL", m);
    }
    p.wait_stderr_line("re-attaching", Duration::from_secs(20));
    p.signal("-INT");
    let r = p.finish(Duration::from_secs(20));
    unreset(&ns);
    assert_eq!(r.code(), Some(130), "{}", r.stderr);
    // The agent on n1 waits out its re-attach time (8 s), then ends.
    let left = net.wait_clean(Duration::from_secs(20));
    assert!(left.is_empty(), "processes left over: {left:?}");
}

/// A command in host n1's namespace, run through `prefix` (`setpriv ...`).
fn in_host(net: &Netns, prefix: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &net.ns(1)]).args(prefix);
    c
}

/// `rdpipe --agent-attach PATH` on host n1, through `prefix`.
fn attach(net: &Netns, prefix: &[&str], path: &str) -> Command {
    let mut c = in_host(net, prefix);
    c.arg(rdpipe()).args(["--agent-attach", path]);
    c
}

#[test]
fn another_user_cannot_attach_to_an_agent() {
    need_root!("network namespaces and another uid");
    need_ssh!();
    let net = Netns::start_with("rau", 2);
    let args = vec![
        "-vv".to_string(),
        "n1:sleep 30; echo late".into(),
        "n2:cat".into(),
    ];
    let p = net.start_rdpipe(&args, None);
    let line = p.wait_stderr_line("re-attachable at ", Duration::from_secs(30));
    let path = line
        .split("re-attachable at ")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    let dir = std::path::Path::new(&path).parent().unwrap();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
    // As nobody: the directory keeps a direct connect out, and our own
    // helper refuses to hand a channel to a directory not its user's.
    let o = in_host(
        &net,
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
    )
    .args([
        "/usr/bin/python3",
        "-c",
        "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])",
    ])
    .arg(&path)
    .output()
    .unwrap();
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("PermissionError"),
        "{o:?}"
    );
    let o = attach(
        &net,
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        &path,
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no agent at"),
        "{o:?}"
    );
    // As root without the secret: turned away; the run goes on.
    let mut c = attach(&net, &[], &path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut i = c.stdin.take().unwrap();
        writeln!(i, "ATTACH {} 0", "00".repeat(32)).unwrap();
    }
    let st = wait_bounded(&mut c, Duration::from_secs(20), "the helper");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut c.stdout.take().unwrap(), &mut out).unwrap();
    assert!(!out.contains("ATTACHED"), "{out}");
    assert!(st.success(), "the agent let the helper go");
    p.wait_stderr_line(
        "re-attach refused: the attaching process presented a wrong secret",
        Duration::from_secs(10),
    );
    p.signal("-TERM");
    let r = p.finish(Duration::from_secs(20));
    assert_ne!(r.code(), Some(0));
    net.assert_clean();
    // An attach to a run that ended: one line.
    let o = attach(&net, &[], &path).output().unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).lines().count(),
        1,
        "{o:?}"
    );
}

/// A run that never loses its channel leaves no attach socket behind, and
/// its agents' stderr (through the relay) reaches rdpipe's stderr whole.
#[test]
fn a_normal_run_leaves_no_attach_socket_and_keeps_stderr() {
    need_root!("network namespaces");
    need_ssh!();
    let net = Netns::start_with("ran", 2);
    let args = vec![
        "-vv".to_string(),
        "n1:cat; echo to-stderr-n1 >&2".into(),
        "n2:cat".into(),
    ];
    let r = net.rdpipe(&args, Some(b"hello\n".to_vec()), 60);
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, b"hello\n");
    assert!(
        r.stderr.lines().any(|l| l == "n1: to-stderr-n1"),
        "{}",
        r.stderr
    );
    let paths: Vec<String> = r
        .stderr
        .lines()
        .filter_map(|l| l.split("re-attachable at ").nth(1))
        .map(|p| p.trim().to_string())
        .collect();
    assert_eq!(paths.len(), 2, "{}", r.stderr);
    for p in paths {
        let dir = std::path::Path::new(&p).parent().unwrap().to_path_buf();
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    net.assert_clean();
}
