//! rdpipe without SSH: local segments (`-:CMD`, `localhost:CMD`), argument errors,
//! the dry run, pipefail exit statuses, a closed stdout, and teardown on SIGTERM.

use crate::support::*;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

fn a(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn local_hello_olleh() {
    let r = run(
        &a(&["-:tr [:lower:] [:upper:]", "localhost:rev"]),
        Some(b"hello\n".to_vec()),
        Duration::from_secs(30),
    );
    r.ok();
    assert_eq!(r.stdout_str(), "OLLEH\n");
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn local_data_verbose() {
    let data = random_bytes(8 << 20, 3);
    let r = run(
        &a(&["-v", "-:cat", "-:cat"]),
        Some(data.clone()),
        Duration::from_secs(60),
    );
    r.ok();
    assert!(r.stdout == data);
    let sum = xxh3_hex(&data);
    assert_eq!(
        r.stderr.lines().filter(|l| l.contains(&sum)).count(),
        3,
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.lines().last().unwrap().starts_with("Bandwidth "),
        "{}",
        r.stderr
    );
}

#[test]
fn malformed_arguments_exit_2_with_one_line() {
    for (arg, msg) in [
        (":cat", "rdpipe: error: empty host in ':cat'"),
        (
            "h1:echo 'oops",
            "rdpipe: error: unbalanced quotes in 'h1:echo 'oops'",
        ),
        ("cat", "rdpipe: error: 'cat' is not HOST:CMD (no ':')"),
        (
            "h1:>",
            "rdpipe: error: missing file name after '>' in 'h1:>'",
        ),
    ] {
        let r = run(&a(&["h0:cat", arg]), None, Duration::from_secs(10));
        assert_eq!(r.code(), Some(2), "{arg}: {}", r.stderr);
        assert_eq!(r.stderr.trim_end(), msg, "{arg}");
    }
    let r = run(
        &a(&["--data-host", "nonsense", "h:cat"]),
        None,
        Duration::from_secs(10),
    );
    assert_eq!(r.code(), Some(2));
    let r = run(
        &a(&["--chunk-size", "0", "h:cat"]),
        None,
        Duration::from_secs(10),
    );
    assert_eq!(r.code(), Some(2));
    let r = run(&a(&[]), None, Duration::from_secs(10));
    assert_eq!(r.code(), Some(2));
    // A flag whose value follows '=' and a value after it that is no segment.
    let r = run(
        &a(&["--compress", "auto", "h1:cat", "h2:cat"]),
        None,
        Duration::from_secs(10),
    );
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert_eq!(
        r.stderr.trim_end(),
        "rdpipe: error: 'auto' is not HOST:CMD (no ':'); did you mean --compress=auto?"
    );
    // An empty command is relay only, which a --to sink cannot be.
    let r = run(
        &a(&["h0:cat", "--to", "h1:", "--to", "h2:cat"]),
        None,
        Duration::from_secs(10),
    );
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr
            .starts_with("rdpipe: error: --to 'h1:': a sink needs a command or '> FILE'"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

#[test]
fn empty_command_is_a_relay_in_the_plan_and_runs_locally() {
    let r = run(
        &a(&["-n", "h0:< f", "h1:   ", "h2:> g"]),
        None,
        Duration::from_secs(10),
    );
    r.ok();
    assert!(
        r.stdout_str().contains(
            "[2] h1               relay only: forwards the stream unchanged, no command  (ssh h1)"
        ),
        "{}",
        r.stdout_str()
    );
    // Local relays: stdin -> relay -> cat -> relay -> stdout, byte-exact.
    let data = random_bytes(8 << 20, 9);
    let r = run(
        &a(&["-v", "-:", "-:cat", "-:"]),
        Some(data.clone()),
        Duration::from_secs(60),
    );
    r.ok();
    assert!(r.stdout == data);
    assert!(
        r.stderr
            .contains("rdpipe: [1] local: relay only: 8388608 bytes from rdpipe stdin forwarded to [2] local (the same stream), no command"),
        "{}",
        r.stderr
    );
}

#[test]
fn dry_run_prints_the_plan_and_runs_nothing() {
    let r = run(
        &a(&[
            "-n",
            "--data-host",
            "h2=192.0.2.7",
            "h1:tr [:lower:] [:upper:]",
            "h2:rev",
            "-:> /nonexistent/dir/file",
        ]),
        None,
        Duration::from_secs(10),
    );
    r.ok();
    let t = r.stdout_str();
    for want in [
        "rdpipe plan: 3 segment(s), 3 transfer(s); nothing was run",
        "[1] h1               sh -c \"tr [:lower:] [:upper:]\"  (ssh h1)",
        "[3] local            write file \"/nonexistent/dir/file\"  (local, no ssh)",
        "rdpipe stdin -> [1] h1: [1] h1 listens on an ephemeral port, rdpipe connects to h1",
        "[1] h1 -> [2] h2: [2] h2 listens on an ephemeral port, [1] h1 connects to 192.0.2.7",
        "[2] h2 -> [3] local: [2] h2 listens on an ephemeral port, [3] local connects to 192.0.2.7",
        "h1: 1 segment(s) over 1 connection(s)",
        // Fabric address discovery: it runs for ssh's addresses, at start;
        // --data-host is used as given.
        "data addresses:",
        "rdpipe stdin -> [1] h1: data address of h1: h1 (from ssh); RDMA-capable address \
         discovered at start",
        "[1] h1 -> [2] h2: data address of h2: 192.0.2.7 (from --data-host, used as given)",
    ] {
        assert!(t.contains(want), "missing {want:?} in:\n{t}");
    }
    // --transport tcp: no discovery.
    let r = run(
        &a(&["-n", "--transport", "tcp", "h1:cat", "h2:cat"]),
        None,
        Duration::from_secs(10),
    );
    r.ok();
    let want = "[1] h1 -> [2] h2: data address of h2: h2 (from ssh; --transport tcp: no discovery)";
    assert!(r.stdout_str().contains(want), "{}", r.stdout_str());
    // The protection every hop gets: the default is decided on this host.
    let default = rdpipe_wire::Integrity::preferred().as_str();
    for (flags, want) in [
        (&[][..], format!("protection: {default} on every transfer")),
        (
            &["--integrity", "mac"][..],
            "protection: mac on every transfer (keyed BLAKE3".into(),
        ),
        (
            &["--integrity", "checksum", "--encrypt"][..],
            "protection: encrypt on every transfer".into(),
        ),
        (
            &["--integrity", "checksum"][..],
            "protection: checksum on every transfer (xxh3 only".into(),
        ),
    ] {
        let mut args = vec!["-n"];
        args.extend_from_slice(flags);
        args.push("h1:cat");
        let r = run(&a(&args), None, Duration::from_secs(10));
        r.ok();
        assert!(
            r.stdout_str().contains(&want),
            "{flags:?}: {}",
            r.stdout_str()
        );
    }
}

#[test]
fn pipefail_status_of_the_failing_command() {
    // The failing command's status, and one line naming it.
    let r = run(
        &a(&["-:cat", "-:cat >/dev/null; exit 4", "-:cat"]),
        Some(b"x\n".to_vec()),
        Duration::from_secs(30),
    );
    assert_eq!(r.code(), Some(4), "{}", r.stderr);
    assert_eq!(
        r.stderr.trim_end(),
        "rdpipe: error: local [2] 'cat >/dev/null; exit 4': the command exited with status 4"
    );
    // A failed producer aborts its stream: the downstream command is stopped
    // instead of seeing a clean end, so the producer's status is the verdict.
    let r = run(
        &a(&["-:exit 3", "-:cat >/dev/null; exit 4", "-:cat"]),
        None,
        Duration::from_secs(30),
    );
    assert_eq!(r.code(), Some(3), "{}", r.stderr);
    assert!(r
        .stderr
        .contains("rdpipe: error: local [1] 'exit 3': the command exited with status 3"));
    // A producer that fails after writing everything: the consumer never sees a
    // clean end of stream, so `> FILE` is not mistaken for complete.
    let s = Scratch::new("pf");
    let r = run(
        &a(&["-:echo partial; exit 1", &format!("-:> {}", s.s("f"))]),
        None,
        Duration::from_secs(30),
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
}

#[test]
fn closed_stdout_is_quiet() {
    let mut c = Command::new(rdpipe())
        .args(["-:yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut so = c.stdout.take().unwrap();
    let mut buf = [0u8; 10];
    so.read_exact(&mut buf).unwrap();
    drop(so);
    let st = wait_bounded(
        &mut c,
        Duration::from_secs(15),
        "rdpipe with a closed stdout",
    );
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(st.code(), Some(141), "{err}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn sigterm_tears_down_local_segments() {
    let mark = format!("LMARK{}", std::process::id());
    let p = start(
        &[],
        &a(&[
            &format!("-:yes {mark}"),
            &format!("-:cat >/dev/null # {mark}"),
        ]),
        None,
    );
    wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
    Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .unwrap();
    let r = p.finish(Duration::from_secs(10));
    assert_eq!(r.code(), Some(143), "{}", r.stderr);
    assert!(
        wait_gone(&mark, Duration::from_secs(5)),
        "{}",
        ps(&pgrep(&mark))
    );
}

#[test]
fn a_consumer_never_sees_a_clean_end_of_a_failed_stream() {
    // wc prints only at end of input: it must be stopped before it gets one.
    let s = Scratch::new("trunc");
    for _ in 0..5 {
        let out = s.path("count");
        let _ = std::fs::remove_file(&out);
        let r = run(
            &a(&[
                "-:head -c 100000 /dev/zero; exit 1",
                &format!("-:wc -c > {}", out.display()),
            ]),
            None,
            Duration::from_secs(30),
        );
        assert_eq!(r.code(), Some(1), "{}", r.stderr);
        let got = std::fs::read_to_string(&out).unwrap_or_default();
        assert!(
            got.trim().is_empty(),
            "the consumer saw a clean end: {got:?}"
        );
    }
}

#[test]
fn dry_run_resolves_data_addresses_through_the_ssh_config() {
    let s = Scratch::new("cfg");
    std::fs::write(
        s.path("config"),
        "Host alpha\n  HostName 192.0.2.10\nHost beta\n  HostName 192.0.2.20\n",
    )
    .unwrap();
    let r = run(
        &a(&[
            "-n",
            "-F",
            &s.s("config"),
            "--data-host",
            "beta=198.51.100.7",
            "alpha:cat",
            "beta:cat",
            "alpha:cat",
        ]),
        None,
        Duration::from_secs(10),
    );
    r.ok();
    let t = r.stdout_str();
    assert!(t.contains("rdpipe connects to 192.0.2.10"), "{t}");
    assert!(t.contains("[1] alpha connects to 198.51.100.7"), "{t}");
    assert!(t.contains("[2] beta connects to 192.0.2.10"), "{t}");
    assert!(
        t.contains("alpha: 2 segment(s) over 1 connection(s)"),
        "{t}"
    );
}
