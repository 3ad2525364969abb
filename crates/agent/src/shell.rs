//! The shell that runs a segment's command: the user's login shell from the
//! passwd database, as sshd runs `ssh host CMD` (`SHELL -c CMD`), so that
//! `HOST:CMD` means there what `ssh HOST CMD` means. The same holds for local
//! segments (this machine's user's shell).
//!
//! The entry is the NSS view, as sshd sees it: `getent passwd UID` (files,
//! LDAP, SSSD, ...). Where /etc/nsswitch.conf lists `files` first for
//! `passwd` (or says nothing), /etc/passwd is read first and `getent` (a
//! process to start at every agent start) asked only for users the file
//! does not list: the same answer. An empty shell field means `/bin/sh`
//! (passwd(5)). A shell that is not an executable file, or that refuses logins
//! (`nologin`, `false`: only possible for local segments, since sshd would not
//! have started the agent), gives `/bin/sh`. Without any entry, `$SHELL`, then
//! `/bin/sh`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The shell used when the user has none that works.
pub const FALLBACK: &str = "/bin/sh";

/// The shell field of a passwd line for `uid` (`name:pw:uid:gid:gecos:home:shell`).
pub fn shell_of(line: &str, uid: u32) -> Option<String> {
    let f: Vec<&str> = line.trim_end_matches(['\n', '\r']).split(':').collect();
    if f.len() != 7 || f[2].parse::<u32>().ok()? != uid {
        return None;
    }
    Some(match f[6] {
        "" => FALLBACK.to_string(),
        s => s.to_string(),
    })
}

fn from_getent(uid: u32) -> Option<String> {
    let o = Command::new("getent")
        .args(["passwd", &uid.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| shell_of(l, uid))
}

/// Whether NSS asks /etc/passwd first for `passwd` (nsswitch.conf's
/// `passwd:` line; none, or no file: glibc's default, files first).
fn files_first(nsswitch: Option<&str>) -> bool {
    let line = nsswitch.and_then(|t| {
        t.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .find_map(|l| l.strip_prefix("passwd:"))
    });
    match line.and_then(|l| l.split_whitespace().next()) {
        Some(first) => first == "files" || first == "compat",
        None => true,
    }
}

fn from_passwd_file(uid: u32) -> Option<String> {
    std::fs::read_to_string("/etc/passwd")
        .ok()?
        .lines()
        .find_map(|l| shell_of(l, uid))
}

/// Whether `shell` can run commands: an absolute path to an executable file
/// that is not a login refuser.
pub fn usable(shell: &Path) -> bool {
    let refuser = matches!(
        shell.file_name().and_then(|n| n.to_str()),
        Some("nologin" | "false")
    );
    shell.is_absolute()
        && !refuser
        && std::fs::metadata(shell)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The current user's shell (see the module doc).
pub fn login_shell() -> PathBuf {
    let uid = rustix::process::getuid().as_raw();
    let found = match files_first(
        std::fs::read_to_string("/etc/nsswitch.conf")
            .ok()
            .as_deref(),
    ) {
        true => from_passwd_file(uid).or_else(|| from_getent(uid)),
        false => from_getent(uid).or_else(|| from_passwd_file(uid)),
    }
    .or_else(|| std::env::var("SHELL").ok().filter(|s| !s.is_empty()))
    .map(PathBuf::from);
    match found {
        Some(s) if usable(&s) => s,
        _ => PathBuf::from(FALLBACK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nsswitch_order() {
        assert!(files_first(None));
        assert!(files_first(Some("group: files\n")));
        assert!(files_first(Some("passwd:         files systemd\n")));
        assert!(files_first(Some("# passwd: sss\npasswd: compat\n")));
        assert!(!files_first(Some("passwd: sss files\n")));
        assert!(!files_first(Some("passwd:ldap files # x\n")));
    }

    #[test]
    fn passwd_lines() {
        assert_eq!(
            shell_of("root:x:0:0:root:/root:/bin/bash", 0).as_deref(),
            Some("/bin/bash")
        );
        assert_eq!(
            shell_of("u:x:1000:1000::/home/u:", 1000).as_deref(),
            Some("/bin/sh")
        );
        assert_eq!(shell_of("u:x:1000:1000::/home/u:/bin/zsh", 1001), None);
        assert_eq!(shell_of("garbage", 0), None);
        assert_eq!(shell_of("+::::::", 0), None);
    }

    #[test]
    fn unusable_shells() {
        assert!(usable(Path::new("/bin/sh")));
        assert!(!usable(Path::new("sh")));
        assert!(!usable(Path::new("/usr/sbin/nologin")));
        assert!(!usable(Path::new("/bin/false")));
        assert!(!usable(Path::new("/nonexistent/shell")));
        assert!(!usable(Path::new("/etc/passwd")));
    }

    #[test]
    fn the_current_user_has_one() {
        let s = login_shell();
        assert!(usable(&s), "{}", s.display());
    }
}
