//! A relay-only segment (`HOST:`, an empty command) across network-namespace
//! hosts with their own sshd (root only; SKIPPED otherwise): the stream goes
//! through the host byte-exact while its agent runs no child process at all;
//! `-v` and `--json` show the segment as a relay; an upstream failure publishes
//! nothing downstream; first, last and same-host relays; SIGINT leaves nothing.

use crate::support::*;

use std::time::Duration;

/// The relay-only agent in host namespace `h` (its argv has `--agent` and
/// `--relay`), if it runs.
fn relay_agent(net: &Netns, h: usize) -> Option<u32> {
    net.stray_pids(h).into_iter().find(|p| {
        let argv = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        let words: Vec<&[u8]> = argv.split(|b| *b == 0).collect();
        words.contains(&&b"--agent"[..]) && words.contains(&&b"--relay"[..])
    })
}

/// The children of `pid` (every thread's), from /proc.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    tasks
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[test]
fn relay_only_is_byte_exact_and_runs_no_command() {
    need_root!("network namespaces");
    let net = Netns::start("ra");
    let d = &net.dir;
    let size = 192usize << 20;
    let data = random_bytes(size, 16);
    let sum = xxh3_hex(&data);
    std::fs::write(d.path("src"), &data).unwrap();
    // Paced, so that the stream lasts (about 3 s) while the relay is watched.
    let a = vec![
        "-v".to_string(),
        "--rate-limit".into(),
        "64M".into(),
        "--json".into(),
        d.s("report.json"),
        format!("n1:< {}", d.s("src")),
        "n2:".into(),
        format!("n3:> {}", d.s("out")),
    ];
    let s = net.start_rdpipe(&a, None);
    let agent = wait_until(
        "the relay-only agent on n2",
        Duration::from_secs(30),
        || relay_agent(&net, 2),
    );
    // While the agent lives: never a child (no shell, no command), and the
    // stream flows through it.
    let mut samples = 0;
    while std::path::Path::new(&format!("/proc/{agent}")).exists() {
        let kids = children(agent);
        assert!(
            kids.is_empty(),
            "the relay-only agent {agent} has children {kids:?}:\n{}",
            ps(&kids)
        );
        samples += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = s.finish(Duration::from_secs(120));
    r.ok();
    assert!(samples >= 10, "only {samples} samples of the relay agent");
    assert_eq!(file_xxh3(&d.path("out")), sum, "n3's copy differs");
    let line = format!(
        "rdpipe: [2] n2: relay only: {size} bytes from [1] n1 forwarded to [3] n3 (the same stream), no command"
    );
    assert!(
        r.stderr.lines().any(|l| l == line),
        "no '{line}':\n{}",
        r.stderr
    );
    for hop in ["[1] n1 -> [2] n2: tcp", "[2] n2 -> [3] n3: tcp"] {
        assert!(
            r.stderr.lines().any(|l| l.contains(hop)
                && l.contains(&format!("{size} bytes"))
                && l.contains(&sum)),
            "no hop line '{hop}':\n{}",
            r.stderr
        );
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("report.json")).unwrap()).unwrap();
    let seg = &v["segments"][1];
    assert_eq!(seg["relay"], true, "{seg}");
    assert_eq!(seg["action"], "", "{seg}");
    assert_eq!(seg["exit_status"], serde_json::Value::Null, "{seg}");
    assert_eq!(seg["ok"], true, "{seg}");
    assert_eq!(v["segments"][0]["relay"], false);
    let hops = v["hops"].as_array().unwrap();
    assert_eq!(hops.len(), 2);
    assert!(
        hops.iter().all(|h| h["verified"] == true
            && h["bytes"] == size as u64
            && h["checksum"] == sum.as_str()),
        "{hops:#?}"
    );
    net.assert_clean();
}

#[test]
fn relay_only_upstream_failure_publishes_nothing() {
    need_root!("network namespaces");
    let net = Netns::start("rb");
    let d = &net.dir;
    std::fs::write(d.path("out"), b"old contents\n").unwrap();
    // The source command fails after 32 MiB: the relay's outgoing stream is
    // aborted, n3's `> FILE` is not replaced, the status is the command's.
    let a = vec![
        "n1:head -c 33554432 /dev/urandom; exit 3".to_string(),
        "n2:".into(),
        format!("n3:> {}", d.s("out")),
    ];
    let r = net.rdpipe(&a, None, 120);
    assert_eq!(r.code(), Some(3), "{}", r.stderr);
    assert_eq!(std::fs::read(d.path("out")).unwrap(), b"old contents\n");
    assert!(
        r.stderr.lines().any(|l| l.starts_with("rdpipe: error: ")
            && l.contains("n1")
            && l.contains("status 3")),
        "{}",
        r.stderr
    );
    net.assert_clean();
    // The same with the relay's incoming stream cut by a truncated sender:
    // the upstream agent killed mid-stream.
    let mark = format!("RELAYCUT{}", std::process::id());
    let a = vec![
        format!("n1:yes {mark}"),
        "n2:".into(),
        format!("n3:> {}", d.s("out")),
    ];
    let s = net.start_rdpipe(&a, None);
    let yes = wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
    wait_until(
        "the relay-only agent on n2",
        Duration::from_secs(20),
        || relay_agent(&net, 2),
    );
    // The agent that runs `yes` is its parent's parent (guardian); SIGKILL
    // the whole chain of n1's agent processes.
    for p in net.stray_pids(1) {
        if !yes.contains(&p) {
            kill("-9", p);
        }
    }
    let r = s.finish(Duration::from_secs(60));
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(std::fs::read(d.path("out")).unwrap(), b"old contents\n");
    net.assert_clean();
}

#[test]
fn relay_only_first_last_same_host_and_blank() {
    need_root!("network namespaces");
    let net = Netns::start("rc");
    let d = &net.dir;
    let data = random_bytes(64 << 20, 5);
    let sum = xxh3_hex(&data);
    std::fs::write(d.path("src"), &data).unwrap();
    // First: fed by rdpipe's stdin.
    net.rdpipe(
        &["n2:".into(), format!("n3:> {}", d.s("o1"))],
        Some(data.clone()),
        120,
    )
    .ok();
    assert_eq!(file_xxh3(&d.path("o1")), sum);
    // Last: into rdpipe's stdout.
    let r = net.rdpipe(&[format!("n1:< {}", d.s("src")), "n2:".into()], None, 120);
    r.ok();
    assert_eq!(xxh3_hex(&r.stdout), sum);
    // Alone, blank (whitespace only): stdin through n2 to stdout.
    let r = net.rdpipe(&["n2:   "], Some(data.clone()), 120);
    r.ok();
    assert_eq!(xxh3_hex(&r.stdout), sum);
    // On the same host as both neighbours (loopback hops), then onward.
    let r = net.rdpipe(
        &[
            "-v".into(),
            format!("n1:< {}", d.s("src")),
            "n1:".into(),
            "n1:cat".into(),
            "n2:".into(),
            format!("n3:> {}", d.s("o2")),
        ],
        None,
        120,
    );
    r.ok();
    assert_eq!(file_xxh3(&d.path("o2")), sum);
    assert!(
        r.stderr
            .contains("rdpipe: [2] n1: relay only: 67108864 bytes")
            && r.stderr
                .contains("rdpipe: [4] n2: relay only: 67108864 bytes"),
        "{}",
        r.stderr
    );
    net.assert_clean();
}

#[test]
fn relay_only_sigint_mid_stream_leaves_nothing() {
    need_root!("network namespaces");
    let net = Netns::start("rd");
    let mark = format!("RELAYMARK{}", std::process::id());
    let s = net.start_rdpipe(
        &[
            format!("n1:yes {mark}"),
            "n2:".into(),
            format!("n3:cat >/dev/null # {mark}"),
        ],
        None,
    );
    wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
    wait_for(&format!("cat >/dev/null # {mark}"), Duration::from_secs(20));
    wait_until(
        "the relay-only agent on n2",
        Duration::from_secs(20),
        || relay_agent(&net, 2),
    );
    let r = s.interrupt();
    assert_eq!(r.code(), Some(130), "{}", r.stderr);
    net.assert_clean();
}
