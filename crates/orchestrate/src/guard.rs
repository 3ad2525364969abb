//! The SSH master's guardian (`rdpipe --ssh-guard ssh ARGS...`, internal).
//!
//! rdpipe runs each SSH master connection (`ssh -M -N`) in the foreground under a
//! small guardian process whose stdin is a pipe from rdpipe. When that pipe closes,
//! because rdpipe finished, failed, or was killed with SIGKILL, the guardian
//! terminates the master. So no `ssh` process of a pipeline outlives rdpipe, which
//! a daemonised master (`ssh -f` with `ControlPersist=yes`) would.

use rustix::process::{kill_process, Pid, Signal};
use std::ffi::OsString;
use std::io::Read;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

enum Ev {
    Gone,
    Exited(Option<i32>),
}

/// Runs `args[0] args[1..]` until it exits (its status is returned) or stdin
/// reaches end of file or a SIGTERM/SIGINT/SIGHUP arrives (it is then terminated).
pub fn main<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
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
            eprintln!("rdpipe: cannot run {}: {e}", prog.to_string_lossy());
            return ExitCode::from(127);
        }
    };
    let pid = Pid::from_child(&child);
    let (tx, rx) = mpsc::channel();
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            let _ = tx.send(Ev::Gone);
        });
    }
    if let Ok(mut sigs) = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ]) {
        let tx = tx.clone();
        std::thread::spawn(move || {
            if sigs.forever().next().is_some() {
                let _ = tx.send(Ev::Gone);
            }
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
            let _ = kill_process(pid, Signal::Term);
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(Ev::Exited(_)) => break,
                    Ok(Ev::Gone) => continue,
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
