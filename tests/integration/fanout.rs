//! One stream to many hosts (`rdpipe --to HOST:CMD ...`, chain relay) across
//! network-namespace hosts with their own sshd (root only; SKIPPED otherwise):
//! every sink's copy byte-exact (compared by checksum), a failing sink command
//! that stops neither the relay nor the other sinks, `--min-ok`, and SIGINT
//! leaving no process on any host.

use crate::support::*;

use std::time::Duration;

/// rdpipe's stdin to `hosts` sinks, each writing its own file (every other one
/// through a command), all byte-exact; -v names every sink ok with the
/// source's checksum.
fn sinks_byte_exact(tag: &str, hosts: usize, size: usize) {
    let net = Netns::start_with(tag, hosts);
    let data = random_bytes(size, hosts as u64);
    let sum = xxh3_hex(&data);
    let mut a = vec!["-v".to_string(), "--json".into(), net.dir.s("report.json")];
    for h in 1..=hosts {
        let out = net.dir.s(&format!("out{h}"));
        a.push("--to".into());
        a.push(if h % 2 == 1 {
            format!("n{h}:> {out}")
        } else {
            format!("n{h}:cat > {out}")
        });
    }
    let r = net.rdpipe(&a, Some(data.clone()), 240);
    r.ok();
    assert!(r.stdout.is_empty());
    eprintln!(
        "fan-out: {} MiB to {hosts} sinks in {:.2} s (rdpipe's wall time, ssh set-up included)",
        size >> 20,
        r.elapsed.as_secs_f64()
    );
    for h in 1..=hosts {
        let got = file_xxh3(&net.dir.path(&format!("out{h}")));
        eprintln!("sink n{h}: xxh3 {got} (source {sum})");
        assert_eq!(got, sum, "n{h}'s copy differs");
        let line = format!("rdpipe: sink [{h}] n{h}: ok: {} bytes over tcp", data.len());
        assert!(
            r.stderr
                .lines()
                .any(|l| l.starts_with(&line) && l.contains(&sum)),
            "no '{line}':\n{}",
            r.stderr
        );
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(net.dir.path("report.json")).unwrap())
            .unwrap();
    let sinks = v["sinks"].as_array().expect("sinks in the report");
    assert_eq!(sinks.len(), hosts);
    assert!(sinks
        .iter()
        .all(|s| s["ok"] == true && s["verified"] == true && s["checksum"] == sum.as_str()));
    // The source sent the stream once: one hop out of rdpipe, then one per relay.
    let hops = v["hops"].as_array().unwrap();
    assert_eq!(hops.len(), hosts);
    assert_eq!(hops[0]["from"], "rdpipe stdin");
    net.assert_clean();
}

#[test]
fn fanout_three_sinks_byte_exact() {
    need_root!("network namespaces");
    sinks_byte_exact("fa", 3, 128 << 20);
}

#[test]
fn fanout_five_sinks_byte_exact() {
    need_root!("network namespaces");
    sinks_byte_exact("fb", 5, 64 << 20);
}

#[test]
fn fanout_failing_sink_does_not_stop_the_others() {
    need_root!("network namespaces");
    let net = Netns::start("fc");
    let d = &net.dir;
    let data = random_bytes(64 << 20, 77);
    let sum = xxh3_hex(&data);
    std::fs::write(d.path("src"), &data).unwrap();
    let sinks = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        a.extend([
            format!("n1:< {}", d.s("src")),
            "--to".into(),
            format!("n2:> {}", d.s("o2")),
            "--to".into(),
            "n3:head -c 1000 >/dev/null; exit 4".into(),
            "--to".into(),
            format!("n1:cat > {}", d.s("o1")),
        ]);
        a
    };
    // The middle sink's command fails: it still relays, the others finish
    // byte-exact, the status is its command's, and the summary names it.
    let r = net.rdpipe(&sinks(&[]), None, 120);
    assert_eq!(r.code(), Some(4), "{}", r.stderr);
    assert_eq!(file_xxh3(&d.path("o2")), sum);
    assert_eq!(file_xxh3(&d.path("o1")), sum);
    assert!(
        r.stderr.lines().any(|l| l.starts_with(
            "rdpipe: sink [3] n3: FAILED (the command exited with status 4): 67108864 bytes over tcp"
        ) && l.contains("relayed to [4] n1")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("rdpipe: error: 1 of 3 sinks failed (n3)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("rdpipe: sink [2] n2: ok:")),
        "{}",
        r.stderr
    );
    net.assert_clean();
    // --min-ok 2: the same run succeeds, with a warning.
    std::fs::remove_file(d.path("o1")).unwrap();
    let r = net.rdpipe(&sinks(&["--min-ok", "2"]), None, 120);
    r.ok();
    assert_eq!(file_xxh3(&d.path("o1")), sum);
    assert!(
        r.stderr
            .contains("rdpipe: warning: 1 of 3 sinks failed; 2 succeeded (--min-ok 2)"),
        "{}",
        r.stderr
    );
    net.assert_clean();
}

#[test]
fn fanout_sigint_mid_stream_leaves_nothing() {
    need_root!("network namespaces");
    let net = Netns::start("fd");
    let mark = format!("FANMARK{}", std::process::id());
    let s = net.start_rdpipe(
        &[
            format!("n1:yes {mark}"),
            "--to".into(),
            format!("n2:cat >/dev/null # {mark}"),
            "--to".into(),
            "n3:cat >/dev/null".into(),
            "--to".into(),
            "n1:wc -c".into(),
        ],
        None,
    );
    wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
    wait_for(&format!("cat >/dev/null # {mark}"), Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(700));
    s.interrupt();
    net.assert_clean();
}

/// `eth0`'s transmitted bytes in host namespace `h`.
fn tx_bytes(net: &Netns, h: usize) -> u64 {
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", &net.ns(h), "cat"])
        .arg("/sys/class/net/eth0/statistics/tx_bytes")
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

#[test]
fn fanout_source_host_sends_each_byte_once() {
    need_root!("network namespaces");
    // The source on n1, three sinks on other hosts: n1's interface carries the
    // stream once (plus protocol overhead), not three times.
    let net = Netns::start_with("fe", 4);
    let size = 64usize << 20;
    std::fs::write(net.dir.path("src"), random_bytes(size, 3)).unwrap();
    let mut a = vec![format!("n1:< {}", net.dir.s("src"))];
    for h in 2..=4 {
        a.extend(["--to".into(), format!("n{h}:> /dev/null")]);
    }
    let before = tx_bytes(&net, 1);
    net.rdpipe(&a, None, 120).ok();
    let sent = tx_bytes(&net, 1) - before;
    let ratio = sent as f64 / size as f64;
    eprintln!("fan-out to 3 sinks: the source host sent {sent} bytes for a {size}-byte stream ({ratio:.3} per byte)");
    assert!(ratio < 1.1, "{ratio:.3} bytes sent per byte of stream");
    net.assert_clean();
}

#[test]
fn fanout_to_a_slurm_hostlist_is_one_sink_per_host_in_order() {
    let net = Netns::start_with("fanhl", 3);
    let data = random_bytes(3 << 20, 9);
    let sum = xxh3_hex(&data);
    let r = net.rdpipe(&["-v", "--to", "n[1-3]:wc -c"], Some(data.clone()), 240);
    r.ok();
    for h in 1..=3 {
        let line = format!("rdpipe: sink [{h}] n{h}: ok: {} bytes over tcp", data.len());
        assert!(
            r.stderr
                .lines()
                .any(|l| l.starts_with(&line) && l.contains(&sum)),
            "no '{line}':\n{}",
            r.stderr
        );
    }
    // A malformed list is a usage error, before anything runs.
    let r = net.rdpipe(&["--to", "n[1-:wc -c"], Some(vec![]), 30);
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("host list 'n[1-'"), "{}", r.stderr);
    net.assert_clean();
}
