//! `--json FILE` on rdpipe, rdsend and rdrecv: the report is valid JSON (parsed
//! with serde_json) and says what happened, for a good run, a failed run, and
//! (rdpipe) a run interrupted by SIGINT. Self-contained: local segments and
//! loopback transfers, no ssh.

use crate::support::{children_get_default_signals, xxh3_hex, Scratch};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RDPIPE: &str = env!("CARGO_BIN_EXE_rdpipe");
const RDSEND: &str = env!("CARGO_BIN_EXE_rdsend");
const RDRECV: &str = env!("CARGO_BIN_EXE_rdrecv");

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: not JSON ({e}):\n{text}", p.display()))
}

/// Runs rdpipe with `input` on stdin; returns (exit code, stdout, stderr).
fn rdpipe(args: &[&str], input: &[u8]) -> (Option<i32>, Vec<u8>, String) {
    children_get_default_signals();
    let mut c = Command::new(RDPIPE)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = c.stdin.take().unwrap();
    let data = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = sin.write_all(&data);
    });
    let o = c.wait_with_output().unwrap();
    feeder.join().unwrap();
    (
        o.status.code(),
        o.stdout,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn rdpipe_good_run() {
    let d = Scratch::new("pipe-good");
    let json = d.path("r.json");
    let (code, out, err) = rdpipe(
        &["--json", json.to_str().unwrap(), "-:cat", "-:rev"],
        b"hello\n",
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, b"olleh\n");
    let v = read_json(&json);
    assert_eq!(v["tool"], "rdpipe");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["verdict"]["exit_status"], 0);
    assert_eq!(v["verdict"]["errors"].as_array().unwrap().len(), 0);
    assert!(v["wall_seconds"].as_f64().unwrap() > 0.0);
    assert!(v["signal"].is_null());
    assert!(v["rate_limit_bytes_per_second"].is_null());
    let hops = v["hops"].as_array().unwrap();
    assert_eq!(hops.len(), 3, "stdin -> [1] -> [2] -> stdout: {v:#}");
    assert_eq!(hops[0]["from"], "rdpipe stdin");
    assert_eq!(hops[0]["to_segment"], 1);
    assert_eq!(hops[1]["from_segment"], 1);
    assert_eq!(hops[1]["to_segment"], 2);
    assert_eq!(hops[2]["to"], "rdpipe stdout");
    for (h, carried) in hops.iter().zip([b"hello\n", b"hello\n", b"olleh\n"]) {
        assert_eq!(h["verified"], true, "{h:#}");
        assert_eq!(h["transport"], "tcp", "{h:#}");
        assert_eq!(
            h["integrity"],
            rdpipe_wire::Integrity::preferred().as_str(),
            "{h:#}"
        );
        assert_eq!(h["bytes"], 6, "{h:#}");
        assert_eq!(h["checksum"], xxh3_hex(carried), "{h:#}");
        assert!(h["seconds"].as_f64().is_some() && h["rate_bytes_per_second"].is_number());
        // Local hops: loopback, never discovered.
        assert_eq!(h["data_address"], "127.0.0.1", "{h:#}");
        assert_eq!(h["data_address_from"], "loopback", "{h:#}");
    }
    let segs = v["segments"].as_array().unwrap();
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[0]["host"], "local");
    assert_eq!(segs[0]["action"], "cat");
    assert_eq!(segs[1]["action"], "rev");
    for s in segs {
        assert_eq!(s["exit_status"], 0, "{s:#}");
        assert_eq!(s["ok"], true, "{s:#}");
        assert!(s["signal"].is_null());
    }
    // Only the report is left: the temporary file was renamed.
    assert_eq!(std::fs::read_dir(&d.0).unwrap().count(), 1);
}

#[test]
fn rdpipe_failed_run() {
    let d = Scratch::new("pipe-fail");
    let json = d.path("r.json");
    std::fs::write(&json, "stale").unwrap();
    let (code, _, err) = rdpipe(
        &["--json", json.to_str().unwrap(), "-:cat", "-:exit 3"],
        b"data\n",
    );
    assert_eq!(code, Some(3), "{err}");
    let v = read_json(&json);
    assert_eq!(v["verdict"]["exit_status"], 3);
    let errors = v["verdict"]["errors"].as_array().unwrap();
    assert!(!errors.is_empty());
    assert!(err.contains(errors[0].as_str().unwrap()), "{err}");
    assert_eq!(v["segments"][1]["action"], "exit 3");
    assert_eq!(v["segments"][1]["exit_status"], 3);
    assert_eq!(v["segments"][1]["ok"], false);
    // The hop into the failed command was not (fully) verified.
    assert_eq!(v["hops"][2]["verified"], false);

    // Bad arguments: a report with the verdict only.
    let (code, _, _) = rdpipe(&["--json", json.to_str().unwrap(), "nocolon"], b"");
    assert_eq!(code, Some(2));
    let v = read_json(&json);
    assert_eq!(v["verdict"]["exit_status"], 2);
    assert!(v["verdict"]["errors"][0]
        .as_str()
        .unwrap()
        .contains("nocolon"));
    assert_eq!(v["segments"].as_array().unwrap().len(), 0);
}

#[test]
fn rdpipe_interrupted_run() {
    children_get_default_signals();
    let d = Scratch::new("pipe-int");
    let json = d.path("r.json");
    let marker = d.path("started");
    let cmd = format!("-:touch {} && exec sleep 60", marker.display());
    let mut c = Command::new(RDPIPE)
        .args(["--json", json.to_str().unwrap(), &cmd])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !marker.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .unwrap();
    let status = c.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let v = read_json(&json);
    assert_eq!(v["verdict"]["exit_status"], 130);
    assert_eq!(v["signal"], 2);
    assert_eq!(v["segments"][0]["ok"], false);
}

/// Starts `rdrecv --announce-fd 1 ARGS 0 KEY OUT`; returns it and its port.
fn start_rdrecv(args: &[&str], key: &str, out: &Path) -> (std::process::Child, String) {
    children_get_default_signals();
    let mut c = Command::new(RDRECV)
        .args(["--announce-fd", "1"])
        .args(args)
        .args(["0", key, out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("PORT ")
        .expect("PORT n")
        .to_string();
    (c, port)
}

#[test]
fn endpoints_good_run() {
    let d = Scratch::new("ep-good");
    let data: Vec<u8> = (0..1_000_003u32).map(|i| (i * 7 + i / 13) as u8).collect();
    std::fs::write(d.path("in"), &data).unwrap();
    let (rj, sj) = (d.path("recv.json"), d.path("send.json"));
    let (rx, port) = start_rdrecv(
        &["--json", rj.to_str().unwrap()],
        "k3y-k3y-k3y-k3y-k3y",
        &d.path("out"),
    );
    let tx = Command::new(RDSEND)
        .args(["--json", sj.to_str().unwrap(), "127.0.0.1", &port])
        .args(["k3y-k3y-k3y-k3y-k3y", d.path("in").to_str().unwrap()])
        .output()
        .unwrap();
    let rx = rx.wait_with_output().unwrap();
    assert!(
        tx.status.success(),
        "{}",
        String::from_utf8_lossy(&tx.stderr)
    );
    assert!(
        rx.status.success(),
        "{}",
        String::from_utf8_lossy(&rx.stderr)
    );
    assert!(std::fs::read(d.path("out")).unwrap() == data);
    for (p, tool, role) in [(&sj, "rdsend", "sender"), (&rj, "rdrecv", "receiver")] {
        let v = read_json(p);
        assert_eq!(v["tool"], tool);
        assert_eq!(v["role"], role);
        assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(v["exit_status"], 0);
        assert_eq!(v["errors"].as_array().unwrap().len(), 0);
        assert_eq!(v["bytes"], data.len());
        assert_eq!(v["checksum"], xxh3_hex(&data));
        assert_eq!(v["transport"], "tcp");
        assert!(v["device"].is_null());
        assert!(v["peer"].as_str().unwrap().contains("127.0.0.1"), "{v:#}");
        assert!(v["seconds"].as_f64().unwrap() >= 0.0);
        assert!(v["rate_bytes_per_second"].is_number());
        assert!(v["wall_seconds"].as_f64().unwrap() >= v["seconds"].as_f64().unwrap());
    }
}

#[test]
fn endpoints_failed_runs() {
    let d = Scratch::new("ep-fail");
    std::fs::write(d.path("in"), b"some data").unwrap();
    // Keys differ: the sender exits 3 and says so in its report; the receiver
    // warns and keeps waiting for the right sender (one stray connection must
    // not end it) until it is interrupted, which its report says.
    let (rj, sj) = (d.path("recv.json"), d.path("send.json"));
    let (rx, port) = start_rdrecv(
        &["-q", "--json", rj.to_str().unwrap()],
        "one-key-one-key-1",
        &d.path("out"),
    );
    let tx = Command::new(RDSEND)
        .args(["-q", "--json", sj.to_str().unwrap(), "127.0.0.1", &port])
        .args(["another-key-another", d.path("in").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(tx.status.code(), Some(3));
    let signalled = Command::new("kill")
        .args(["-INT", &rx.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let rx = rx.wait_with_output().unwrap();
    assert_eq!(rx.status.code(), Some(130), "{rx:?}");
    for (p, code) in [(&sj, 3), (&rj, 130)] {
        let v = read_json(p);
        assert_eq!(v["exit_status"], code, "{v:#}");
        assert!(!v["errors"][0].as_str().unwrap().is_empty(), "{v:#}");
        assert!(v["bytes"].is_null() && v["checksum"].is_null());
    }
    assert_eq!(read_json(&sj)["peer"], format!("127.0.0.1:{port}"));

    // Nobody listens: rdsend exits 6; the report names the peer it tried.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let tx = Command::new(RDSEND)
        .args(["--json", sj.to_str().unwrap(), "--connect-timeout", "0"])
        .args(["127.0.0.1", &closed, "k3y-k3y-k3y-k3y-k3y"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(tx.status.code(), Some(6));
    let v = read_json(&sj);
    assert_eq!(v["exit_status"], 6);
    assert_eq!(v["role"], "sender");
    assert_eq!(v["peer"], format!("127.0.0.1:{closed}"));
    let stderr = String::from_utf8_lossy(&tx.stderr);
    assert!(
        stderr.contains(v["errors"][0].as_str().unwrap()),
        "{stderr} vs {v:#}"
    );

    // A report that cannot be written fails an otherwise good run, naming it.
    let tx = Command::new(RDSEND)
        .args([
            "--json",
            "/nonexistent-dir/r.json",
            "--connect-timeout",
            "0",
        ])
        .args(["127.0.0.1", &closed, "k3y-k3y-k3y-k3y-k3y"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&tx.stderr).contains("/nonexistent-dir/r.json"));
}
