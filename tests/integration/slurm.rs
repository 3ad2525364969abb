//! The Slurm cluster of `support/slurm.rs` on the network-namespace hosts, the
//! ground `--launcher srun` stands on: steps land in their node's namespace,
//! carry stdin and stdout, are listed and cancelled, and the cluster leaves
//! nothing behind. Needs root and slurm-wlm + munge (scripts/install-deps); the
//! test says SKIPPED loudly otherwise.

use crate::support::*;

use std::process::Stdio;
use std::time::Duration;

/// Whether `pid` is gone (or a zombie nobody has reaped yet).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(") ").next().unwrap_or("").starts_with('Z'))
        .unwrap_or(true)
}

#[test]
fn slurm_cluster_runs_steps_on_each_namespace_host() {
    need_slurm!();
    let net = Netns::start_with("sl", 2);
    let slurm = Slurm::start(&net);
    eprintln!("slurm ready in {:?}", slurm.ready_in);
    let job = slurm.allocate(2);
    // One task on `node` as a step of `job`, stdin `input`: status, stdout, stderr.
    let srun = |job: &str, node: &str, cmd: &[&str], input: Option<&[u8]>| {
        let mut a = vec!["srun", "--jobid", job, "-N1", "-n1", "-w", node];
        a.extend(["--overlap", "--unbuffered"]);
        a.extend(cmd);
        let o = slurm.run(&a, input);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (
            o.status,
            String::from_utf8_lossy(&o.stdout).into_owned(),
            err,
        )
    };

    // A step on n2 runs in n2's namespace.
    let (st, out, err) = srun(
        &job,
        "n2",
        &["ip", "-o", "-4", "addr", "show", "dev", "eth0"],
        None,
    );
    assert!(
        st.success() && out.contains(" 10.99.0.12/24 "),
        "{st:?} {out} {err}"
    );
    // stdin reaches the step, its stdout comes back.
    let (st, out, err) = srun(&job, "n1", &["cat"], Some(b"hi\n"));
    assert!(st.success(), "{st:?} {err}");
    assert_eq!(out, "hi\n");

    // A step on a node outside its job fails at once, with status 1.
    let small = slurm.allocate(1);
    let (st, _, err) = srun(&small, "n2", &["true"], None);
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(
        err.contains("Unable to create step")
            && err.contains("Requested node configuration is not available"),
        "{err}"
    );

    // A running step is listed by squeue -s until scancel ends it.
    assert!(slurm.steps(&job).is_empty());
    let mut sleeper = slurm
        .command("srun")
        .args(["--jobid", &job, "-N1", "-n1", "-w", "n1", "--overlap"])
        .args(["sleep", "300"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let step = wait_until("the sleep step listed", Duration::from_secs(20), || {
        slurm.steps(&job).pop()
    });
    assert!(step.starts_with(&format!("{job}.")), "{step}");
    slurm.ok(&["scancel", &step]);
    let st = wait_bounded(&mut sleeper, Duration::from_secs(30), "srun sleep 300");
    assert!(!st.success(), "{st:?}");
    wait_until("no step listed", Duration::from_secs(20), || {
        slurm.steps(&job).is_empty().then_some(())
    });

    // Nothing of the steps is left (their slurmstepd included): only sshd and
    // the cluster's daemons.
    let left = slurm.wait_clean(&net, Duration::from_secs(10));
    assert!(left.is_empty(), "{left:?}");

    // Drop cancels the jobs and stops every daemon, a step still running (one
    // that ignores SIGTERM) included: nothing is left in any namespace but the
    // sshds.
    let mut stubborn = slurm
        .command("srun")
        .args(["--jobid", &job, "-N1", "-n1", "-w", "n2", "--overlap"])
        .args(["sh", "-c", "trap '' TERM; sleep 300"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the stubborn step listed", Duration::from_secs(20), || {
        (!slurm.steps(&job).is_empty()).then_some(())
    });
    let pids = slurm.daemon_pids();
    let dir = slurm.dir.s("");
    let t = std::time::Instant::now();
    drop(slurm);
    eprintln!("slurm dropped in {:?}", t.elapsed());
    let st = wait_bounded(&mut stubborn, Duration::from_secs(10), "srun sh -c ...");
    assert!(!st.success(), "{st:?}");
    assert!(pids.iter().all(|p| gone(*p)), "{}", ps(&pids));
    assert!(pgrep(&dir).is_empty(), "{}", ps(&pgrep(&dir)));
    net.assert_clean();
}
