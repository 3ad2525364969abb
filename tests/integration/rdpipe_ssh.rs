//! rdpipe against a real sshd on 127.0.0.1 (no privileges needed): host aliases
//! h1..h4 in a generated ssh config all reach the same sshd.

use crate::support::*;

use std::time::Duration;

fn args(ssh: &LocalSsh, extra: &[&str]) -> Vec<String> {
    let mut v = ssh.base_args();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

#[test]
fn ssh_hello_olleh() {
    need_ssh!();
    let ssh = LocalSsh::start("hello");
    let r = run(
        &args(&ssh, &["h1:tr [:lower:] [:upper:]", "h2:rev"]),
        Some(b"hello\n".to_vec()),
        Duration::from_secs(60),
    );
    r.ok();
    assert_eq!(r.stdout_str(), "OLLEH\n", "{}", r.stderr);
}

#[test]
fn ssh_file_operators() {
    need_ssh!();
    let ssh = LocalSsh::start("files");
    let d = &ssh.dir;
    std::fs::write(d.path("in"), "from a file\n").unwrap();
    // `<` starts, `>` ends: nothing comes back to stdout.
    let r = run(
        &args(
            &ssh,
            &[
                &format!("h1:< {}", d.s("in")),
                "h2:tr a-z A-Z",
                &format!("h1:> {}", d.s("out")),
            ],
        ),
        None,
        Duration::from_secs(60),
    );
    r.ok();
    assert!(r.stdout.is_empty());
    assert_eq!(
        std::fs::read_to_string(d.path("out")).unwrap(),
        "FROM A FILE\n"
    );
    // `>>` appends.
    run(
        &args(
            &ssh,
            &[
                &format!("h1:< {}", d.s("in")),
                &format!("h2:>> {}", d.s("out")),
            ],
        ),
        None,
        Duration::from_secs(60),
    )
    .ok();
    assert_eq!(
        std::fs::read_to_string(d.path("out")).unwrap(),
        "FROM A FILE\nfrom a file\n"
    );
    // `<` in the middle: the previous output is discarded, the file goes on.
    let r = run(
        &args(&ssh, &["h1:cat", &format!("h2:< {}", d.s("in")), "h3:rev"]),
        Some(b"discarded\n".to_vec()),
        Duration::from_secs(60),
    );
    r.ok();
    assert_eq!(r.stdout_str(), "elif a morf\n");
    // `>` in the middle: the file gets the stream, an empty stream goes on.
    let r = run(
        &args(&ssh, &[&format!("h1:> {}", d.s("mid")), "h2:wc -c"]),
        Some(b"12345\n".to_vec()),
        Duration::from_secs(60),
    );
    r.ok();
    assert_eq!(r.stdout_str().trim(), "0");
    assert_eq!(std::fs::read_to_string(d.path("mid")).unwrap(), "12345\n");
    // A file that cannot be opened: non-zero, the message names host and file.
    let r = run(
        &args(&ssh, &["h2:< /nonexistent/file", "h1:cat"]),
        None,
        Duration::from_secs(60),
    );
    assert_ne!(r.code(), Some(0));
    assert!(
        r.stderr.contains("h2 [1] '< /nonexistent/file'") && r.stderr.contains("/nonexistent/file"),
        "{}",
        r.stderr
    );
}

#[test]
fn ssh_data_through_repeated_hosts_with_tee() {
    need_ssh!();
    let ssh = LocalSsh::start("tee");
    let data = random_bytes(16 << 20, 7);
    let sum = xxh3_hex(&data);
    let tee = ssh.dir.s("tee");
    let r = run(
        &args(&ssh, &["-v", "h1:cat", &format!("h2:tee {tee}"), "h1:cat"]),
        Some(data.clone()),
        Duration::from_secs(120),
    );
    r.ok();
    assert!(
        r.stdout == data,
        "stdout differs ({} bytes)",
        r.stdout.len()
    );
    assert!(std::fs::read(&tee).unwrap() == data, "tee file differs");
    // Every hop's reported checksum is the input's.
    let hops: Vec<&str> = r.stderr.lines().filter(|l| l.contains(" -> ")).collect();
    assert_eq!(hops.len(), 4, "{}", r.stderr);
    for l in hops {
        assert!(
            l.contains(&sum) && l.contains(&format!("{} bytes", data.len())),
            "{l}"
        );
    }
    assert!(
        r.stderr.lines().any(|l| l.starts_with("Bandwidth ")),
        "{}",
        r.stderr
    );
}

#[test]
fn ssh_more_segments_than_max_sessions() {
    need_ssh!();
    let ssh = LocalSsh::start("many");
    let data = random_bytes(1 << 20, 11);
    // 12 segments on one host: sshd's MaxSessions is 10.
    let a = vec!["h1:cat"; 12];
    let r = run(
        &args(&ssh, &a),
        Some(data.clone()),
        Duration::from_secs(120),
    );
    r.ok();
    assert!(r.stdout == data);
}

#[test]
fn ssh_two_pipelines_at_once() {
    need_ssh!();
    let ssh = LocalSsh::start("two");
    let d1 = random_bytes(4 << 20, 1);
    let d2 = random_bytes(4 << 20, 2);
    let p1 = start(&[], &args(&ssh, &["h1:cat", "h2:cat"]), Some(d1.clone()));
    let p2 = start(&[], &args(&ssh, &["h2:cat", "h1:cat"]), Some(d2.clone()));
    let r1 = p1.finish(Duration::from_secs(120));
    let r2 = p2.finish(Duration::from_secs(120));
    r1.ok();
    r2.ok();
    assert!(r1.stdout == d1 && r2.stdout == d2);
}

#[test]
fn ssh_failing_middle_command() {
    need_ssh!();
    let ssh = LocalSsh::start("fail");
    let r = run(
        &args(&ssh, &["h1:cat", "h2:cat >/dev/null; exit 3", "h3:cat"]),
        Some(random_bytes(1 << 20, 3)),
        Duration::from_secs(30),
    );
    assert_eq!(r.code(), Some(3), "{}", r.stderr);
    // Only rdpipe's own lines (the remote shell may print login noise).
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("rdpipe:"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(
        lines[0].starts_with("rdpipe: error: h2 [2] 'cat >/dev/null; exit 3'")
            && lines[0].contains("exited with status 3"),
        "{}",
        r.stderr
    );
    assert!(r.elapsed < Duration::from_secs(10), "{:?}", r.elapsed);
}

/// A failing command's stderr reaches rdpipe's whole, its last line included
/// (through the agent's stderr relay, emptied before the agent exits).
#[test]
fn ssh_failing_commands_stderr_arrives_whole() {
    need_ssh!();
    let ssh = LocalSsh::start("failerr");
    let n = 3000;
    let cmd =
        format!("i=0; while [ $i -lt {n} ]; do echo \"err $i\" >&2; i=$((i+1)); done; exit 3");
    for round in 0..3 {
        let r = run(
            &args(&ssh, &["h1:cat", &format!("h2:cat >/dev/null; {cmd}")]),
            Some(b"x\n".to_vec()),
            Duration::from_secs(60),
        );
        assert_eq!(r.code(), Some(3), "{}", r.stderr);
        let got: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| !l.starts_with("rdpipe:"))
            .filter_map(|l| l.split_once("err ").map(|(_, k)| k))
            .collect();
        let want: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        assert!(
            got == want,
            "round {round}: {} of {n} stderr lines, the last {:?}",
            got.len(),
            got.last()
        );
    }
}

#[test]
fn ssh_missing_remote_tool() {
    need_ssh!();
    let ssh = LocalSsh::start("missing");
    let a: Vec<String> = [
        "-F",
        &ssh.config.to_string_lossy(),
        "--remote-bin",
        "/nonexistent/bin",
        "h2:cat",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let r = run(&a, None, Duration::from_secs(30));
    assert_eq!(r.code(), Some(127), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "rdpipe: error: h2: rdrecv not found (install rdma-pipe there or pass --remote-bin)"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn ssh_unreachable_host() {
    need_ssh!();
    let ssh = LocalSsh::start("closed");
    let r = run(
        &args(&ssh, &["h1:cat", "closed:cat"]),
        None,
        Duration::from_secs(30),
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("rdpipe: error: closed: ssh: "),
        "{}",
        r.stderr
    );
    assert!(wait_gone(
        &ssh.config.to_string_lossy(),
        Duration::from_secs(5)
    ));
}

fn interrupt(sig: &str, tag: &str) {
    let ssh = LocalSsh::start(tag);
    let mark = format!("MARK{}{tag}", std::process::id());
    let p = start(
        &[],
        &args(
            &ssh,
            &[
                &format!("h1:yes {mark}"),
                &format!("h2:cat >/dev/null # {mark}"),
            ],
        ),
        None,
    );
    // Mid-stream: wait until the commands run.
    wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(500));
    let pid = p.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .unwrap()
        .success());
    let r = p.finish(Duration::from_secs(10));
    if sig == "-INT" {
        assert_eq!(r.code(), Some(130), "{}", r.stderr);
        assert!(r.stderr.contains("interrupted by SIGINT"), "{}", r.stderr);
    } else {
        assert_eq!(r.status.code(), None, "killed by SIGKILL");
    }
    for pat in [mark.as_str(), &ssh.config.to_string_lossy()] {
        assert!(
            wait_gone(pat, Duration::from_secs(8)),
            "left over after {sig}:\n{}",
            ps(&pgrep(pat))
        );
    }
}

#[test]
fn ssh_sigint_mid_stream_leaves_nothing() {
    need_ssh!();
    interrupt("-INT", "int");
}

#[test]
fn ssh_sigkill_of_rdpipe_leaves_nothing() {
    need_ssh!();
    interrupt("-KILL", "kill");
}

#[test]
fn ssh_sigkill_of_an_agent_leaves_nothing() {
    need_ssh!();
    let ssh = LocalSsh::start("agentkill");
    let mark = format!("AMARK{}", std::process::id());
    let p = start(
        &[],
        &args(
            &ssh,
            &[
                &format!("h1:yes {mark}"),
                &format!("h2:cat >/dev/null # {mark}"),
            ],
        ),
        None,
    );
    wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
    // The producer's agent dies without any chance to clean up.
    let agents = pgrep(&format!("rdrecv --agent .*yes {mark}"));
    assert_eq!(agents.len(), 1, "{}", ps(&pgrep(&mark)));
    std::process::Command::new("kill")
        .args(["-9", &agents[0].to_string()])
        .status()
        .unwrap();
    let r = p.finish(Duration::from_secs(40));
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("h1 [1] 'yes "), "{}", r.stderr);
    assert!(
        wait_gone(&mark, Duration::from_secs(8)),
        "left over:\n{}",
        ps(&pgrep(&mark))
    );
}

#[test]
fn ssh_options_ports_and_user_at_host() {
    need_ssh!();
    let ssh = LocalSsh::start("opts");
    let port = ssh.port.to_string();
    let user = String::from_utf8(
        std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    // `-o Port=N` reaches a host whose config has no port.
    let r = run(
        &args(&ssh, &["-o", &format!("Port={port}"), "noport:rev"]),
        Some(b"abc\n".to_vec()),
        Duration::from_secs(30),
    );
    r.ok();
    assert_eq!(r.stdout_str(), "cba\n");
    // The bracketed form gives user and port; data address is the literal host.
    let r = run(
        &args(&ssh, &[&format!("[{user}@127.0.0.1:{port}]:rev"), "h1:cat"]),
        Some(b"abc\n".to_vec()),
        Duration::from_secs(30),
    );
    r.ok();
    assert_eq!(r.stdout_str(), "cba\n");
    // user@alias.
    let r = run(
        &args(&ssh, &[&format!("{user}@h2:tr a-z A-Z")]),
        Some(b"abc\n".to_vec()),
        Duration::from_secs(30),
    );
    r.ok();
    assert_eq!(r.stdout_str(), "ABC\n");
}

/// The ssh master for h1 killed mid-stream: rdpipe starts it again and
/// re-attaches to h1's agent, which kept streaming; byte-exact, exit 0.
#[test]
fn ssh_master_killed_mid_stream() {
    need_ssh!();
    let ssh = LocalSsh::start("masterkill");
    let data = random_bytes(96 << 20, 41);
    let mark = format!("SMARK{}", std::process::id());
    let p = start(
        &[],
        &args(
            &ssh,
            &[
                "-v",
                "--rate-limit",
                "32M",
                &format!("h1:cat # {mark}"),
                &format!("h2:cat # {mark}"),
            ],
        ),
        Some(data.clone()),
    );
    assert!(
        p.wait_stdout_len(4 << 20, Duration::from_secs(30)),
        "no data flows"
    );
    let cfg = ssh.config.to_string_lossy().into_owned();
    let masters = pgrep(&format!("^ssh .*{cfg}.* -M .*-- h1$"));
    assert_eq!(masters.len(), 1, "{}", ps(&pgrep(&cfg)));
    std::process::Command::new("kill")
        .args(["-9", &masters[0].to_string()])
        .status()
        .unwrap();
    let r = p.finish(Duration::from_secs(60));
    assert_eq!(r.code(), Some(0), "{}", r.stderr);
    assert!(
        r.stdout == data,
        "output differs ({} bytes)",
        r.stdout.len()
    );
    assert!(
        r.stderr.contains("h1 [1] 'cat") && r.stderr.contains("re-attached after"),
        "{}",
        r.stderr
    );
    for pat in [mark.as_str(), cfg.as_str()] {
        assert!(
            wait_gone(pat, Duration::from_secs(8)),
            "left over:\n{}",
            ps(&pgrep(pat))
        );
    }
}

#[test]
fn ssh_interrupt_while_connecting_leaves_nothing() {
    need_ssh!();
    let dir = Scratch::new("hang");
    for (sig, want) in [("-INT", Some(130)), ("-KILL", None)] {
        // A host whose connection never completes (its ProxyCommand just sleeps).
        let secs = format!("{}{}", 700 + want.unwrap_or(9), std::process::id() % 1000);
        let cfg = dir.path(&format!("config{sig}"));
        std::fs::write(&cfg, format!("Host hang\n  ProxyCommand sleep {secs}\n")).unwrap();
        let p = start(
            &[],
            &[
                "-F".into(),
                cfg.to_string_lossy().into_owned(),
                "hang:cat".into(),
            ],
            None,
        );
        wait_for(&format!("^sleep {secs}"), Duration::from_secs(20));
        std::process::Command::new("kill")
            .args([sig, &p.child.id().to_string()])
            .status()
            .unwrap();
        let r = p.finish(Duration::from_secs(10));
        assert_eq!(r.code(), want, "{}", r.stderr);
        for pat in [format!("sleep {secs}"), cfg.to_string_lossy().into_owned()] {
            assert!(
                wait_gone(&pat, Duration::from_secs(8)),
                "left over after {sig}:\n{}",
                ps(&pgrep(&pat))
            );
        }
    }
}

#[test]
fn ssh_progress_and_debug_log_from_remote_agents() {
    need_ssh!();
    let ssh = LocalSsh::start("prog");
    let d = &ssh.dir;
    let data = random_bytes(5 << 20, 17);
    std::fs::write(d.path("in"), &data).unwrap();
    let src = format!("h1:< {}", d.s("in"));
    // The source's size and the counts come from the remote agents (SIZE, BYTES).
    let r = run(
        &args(&ssh, &["--progress", &src, "h2:cat"]),
        None,
        Duration::from_secs(60),
    );
    r.ok();
    assert!(
        r.stdout == data,
        "stdout differs ({} bytes)",
        r.stdout.len()
    );
    let last = r
        .stderr
        .lines()
        .rfind(|l| l.starts_with("rdpipe: ") && l.contains("/s "))
        .unwrap_or_else(|| panic!("no progress line:\n{}", r.stderr));
    assert!(
        last.starts_with("rdpipe: 5.00 MiB ") && last.contains("100.0% ETA 0:00:00"),
        "{last:?}\n{}",
        r.stderr
    );
    assert!(!r.stderr.contains('\x1b') && !r.stderr.contains('\r'));
    // A file sent to a remote `> FILE`: the last hop's count is the remote one.
    let r = run(
        &args(&ssh, &["--progress", &src, &format!("h2:> {}", d.s("out"))]),
        None,
        Duration::from_secs(60),
    );
    r.ok();
    assert!(std::fs::read(d.path("out")).unwrap() == data);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("rdpipe: 5.00 MiB ") && l.contains("100.0%")),
        "{}",
        r.stderr
    );
    // -vv: rdpipe's debug log, and the remote agents' own, prefixed with the host.
    let r = run(
        &args(&ssh, &["-vv", "h1:cat", "h2:cat"]),
        Some(b"x\n".to_vec()),
        Duration::from_secs(60),
    );
    r.ok();
    assert_eq!(r.stdout_str(), "x\n");
    for want in [
        "rdpipe: debug: starting ssh master ",
        &format!(
            "rdpipe: debug: [2] said: HELLO {}",
            rdpipe_control::PROTOCOL
        ),
        "rdpipe: debug: [2] listens on port ",
        "h1: agent h1[1]: debug: control: CONNECT out ",
        "h2: agent h2[2]: debug: ",
    ] {
        assert!(r.stderr.contains(want), "no {want:?} in:\n{}", r.stderr);
    }
    // -q: nothing at all on success.
    let r = run(
        &args(&ssh, &["-q", "h1:cat", "h2:cat"]),
        Some(b"x\n".to_vec()),
        Duration::from_secs(60),
    );
    r.ok();
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn ssh_endpoint_tuning_env_reaches_remote_agents() {
    need_ssh!();
    let ssh = LocalSsh::start("tuneenv");
    let data = random_bytes(1 << 20, 18);
    // ssh passes no environment on: rdpipe hands RDPIPE_TCP_SEND to the agents
    // itself. A value they do not know makes each sender say so.
    let r = start(
        &["env", "RDPIPE_TCP_SEND=bogus"],
        &args(&ssh, &["h1:cat", "h2:cat"]),
        Some(data.clone()),
    )
    .finish(Duration::from_secs(60));
    r.ok();
    assert!(r.stdout == data, "stdout differs\n{}", r.stderr);
    for host in ["h1: ", "h2: "] {
        assert!(
            r.stderr.lines().any(|l| l.starts_with(host)
                && l.contains(
                    "ignoring RDPIPE_TCP_SEND=\"bogus\": expected threaded, inline or adaptive"
                )),
            "no warning from {host}\n{}",
            r.stderr
        );
    }
    // A known value is taken silently.
    let r = start(
        &["env", "RDPIPE_TCP_SEND=inline"],
        &args(&ssh, &["h1:cat", "h2:cat"]),
        Some(data.clone()),
    )
    .finish(Duration::from_secs(60));
    r.ok();
    assert!(r.stdout == data);
    assert!(!r.stderr.contains("RDPIPE_TCP_SEND"), "{}", r.stderr);
}

#[test]
fn ssh_persist_reuses_the_masters_and_persist_stop_closes_them() {
    need_ssh!();
    let ssh = LocalSsh::start("persist");
    // A runtime directory of this test's own (short: it holds the sockets).
    let rt = Scratch::new("prt");
    let env = format!("XDG_RUNTIME_DIR={}", rt.0.display());
    let sockets = rt.path(&format!(
        "rdpipe-persist-{}",
        rustix::process::getuid().as_raw()
    ));
    let masters = || pgrep(&sockets.to_string_lossy());
    let mut a = args(&ssh, &["-vv", "--persist", "60", "h1:cat", "h2:rev"]);
    let r = start(&["env", &env], &a, Some(b"hello\n".to_vec())).finish(Duration::from_secs(60));
    r.ok();
    assert_eq!(r.stdout_str(), "olleh\n");
    assert!(!r.stderr.contains("reusing"), "{}", r.stderr);
    assert_eq!(masters().len(), 2, "two masters kept: {}", ps(&masters()));
    // The second run logs in nowhere: both masters are reused.
    let r = start(&["env", &env], &a, Some(b"again\n".to_vec())).finish(Duration::from_secs(60));
    r.ok();
    assert_eq!(r.stdout_str(), "niaga\n");
    assert_eq!(r.stderr.matches(": reusing ").count(), 2, "{}", r.stderr);
    assert_eq!(masters().len(), 2);
    a = args(&ssh, &["--persist-stop"]);
    start(&["env", &env], &a, None)
        .finish(Duration::from_secs(30))
        .ok();
    assert!(
        wait_gone(&sockets.to_string_lossy(), Duration::from_secs(10)),
        "{}",
        ps(&masters())
    );
    assert_eq!(std::fs::read_dir(&sockets).unwrap().count(), 0);
}
