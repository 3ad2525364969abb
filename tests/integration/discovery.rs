//! Data-address discovery's second rule, "routed and answering", as
//! the real agents carry it out: an agent told to `PROBE` a listening agent's
//! addresses answers `REACH` with what each probe found, and the transfer that
//! follows is byte-exact. These hosts have no RDMA device, so
//! every route leaves from an address without one (`off-fabric`) and no probe
//! connects; the answered case needs an RDMA-capable source address
//! (crates/agent/src/reach.rs's tests, with sockets on loopback, and the
//! decision in run/fabric.rs's).

use crate::support::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// An agent started directly (as rdpipe would over ssh) and its control channel.
struct Agent {
    child: Child,
    stdin: ChildStdin,
    lines: BufReader<ChildStdout>,
}

impl Agent {
    fn start(args: &[&str], keys: &str) -> Agent {
        let mut child = Command::new(bin("rdpipe"))
            .args(["--agent", "--label", "t"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{keys}").unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap());
        Agent {
            child,
            stdin,
            lines,
        }
    }

    /// Reads control lines until one starts with `prefix`; returns the rest.
    fn expect(&mut self, prefix: &str) -> String {
        let mut seen = Vec::new();
        loop {
            let mut l = String::new();
            let n = self.lines.read_line(&mut l).unwrap_or(0);
            assert!(n > 0, "agent ended before '{prefix}': {seen:?}");
            if let Some(rest) = l.trim_end().strip_prefix(prefix) {
                return rest.to_string();
            }
            seen.push(l);
        }
    }

    fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
    }
}

#[test]
fn an_agent_probes_a_listener_that_then_takes_the_real_transfer() {
    let dir = Scratch::new("probe");
    let data = random_bytes((8 << 20) + 77, 14);
    let input = dir.path("in");
    std::fs::write(&input, &data).unwrap();
    let out = dir.path("out");
    let key = "33".repeat(32);
    let mut rx = Agent::start(
        &[
            "--input",
            "listen",
            "--output",
            "none",
            "--in-addr",
            "127.0.0.1",
            "--write",
            out.to_str().unwrap(),
        ],
        &format!("{key} -"),
    );
    let port = rx.expect("PORT in ");
    let mut tx = Agent::start(
        &[
            "--input",
            "none",
            "--output",
            "connect",
            "--read",
            input.to_str().unwrap(),
        ],
        &format!("- {key}"),
    );
    let fabric = tx.expect("FABRIC");
    assert_eq!(fabric.trim(), "", "a host without RDMA reports no address");
    // 127.0.0.1 listens; 127.0.0.2 routes over lo too but nothing listens there;
    // 192.0.2.1 (TEST-NET-1) has no route here, or one that is not ours.
    tx.say(&format!("PROBE out {port} 127.0.0.1 127.0.0.2 192.0.2.1"));
    let reach = tx.expect("REACH out ");
    let results: Vec<&str> = reach.split_whitespace().collect();
    assert_eq!(results.len(), 3, "{reach}");
    // No RDMA-capable address here: every route leaves off the fabric, and
    // nothing is connected to.
    assert_eq!(results[0], "127.0.0.1=off-fabric@127.0.0.1", "{reach}");
    assert_eq!(results[1], "127.0.0.2=off-fabric@127.0.0.1", "{reach}");
    assert!(
        results[2].starts_with("192.0.2.1=off-fabric@") || results[2] == "192.0.2.1=unreachable",
        "{reach}"
    );
    // Then the real transfer.
    tx.say(&format!("CONNECT out 127.0.0.1 {port}"));
    assert_eq!(tx.expect("END "), "ok");
    assert_eq!(rx.expect("END "), "ok");
    assert!(std::fs::read(&out).unwrap() == data, "output differs");
    for mut a in [tx, rx] {
        drop(a.stdin);
        let _ = a.child.wait();
    }
}
