//! A relay host of a fan-out (`rdpipe --to ...` chain) that dies mid-stream
//! (root only, network-namespace hosts with their own sshd; SKIPPED
//! otherwise): the chain re-links around it and the sink after it still gets
//! the whole stream, byte-exact and verified; when the bytes it misses have
//! left the upstream relay's replay window, or re-linking is off
//! (`--replay-window 0`), the sink before it still gets its whole copy, the
//! ones after it fail clearly and promptly (no hang, no published `> FILE`,
//! the summary names the dead host and why), and nothing is left running on
//! any host.

use crate::support::*;

use std::path::Path;
use std::time::{Duration, Instant};

/// `n2`'s sink agent (its `rdrecv --agent ... --sink` process): the relay.
fn relay_agent(net: &Netns, h: usize) -> Option<u32> {
    net.stray_pids(h).into_iter().find(|p| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .map(|c| {
                let c = String::from_utf8_lossy(&c).replace('\0', " ");
                c.contains("--agent") && c.contains("--sink")
            })
            .unwrap_or(false)
    })
}

/// The length of `path`, or 0.
fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Starts three `> FILE` sinks n1 -> n2 -> n3 fed from a `< FILE` of
/// `data` on n1, paced by `--rate-limit`, and waits until the stream flows
/// through n2 (its file, a temporary until it is published, has data).
/// Returns the run and n2's relay agent.
fn start_chain(net: &Netns, extra: &[&str], data: &[u8]) -> (Started, u32) {
    let d = &net.dir;
    std::fs::write(d.path("src"), data).unwrap();
    let mut a = net.base_args();
    a.extend(extra.iter().map(|s| s.to_string()));
    a.extend([
        "--rate-limit".into(),
        "8M".into(),
        "--json".into(),
        d.s("report.json"),
        format!("n1:< {}", d.s("src")),
        "--to".into(),
        format!("n1:> {}", d.s("o1")),
        "--to".into(),
        format!("n2:> {}", d.s("o2")),
        "--to".into(),
        format!("n3:> {}", d.s("o3")),
    ]);
    let p = net.exec_prefix();
    let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
    let s = start(&p, &a, None);
    // Readiness: n2's copy (a temporary beside o2 until it is published) has
    // data, so the stream is flowing through n2.
    let pid = wait_until("n2's agent receiving", Duration::from_secs(30), || {
        let growing = d
            .names()
            .iter()
            .any(|n| n != "o2" && n.contains("o2") && len(&d.path(n)) > 0);
        growing.then(|| relay_agent(net, 2)).flatten()
    });
    (s, pid)
}

/// [`start_chain`], then the middle relay (n2) is killed with `how`.
/// Returns the run.
fn kill_middle(net: &Netns, extra: &[&str], how: &str) -> (Run, Vec<u8>) {
    let data = random_bytes(48 << 20, 16);
    let (s, pid) = start_chain(net, extra, &data);
    match how {
        "agent" => kill("-9", pid),
        _ => {
            // The whole ssh session: every process of n2 but its sshd listener.
            for p in net.stray_pids(2) {
                kill("-9", p);
            }
        }
    }
    let killed = Instant::now();
    let mut s = s;
    let ended = poll(Duration::from_secs(40), Duration::from_millis(50), || {
        s.child.try_wait().unwrap()
    });
    if ended.is_none() {
        for h in 0..=3 {
            eprintln!("left on n{h}:\n{}", ps(&net.stray_pids(h)));
        }
    }
    let r = s.finish(Duration::from_secs(20));
    eprintln!(
        "rdpipe ended {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    (r, data)
}

/// The middle relay dies (`how`): the sink before it still gets its whole
/// copy (published, byte-exact; its summary line says its relay broke); rdpipe
/// fails with errors that name n2, the summary says n2's agent died and n3
/// lost the stream to it, n3's file is not published (nor its temporary
/// left), the `--json` report says the same, and nothing is left running on
/// any host. With `--min-ok 1` the same run succeeds with a warning.
fn dead_relay_fails_clearly(tag: &str, how: &str) {
    let net = Netns::start(tag);
    let d = &net.dir;
    let (r, data) = kill_middle(&net, &["--replay-window", "0"], how);
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(45), "{:?}", r.elapsed);
    let sum = xxh3_hex(&data);
    assert_eq!(xxh3_hex(&std::fs::read(d.path("o1")).unwrap()), sum);
    let line = |start: &str| r.stderr.lines().find(|l| l.starts_with(start));
    let first = line("rdpipe: sink [2] n1: ok: ").unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(
        first.contains(&sum) && first.ends_with("relay to [3] n2 broke"),
        "{first}"
    );
    assert!(
        line("rdpipe: sink [3] n2: FAILED (its agent died mid-stream)").is_some(),
        "{}",
        r.stderr
    );
    assert!(
        line("rdpipe: sink [4] n3: FAILED (the stream did not arrive whole: relay [3] n2 died upstream)").is_some(),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("rdpipe: error: n2 [3]") && l.contains("the agent died")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("rdpipe: error: 2 of 3 sinks failed (n2, n3)"),
        "{}",
        r.stderr
    );
    let names = d.names();
    assert!(
        !names.iter().any(|n| n.contains("o3")) && !names.contains(&"o2".to_string()),
        "{names:?}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("report.json")).unwrap()).unwrap();
    let sinks = v["sinks"].as_array().expect("sinks in the report");
    assert_eq!(sinks[0]["ok"], true);
    assert_eq!(sinks[1]["host"], "n2");
    assert_eq!(sinks[1]["ok"], false);
    assert_eq!(sinks[1]["problem"], "its agent died mid-stream");
    assert_eq!(sinks[2]["ok"], false);
    assert!(sinks[2]["problem"]
        .as_str()
        .is_some_and(|p| p.contains("relay [3] n2 died")));
    net.assert_clean();
    // --min-ok 1: n1's copy is enough. (The killed agent left its temporary
    // file: remove it, it is the next run's readiness signal.)
    for n in d.names() {
        if n.starts_with(".o2.") || n == "o1" {
            std::fs::remove_file(d.path(&n)).unwrap();
        }
    }
    let (r, _) = kill_middle(&net, &["--replay-window", "0", "--min-ok", "1"], how);
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(xxh3_hex(&std::fs::read(d.path("o1")).unwrap()), sum);
    assert!(
        r.stderr
            .contains("rdpipe: warning: 2 of 3 sinks failed; 1 succeeded (--min-ok 1)"),
        "{}",
        r.stderr
    );
    net.assert_clean();
}

#[test]
fn relay_agent_killed_mid_stream_fails_clearly() {
    need_root!("network namespaces");
    dead_relay_fails_clearly("ra", "agent");
}

#[test]
fn relay_ssh_session_killed_mid_stream_fails_clearly() {
    need_root!("network namespaces");
    dead_relay_fails_clearly("rs", "session");
}

/// A chain n1 -> n2 -> n3 of a 256 MiB stream whose last sink's command holds
/// its input until the file `GO` exists, so the whole chain backs up behind
/// it; once n2 has taken 4 MiB (the stream is surely mid-way: it cannot end
/// while n3 holds it), host `victim`'s sink agent is SIGKILLed (`how`:
/// "agent"), or its whole ssh session ("session"), then `GO` is made.
/// Returns the run and the stream.
fn kill_behind_a_held_sink(
    net: &Netns,
    extra: &[&str],
    victim: usize,
    how: &str,
) -> (Run, Vec<u8>) {
    let d = &net.dir;
    let data = random_bytes(256 << 20, 23);
    std::fs::write(d.path("src"), &data).unwrap();
    let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    a.extend([
        "--json".into(),
        d.s("report.json"),
        format!("n1:< {}", d.s("src")),
        "--to".into(),
        format!("n1:> {}", d.s("o1")),
        "--to".into(),
        format!("n2:> {}", d.s("o2")),
        "--to".into(),
        format!(
            "n3:while [ ! -e {go} ]; do sleep 0.05; done; cat > {o3}",
            go = d.s("GO"),
            o3 = d.s("o3")
        ),
    ]);
    let s = net.start_rdpipe(&a, None);
    // Readiness: n2's copy (a temporary beside o2) holds 4 MiB.
    let pid = wait_until("n2's agent holding 4 MiB", Duration::from_secs(60), || {
        let taken = d
            .names()
            .iter()
            .any(|n| n != "o2" && n.contains("o2") && len(&d.path(n)) >= 4 << 20);
        taken.then(|| relay_agent(net, victim)).flatten()
    });
    match how {
        "agent" => kill("-9", pid),
        _ => {
            for p in net.stray_pids(victim) {
                kill("-9", p);
            }
        }
    }
    std::fs::write(d.path("GO"), b"").unwrap();
    let r = s.finish(Duration::from_secs(120));
    (r, data)
}

/// The relay dies mid-stream: n1 re-links straight to n3, which resumes
/// where it was; n1 and n3 get the stream byte-exact (their summary lines say
/// so: n1 relayed to n3 around n2, n3 verified the whole stream over the
/// re-link), n2 is reported failed, `--min-ok 2` makes the run succeed with a
/// warning, the `--json` report agrees, nothing is left running.
fn relinks_around(tag: &str, how: &str) {
    let net = Netns::start(tag);
    let d = &net.dir;
    let (r, data) = kill_behind_a_held_sink(&net, &["--min-ok", "2"], 2, how);
    eprintln!("{}", r.stderr);
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    let sum = xxh3_hex(&data);
    assert_eq!(file_xxh3(&d.path("o1")), sum);
    assert_eq!(file_xxh3(&d.path("o3")), sum);
    let line = |start: &str| {
        r.stderr
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line {start:?} in\n{}", r.stderr))
    };
    let first = line("rdpipe: sink [2] n1: ok: ");
    assert!(
        first.contains(&sum) && first.ends_with("relayed to [4] n3 (re-linked around [3] n2)"),
        "{first}"
    );
    line("rdpipe: sink [3] n2: FAILED (its agent died mid-stream)");
    let last = line("rdpipe: sink [4] n3: ok: 268435456 bytes over tcp, re-linked at byte ");
    assert!(
        last.contains(&format!(
            "{} verified, xxh3 {sum}",
            rdpipe_wire::Integrity::preferred().as_str()
        )),
        "{last}"
    );
    assert!(
        r.stderr
            .contains("rdpipe: warning: 1 of 3 sinks failed; 2 succeeded (--min-ok 2)"),
        "{}",
        r.stderr
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("report.json")).unwrap()).unwrap();
    let sinks = v["sinks"].as_array().expect("sinks in the report");
    assert_eq!(sinks[0]["ok"], true);
    assert_eq!(sinks[1]["ok"], false);
    assert_eq!(sinks[2]["ok"], true);
    assert_eq!(sinks[2]["verified"], true);
    assert_eq!(sinks[2]["bytes"], 256u64 << 20);
    net.assert_clean();
}

#[test]
fn relay_agent_killed_mid_stream_the_chain_relinks_around_it() {
    need_root!("network namespaces");
    relinks_around("rl", "agent");
}

#[test]
fn relay_session_killed_mid_stream_the_chain_relinks_around_it() {
    need_root!("network namespaces");
    relinks_around("rk", "session");
}

/// The last sink dies: nothing is left downstream to re-link to, rdpipe
/// tells the relay before it at once (`UNLINK`), whose own copy completes
/// without waiting for a re-link; the run ends promptly and fails (the dead
/// sink), nothing is left running.
#[test]
fn last_sink_killed_the_relay_before_it_does_not_wait() {
    need_root!("network namespaces");
    let net = Netns::start("rz");
    let d = &net.dir;
    let (r, data) = kill_behind_a_held_sink(&net, &[], 3, "agent");
    eprintln!("{}", r.stderr);
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(25), "{:?}", r.elapsed);
    let sum = xxh3_hex(&data);
    assert_eq!(file_xxh3(&d.path("o1")), sum);
    assert_eq!(file_xxh3(&d.path("o2")), sum);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("rdpipe: sink [3] n2: ok: ")
                && l.ends_with("relay to [4] n3 broke")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("rdpipe: sink [4] n3: FAILED (its agent died mid-stream)"),
        "{}",
        r.stderr
    );
    net.assert_clean();
}

/// The same with a replay window far smaller than what the chain held behind
/// n3: n1 cannot resend what n3 missed, so n3 fails with one line that says
/// so and how to fix it; n1's own copy is whole, the run fails, nothing is
/// left running.
#[test]
fn relay_killed_beyond_the_replay_window_fails_clearly() {
    need_root!("network namespaces");
    let net = Netns::start("rw");
    let d = &net.dir;
    let (r, data) = kill_behind_a_held_sink(&net, &["--replay-window", "4K"], 2, "agent");
    eprintln!("{}", r.stderr);
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert_eq!(file_xxh3(&d.path("o1")), xxh3_hex(&data));
    let last = r
        .stderr
        .lines()
        .find(|l| l.starts_with("rdpipe: sink [4] n3: FAILED (the stream did not arrive whole: relay [3] n2 died upstream and the re-link around it failed: cannot resume the stream at byte "))
        .unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(
        last.contains("(a larger --replay-window keeps more)"),
        "{last}"
    );
    assert!(
        r.stderr
            .contains("rdpipe: error: 2 of 3 sinks failed (n2, n3)"),
        "{}",
        r.stderr
    );
    net.assert_clean();
}

/// The relay's data connections (its incoming and its outgoing chain hop)
/// are reset mid-stream while every agent lives: both hops reconnect to the
/// same peers and resume (no re-link: nobody died), every sink's copy is
/// byte-exact, the `--json` report lists the reconnects, nothing is left.
#[test]
fn relay_connections_reset_mid_stream_the_chain_reconnects() {
    need_root!("network namespaces");
    if !crate::reconnect::can_reset() {
        skip(
            &test_name(),
            "this kernel cannot destroy sockets (ss -K needs CONFIG_INET_DIAG_DESTROY)",
        );
        return;
    }
    let net = Netns::start("rc");
    let d = &net.dir;
    let data = random_bytes(48 << 20, 17);
    let (s, pid) = start_chain(&net, &[], &data);
    let killed = reset_connections_of(&net.ns(2), pid, true);
    assert!(killed >= 2, "reset {killed} connections of n2's relay");
    let r = s.finish(Duration::from_secs(90));
    r.ok();
    let sum = xxh3_hex(&data);
    for o in ["o1", "o2", "o3"] {
        assert_eq!(xxh3_hex(&std::fs::read(d.path(o)).unwrap()), sum, "{o}");
    }
    assert!(!r.stderr.contains("re-linked"), "{}", r.stderr);
    assert!(json_reconnects(&d.path("report.json")) >= 1, "{}", r.stderr);
    let left = net.wait_clean(Duration::from_secs(10));
    assert!(left.is_empty(), "{left:?}");
}
