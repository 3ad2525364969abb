//! The README's command lines, run as written where this machine can: every
//! line of its `sh` blocks whose hosts are `host`, `host1` or `host2` and
//! whose files are relative (or /dev/null) runs under `sh -c`, in a scratch
//! directory holding the `big_file` and `dir` they name, with the built tools
//! first on PATH. The three host names are aliases of one local sshd whose
//! sessions start in a scratch home, and `rdpipe`/`rdcp` get `-F CONFIG
//! --remote-bin DIR` after their name (the only change to a line). Each must
//! exit 0, and print what its comment says where the comment is a word in
//! capitals (`# OLLEH`). Lines that need other hosts, absolute paths, a
//! prompt (`host2$ ...`), ZFS or a camera are listed as not run.

use crate::support::*;
use std::time::Duration;

const HOSTS: [&str; 3] = ["host", "host1", "host2"];

/// The lines of the README's `sh` code blocks: (command, comment).
fn sh_lines(readme: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in readme.lines() {
        if l.starts_with("```") {
            inside = !inside && l.trim() == "```sh";
            continue;
        }
        if !inside || l.trim().is_empty() {
            continue;
        }
        let (cmd, comment) = match l.find("  #") {
            Some(i) => (&l[..i], l[i + 3..].trim()),
            None => (l, ""),
        };
        out.push((cmd.trim().to_string(), comment.to_string()));
    }
    out
}

/// Why `cmd` cannot run here, if it cannot.
fn not_here(cmd: &str) -> Option<String> {
    if cmd.contains("$ ") {
        return Some("a prompt on another host".into());
    }
    let first = cmd.split_whitespace().next().unwrap_or("");
    if ["scripts/demo", "cargo", "install"].contains(&first) {
        return Some("builds or installs".into());
    }
    for word in cmd.split_whitespace() {
        let w = word.trim_matches(|c| c == '\'' || c == '"');
        if let Some((host, rest)) = w.split_once(':') {
            let host = host.trim_start_matches('-');
            let named = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_alphanumeric() || "@._-".contains(c));
            if named && !HOSTS.contains(&host) && !rest.starts_with('[') {
                return Some(format!("host {host}"));
            }
        }
        if ["zfs", "ffmpeg", "salloc"].contains(&w) {
            return Some(format!("needs {w}"));
        }
        let path = w
            .rsplit(':')
            .next()
            .unwrap_or(w)
            .trim_start_matches(['<', '>']);
        if path.starts_with('/') && path != "/dev/null" {
            return Some(format!("absolute path {path}"));
        }
    }
    None
}

/// `rdpipe`/`rdcp` as commands (at the start or after a `|`) get `extra`.
fn with_args(cmd: &str, extra: &str) -> String {
    let mut out = Vec::new();
    let mut at_command = true;
    for w in cmd.split(' ') {
        out.push(w.to_string());
        if at_command && (w == "rdpipe" || w == "rdcp") {
            out.push(extra.to_string());
        }
        if !w.is_empty() {
            at_command = w == "|";
        }
    }
    // `doctor` is rdpipe's first argument, before the options.
    out.join(" ").replace(
        &format!("rdpipe {extra} doctor"),
        &format!("rdpipe doctor {extra}"),
    )
}

/// /dev/null is still the null device: a copy "to /dev/null" writes into it
/// and never renames a file over it. If not, it is made again (as root),
/// so that the rest of the suite runs, and the test fails.
fn dev_null_kept(line: &str) {
    use std::os::unix::fs::FileTypeExt;
    let ok = std::fs::symlink_metadata("/dev/null").is_ok_and(|m| m.file_type().is_char_device());
    if !ok {
        let _ = std::fs::remove_file("/dev/null");
        let _ = rustix::fs::mknodat(
            rustix::fs::CWD,
            "/dev/null",
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(1, 3),
        );
        let _ = std::fs::set_permissions(
            "/dev/null",
            std::os::unix::fs::PermissionsExt::from_mode(0o666),
        );
        panic!("README line `{line}` replaced /dev/null with something else (made again)");
    }
}

#[test]
fn readme_commands_run_as_written() {
    need_ssh!();
    // Sessions start in the scratch home, as a user's start in theirs.
    let ssh = LocalSsh::start_with(
        "readme",
        "ForceCommand cd \"$HOME\" && eval \"$SSH_ORIGINAL_COMMAND\"\n",
    );
    let d = &ssh.dir;
    let config = d.path("readme_ssh_config");
    let mut text = std::fs::read_to_string(&ssh.config).unwrap();
    text = format!(
        "Host {}\n  HostName 127.0.0.1\n  Port {}\n{text}",
        HOSTS.join(" "),
        ssh.port
    );
    std::fs::write(&config, text).unwrap();
    let work = d.path("work");
    std::fs::create_dir_all(work.join("dir/sub")).unwrap();
    std::fs::write(work.join("big_file"), random_bytes(8 << 20, 11)).unwrap();
    std::fs::write(work.join("dir/a"), b"a file\n").unwrap();
    std::fs::write(work.join("dir/sub/b"), random_bytes(70_000, 12)).unwrap();
    let extra = format!("-F {} --remote-bin {}", config.display(), bin_dir());
    let path = format!(
        "{}:{}",
        bin_dir(),
        std::env::var("PATH").unwrap_or_default()
    );

    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let (mut ran, mut skipped) = (0, Vec::new());
    for (cmd, comment) in sh_lines(&readme) {
        if let Some(why) = not_here(&cmd) {
            skipped.push(format!("{cmd}  ({why})"));
            continue;
        }
        let line = with_args(&cmd, &extra);
        let r = start_tool(
            std::path::Path::new("/bin/sh"),
            &["env", &format!("PATH={path}")],
            &["-c".to_string(), format!("cd {} && {line}", work.display())],
            None,
        )
        .finish(Duration::from_secs(60));
        assert!(
            r.status.success(),
            "README line `{cmd}` failed ({:?}):\n{}",
            r.status,
            r.stderr
        );
        dev_null_kept(&cmd);
        let shouted = !comment.is_empty() && comment.chars().all(|c| c.is_ascii_uppercase());
        if shouted {
            assert_eq!(r.stdout_str().trim(), comment, "README line `{cmd}`");
        }
        eprintln!("ran: {cmd}");
        ran += 1;
    }
    for s in &skipped {
        eprintln!("not run here: {s}");
    }
    // The tree went there whole.
    let home = d.path("home_local");
    assert_eq!(std::fs::read(home.join("dir/a")).unwrap(), b"a file\n");
    assert_eq!(
        file_xxh3(&home.join("dir/sub/b")),
        file_xxh3(&work.join("dir/sub/b"))
    );
    // The README's local examples: OLLEH, the plan, the key, rdcp there and
    // back, with --resume and -X.
    assert!(
        ran >= 8,
        "only {ran} README lines ran; not run: {skipped:#?}"
    );
}
