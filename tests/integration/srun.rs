//! `rdpipe --launcher srun` on a real Slurm cluster (support/slurm.rs) in the
//! network-namespace hosts: the pipelines the ssh tests run (OLLEH, 256 MiB
//! byte-exact, self-install, fan-out with a failing sink, an agent killed
//! mid-stream, Ctrl-C), a node that dies mid-stream, a node outside the
//! allocation, no allocation at all; after each, nothing is left running on
//! any node and no step of the run is left in `squeue -s` (but the dead
//! node's, until Slurm declares the node down). And the sealed control
//! channel: a tap on Slurm's step I/O finds no key and nothing that
//! authenticates, and munge missing or not answering is a clear error, never
//! keys in clear text.

use crate::support::*;
use std::time::Duration;

/// rdpipe started in namespace 0 with the cluster's environment, the job's
/// id (as inside `salloc`), `--launcher srun` and `--remote-bin` (the agents
/// cargo built).
fn start_srun(
    net: &Netns,
    slurm: &Slurm,
    job: &str,
    extra: &[String],
    input: Option<Vec<u8>>,
) -> Started {
    let mut args = vec!["--remote-bin".to_string(), bin_dir()];
    args.extend(extra.iter().cloned());
    start_srun_as_is(net, slurm, job, &args, input, &[])
}

/// The same without `--remote-bin`, with `env` added.
fn start_srun_as_is(
    net: &Netns,
    slurm: &Slurm,
    job: &str,
    args: &[String],
    input: Option<Vec<u8>>,
    env: &[(&str, String)],
) -> Started {
    let mut prefix = net.exec_prefix();
    prefix.push("env".into());
    prefix.extend(slurm.env().into_iter().map(|(k, v)| format!("{k}={v}")));
    prefix.push(format!("SLURM_JOB_ID={job}"));
    prefix.push("RDPIPE_LAUNCHER=srun".into());
    prefix.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    start(&prefix, args, input)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `extra`, then a three-node pipeline paced to last about 50 s (so that it
/// is still running when the test interrupts it).
fn paced_chain(extra: &[&str]) -> Vec<String> {
    let mut v = strings(extra);
    v.extend(strings(&[
        "--rate-limit",
        "8M",
        "n1:head -c 400M /dev/zero",
        "n2:cat",
        "n3:cat > /dev/null",
    ]));
    v
}

/// No process of the run on any host and no step of it in the job.
fn assert_clean(net: &Netns, slurm: &Slurm, job: &str) {
    let left = slurm.wait_clean(net, Duration::from_secs(15));
    assert!(
        left.is_empty(),
        "processes left: {left:?}\n{}",
        slurm.logs()
    );
    let steps = wait_until("no step left", Duration::from_secs(15), || {
        Some(slurm.steps(job)).filter(Vec::is_empty)
    });
    assert!(steps.is_empty());
}

#[test]
fn srun_olleh_and_256_mib_byte_exact() {
    need_slurm!();
    let net = Netns::start_with("sr", 2);
    let slurm = Slurm::start(&net);
    let job = slurm.allocate(2);
    let r = start_srun(
        &net,
        &slurm,
        &job,
        &strings(&["-v", "n1:tr [:lower:] [:upper:]", "n2:rev"]),
        Some(b"hello\n".to_vec()),
    )
    .finish(Duration::from_secs(120));
    r.ok();
    assert_eq!(r.stdout_str(), "OLLEH\n", "{}", r.stderr);
    // The hop between the nodes went between their addresses, Slurm's NodeAddr.
    assert!(
        r.stderr
            .contains("[2] n2: data address 10.99.0.12 for [1] n1 (from slurm;"),
        "{}",
        r.stderr
    );
    assert_clean(&net, &slurm, &job);

    let data = random_bytes(256 << 20, 31);
    let r = start_srun(
        &net,
        &slurm,
        &job,
        &strings(&["n1:cat", "n2:cat"]),
        Some(data.clone()),
    )
    .finish(Duration::from_secs(180));
    r.ok();
    assert_eq!(r.stdout.len(), data.len(), "{}", r.stderr);
    assert!(r.stdout == data, "the output differs from the input");
    assert_clean(&net, &slurm, &job);

    // Self-install through srun: with no rdrecv in the steps' PATH (srun
    // passes rdpipe's environment on) and no --remote-bin, the probe and the
    // upload run as steps (into HOME's cache), then the agents.
    let home = net.dir.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let r = start_srun_as_is(
        &net,
        &slurm,
        &job,
        &strings(&["-vv", "n1:cat", "n2:tr a-z A-Z"]),
        Some(b"self-installed\n".to_vec()),
        &[
            ("HOME", home.to_string_lossy().into_owned()),
            ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin".into()),
        ],
    );
    let r = r.finish(Duration::from_secs(120));
    r.ok();
    assert_eq!(r.stdout_str(), "SELF-INSTALLED\n", "{}", r.stderr);
    assert!(r.stderr.contains("probed in"), "{}", r.stderr);
    assert_clean(&net, &slurm, &job);
}

#[test]
fn srun_fanout_with_a_failing_sink_and_an_agent_killed_mid_stream() {
    need_slurm!();
    let net = Netns::start_with("sf", 3);
    let slurm = Slurm::start(&net);
    let job = slurm.allocate(3);
    let d = &net.dir;
    let data = random_bytes(64 << 20, 78);
    let sum = xxh3_hex(&data);
    std::fs::write(d.path("src"), &data).unwrap();
    // The middle sink's command fails: it still relays, the others finish
    // byte-exact, the status is its command's.
    let r = start_srun(
        &net,
        &slurm,
        &job,
        &[
            format!("n1:< {}", d.s("src")),
            "--to".into(),
            format!("n2:> {}", d.s("o2")),
            "--to".into(),
            "n3:head -c 1000 >/dev/null; exit 4".into(),
            "--to".into(),
            format!("n1:cat > {}", d.s("o1")),
        ],
        None,
    )
    .finish(Duration::from_secs(120));
    assert_eq!(r.code(), Some(4), "{}", r.stderr);
    assert_eq!(file_xxh3(&d.path("o2")), sum);
    assert_eq!(file_xxh3(&d.path("o1")), sum);
    assert!(
        r.stderr.contains("rdpipe: error: 1 of 3 sinks failed (n3)"),
        "{}",
        r.stderr
    );
    assert_clean(&net, &slurm, &job);

    // n2's agent (and what runs under it) killed mid-stream: the run fails
    // naming n2, within bounds, and leaves nothing anywhere.
    let s = start_srun(
        &net,
        &slurm,
        &job,
        &paced_chain(&["--reconnect-timeout", "2"]),
        None,
    );
    let agent = wait_until("n2's agent running", Duration::from_secs(30), || {
        net.stray_pids(2)
            .into_iter()
            .filter(|p| !slurm.daemon_pids().contains(p))
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.contains("--agent"))
            })
    });
    std::thread::sleep(Duration::from_millis(500));
    kill("-9", agent);
    let r = s.finish(Duration::from_secs(30));
    assert!(!r.status.success(), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("n2 [2] 'cat': the agent died without a report"),
        "{}",
        r.stderr
    );
    assert_clean(&net, &slurm, &job);

    // Ctrl-C mid-stream: status 130, every step ended.
    let s = start_srun(&net, &slurm, &job, &paced_chain(&[]), None);
    wait_until("three steps running", Duration::from_secs(30), || {
        (slurm.steps(&job).len() >= 3).then_some(())
    });
    s.interrupt();
    assert_clean(&net, &slurm, &job);
}

#[test]
fn srun_gather_line_merge_and_each() {
    need_slurm!();
    let net = Netns::start_with("sg", 3);
    let slurm = Slurm::start(&net);
    let job = slurm.allocate(3);
    let d = &net.dir;
    // Line merge: n1 and n2's lines into n3's sort, tagged; the merge's
    // lanes run in n3's one step.
    let r = start_srun(
        &net,
        &slurm,
        &job,
        &strings(&[
            "-v",
            "--tag",
            "--from",
            "n1:seq 1 3000",
            "--from",
            "n2:seq 1 3000",
            "n3:sort -t: -k1,1 -s",
        ]),
        None,
    )
    .finish(Duration::from_secs(120));
    r.ok();
    let out = r.stdout_str();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6000, "{}", r.stderr);
    for (k, h) in ["n1", "n2"].iter().enumerate() {
        let mine: Vec<&str> = lines[k * 3000..(k + 1) * 3000].to_vec();
        let want: Vec<String> = (1..=3000).map(|i| format!("{h}: {i}")).collect();
        assert_eq!(mine, want, "{h}'s lines");
    }
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("rdpipe: source 2 [3] n2 ") && l.contains(": ok: ")),
        "{}",
        r.stderr
    );
    assert_clean(&net, &slurm, &job);

    // --each: each source's stream byte-exact into its own file on n3.
    let mut sums = Vec::new();
    for h in 1..=2 {
        let data = random_bytes((16 << 20) + h, 90 + h as u64);
        sums.push(xxh3_hex(&data));
        std::fs::write(d.path(&format!("src{h}")), &data).unwrap();
    }
    let r = start_srun(
        &net,
        &slurm,
        &job,
        &[
            "--each".into(),
            "--from".into(),
            format!("n1:< {}", d.s("src1")),
            "--from".into(),
            format!("n2:cat {}", d.s("src2")),
            format!("n3:> {}", d.s("out.%h")),
        ],
        None,
    )
    .finish(Duration::from_secs(120));
    r.ok();
    for h in 1..=2 {
        assert_eq!(file_xxh3(&d.path(&format!("out.n{h}"))), sums[h - 1]);
    }
    assert_clean(&net, &slurm, &job);
}

#[test]
fn srun_refuses_a_node_outside_the_allocation_and_a_missing_allocation() {
    need_slurm!();
    let net = Netns::start_with("so", 2);
    let slurm = Slurm::start(&net);
    let job = slurm.allocate(1);
    let r = start_srun(
        &net,
        &slurm,
        &job,
        &strings(&["n1:cat", "n2:cat"]),
        Some(b"x".to_vec()),
    )
    .finish(Duration::from_secs(60));
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("not a node"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(
        lines[0].contains(&format!(
            "n2: not a node of Slurm job {job} (its nodes: n1)"
        )),
        "{}",
        r.stderr
    );
    assert_clean(&net, &slurm, &job);
    // No job at all: one line saying how to get one.
    let mut prefix = net.exec_prefix();
    prefix.extend(["env".into(), "-u".into(), "SLURM_JOB_ID".into()]);
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let r = start(
        &prefix,
        &strings(&["--launcher", "srun", "n1:cat"]),
        Some(b"x".to_vec()),
    )
    .finish(Duration::from_secs(30));
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--launcher srun needs a Slurm allocation: run rdpipe inside one (salloc, sbatch) or pass --jobid JOB"),
        "{}",
        r.stderr
    );
}

/// n2 of a chain dies mid-stream as a host does: its link goes down first, so
/// no FIN or RST from its sockets reaches anyone, then every process on it
/// (slurmd, the step's slurmstepd, the agent and its command) is SIGKILLed.
/// Its neighbours notice only by their dead-peer timeout (30 s, transport's
/// DEAD_PEER_SECS) and `--reconnect-timeout`; n2's srun notices nothing (its
/// slurmstepd just stops answering). rdpipe fails within that bound with one
/// line naming n2, and leaves nothing running on n1, n3 or its own host.
#[test]
fn srun_chain_with_a_node_that_dies_mid_stream() {
    need_slurm!();
    let net = Netns::start_with("sd", 3);
    let slurm = Slurm::start(&net);
    let job = slurm.allocate(3);
    let s = start_srun(
        &net,
        &slurm,
        &job,
        &paced_chain(&["--reconnect-timeout", "2"]),
        None,
    );
    // Mid-stream: n2's command has read the first MiB of the stream.
    wait_until("a MiB through n2's cat", Duration::from_secs(30), || {
        net.stray_pids(2)
            .into_iter()
            .find(|p| comm(*p) == "cat" && read_bytes(*p).is_some_and(|n| n > 1 << 20))
    });
    sh(std::process::Command::new("ip").args(["-n", &net.ns(2), "link", "set", "eth0", "down"]));
    let died = std::time::Instant::now();
    // Until nothing is left: a process forked while the list was read is
    // killed in the next round.
    wait_until(
        "nothing left running on n2",
        Duration::from_secs(10),
        || {
            let left = net.stray_pids(2);
            left.iter().for_each(|p| kill("-9", *p));
            left.is_empty().then_some(())
        },
    );
    let r = s.finish(Duration::from_secs(150));
    let took = died.elapsed();
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    // The 30 s dead-peer timeout and 2 s of reconnecting, then rdpipe's
    // teardown (it waits for the agents, kills n2's srun, cancels the run's
    // steps through slurmctld): 44 to 54 s in all on an idle machine; the
    // bound leaves room for a loaded one (CI runs tests side by side).
    assert!(took < Duration::from_secs(100), "{took:?}\n{}", r.stderr);
    let errors: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("rdpipe: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", r.stderr);
    // Which neighbours are named depends on which timed out before rdpipe
    // closed the control channels (both, usually).
    assert!(
        errors[0].starts_with("rdpipe: error: n2 [2] 'cat': no word from it since [")
            && errors[0].ends_with("to it: is n2 down or cut off from the network?"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    // Nothing on n1, n3 or rdpipe's host (no srun of the run left).
    let left = slurm.wait_clean(&net, Duration::from_secs(15));
    assert!(
        left.is_empty(),
        "processes left: {left:?}\n{}",
        slurm.logs()
    );
    // The steps on n1 and n3 ended. n2's stays listed: only its slurmstepd
    // can report it complete, and slurmctld drops it only when it declares n2
    // DOWN (after SlurmdTimeout, 300 s by default, longer than a test should
    // wait); rdpipe's `scancel` of it cannot reach n2 either. So that one is
    // allowed, and then n2 is declared DOWN as SlurmdTimeout would, which ends
    // the job (NODE_FAIL) and its last step.
    let steps = wait_until("steps on n1 and n3 ended", Duration::from_secs(15), || {
        Some(slurm.steps_with_nodes(&job)).filter(|s| s.iter().all(|(_, n)| n == "n2"))
    });
    assert!(steps.len() <= 1, "{steps:?}");
    slurm.ok(&[
        "scontrol",
        "update",
        "NodeName=n2",
        "State=DOWN",
        "Reason=died",
    ]);
    wait_until("n2's step gone", Duration::from_secs(30), || {
        let o = slurm.run(&["squeue", "-h", "-s", "-j", &job, "-o", "%i"], None);
        o.stdout.is_empty().then_some(())
    });
}

/// The keys a run wrote to its `RDPIPE_KEYLOG` file: (what, key).
fn keylog(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(what, hex)| {
            let key = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (what.to_string(), key)
        })
        .collect()
}

/// Whether a hop's authentication handshake passes between a side holding
/// `real` (as a hop's listener does) and one holding `guess`, both in this
/// process over loopback.
fn authenticates(real: &[u8], guess: &[u8]) -> bool {
    use rdpipe_transport::handshake::handshake;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let real = real.to_vec();
    let listener = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut params = sender_params();
        params.role = rdpipe_wire::Role::Receiver;
        handshake(&mut c, &real, &params, Duration::from_secs(5)).is_ok()
    });
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mine = handshake(&mut s, guess, &sender_params(), Duration::from_secs(5)).is_ok();
    drop(s);
    let theirs = listener.join().unwrap();
    mine && theirs
}

/// Playing the eavesdropper on Slurm's step I/O (docs/security.md): a
/// passive tap (an AF_PACKET socket in rdpipe's namespace, which carries
/// every byte between srun and the nodes' slurmstepd) during a real run. The
/// tap sees the control channels (both munge credentials, the sealed lines,
/// the agents' clear `HELLO`), but none of the run's keys (from
/// `RDPIPE_KEYLOG`) in hex or raw, no key-shaped word as the key line had
/// them, and no 64-hex-digit string in all it captured passes the handshake
/// of the hop between the nodes against its real key (which does pass). A captured
/// credential replayed to munge is refused.
#[test]
fn srun_step_io_tapped_carries_no_key() {
    need_slurm!();
    let net = Netns::start_with("sk", 2);
    let slurm = Slurm::start(&net);
    let job = slurm.allocate(2);
    let log = net.dir.path("keylog");
    let mut args = vec!["--remote-bin".to_string(), bin_dir()];
    args.extend(strings(&["--progress", "n1:tr a-z A-Z", "n2:rev"]));
    let tap = Tap::start(&net.ns(0));
    let r = start_srun_as_is(
        &net,
        &slurm,
        &job,
        &args,
        Some(b"hello\n".to_vec()),
        &[("RDPIPE_KEYLOG", log.to_string_lossy().into_owned())],
    )
    .finish(Duration::from_secs(120));
    // The last of the agents' lines reach the tap before rdpipe ends.
    let cap = tap.stop();
    r.ok();
    assert_eq!(r.stdout_str(), "OLLEH\n", "{}", r.stderr);
    assert!(r.stderr.contains("RDPIPE_KEYLOG is set"), "{}", r.stderr);
    assert_clean(&net, &slurm, &job);
    let keys = keylog(&log);
    // stdin → n1, n1 → n2, n2 → stdout, and the chain secret.
    assert_eq!(keys.len(), 4, "{keys:?}");
    // The tap saw the step I/O, both ways.
    let hello = format!("HELLO {}", rdpipe_control::PROTOCOL);
    for seen in [&b"MUNGE MUNGE:"[..], b"SEAL ", hello.as_bytes()] {
        assert!(
            cap.contains(seen),
            "the tap missed {:?} ({} segments)",
            String::from_utf8_lossy(seen),
            cap.segments
        );
    }
    for (what, key) in &keys {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        for form in [hex.as_bytes(), hex.to_uppercase().as_bytes(), key] {
            assert!(!cap.contains(form), "{what}'s key crossed Slurm's I/O");
        }
    }
    // No word of 64 hex digits (a key as the clear key line had it) on any
    // connection.
    for (flow, bytes) in &cap.flows {
        let text = String::from_utf8_lossy(bytes);
        let word = text
            .split(|c: char| c.is_whitespace())
            .find(|w| w.len() == 64 && w.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(word.is_none(), "a key-shaped word on {flow:?}: {word:?}");
    }
    // Everything key-shaped the tap holds (each 64-digit window of the sealed
    // lines' hex, some hundreds) against the real key of the hop between the
    // nodes (the others' absence is checked above): none authenticates, four
    // at a time.
    let guesses = cap.hex_key_candidates();
    assert!(!guesses.is_empty());
    let real = &keys.iter().find(|(w, _)| w == "hop 2").unwrap().1;
    assert!(authenticates(real, real), "the real key must pass");
    std::thread::scope(|s| {
        for part in guesses.chunks(guesses.len().div_ceil(4)) {
            s.spawn(move || {
                for g in part {
                    assert!(!authenticates(real, g), "a captured string authenticated");
                }
            });
        }
    });
    // A captured credential replayed to munge is refused.
    let all: Vec<u8> = cap.flows.iter().flat_map(|(_, b)| b.clone()).collect();
    let text = String::from_utf8_lossy(&all);
    let cred = text
        .split("MUNGE ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap()
        .to_string();
    let socket = slurm.dir.path("munge.socket");
    let o = slurm.run(
        &["unmunge", &format!("--socket={}", socket.display())],
        Some(format!("{cred}\n").as_bytes()),
    );
    assert!(!o.status.success(), "a replayed credential decoded");
}

/// A directory for PATH holding only what a run with `--launcher srun` needs
/// (Slurm's clients, sh) and, as `munge` and `unmunge`, what `with` names.
fn path_with(net: &Netns, name: &str, with: &[(&str, &str)]) -> String {
    let d = net.dir.path(name);
    std::fs::create_dir_all(&d).unwrap();
    for p in ["srun", "squeue", "scontrol", "scancel", "sh", "env"] {
        let target = ["/usr/bin", "/bin"]
            .iter()
            .map(|b| std::path::Path::new(b).join(p))
            .find(|t| t.exists())
            .unwrap();
        std::os::unix::fs::symlink(target, d.join(p)).unwrap();
    }
    for (p, script) in with {
        let f = d.join(p);
        std::fs::write(&f, format!("#!/bin/sh\n{script}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    d.to_string_lossy().into_owned()
}

/// munge missing or munged not answering, here or on a node: one clear
/// error per host naming it and the fix, a non-zero status, no output, and
/// never the keys in clear text instead (no step of the run ever got a key).
#[test]
fn srun_without_munge_is_a_clear_error_never_clear_keys() {
    need_slurm!();
    let net = Netns::start_with("sm", 2);
    let slurm = Slurm::start(&net);
    let job = slurm.allocate(2);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();
    let run = |path: String| {
        let mut args = vec!["--remote-bin".to_string(), bin_dir()];
        args.extend(strings(&["n1:cat", "n2:cat"]));
        start_srun_as_is(
            &net,
            &slurm,
            &job,
            &args,
            Some(b"secret\n".to_vec()),
            &[("PATH", path)],
        )
        .finish(Duration::from_secs(60))
    };
    let errors = |r: &Run| -> Vec<String> {
        r.stderr
            .lines()
            .filter(|l| l.starts_with("rdpipe: error:"))
            .map(str::to_string)
            .collect()
    };
    // No munge on rdpipe's host: nothing starts.
    let r = run(path_with(&net, "none", &[]));
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(r.stdout.is_empty());
    assert_eq!(
        errors(&r),
        [format!(
            "rdpipe: error: cannot run munge on {host}: No such file or directory (os error 2): \
             install munge on {host} (--launcher srun authenticates each agent's control \
             channel with munge)"
        )],
        "{}",
        r.stderr
    );
    assert_clean(&net, &slurm, &job);
    // munged not answering here (a socket nobody listens on).
    let r = run(path_with(
        &net,
        "deaf",
        &[(
            "munge",
            "exec /usr/bin/munge \"$@\" --socket=/nonexistent/munge.socket",
        )],
    ));
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    let e = errors(&r);
    assert_eq!(e.len(), 1, "{}", r.stderr);
    assert!(
        e[0].starts_with(&format!("rdpipe: error: munge on {host} failed: "))
            && e[0].contains("Did you start munged?")
            && e[0].contains("needs munged running on every host of the run"),
        "{}",
        r.stderr
    );
    assert_clean(&net, &slurm, &job);
    // munge here, no unmunge on the nodes (the steps get rdpipe's PATH): each
    // node's agent says so, naming its node.
    let r = run(path_with(
        &net,
        "half",
        &[("munge", "exec /usr/bin/munge \"$@\"")],
    ));
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(r.stdout.is_empty());
    let e = errors(&r);
    assert!((1..=2).contains(&e.len()), "{}", r.stderr);
    for l in &e {
        let node = if l.contains("n1 [1]") { "n1" } else { "n2" };
        assert!(
            l.contains(&format!(
                "cannot run unmunge on {node}: No such file or directory (os error 2): install \
                 munge on {node}"
            )),
            "{}",
            r.stderr
        );
    }
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert_clean(&net, &slurm, &job);
}
