//! `rdpipe doctor`: on this machine (`-`, no ssh), on two hosts behind a real
//! sshd (the local harness: aliases h1, h2 on 127.0.0.1), with an unreachable
//! host and a missing rdrecv, and (as root) on a host whose rdma-core is hidden
//! in a mount namespace. Text and `--json` (parsed with serde_json).

use crate::support::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn doctor(args: &[String]) -> Run {
    let mut v = vec!["doctor".to_string()];
    v.extend(args.iter().cloned());
    run(&v, None, LIMIT)
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn json(r: &Run) -> Value {
    serde_json::from_slice(&r.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", r.stdout_str(), r.stderr))
}

/// The exit status says whether problems were listed.
fn consistent(r: &Run) {
    let out = r.stdout_str();
    assert_eq!(
        r.code() == Some(0),
        out.contains("no problems found"),
        "exit {:?}:\n{out}{}",
        r.code(),
        r.stderr
    );
}

#[test]
fn doctor_on_this_machine() {
    let r = doctor(&strings(&["--size", "8M", "-", "localhost"]));
    let out = r.stdout_str();
    consistent(&r);
    for want in [
        "host -: this machine",
        "host localhost: this machine",
        "RDMA libraries: loaded",
        "ulimit -l: ",
        "pair - -> localhost: tcp ",
        "Gb/s (8.00 MiB in ",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
    let r = doctor(&strings(&["--json", "--size", "1M", "-", "-"]));
    let v = json(&r);
    assert_eq!(v["tool"], "rdpipe doctor");
    assert_eq!(v["exit_status"].as_i64(), r.code().map(i64::from));
    assert_eq!(v["hosts"][0]["local"], true);
    assert_eq!(v["hosts"][0]["probe"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["hosts"][0]["probe"]["libraries"]["loaded"], true);
    assert_eq!(v["hosts"][0]["probe"]["pinned_per_transfer"], 2 << 20);
    let tcp = &v["pairs"][0]["tcp"];
    assert_eq!(tcp["ok"], true, "{v:#}");
    assert_eq!(tcp["bytes"], 1 << 20);
    assert!(tcp["gbit_per_second"].as_f64().unwrap() > 0.0);

    // `doctor` is only the doctor alone: `doctor:cat` is a segment on host doctor.
    let r = run(&strings(&["-n", "doctor:cat"]), None, LIMIT);
    r.ok();
    assert!(r.stdout_str().contains("doctor"), "{}", r.stdout_str());
    // No host: bad arguments.
    assert_eq!(doctor(&[]).code(), Some(2));
}

#[test]
fn doctor_on_two_ssh_hosts() {
    need_ssh!();
    let ssh = LocalSsh::start("doctor2");
    let mut a = ssh.base_args();
    a.extend(strings(&["--size", "16M", "h1", "h2"]));
    let r = doctor(&a);
    let out = r.stdout_str();
    consistent(&r);
    for want in [
        "host h1: reachable over ssh",
        "host h2: reachable over ssh",
        "data address: 127.0.0.1 (from ssh HostName; 127.0.0.1)",
        "RDMA libraries: loaded",
        "pair h1 -> h2: tcp ",
        "Gb/s (16.00 MiB in ",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}{}", r.stderr);
    }
    assert!(
        out.contains(&format!("rdma-pipe {}", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    a.insert(0, "--json".into());
    let r = doctor(&a);
    let v = json(&r);
    for (i, h) in ["h1", "h2"].iter().enumerate() {
        let host = &v["hosts"][i];
        assert_eq!(host["host"], *h);
        assert_eq!(host["local"], false);
        assert!(host["ssh_error"].is_null());
        assert_eq!(host["data_address"], "127.0.0.1");
        assert_eq!(host["probe"]["agent_protocol"], v["agent_protocol"]);
    }
    assert_eq!(v["pairs"][0]["from"], "h1");
    assert_eq!(v["pairs"][0]["to"], "h2");
    assert_eq!(v["pairs"][0]["tcp"]["ok"], true, "{v:#}");
    assert_eq!(v["pairs"][0]["tcp"]["bytes"], 16 << 20);
}

#[test]
fn doctor_reports_unreachable_hosts_and_missing_rdrecv() {
    need_ssh!();
    let ssh = LocalSsh::start("doctor-bad");
    let cfg = ssh.config.to_string_lossy().into_owned();
    let args = strings(&[
        "-F",
        &cfg,
        "--connect-timeout",
        "5",
        "--remote-bin",
        "/nonexistent-rdpipe-dir",
        "closed",
        "h1",
    ]);
    let r = doctor(&args);
    let out = r.stdout_str();
    assert_eq!(r.code(), Some(1), "{out}{}", r.stderr);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("closed: cannot connect over ssh (")
                && l.contains("check that `ssh closed true` works")),
        "{out}"
    );
    assert!(
        lines.contains(
            &"h1: rdrecv not found: install rdma-pipe there (cargo install --path .) or pass \
              --remote-bin DIR (without --no-install and --remote-bin, rdpipe installs itself)"
        ),
        "{out}"
    );
    assert!(
        out.contains("pair closed -> h1: closed is unreachable"),
        "{out}"
    );
    let mut j = args.clone();
    j.insert(0, "--json".into());
    let v = json(&doctor(&j));
    assert_eq!(v["exit_status"], 1);
    assert_eq!(v["hosts"][1]["rdrecv_missing"], true);
    assert_eq!(v["problems"].as_array().unwrap().len(), 2, "{v:#}");
}

/// Where the dynamic loader finds `soname` (`ldconfig -p`), if anywhere.
fn lib_path(soname: &str) -> Option<String> {
    let out = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (name, path) = l.trim().split_once(" => ")?;
        (name.split_whitespace().next() == Some(soname)).then(|| path.to_string())
    })
}

#[test]
fn doctor_names_missing_rdma_libraries_and_the_fix() {
    need_ssh!();
    if !is_root() {
        skip(
            "doctor_names_missing_rdma_libraries_and_the_fix",
            "needs root (a mount namespace hiding the RDMA libraries)",
        );
        return;
    }
    let libs: Vec<String> = ["libibverbs.so.1", "librdmacm.so.1"]
        .iter()
        .filter_map(|l| lib_path(l))
        .collect();
    let ssh = LocalSsh::start("doctor-nolib");
    // The "host" whose rdrecv runs in a mount namespace where every RDMA library
    // the loader would find is /dev/null: --remote-bin points at this wrapper.
    let dir = ssh.dir.path("nolib-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let mounts: String = libs
        .iter()
        .map(|l| format!("mount --bind /dev/null '{l}'; "))
        .collect();
    let real = Path::new(&bin_dir()).join("rdrecv");
    let wrapper = format!(
        "#!/bin/sh\nexec unshare --mount --propagation private sh -c \
         'set -e; {} exec \"$@\"' sh '{}' \"$@\"\n",
        mounts.replace('\'', "'\\''"),
        real.display()
    );
    let w = dir.join("rdrecv");
    std::fs::write(&w, wrapper).unwrap();
    std::process::Command::new("chmod")
        .args(["+x", w.to_str().unwrap()])
        .status()
        .unwrap();
    let args = strings(&[
        "-F",
        ssh.config.to_str().unwrap(),
        "--remote-bin",
        dir.to_str().unwrap(),
        "--size",
        "4M",
        "-",
        "h1",
    ]);
    let r = doctor(&args);
    let out = r.stdout_str();
    assert_eq!(r.code(), Some(1), "{out}{}", r.stderr);
    assert!(
        out.contains("RDMA libraries: not loaded (RDMA is unavailable on this host: cannot load"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with(
            "h1: the RDMA libraries do not load (libibverbs.so.1 is missing): install rdma-core"
        )),
        "{out}"
    );
    // The host still moves data over TCP.
    assert!(out.contains("pair - -> h1: tcp "), "{out}");
    assert!(!out.contains("FAILED"), "{out}");
    let mut j = args.clone();
    j.insert(0, "--json".into());
    let v = json(&doctor(&j));
    assert_eq!(v["hosts"][1]["probe"]["libraries"]["loaded"], false);
    assert_eq!(
        v["hosts"][1]["probe"]["libraries"]["missing"],
        "libibverbs.so.1"
    );
    assert_eq!(v["pairs"][0]["tcp"]["ok"], true);
}
