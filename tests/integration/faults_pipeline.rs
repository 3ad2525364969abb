//! The fault suite for whole pipelines: faults injected into running
//! rdpipe pipelines, each driving the real binaries over real sshd (on 127.0.0.1,
//! or one per network namespace as root), asserting that the stream is either
//! delivered whole (checksums compared) with exit 0, or that rdpipe exits
//! non-zero with one line naming the host, the command and what failed, within a
//! stated bound, and that no process of the pipeline is left anywhere.
//!
//! Random fault points are seeded; the seed is printed and `RDPIPE_FAULT_SEED=N`
//! replays it. Root-only cases print `SKIPPED: ... needs root` otherwise (a
//! failure with `RDPIPE_REQUIRE_ALL=1`).
//! docs/faults.md has the table of faults, expectations and bounds.

use crate::support::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// A teardown bound: how long after rdpipe exits the last remote process may
/// linger (agents notice the closed control channel at once; this is slack for
/// a loaded CI machine).
pub(crate) const GONE: Duration = Duration::from_secs(10);

fn args(ssh: &LocalSsh, extra: &[&str]) -> Vec<String> {
    let mut v = ssh.base_args();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

pub(crate) fn nargs(net: &Netns, extra: &[&str]) -> Vec<String> {
    let mut v = net.base_args();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

pub(crate) fn nstart(net: &Netns, extra: &[&str], input: Option<Vec<u8>>) -> Started {
    let p = net.exec_prefix();
    let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
    start(&p, &nargs(net, extra), input)
}

/// A marker unique to this test process and case, put into every remote command
/// (as a comment where needed) so pgrep finds exactly this pipeline's processes.
pub(crate) fn marker(tag: &str) -> String {
    format!("FM{}{tag}", std::process::id())
}

/// No process matching any of `patterns` within [`GONE`].
pub(crate) fn assert_gone(patterns: &[&str], what: &str) {
    for pat in patterns {
        assert!(
            wait_gone(pat, GONE),
            "left over after {what} (pattern {pat:?}):\n{}",
            ps(&pgrep(pat))
        );
    }
}

/// The `rdpipe: error:` lines of a run's stderr (its verdict; remote stderr lines
/// are prefixed with the host instead).
pub(crate) fn verdict_lines(r: &Run) -> Vec<String> {
    r.stderr
        .lines()
        .filter(|l| l.starts_with("rdpipe: error: "))
        .map(|l| l.to_string())
        .collect()
}

/// Exactly one verdict line, containing every needle.
pub(crate) fn assert_one_line(r: &Run, needles: &[&str]) {
    let v = verdict_lines(r);
    assert_eq!(v.len(), 1, "want one verdict line:\n{}", r.stderr);
    for n in needles {
        assert!(v[0].contains(n), "{n:?} not in {:?}\n{}", v[0], r.stderr);
    }
}

// ---------------------------------------------------------------------------
// 1. kill -9 mid-stream, at a seeded random point.

#[derive(Clone, Copy, Debug)]
enum Victim {
    /// The remote shell command producing the stream (`yes` on h1).
    Command,
    /// The agent on the sending host (h1).
    SendAgent,
    /// The agent on the receiving host (h2).
    RecvAgent,
    /// The ssh master connection of the receiving host (h2).
    RecvMaster,
}

fn kill9_mid_stream(victim: Victim, tag: &str) {
    let name = format!("kill9_{victim:?}");
    let mut rng = Rng::seeded(&name);
    let ssh = LocalSsh::start(tag);
    let mark = marker(tag);
    let cfg = ssh.config.to_string_lossy().into_owned();
    let yes = format!("h1:yes {mark}");
    let cat = format!("h2:cat >/dev/null # {mark}");
    // (-v for the re-attach line, where the master is the victim.)
    let words: Vec<&str> = match victim {
        Victim::RecvMaster => vec!["-v", &yes, &cat],
        _ => vec![&yes, &cat],
    };
    let s = start(&[], &args(&ssh, &words), None);
    let (pattern, comm_is) = match victim {
        Victim::Command => (format!("^yes {mark}"), "yes"),
        Victim::SendAgent => (format!("rdrecv --agent .*yes {mark}"), "rdrecv"),
        Victim::RecvAgent => (
            format!("rdrecv --agent .*cat >/dev/null # {mark}"),
            "rdrecv",
        ),
        Victim::RecvMaster => (format!("^ssh .*{cfg}.* -M .*-- h2$"), "ssh"),
    };
    // Mid-stream: both commands run (the remote login shell that starts an
    // agent shows the same command line until it execs, hence the comm check).
    let pids = poll(Duration::from_secs(20), Duration::from_millis(20), || {
        let both = !pgrep(&format!("^yes {mark}")).is_empty()
            && !pgrep(&format!("rdrecv --cmd-guard .*cat >/dev/null # {mark}")).is_empty();
        let v: Vec<u32> = pgrep(&pattern)
            .into_iter()
            .filter(|p| comm(*p) == comm_is)
            .collect();
        (both && !v.is_empty()).then_some(v)
    })
    .unwrap_or_else(|| panic!("pipeline did not start: {}", ps(&pgrep(&mark))));
    assert_eq!(pids.len(), 1, "{pattern}: {}", ps(&pgrep(&mark)));
    let at = rng.millis(50, 1500);
    std::thread::sleep(at);
    eprintln!("{name}: kill -9 {pattern} after {at:?} of streaming");
    let t = Instant::now();
    kill("-9", pids[0]);
    if let Victim::RecvMaster = victim {
        // Not a failure: rdpipe starts the master again and re-attaches to
        // h2's agent, which kept receiving; then Ctrl-C ends it all.
        s.wait_stderr_line("re-attached after", Duration::from_secs(20));
        s.signal("-INT");
        let r = s.finish(Duration::from_secs(15));
        assert_eq!(r.code(), Some(130), "{}", r.stderr);
        assert!(r.stderr.contains("h2 [2] 'cat "), "{}", r.stderr);
        assert_gone(&[&mark, &cfg], &name);
        return;
    }
    let r = s.finish(Duration::from_secs(40));
    eprintln!("{name}: rdpipe ended {:?} after the kill", t.elapsed());
    assert!(
        r.code().is_some_and(|c| c != 0),
        "{:?}\n{}",
        r.status,
        r.stderr
    );
    // The bound: the failure cascades at once, teardown takes at most about
    // ROOT_CAUSE_GRACE + TEARDOWN_WAIT (4 s).
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    let host = match victim {
        Victim::Command | Victim::SendAgent => "h1 [1] 'yes ",
        Victim::RecvAgent | Victim::RecvMaster => "h2 [2] 'cat ",
    };
    let v = verdict_lines(&r);
    assert!(!v.is_empty(), "no verdict line:\n{}", r.stderr);
    let names_root = v.iter().any(|l| l.contains(host));
    assert!(names_root, "no verdict naming {host}:\n{}", r.stderr);
    if let Victim::Command = victim {
        // The login shell either forks the command and reports its SIGKILL as
        // status 137 (dash) or execs it, which is then killed itself (bash).
        assert_one_line(&r, &["h1 [1] 'yes "]);
        let v = verdict_lines(&r);
        assert!(
            v[0].contains("137") || v[0].contains("killed by signal 9"),
            "{}",
            r.stderr
        );
        assert_eq!(r.code(), Some(137), "{}", r.stderr);
    }
    assert_gone(&[&mark, &cfg], &name);
}

#[test]
fn kill9_remote_command_mid_stream() {
    need_ssh!();
    kill9_mid_stream(Victim::Command, "kcmd");
}

#[test]
fn kill9_sending_agent_at_a_random_point() {
    need_ssh!();
    kill9_mid_stream(Victim::SendAgent, "ksnd");
}

#[test]
fn kill9_receiving_agent_mid_stream() {
    need_ssh!();
    kill9_mid_stream(Victim::RecvAgent, "krcv");
}

#[test]
fn kill9_receiving_hosts_ssh_master_mid_stream() {
    need_ssh!();
    kill9_mid_stream(Victim::RecvMaster, "kmst");
}

// ---------------------------------------------------------------------------
// 2.–3. Network faults: `faults_network`.
// 4. The downstream command exiting early.

#[test]
fn downstream_head_exits_early() {
    need_ssh!();
    let ssh = LocalSsh::start("head");
    let mark = marker("head");
    let cfg = ssh.config.to_string_lossy().into_owned();
    // An endless producer: the consumer stops reading after 1000 bytes. Like
    // `set -o pipefail; yes | head -c 1000`: head's output is delivered whole,
    // the producer's stream was cut short, so the status is non-zero (1, the
    // status of a failed transfer; 141 stays reserved for rdpipe's own stdout
    // being closed) and one line says who stopped reading.
    let t = Instant::now();
    let r = run(
        &args(
            &ssh,
            &[
                &format!("h1:yes {mark}"),
                &format!("h2:head -c 1000 # {mark}"),
            ],
        ),
        None,
        Duration::from_secs(30),
    );
    eprintln!("head: {:?} {:?}\n{}", r.status, t.elapsed(), r.stderr);
    assert_eq!(r.stdout.len(), 1000, "{}", r.stderr);
    assert!(r.stdout.starts_with(format!("{mark}\n").as_bytes()));
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert_one_line(
        &r,
        &[
            "h2 [2] 'head -c 1000",
            "stopped reading its input",
            "from [1] h1 was cut short",
        ],
    );
    assert_gone(&[&mark, &cfg], "head -c 1000");

    // A finite stream that fits the consumer's pipe is written whole before it
    // exits: delivered, exit 0 (again like a shell).
    let r = run(
        &args(&ssh, &["h1:cat", &format!("h2:head -c 1000 # {mark}")]),
        Some(b"0123456789".repeat(10)),
        Duration::from_secs(30),
    );
    r.ok();
    assert_eq!(r.stdout, b"0123456789".repeat(10));
    assert_gone(&[&mark, &cfg], "head -c 1000 (short input)");
}

// ---------------------------------------------------------------------------
// 5. A slow consumer at the end of a pipeline.

#[test]
fn slow_consumer_keeps_the_receiving_agents_memory_flat() {
    need_ssh!();
    let ssh = LocalSsh::start("slow");
    let mark = marker("slow");
    let total = 256u64 << 20;
    // The consumer sleeps 4 s before it reads anything, then reads it all.
    let s = start(
        &[],
        &args(
            &ssh,
            &[
                &format!("h1:head -c {total} /dev/zero"),
                &format!("h2:sleep 4; wc -c # {mark}"),
            ],
        ),
        None,
    );
    // The agent itself (not the login shell that starts it, same command line).
    let pat = format!("rdrecv --agent .*wc -c # {mark}");
    let agent = wait_until("the receiving agent", Duration::from_secs(20), || {
        pgrep(&pat).into_iter().find(|p| comm(*p) == "rdrecv")
    });
    let mut samples = Vec::new();
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(k) = rss_kib(agent) {
            samples.push(k);
        }
    }
    let r = s.finish(Duration::from_secs(60));
    r.ok();
    assert_eq!(r.stdout_str().trim(), total.to_string());
    let (lo, hi) = (
        *samples.iter().min().unwrap(),
        *samples.iter().max().unwrap(),
    );
    eprintln!("slow consumer: receiving agent RSS {lo}..{hi} KiB while the consumer slept");
    assert!(samples.len() > 10, "could not read the agent's RSS");
    assert!(hi < 64 * 1024, "agent RSS {hi} KiB");
    assert!(hi - lo < 16 * 1024, "agent RSS grew from {lo} to {hi} KiB");
}

// ---------------------------------------------------------------------------
// 6. `> FILE` on a full file system.

struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn write_to_a_full_file_system_names_host_and_file() {
    need_root!("mount");
    let ssh = LocalSsh::start("full");
    let dir = ssh.dir.path("small");
    std::fs::create_dir_all(&dir).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "rdpftmp"])
        .arg(&dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount tmpfs");
    let _m = Tmpfs(dir.clone());
    let target = dir.join("out").to_string_lossy().into_owned();
    let cfg = ssh.config.to_string_lossy().into_owned();
    let mark = marker("full");
    let t = Instant::now();
    let r = run(
        &args(
            &ssh,
            &[
                &format!("h1:head -c 8000000 /dev/zero # {mark}"),
                &format!("h2:> {target}"),
            ],
        ),
        None,
        Duration::from_secs(30),
    );
    eprintln!("full: {:?} in {:?}\n{}", r.status, t.elapsed(), r.stderr);
    assert!(r.code().is_some_and(|c| c != 0), "{}", r.stderr);
    assert_one_line(&r, &["h2 [2]", &target, "No space left"]);
    assert_gone(&[&mark, &cfg, &target], "a full file system");
}

// ---------------------------------------------------------------------------
// 7. SIGINT and SIGTERM at random points.

#[derive(Clone, Copy, Debug)]
enum When {
    /// While the SSH masters connect (nothing remote started yet, or just).
    BeforeConnect,
    /// While data flows.
    MidStream,
    /// Every byte delivered, the last command still running.
    AtTheEnd,
}

fn signal_at(sig: &str, num: i32, tag: &str) {
    let name = format!("sig{sig}");
    let mut rng = Rng::seeded(&name);
    let ssh = LocalSsh::start(tag);
    let cfg = ssh.config.to_string_lossy().into_owned();
    for (k, when) in [When::BeforeConnect, When::MidStream, When::AtTheEnd]
        .into_iter()
        .enumerate()
    {
        let mark = marker(&format!("{tag}{k}"));
        // A unique sleep the test can find: the last command after its data.
        let nap = format!("30.{}{k}", std::process::id() % 1000);
        let segs: Vec<String> = match when {
            When::AtTheEnd => vec![
                format!("h1:echo {mark}"),
                format!("h2:cat; sleep {nap} # {mark}"),
            ],
            _ => vec![
                format!("h1:yes {mark}"),
                format!("h2:cat >/dev/null # {mark}"),
            ],
        };
        let segs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
        let s = start(&[], &args(&ssh, &segs), None);
        let at = match when {
            When::BeforeConnect => rng.millis(0, 150),
            When::MidStream => {
                wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
                rng.millis(50, 1000)
            }
            When::AtTheEnd => {
                // `sleep` runs once `cat` has written its output; the agent
                // still passes it on: the signal comes once it is on
                // rdpipe's stdout (the data is all there, the run is not over).
                wait_for(&format!("^sleep {nap}"), Duration::from_secs(20));
                assert!(
                    s.wait_stdout_ends_with(
                        format!("{mark}\n").as_bytes(),
                        Duration::from_secs(20)
                    ),
                    "the output never reached rdpipe's stdout"
                );
                rng.millis(0, 250)
            }
        };
        std::thread::sleep(at);
        eprintln!("{name}: {sig} {when:?} (+{at:?})");
        let t = Instant::now();
        kill(&format!("-{sig}"), s.child.id());
        let r = s.finish(Duration::from_secs(20));
        eprintln!("{name} {when:?}: {:?} after {:?}", r.status, t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(10), "{when:?}");
        use std::os::unix::process::ExitStatusExt;
        if r.status.signal() == Some(num) {
            // Within the first milliseconds, before rdpipe has set up its
            // handlers (and before it started anything), the default action
            // applies; a shell reports that as 128+N too.
            assert!(matches!(when, When::BeforeConnect), "{when:?}");
            eprintln!("{name}: {sig} arrived before rdpipe caught signals");
        } else {
            assert_eq!(r.code(), Some(128 + num), "{when:?}: {}", r.stderr);
            assert_one_line(&r, &[&format!("interrupted by SIG{sig}")]);
        }
        if let When::AtTheEnd = when {
            assert_eq!(r.stdout_str(), format!("{mark}\n"));
        }
        assert_gone(&[&mark, &nap, &cfg], &format!("SIG{sig} {when:?}"));
    }
}

#[test]
fn sigint_before_connect_mid_stream_and_at_the_end() {
    need_ssh!();
    signal_at("INT", 2, "sint");
}

#[test]
fn sigterm_before_connect_mid_stream_and_at_the_end() {
    need_ssh!();
    signal_at("TERM", 15, "sterm");
}

#[test]
fn signals_inherited_as_ignored_stay_ignored() {
    // `nohup rdpipe … &` from a script: SIGHUP and SIGINT arrive ignored, and
    // must not stop the pipeline (the terminal closing, a Ctrl-C meant for the
    // script's foreground job); SIGTERM, still at its default, does.
    need_ssh!();
    let ssh = LocalSsh::start("nohup");
    let cfg = ssh.config.to_string_lossy().into_owned();
    let mark = marker("nohup");
    let segs = [
        format!("h1:yes {mark}"),
        format!("h2:cat >/dev/null # {mark}"),
    ];
    let segs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
    let mut s = start(
        &["env", "--ignore-signal=HUP,INT"],
        &args(&ssh, &segs),
        None,
    );
    wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
    kill("-HUP", s.child.id());
    kill("-INT", s.child.id());
    // Nothing to wait for but the absence of an exit: a pipeline that would
    // stop tears down within milliseconds.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "rdpipe stopped on a signal it inherited as ignored"
    );
    kill("-TERM", s.child.id());
    let r = s.finish(Duration::from_secs(20));
    assert_eq!(r.code(), Some(143), "{}", r.stderr);
    assert_one_line(&r, &["interrupted by SIGTERM"]);
    assert_gone(&[&mark, &cfg], "SIGTERM after ignored signals");
}

// ---------------------------------------------------------------------------
// 8. Bad input: SSH authentication failure.

#[test]
fn ssh_authentication_failure_is_one_line_naming_the_host() {
    need_ssh!();
    let ssh = LocalSsh::start("auth");
    // A host alias whose identity is a key sshd does not know.
    let keys = Keys::generate(&Scratch::new("authk"));
    let cfg = ssh.dir.path("ssh_config_badkey");
    let known = ssh.dir.path("known_hosts");
    let user = user();
    // No `Host *` block: IdentityFile accumulates, the good key must not leak in.
    let mut text = String::new();
    for (alias, key) in [("h1", ssh.dir.path("id_test")), ("badkey", keys.user_key)] {
        text.push_str(&format!(
            "Host {alias}\n  HostName 127.0.0.1\n  Port {}\n  User {user}\n  IdentityFile {}\n\
             IdentitiesOnly yes\n  UserKnownHostsFile {}\n  StrictHostKeyChecking yes\n\
             LogLevel ERROR\n  BatchMode yes\n",
            ssh.port,
            key.display(),
            known.display()
        ));
    }
    std::fs::write(&cfg, text).unwrap();
    let cfgs = cfg.to_string_lossy().into_owned();
    let t = Instant::now();
    let r = run(
        &[
            "-F".to_string(),
            cfgs.clone(),
            "--remote-bin".into(),
            bin_dir(),
            "h1:cat".into(),
            "badkey:cat".into(),
        ],
        Some(b"x\n".to_vec()),
        Duration::from_secs(30),
    );
    eprintln!("auth: {:?} in {:?}\n{}", r.status, t.elapsed(), r.stderr);
    assert!(r.code().is_some_and(|c| c != 0), "{}", r.stderr);
    assert_one_line(&r, &["badkey"]);
    assert!(r.stdout.is_empty());
    assert_gone(&[&cfgs], "an authentication failure");
}

// ---------------------------------------------------------------------------
// 9. Load: 16 concurrent pipelines.

fn sixteen(
    starter: &dyn Fn(&[&str], Vec<u8>) -> Started,
    hosts: [&str; 3],
) -> Vec<(usize, Run, Vec<u8>)> {
    let mut running = Vec::new();
    for i in 0..16 {
        let data = random_bytes((2 << 20) + i * 4099, 100 + i as u64);
        // Vary the shapes: two or three hops, hosts in both directions.
        let a = hosts[i % 3];
        let b = hosts[(i + 1) % 3];
        let c = hosts[(i + 2) % 3];
        let segs = if i % 2 == 0 {
            vec![format!("{a}:cat"), format!("{b}:cat")]
        } else {
            vec![format!("{a}:cat"), format!("{b}:cat"), format!("{c}:cat")]
        };
        let segs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
        running.push((i, starter(&segs, data.clone()), data));
    }
    running
        .into_iter()
        .map(|(i, s, d)| (i, s.finish(Duration::from_secs(180)), d))
        .collect()
}

fn check_sixteen(results: Vec<(usize, Run, Vec<u8>)>) {
    for (i, r, data) in results {
        assert!(
            r.status.success(),
            "pipeline {i}: {:?}\n{}",
            r.status,
            r.stderr
        );
        assert_eq!(r.stdout.len(), data.len(), "pipeline {i}");
        assert_eq!(xxh3_hex(&r.stdout), xxh3_hex(&data), "pipeline {i}");
    }
}

#[test]
fn sixteen_concurrent_pipelines_all_byte_exact() {
    need_ssh!();
    let t = Instant::now();
    if is_root() {
        let net = Netns::start("16");
        let results = sixteen(
            &|segs, data| nstart(&net, segs, Some(data)),
            ["n1", "n2", "n3"],
        );
        eprintln!("16 pipelines (netns) in {:?}", t.elapsed());
        check_sixteen(results);
        let left = net.wait_clean(GONE);
        assert!(
            left.is_empty(),
            "{left:?}\n{}",
            ps(&left.iter().flat_map(|(_, v)| v.clone()).collect::<Vec<_>>())
        );
        for n in 0..=3 {
            assert!(netns_listeners(&net.ns(n)).is_empty(), "ns {n} ports");
        }
    } else {
        eprintln!("sixteen_concurrent_pipelines_all_byte_exact: not root, using sshd on 127.0.0.1");
        let ssh = LocalSsh::start("16");
        let cfg = ssh.config.to_string_lossy().into_owned();
        let results = sixteen(
            &|segs, data| start(&[], &args(&ssh, segs), Some(data)),
            ["h1", "h2", "h3"],
        );
        eprintln!("16 pipelines (127.0.0.1) in {:?}", t.elapsed());
        check_sixteen(results);
        assert_gone(&[&cfg], "16 pipelines");
    }
}
