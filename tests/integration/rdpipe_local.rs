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

// ---------------------------------------------------------------------------
// Progress, verbosity and messages (issue #7).

/// `env VAR=VALUE ...` in front of rdpipe.
fn with_env(vars: &[&str], args: &[&str], input: Option<Vec<u8>>) -> Run {
    let mut prefix = vec!["env"];
    prefix.extend_from_slice(vars);
    start(&prefix, &a(args), input).finish(Duration::from_secs(60))
}

fn progress_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("rdpipe: ") && l.contains("/s "))
        .collect()
}

#[test]
fn progress_of_a_file_source_ends_at_100_percent() {
    let s = Scratch::new("prog");
    let data = random_bytes(6 << 20, 11);
    std::fs::write(s.path("in"), &data).unwrap();
    let src = format!("-:< {}", s.s("in"));
    for vars in [&["NO_COLOR=1"][..], &["TERM=xterm"][..]] {
        let r = with_env(vars, &["--progress", &src, "-:cat"], None);
        r.ok();
        // Progress goes to stderr only: stdout is the data, byte for byte.
        assert!(
            r.stdout == data,
            "stdout differs ({} bytes)",
            r.stdout.len()
        );
        let lines = progress_lines(&r.stderr);
        let last = lines
            .last()
            .unwrap_or_else(|| panic!("no progress line:\n{}", r.stderr));
        assert!(
            last.starts_with("rdpipe: 6.00 MiB ") && last.contains("100.0% ETA 0:00:00"),
            "{last:?}\n{}",
            r.stderr
        );
        // No terminal: plain lines, no escape codes, no carriage returns.
        assert!(
            !r.stderr.contains('\x1b') && !r.stderr.contains('\r'),
            "{:?}",
            r.stderr
        );
        assert_eq!(lines.len(), r.stderr.lines().count(), "{}", r.stderr);
        // Every line's bytes and percentage describe the same count (the source).
        for l in &lines {
            let (bytes, pct) = bytes_and_percent(l);
            let expect = bytes / data.len() as f64 * 100.0;
            assert!((expect - pct).abs() < 0.2, "{l:?}: {bytes} B is not {pct}%");
        }
    }
}

/// The byte count and percentage of a progress line `rdpipe: 1.50 MiB ... 25.0% ...`.
fn bytes_and_percent(line: &str) -> (f64, f64) {
    let w: Vec<&str> = line.split_whitespace().collect();
    let unit = match w[2] {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        u => panic!("unit {u:?} in {line:?}"),
    };
    let pct = w
        .iter()
        .find_map(|x| x.strip_suffix('%'))
        .unwrap_or_else(|| panic!("no percentage in {line:?}"));
    (
        w[1].parse::<f64>().unwrap() * unit,
        pct.parse::<f64>().unwrap(),
    )
}

#[test]
fn progress_of_a_regular_file_on_stdin() {
    let s = Scratch::new("progin");
    let data = random_bytes(3 << 20, 12);
    std::fs::write(s.path("in"), &data).unwrap();
    let out = Command::new(rdpipe())
        .args(["--progress", "-:cat", "-:cat"])
        .stdin(std::fs::File::open(s.path("in")).unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(out.stdout == data);
    let lines = progress_lines(&err);
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("rdpipe: 3.00 MiB ") && l.contains("100.0%")),
        "{err}"
    );
}

#[test]
fn progress_of_a_pipe_has_no_percentage_and_counts_the_last_hop_with_data() {
    // The last command writes nothing: the count is that of the hop before it.
    let r = run(
        &a(&[
            "--progress",
            "-:head -c 2097152 /dev/zero",
            "-:cat",
            "-:cat >/dev/null",
        ]),
        None,
        Duration::from_secs(60),
    );
    r.ok();
    assert!(r.stdout.is_empty());
    let lines = progress_lines(&r.stderr);
    let last = lines.last().unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(last.starts_with("rdpipe: 2.00 MiB "), "{last:?}");
    assert!(!last.contains('%'), "{last:?}");
}

#[test]
fn quiet_prints_nothing_on_success_and_the_error_on_failure() {
    let data = random_bytes(1 << 20, 13);
    let r = run(
        &a(&["-q", "--progress", "-:cat", "-:cat"]),
        Some(data.clone()),
        Duration::from_secs(30),
    );
    r.ok();
    assert!(r.stdout == data);
    // --progress asked for explicitly still draws; -q alone prints nothing.
    let lines = progress_lines(&r.stderr);
    assert!(!lines.is_empty(), "{}", r.stderr);
    assert_eq!(lines.len(), r.stderr.lines().count(), "{}", r.stderr);
    let r = run(
        &a(&["-q", "-:cat", "-:cat"]),
        Some(data.clone()),
        Duration::from_secs(30),
    );
    r.ok();
    assert!(r.stdout == data);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    let r = run(
        &a(&["-q", "-:cat", "-:cat >/dev/null; exit 6"]),
        Some(data),
        Duration::from_secs(30),
    );
    assert_eq!(r.code(), Some(6), "{}", r.stderr);
    assert_eq!(
        r.stderr.trim_end(),
        "rdpipe: error: local [2] 'cat >/dev/null; exit 6': the command exited with status 6"
    );
}

/// Debug output of a two-segment local pipeline: rdpipe's own set-up events and
/// control lines, and the agents' log.
fn assert_debug_log(r: &Run, data: &[u8]) {
    r.ok();
    assert!(
        r.stdout == data,
        "stdout differs ({} bytes)",
        r.stdout.len()
    );
    let debug: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("rdpipe: debug: "))
        .collect();
    let hello = format!("said: HELLO {}", rdpipe_orchestrate::control::PROTOCOL);
    for want in [
        hello.as_str(),
        "to CONNECT out 127.0.0.1 ",
        "said: END ok",
        "teardown",
    ] {
        assert!(
            debug.iter().any(|l| l.contains(want)),
            "no {want:?} in:\n{}",
            r.stderr
        );
    }
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("agent local[2]: debug: ")),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains('\x1b'), "{:?}", r.stderr);
}

#[test]
fn debug_log_with_vv_rust_log_and_rdpipe_debug() {
    let data = random_bytes(256 << 10, 14);
    let r = run(
        &a(&["-vv", "-:cat", "-:cat | cat"]),
        Some(data.clone()),
        Duration::from_secs(30),
    );
    assert_debug_log(&r, &data);
    // -vv includes -v's report.
    assert!(
        r.stderr.lines().any(|l| l.starts_with("Bandwidth ")),
        "{}",
        r.stderr
    );
    let r = with_env(
        &["RUST_LOG=debug"],
        &["-:cat", "-:cat | cat"],
        Some(data.clone()),
    );
    assert_debug_log(&r, &data);
    assert!(!r.stderr.contains("Bandwidth "), "{}", r.stderr);
    let r = with_env(
        &["RDPIPE_DEBUG=1"],
        &["-:cat", "-:cat | cat"],
        Some(data.clone()),
    );
    assert_debug_log(&r, &data);
    // Without any of them: nothing.
    let r = with_env(
        &["RUST_LOG=", "RDPIPE_DEBUG="],
        &["-:cat", "-:cat | cat"],
        Some(data.clone()),
    );
    r.ok();
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

/// Runs `sh -c CMD` under `script` (a pseudo-terminal); None when script is missing.
fn in_terminal(cmd: &str) -> Option<(std::process::ExitStatus, String)> {
    let ok = Command::new("script")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip(
            &test_name(),
            "no `script` (util-linux) to run rdpipe on a terminal",
        );
        return None;
    }
    let out = Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Some((
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

/// `rdpipe -:'< FILE' -:'CONSUMER' > OUT` (4 MiB) on a terminal: checks that it
/// succeeded and OUT is the file, and returns what the terminal showed (None
/// when there is no `script`).
fn file_to_consumer_in_terminal(s: &Scratch, seed: u64, consumer: &str) -> Option<String> {
    let data = random_bytes(4 << 20, seed);
    std::fs::write(s.path("in"), &data).unwrap();
    let cmd = format!(
        "{bin} -:'< {src}' -:'{consumer}' > {out}",
        bin = rdpipe().display(),
        src = s.s("in"),
        out = s.s("out")
    );
    let (st, tty) = in_terminal(&cmd)?;
    assert!(st.success(), "{tty:?}");
    assert!(std::fs::read(s.path("out")).unwrap() == data);
    Some(tty)
}

#[test]
fn on_a_terminal_progress_is_on_by_default_and_errors_are_coloured() {
    let s = Scratch::new("tty");
    let bin = rdpipe().display().to_string();
    // The consumer starts late, so the transfer lasts past the first redraw.
    let Some(tty) = file_to_consumer_in_terminal(&s, 15, "sleep 1; cat") else {
        return;
    };
    // Redrawn in place, and the final line (the total, 100%) stays.
    assert!(tty.contains("\rrdpipe: "), "{tty:?}");
    let last = tty
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let last = last
        .rsplit('\r')
        .find(|p| !p.trim().is_empty())
        .unwrap_or("");
    assert!(
        last.starts_with("rdpipe: 4.00 MiB ") && last.contains("100.0%"),
        "{last:?} in {tty:?}"
    );
    // -q: no progress line.
    let (st, tty) = in_terminal(&format!(
        "{bin} -q -:'< {}' -:'sleep 1; cat' > /dev/null",
        s.s("in")
    ))
    .unwrap();
    assert!(st.success(), "{tty:?}");
    assert!(!tty.contains("rdpipe"), "{tty:?}");
    // Errors: the tool name bold, `error:` red; NO_COLOR turns colours off.
    let (_, tty) = in_terminal(&format!("{bin} -:'exit 3' -:cat")).unwrap();
    assert!(
        tty.contains("\x1b[1mrdpipe\x1b[0m: \x1b[31merror:\x1b[0m local [1] 'exit 3'"),
        "{tty:?}"
    );
    let (_, tty) = in_terminal(&format!("NO_COLOR=1 {bin} -:'exit 3' -:cat")).unwrap();
    assert!(tty.contains("rdpipe: error: local [1] 'exit 3'"), "{tty:?}");
    assert!(!tty.contains('\x1b'), "{tty:?}");
}

#[test]
fn on_a_terminal_a_local_commands_stderr_does_not_overwrite_the_progress_line() {
    let s = Scratch::new("ttyerr");
    // The consumer writes to stderr after the line has been drawn, then drains.
    let Some(tty) = file_to_consumer_in_terminal(&s, 16, "sleep 1; echo note-from-cmd >&2; cat")
    else {
        return;
    };
    let note = tty
        .find("note-from-cmd")
        .unwrap_or_else(|| panic!("{tty:?}"));
    let drawn = tty.find("\rrdpipe: ").unwrap_or_else(|| panic!("{tty:?}"));
    assert!(
        drawn < note,
        "the line was not drawn before the note: {tty:?}"
    );
    // What is on the note's terminal line before it was blanked: the last
    // carriage return before the note leaves nothing but spaces in between.
    let line_start = tty[..note].rfind('\n').map_or(0, |p| p + 1);
    let visible = tty[line_start..note].rsplit('\r').next().unwrap_or("");
    assert!(
        visible.trim().is_empty(),
        "the note landed on the progress line ({visible:?}): {tty:?}"
    );
    // Unprefixed, as the command wrote it, and the line is drawn again after it.
    assert!(tty.contains("note-from-cmd\r\n"), "{tty:?}");
    assert!(tty[note..].contains("rdpipe: "), "{tty:?}");
}
