//! rdpipe's messages on stderr: progress (on a terminal by default, `--progress`
//! elsewhere), `-q`, `-v`/`-vv`/`RUST_LOG` debug logs, and colours (issue #7).

use crate::support::*;

use std::process::{Command, Stdio};
use std::time::Duration;

fn a(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

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
    let hello = format!("said: HELLO {}", rdpipe_control::PROTOCOL);
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
