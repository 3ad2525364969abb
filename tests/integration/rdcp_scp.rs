//! rdcp's scp forms against a real sshd on 127.0.0.1 (aliases h1..h4 of one
//! sshd; `noport` names no port, `closed` a port nobody listens on): `~`,
//! `~/`, `~USER/...` expanded on the remote side, `scp://HOST:PORT/PATH`,
//! `-P PORT`, and a malformed URI.

use crate::rdcp::args;
use crate::support::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

/// `user`'s home directory in /etc/passwd (None: not there).
fn passwd_home(user: &str) -> Option<std::path::PathBuf> {
    std::fs::read_to_string("/etc/passwd")
        .ok()?
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 7 && f[0] == user).then(|| f[5].into())
        })
}

#[test]
fn rdcp_scp_tilde_forms() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcp-tilde");
    let d = &ssh.dir;
    // The sessions' HOME (sshd's SetEnv HOME=).
    let home = d.path("home_local");
    let (f, g) = (random_bytes(300_000, 11), random_bytes(1000, 12));
    std::fs::write(d.path("f"), &f).unwrap();
    std::fs::write(d.path("g"), &g).unwrap();
    let copy = |ops: &[&str]| run_rdcp(&args(&ssh, ops), None, LIMIT);
    // `h2:~` is the home directory: the file lands there under its name.
    copy(&[&d.s("f"), "h2:~"]).ok();
    assert!(std::fs::read(home.join("f")).unwrap() == f);
    assert!(!home.join("~").exists());
    copy(&[&d.s("g"), "h2:~/"]).ok();
    assert!(std::fs::read(home.join("g")).unwrap() == g);
    // A source `h1:~/f`.
    copy(&["h1:~/f", &d.s("back")]).ok();
    assert!(std::fs::read(d.path("back")).unwrap() == f);
    // An unknown `~user`: one line names it.
    let r = copy(&[&d.s("f"), "h2:~no_such_user_rdcp/x"]);
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert!(
        r.stderr.contains("no user no_such_user_rdcp"),
        "{}",
        r.stderr
    );
    // `h2:~USER/sub/`: USER's home from the passwd database (not HOME).
    let me = user();
    let Some(pw) = passwd_home(&me) else {
        return skip(&test_name(), &format!("{me} is not in /etc/passwd"));
    };
    let dir = pw.join(format!(".rdcp-scp-test-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let rel = dir.file_name().unwrap().to_string_lossy().into_owned();
    let r = copy(&[&d.s("f"), &d.s("g"), &format!("h2:~{me}/{rel}/sub/")]);
    let got = (
        std::fs::read(dir.join("sub/f")).ok(),
        std::fs::read(dir.join("sub/g")).ok(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    r.ok();
    assert!(got.0.as_deref() == Some(&f[..]) && got.1.as_deref() == Some(&g[..]));
}

#[test]
fn rdcp_scp_uri_and_port() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcp-uri");
    let d = &ssh.dir;
    let f = random_bytes(200_000, 13);
    std::fs::write(d.path("f"), &f).unwrap();
    let copy = |ops: &[&str]| run_rdcp(&args(&ssh, ops), None, LIMIT);
    let port = ssh.port.to_string();
    // `noport` names no port in the ssh configuration: the URI's reaches ssh.
    let uri = format!("scp://noport:{port}/{}", d.s("by_uri"));
    copy(&[&d.s("f"), &uri]).ok();
    assert!(std::fs::read(d.path("by_uri")).unwrap() == f);
    // And as a source, with the user.
    let uri = format!("scp://{}@noport:{port}/{}", user(), d.s("by_uri"));
    copy(&[&uri, &d.s("back")]).ok();
    assert!(std::fs::read(d.path("back")).unwrap() == f);
    // -P: the port of a plain `HOST:PATH`, over the configuration's (for
    // `closed`, a port nobody listens on).
    copy(&["-P", &port, &d.s("f"), &format!("noport:{}", d.s("by_p"))]).ok();
    assert!(std::fs::read(d.path("by_p")).unwrap() == f);
    copy(&["-P", &port, &d.s("f"), &format!("closed:{}", d.s("by_p2"))]).ok();
    assert!(std::fs::read(d.path("by_p2")).unwrap() == f);
    // A malformed URI: one line, exit 2, nothing run.
    let r = copy(&[&d.s("f"), "scp://h2:notaport/x"]);
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("scp://h2:notaport/x"), "{}", r.stderr);
}
