//! rdpipe across three "hosts": network namespaces joined by veth pairs to a bridge,
//! each with its own sshd, rdpipe itself running in a fourth namespace. Needs root
//! (CI runs as root); each test says SKIPPED loudly otherwise. Every test checks at
//! the end that no process of the pipeline is left in any namespace.

use crate::support::*;

use std::time::Duration;

fn args(net: &Netns, extra: &[&str]) -> Vec<String> {
    let mut v = net.base_args();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

#[test]
fn netns_hello_olleh() {
    need_root!("network namespaces");
    let net = Netns::start("a");
    let r = net.rdpipe(
        &["n1:tr [:lower:] [:upper:]", "n2:rev"],
        Some(b"hello\n".to_vec()),
        60,
    );
    r.ok();
    assert_eq!(r.stdout_str(), "OLLEH\n");
    net.assert_clean();
}

#[test]
fn netns_64mib_three_hosts_tee_checksums() {
    need_root!("network namespaces");
    let net = Netns::start("b");
    let data = random_bytes(64 << 20, 64);
    let sum = xxh3_hex(&data);
    let tee = net.dir.s("tee");
    let r = net.rdpipe(
        &["-v", "n1:cat", &format!("n2:tee {tee}"), "n3:cat"],
        Some(data.clone()),
        240,
    );
    r.ok();
    assert!(
        r.stdout == data,
        "stdout differs ({} bytes)",
        r.stdout.len()
    );
    assert!(
        std::fs::read(&tee).unwrap() == data,
        "tee copy on n2 differs"
    );
    // rdpipe stdin -> n1 -> n2 -> n3 -> rdpipe stdout: each hop verified by both
    // ends and reported with the input's checksum.
    let hops: Vec<&str> = r.stderr.lines().filter(|l| l.contains(" -> ")).collect();
    assert_eq!(hops.len(), 4, "{}", r.stderr);
    for l in &hops {
        assert!(
            l.contains(&sum) && l.contains(&format!("{} bytes", data.len())),
            "{l}"
        );
    }
    assert!(
        hops[1].starts_with("rdpipe: [1] n1 -> [2] n2: tcp"),
        "{}",
        hops[1]
    );
    assert!(
        r.stderr.lines().any(|l| l.starts_with("Bandwidth ")),
        "{}",
        r.stderr
    );
    net.assert_clean();
}

#[test]
fn netns_file_operators() {
    need_root!("network namespaces");
    let net = Netns::start("c");
    let d = &net.dir;
    std::fs::write(d.path("in"), "abc\n").unwrap();
    net.rdpipe(
        &[
            &format!("n1:< {}", d.s("in")),
            "n2:tr a-z A-Z",
            &format!("n3:> {}", d.s("out")),
        ],
        None,
        60,
    )
    .ok();
    assert_eq!(std::fs::read_to_string(d.path("out")).unwrap(), "ABC\n");
    let r = net.rdpipe(
        &[
            "n1:cat",
            &format!("n2:> {}", d.s("mid")),
            &format!("n3:< {}", d.s("in")),
            "n1:rev",
        ],
        Some(b"xyz\n".to_vec()),
        60,
    );
    r.ok();
    assert_eq!(r.stdout_str(), "cba\n");
    assert_eq!(std::fs::read_to_string(d.path("mid")).unwrap(), "xyz\n");
    net.assert_clean();
}

#[test]
fn netns_repeated_host_and_more_than_max_sessions() {
    need_root!("network namespaces");
    let net = Netns::start("d");
    // tac twice is the identity for data that ends with a newline.
    let mut data = random_bytes(2 << 20, 5);
    *data.last_mut().unwrap() = b'\n';
    let r = net.rdpipe(
        &["n1:cat", "n2:tac", "n1:tac", "n3:cat"],
        Some(data.clone()),
        60,
    );
    r.ok();
    assert!(r.stdout == data);
    // 12 segments on n2 (sshd's MaxSessions is 10).
    let mut a = vec!["n1:cat"];
    a.extend(std::iter::repeat_n("n2:cat", 12));
    a.push("n3:cat");
    let r = net.rdpipe(&a, Some(data.clone()), 120);
    r.ok();
    assert!(r.stdout == data);
    net.assert_clean();
}

#[test]
fn netns_two_pipelines_at_once() {
    need_root!("network namespaces");
    let net = Netns::start("e");
    let d1 = random_bytes(8 << 20, 1);
    let d2 = random_bytes(8 << 20, 2);
    let p = net.exec_prefix();
    let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
    let a = start(
        &p,
        &args(&net, &["n1:cat", "n2:cat", "n3:cat"]),
        Some(d1.clone()),
    );
    let b = start(
        &p,
        &args(&net, &["n3:cat", "n2:cat", "n1:cat"]),
        Some(d2.clone()),
    );
    let (ra, rb) = (
        a.finish(Duration::from_secs(120)),
        b.finish(Duration::from_secs(120)),
    );
    ra.ok();
    rb.ok();
    assert!(ra.stdout == d1 && rb.stdout == d2);
    net.assert_clean();
}

#[test]
fn netns_failing_middle_command() {
    need_root!("network namespaces");
    let net = Netns::start("f");
    let r = net.rdpipe(
        &["n1:cat", "n2:head -c 1000 >/dev/null; exit 5", "n3:cat"],
        Some(random_bytes(8 << 20, 9)),
        30,
    );
    assert_eq!(r.code(), Some(5), "{}", r.stderr);
    assert!(
        r.stderr.starts_with(
            "rdpipe: error: n2 [2] 'head -c 1000 >/dev/null; exit 5': the command exited with status 5"
        ),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty());
    net.assert_clean();
    // n1's cat dies of SIGPIPE once its sender stops, and its stdin breaks in
    // the same instant: whichever of the two the agent sees first, no line
    // (not even with -v, which prints every failure) blames n1's cat for
    // stopping to read.
    for round in 0..3 {
        let r = net.rdpipe(
            &[
                "-v",
                "n1:cat",
                "n2:head -c 1000 >/dev/null; exit 5",
                "n3:cat",
            ],
            Some(random_bytes(8 << 20, round)),
            30,
        );
        assert_eq!(r.code(), Some(5), "{}", r.stderr);
        let blamed = r
            .stderr
            .lines()
            .filter(|l| l.contains("stopped reading its input"))
            .find(|l| !l.contains("n2 [2]"));
        assert!(blamed.is_none(), "round {round}: {}", r.stderr);
        net.assert_clean();
    }
}

#[test]
fn netns_sigint_mid_stream_leaves_nothing() {
    need_root!("network namespaces");
    let net = Netns::start("g");
    let p = net.exec_prefix();
    let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
    let mark = format!("MARK{}", std::process::id());
    let s = start(
        &p,
        &args(
            &net,
            &[
                &format!("n1:yes {mark}"),
                "n2:cat",
                &format!("n3:cat >/dev/null # {mark}"),
            ],
        ),
        None,
    );
    wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(700));
    s.interrupt();
    net.assert_clean();
}

#[test]
fn netns_missing_remote_tool() {
    need_root!("network namespaces");
    let net = Netns::start("h");
    let p = net.exec_prefix();
    let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
    let a: Vec<String> = [
        "-F",
        &net.config.to_string_lossy(),
        "--remote-bin",
        "/nonexistent",
        "n1:cat",
        "n2:cat",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let r = start(&p, &a, None).finish(Duration::from_secs(30));
    assert_eq!(r.code(), Some(127), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "rdpipe: error: n2: rdrecv not found (install rdma-pipe there or pass --remote-bin)"
        ),
        "{}",
        r.stderr
    );
    net.assert_clean();
}

#[test]
fn netns_data_host_override_is_used() {
    need_root!("network namespaces");
    let net = Netns::start("i");
    // A second address on n2, like an IPoIB interface next to the management one.
    let ns2 = net.ns(2);
    assert!(std::process::Command::new("ip")
        .args(["-n", &ns2, "addr", "add", "10.99.0.22/24", "dev", "eth0"])
        .status()
        .unwrap()
        .success());
    let r = net.rdpipe(
        &["-v", "--data-host", "n2=10.99.0.22", "n1:cat", "n2:rev"],
        Some(b"abc\n".to_vec()),
        60,
    );
    r.ok();
    assert_eq!(r.stdout_str(), "cba\n");
    // An address nobody has: the hop into n2 fails, naming it, within the bound.
    let r = net.rdpipe(
        &[
            "--connect-timeout",
            "2",
            "--data-host",
            "n2=10.99.0.99",
            "n1:cat",
            "n2:rev",
        ],
        Some(b"abc\n".to_vec()),
        60,
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("10.99.0.99"), "{}", r.stderr);
    net.assert_clean();
}
