//! The fault suite for whole pipelines, network faults: a link cut
//! mid-stream between two network-namespace hosts, and packet loss on it. Root
//! only (`SKIPPED: ... needs root` otherwise; a failure with
//! `RDPIPE_REQUIRE_ALL=1`). The other faults and the shared helpers are in
//! `faults_pipeline`; docs/faults.md has the table of faults, expectations and
//! bounds.

use crate::faults_pipeline::{marker, nstart, verdict_lines, GONE};
use crate::support::*;
use std::process::Command;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// 2. The link of a host going down mid-stream.

/// Pids in namespace `n` that are not sshd (sshd's per-connection processes
/// for a connection whose peer vanished with the link are sshd's business, and
/// go when the link comes back and TCP notices).
fn pipeline_pids(net: &Netns, n: usize) -> Vec<u32> {
    net.stray_pids(n)
        .into_iter()
        .filter(|p| comm(*p) != "sshd" && comm(*p) != "sshd-session")
        .collect()
}

#[test]
fn netns_link_down_mid_stream_ends_within_the_dead_peer_bound() {
    need_root!("network namespaces");
    let mut rng = Rng::seeded("netns_link_down");
    let net = Netns::start("ld");
    let mark = marker("ld");
    let s = nstart(
        &net,
        &[
            "--reconnect-timeout",
            "5",
            &format!("n1:yes {mark}"),
            &format!("n2:cat >/dev/null # {mark}"),
        ],
        None,
    );
    wait_for(&format!("^yes {mark}"), Duration::from_secs(30));
    std::thread::sleep(rng.millis(100, 1500));
    let ns2 = net.ns(2);
    let down = Instant::now();
    assert!(Command::new("ip")
        .args(["-n", &ns2, "link", "set", "eth0", "down"])
        .status()
        .unwrap()
        .success());
    // Bound: the sender's unacknowledged data times out after DEAD_PEER_SECS
    // (30 s, TCP_USER_TIMEOUT), the hop tries to reconnect for
    // --reconnect-timeout (5 s), then teardown (4 s); 50 s with CI slack.
    let r = s.finish(Duration::from_secs(70));
    let took = down.elapsed();
    eprintln!("link down: rdpipe ended {took:?} after the link went down");
    assert!(
        r.code().is_some_and(|c| c != 0),
        "{:?}\n{}",
        r.status,
        r.stderr
    );
    assert!(took < Duration::from_secs(50), "{took:?}\n{}", r.stderr);
    let v = verdict_lines(&r);
    // The cut-off host as the root cause: its peers' transfers with it timed
    // out and its agent (whose ssh session is cut off too) said nothing.
    assert!(
        v.len() == 1
            && v[0].starts_with("rdpipe: error: n2 [2] ")
            && v[0].ends_with("is n2 down or cut off from the network?"),
        "{}",
        r.stderr
    );
    // The agent on the cut-off host ends by itself (its receiver's keepalive,
    // 30 s; at the latest the control channel's silence, 60 s), with the link
    // still down.
    let left = || -> Vec<(usize, Vec<u32>)> {
        (0..=3)
            .map(|n| (n, pipeline_pids(&net, n)))
            .filter(|(_, v)| !v.is_empty())
            .collect()
    };
    if poll(Duration::from_secs(70), Duration::from_millis(200), || {
        left().is_empty().then_some(())
    })
    .is_none()
    {
        let left = left();
        panic!(
            "left over with the link down: {left:?}\n{}",
            ps(&left.iter().flat_map(|(_, v)| v.clone()).collect::<Vec<_>>())
        );
    }
    eprintln!(
        "link down: every pipeline process gone {:?} after the cut",
        down.elapsed()
    );
    for n in 0..=3 {
        assert!(netns_listeners(&net.ns(n)).is_empty(), "ns {n} ports");
    }
    let _ = Command::new("ip")
        .args(["-n", &ns2, "link", "set", "eth0", "up"])
        .status();
}

/// A link that comes back within the bound costs nothing but the wait: the
/// hops (TCP retransmission, or a reconnect where a connection died) carry on
/// and the output is byte-exact.
#[test]
fn netns_link_down_for_ten_seconds_then_up_is_ridden_out() {
    need_root!("network namespaces");
    let net = Netns::start("lu");
    let data = random_bytes(48 << 20, 7);
    let want = xxh3_hex(&data);
    // Paced so that the stream is still running when the link goes down and
    // when it comes back (48 MiB at 2 MiB/s: about 24 s).
    let s = nstart(
        &net,
        &["--rate-limit", "2M", "-v", "n1:cat", "n2:cat"],
        Some(data.clone()),
    );
    std::thread::sleep(Duration::from_secs(3));
    let ns2 = net.ns(2);
    let link = |state: &str| {
        assert!(Command::new("ip")
            .args(["-n", &ns2, "link", "set", "eth0", state])
            .status()
            .unwrap()
            .success());
    };
    link("down");
    std::thread::sleep(Duration::from_secs(10));
    link("up");
    let r = s.finish(Duration::from_secs(150));
    r.ok();
    assert_eq!(r.stdout.len(), data.len(), "{}", r.stderr);
    assert_eq!(
        xxh3_hex(&r.stdout),
        want,
        "the output differs from the input"
    );
    let left = net.wait_clean(GONE);
    assert!(left.is_empty(), "{left:?}");
}

// ---------------------------------------------------------------------------
// 3. Packet loss.

/// Drops `pct` % of the packets leaving `dev` in namespace `ns`: netem when the
/// kernel has sch_netem, else an nftables rule (numgen random). None when
/// neither is available.
fn add_loss(ns: &str, dev: &str, pct: u32) -> Option<&'static str> {
    let netem = Command::new("ip")
        .args([
            "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
        ])
        .args(["netem", "loss", &format!("{pct}%")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if netem {
        return Some("tc netem");
    }
    let nft = |rule: &str| {
        Command::new("ip")
            .args(["netns", "exec", ns, "nft", rule])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let ok = nft("add table inet rdpfloss")
        && nft("add chain inet rdpfloss out { type filter hook output priority 0; }")
        && nft("add chain inet rdpfloss in { type filter hook input priority 0; }")
        && nft(&format!(
            "add rule inet rdpfloss out oifname {dev} numgen random mod 100 < {pct} drop"
        ))
        && nft(&format!(
            "add rule inet rdpfloss in iifname {dev} numgen random mod 100 < {pct} drop"
        ));
    ok.then_some("nftables numgen random")
}

#[test]
fn netns_packet_loss_still_byte_exact() {
    need_root!("network namespaces");
    let net = Netns::start("pl");
    let mut how = None;
    for h in 1..=3 {
        how = add_loss(&net.ns(h), "eth0", 2);
        if how.is_none() {
            skip(
                &test_name(),
                "neither tc netem (kernel without sch_netem) nor nft (package nftables) can drop packets here",
            );
            return;
        }
    }
    eprintln!(
        "packet loss: 2% each way on every host's link, with {}",
        how.unwrap()
    );
    let data = random_bytes(24 << 20, 3);
    let want = xxh3_hex(&data);
    let t = Instant::now();
    let r = nstart(&net, &["n1:cat", "n2:cat", "n3:cat"], Some(data.clone()))
        .finish(Duration::from_secs(180));
    r.ok();
    eprintln!("packet loss: 24 MiB in {:?}", t.elapsed());
    assert_eq!(r.stdout.len(), data.len());
    assert_eq!(xxh3_hex(&r.stdout), want);
    let left = net.wait_clean(GONE);
    assert!(left.is_empty(), "{left:?}");
}
