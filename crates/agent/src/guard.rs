//! Guardians: small processes that tie the life of something rdpipe started to
//! the life of its starter, so that even a SIGKILL leaves nothing behind.
//!
//! - [`main`]: the SSH master's guardian (`rdpipe --ssh-guard ssh ARGS...`).
//! - [`cmd_main`]: a segment command's guardian (`rdrecv --cmd-guard FD sh -c CMD`).
//!
//! # The SSH master's guardian
//!
//! rdpipe runs each SSH master connection (`ssh -M -N`) in the foreground under a
//! small guardian process whose stdin is a pipe from rdpipe. When that pipe closes,
//! because rdpipe finished, failed, or was killed with SIGKILL, the guardian
//! terminates the master. So no `ssh` process of a pipeline outlives rdpipe, which
//! a daemonised master (`ssh -f` with `ControlPersist=yes`) would.
//!
//! Agents that outlive a lost ssh session (`--reattach`) would wait out their
//! re-attach time after rdpipe is gone. So rdpipe hands the guardian, on that
//! pipe, a farewell per such agent (`FAREWELL ARGV INPUT`, both hex: a
//! command that reaches the agent through the master, and what to write to
//! it): when the pipe closes without `CLOSE` first (rdpipe died: an orderly
//! end says `CLOSE`), the guardian runs them all (at most [`FAREWELL_TIME`])
//! before it ends the master, and the agents end at once.

use rustix::process::{kill_process, Pid, Signal};
use std::ffi::OsString;
use std::io::Read;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// SIGTERM, SIGINT and SIGHUP, less those this process inherited as ignored.
///
/// A shell starts a background job (`cmd &` without job control) with SIGINT
/// ignored, and `nohup` starts its command with SIGHUP ignored: the person
/// asked for those signals not to stop it. Catching them anyway would undo
/// that (`nohup rdpipe …` torn down when the terminal closes; a script's
/// background rdpipe stopped by a Ctrl-C meant for the script's foreground
/// job), so such a signal stays ignored, as in any Unix filter. Read from
/// `SigIgn` in /proc/self/status (a mask, bit N-1 for signal N); where it
/// cannot be read, all three are caught.
pub fn stop_signals() -> Vec<i32> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let ignored = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| ignored_mask(&s))
        .unwrap_or(0);
    [SIGTERM, SIGINT, SIGHUP]
        .into_iter()
        .filter(|&s| ignored & (1u64 << (s - 1)) == 0)
        .collect()
}

/// The `SigIgn:` mask of a /proc/PID/status text.
fn ignored_mask(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// Calls `f` with each stop signal ([`stop_signals`]) on a thread of its own,
/// until `f` returns false. Nothing happens when the handlers cannot be
/// installed.
pub fn on_stop_signals(mut f: impl FnMut(i32) -> bool + Send + 'static) {
    if let Ok(mut sigs) = signal_hook::iterator::Signals::new(stop_signals()) {
        std::thread::spawn(move || {
            for s in sigs.forever() {
                if !f(s) {
                    break;
                }
            }
        });
    }
}

enum Ev {
    Gone,
    Exited(Option<i32>),
}

/// The longest the guardian spends on the farewells.
pub const FAREWELL_TIME: Duration = Duration::from_secs(3);

/// What rdpipe told the guardian on its stdin.
#[derive(Default)]
struct Told {
    /// `CLOSE`: rdpipe ends on purpose.
    close: bool,
    /// `FAREWELL ARGV INPUT`s.
    farewells: Vec<(Vec<OsString>, Vec<u8>)>,
}

/// A `FAREWELL ARGV INPUT` line: ARGV's words joined by NUL, and INPUT, each
/// in hex.
fn farewell(line: &str) -> Option<(Vec<OsString>, Vec<u8>)> {
    use std::os::unix::ffi::OsStringExt;
    let mut w = line.strip_prefix("FAREWELL ")?.split(' ');
    let argv = rdpipe_control::decode_hex(w.next()?)?;
    let input = rdpipe_control::decode_hex(w.next()?)?;
    let argv: Vec<OsString> = argv
        .split(|&b| b == 0)
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect();
    (!argv.is_empty() && w.next().is_none()).then_some((argv, input))
}

/// How many farewells run at once: sessions on one master, which sshd
/// bounds (`MaxSessions`, 10 by default).
const FAREWELLS_AT_ONCE: usize = 8;

/// Runs the farewells, [`FAREWELLS_AT_ONCE`] at a time, each with its input
/// on stdin; whatever still runs after [`FAREWELL_TIME`] in all is killed.
fn run_farewells(all: &[(Vec<OsString>, Vec<u8>)]) {
    use std::io::Write;
    let deadline = Instant::now() + FAREWELL_TIME;
    for batch in all.chunks(FAREWELLS_AT_ONCE) {
        let mut running = Vec::new();
        for (argv, input) in batch {
            let started = Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            if let Ok(mut c) = started {
                if let Some(mut i) = c.stdin.take() {
                    let _ = i.write_all(input);
                }
                running.push(c);
            }
        }
        while Instant::now() < deadline && !running.is_empty() {
            running.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_)) | Err(_)));
            std::thread::sleep(Duration::from_millis(10));
        }
        for mut c in running {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `args[0] args[1..]` until it exits (its status is returned) or stdin
/// reaches end of file or a SIGTERM/SIGINT/SIGHUP arrives (it is then terminated).
///
/// With `--rm CTL` first, the control socket CTL, its `CTL.log`, their
/// directory (each master has one of its own) and, when that leaves it empty,
/// the run's directory above it are removed when the master has ended, so a
/// rdpipe killed with SIGKILL leaves no files either. (rdpipe creates every
/// master's directory before it starts any master, so the run's directory is
/// only empty once all are gone.)
pub fn main<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let mut remove: Option<std::path::PathBuf> = None;
    if args.first().is_some_and(|a| a == "--rm") && args.len() >= 2 {
        remove = Some(args[1].clone().into());
        args.drain(..2);
    }
    let code = supervise(&args);
    if let Some(ctl) = remove {
        let _ = std::fs::remove_file(&ctl);
        let _ = std::fs::remove_file(ctl.with_extension("log"));
        if let Some(dir) = ctl.parent() {
            let _ = std::fs::remove_dir(dir);
            if let Some(run) = dir.parent() {
                let _ = std::fs::remove_dir(run);
            }
        }
    }
    code
}

/// How often the guard repeats its SIGTERM to a master that has not ended.
const TERM_AGAIN: Duration = Duration::from_millis(50);

fn supervise(args: &[OsString]) -> ExitCode {
    let Some((prog, rest)) = args.split_first() else {
        eprintln!("rdpipe --ssh-guard: no command");
        return ExitCode::from(2);
    };
    let mut child = match Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            rdpipe_term::error(
                "rdpipe",
                format!("cannot run {}: {e}", prog.to_string_lossy()),
            );
            return ExitCode::from(127);
        }
    };
    let pid = Pid::from_child(&child);
    let (tx, rx) = mpsc::channel();
    let told = std::sync::Arc::new(std::sync::Mutex::new(Told::default()));
    {
        let tx = tx.clone();
        let told = told.clone();
        std::thread::spawn(move || {
            let mut lines = std::io::BufRead::lines(std::io::stdin().lock());
            while let Some(Ok(l)) = lines.next() {
                let mut t = told.lock().unwrap_or_else(|p| p.into_inner());
                match farewell(&l) {
                    Some(f) => t.farewells.push(f),
                    None if l == "CLOSE" => t.close = true,
                    None => {}
                }
            }
            let _ = tx.send(Ev::Gone);
        });
    }
    {
        let tx = tx.clone();
        // Keep catching: we signal our own group when stopping.
        on_stop_signals(move |_| {
            let _ = tx.send(Ev::Gone);
            true
        });
    }
    let waiter = std::thread::spawn(move || {
        let st = child.wait().ok().and_then(|s| s.code());
        let _ = tx.send(Ev::Exited(st));
    });
    match rx.recv() {
        Ok(Ev::Exited(code)) => {
            let _ = waiter.join();
            ExitCode::from(code.unwrap_or(1).clamp(0, 255) as u8)
        }
        _ => {
            let t = std::mem::take(&mut *told.lock().unwrap_or_else(|p| p.into_inner()));
            if !t.close && !t.farewells.is_empty() {
                run_farewells(&t.farewells);
            }
            // The whole group: ssh and whatever it started (a ProxyCommand). We
            // lead the group (rdpipe starts us in our own) and catch SIGTERM.
            let term = || {
                let _ = kill_process(pid, Signal::Term);
                let me = rustix::process::getpid();
                if rustix::process::getpgrp() == me {
                    let _ = rustix::process::kill_process_group(me, Signal::Term);
                }
            };
            term();
            // Again every 50 ms: OpenSSH 9.2's client loop checks for a
            // signal only before it calls poll(2), so a SIGTERM that lands
            // while the master is busy (closing the run's last sessions, as
            // at every teardown) waits for its next wake-up, seconds away.
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left.min(TERM_AGAIN)) {
                    Ok(Ev::Exited(_)) => break,
                    Ok(Ev::Gone) => continue,
                    Err(_) if !left.is_zero() => term(),
                    Err(_) => {
                        let _ = kill_process(pid, Signal::Kill);
                        let _ = waiter.join();
                        break;
                    }
                }
            }
            ExitCode::SUCCESS
        }
    }
}

/// The command's guardian (`--cmd-guard FD PROG ARGS...`, internal): the agent
/// starts a segment's `sh -c CMD` through it. It leads the command's process group
/// and holds the read end of a "lifeline" pipe (file descriptor FD) whose write end
/// only the agent has. When the agent dies, even by SIGKILL, the lifeline reads end
/// of file and the guardian takes the whole group down (SIGTERM, SIGKILL one second
/// later). Otherwise it exits with the command's status, or dies of the signal
/// that killed the command.
pub fn cmd_main<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let args: Vec<OsString> = args.into_iter().collect();
    let (Some(fd), Some(prog)) = (
        args.first().and_then(|a| a.to_str()?.parse::<u32>().ok()),
        args.get(1),
    ) else {
        eprintln!("rdrecv --cmd-guard: usage: --cmd-guard FD PROG ARGS...");
        return ExitCode::from(2);
    };
    // A new descriptor for the inherited pipe (no unsafe fd adoption needed).
    let lifeline = match std::fs::File::open(format!("/proc/self/fd/{fd}")) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rdrecv --cmd-guard: no lifeline on fd {fd}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut child = match Command::new(prog).args(&args[2..]).spawn() {
        Ok(c) => c,
        Err(e) => {
            rdpipe_term::error(
                "rdpipe",
                format!("cannot run {}: {e}", prog.to_string_lossy()),
            );
            return ExitCode::from(127);
        }
    };
    // The data pipes belong to the command now: hold no copies, so that their
    // ends see EOF/EPIPE when the command closes them.
    if let Ok(null) = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
    }
    let (tx, rx) = mpsc::channel();
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            let mut l = lifeline;
            while matches!(l.read(&mut buf), Ok(n) if n > 0) {}
            let _ = tx.send(Ev::Gone);
        });
    }
    std::thread::spawn(move || {
        let st = child.wait().ok();
        let code = st.map(|s| match (s.code(), s.signal()) {
            (Some(c), _) => c,
            (None, Some(sig)) => -sig,
            _ => 1,
        });
        let _ = tx.send(Ev::Exited(code));
    });
    match rx.recv() {
        Ok(Ev::Exited(Some(code))) if code < 0 => {
            // Die of the same signal, so the agent sees what the command saw.
            let _ = signal_hook::low_level::emulate_default_handler(-code);
            ExitCode::from((128 - code).clamp(0, 255) as u8)
        }
        Ok(Ev::Exited(code)) => ExitCode::from(code.unwrap_or(1).clamp(0, 255) as u8),
        _ => {
            let me = rustix::process::getpid();
            let _ = rustix::process::kill_process_group(me, Signal::Term);
            std::thread::sleep(Duration::from_secs(1));
            let _ = rustix::process::kill_process_group(me, Signal::Kill);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ignored_mask_is_read_from_the_status_text() {
        let text = "Name:\trdpipe\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000003\n";
        // SIGHUP (1) and SIGINT (2) ignored, as under `nohup cmd &`.
        assert_eq!(ignored_mask(text), Some(3));
        assert_eq!(ignored_mask("Name:\tx\n"), None);
        assert_eq!(ignored_mask("SigIgn:\tzz\n"), None);
    }

    #[test]
    fn this_process_catches_what_it_does_not_ignore() {
        let own = std::fs::read_to_string("/proc/self/status").unwrap();
        let ignored = ignored_mask(&own).unwrap();
        for s in [1, 2, 15] {
            let caught = stop_signals().contains(&s);
            assert_eq!(caught, ignored & (1 << (s - 1)) == 0, "signal {s}");
        }
    }
}
