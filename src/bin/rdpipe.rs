//! `rdpipe`: Unix pipes between machines, orchestrated over SSH. See
//! `rdpipe --help` and the `rdpipe_orchestrate` crate.

use clap::Parser;
use rdpipe_orchestrate::cli::RdpipeArgs;
use rdpipe_orchestrate::run::{run, LocalExe};
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // Internal modes: the endpoint agent of local segments, the ssh master guard.
    if let Some(code) = rdpipe_orchestrate::internal_mode(&argv) {
        return code;
    }
    // `-:CMD` (a local segment) looks like a short option to clap: spell it
    // `localhost:CMD`, which means the same.
    let words = std::env::args_os().map(|a| match a.to_str() {
        Some(s) if s.starts_with("-:") => format!("localhost{}", &s[1..]).into(),
        _ => a,
    });
    let args = match RdpipeArgs::try_parse_from(words) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rdpipe: cannot find my own executable: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(run(args, LocalExe { exe }))
}
