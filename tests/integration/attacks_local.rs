//! Playing the attacker on the same machine, or as the sender of a copy
//! (docs/security.md, "Attacks tried"): another local user racing to open a
//! private output file or rdcp's listing while it is written, a sender whose
//! file names carry terminal escape sequences, and a sender whose files are
//! set-uid. Each drives the real binaries.

use crate::support::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const KEY: &str = "local-attack-test-key-0123456789";
/// The uid and gid the racer runs as (Debian's `nobody`).
const NOBODY: u32 = 65534;
const LIMIT: Duration = Duration::from_secs(90);

/// The racer (`attackers/racer.c`) compiled into a scratch directory of its
/// own (kept while the test holds it); None, with a SKIPPED line, when this
/// is not root (it runs the racer as another uid) or has no C compiler.
fn racer_or_skip() -> Option<(Scratch, PathBuf)> {
    if !is_root() {
        skip(&test_name(), "needs root (to run the racer as another uid)");
        return None;
    }
    let dir = Scratch::new("racerbin");
    let exe = build_racer(&dir)?;
    Some((dir, exe))
}

/// The racer, compiled into `dir` with the system's C compiler; None (and a
/// SKIPPED line) without one.
fn build_racer(dir: &Scratch) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration/attackers/racer.c");
    let exe = dir.path("racer");
    let built = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        skip(
            &test_name(),
            "needs a C compiler (cc) for the racing reader",
        );
        return None;
    }
    std::fs::set_permissions(dir.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(exe)
}

/// The racer running as `nobody`, watching `watched`, once it said `ready`.
struct Racer {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
    watched: PathBuf,
}

impl Racer {
    fn start(exe: &Path, watched: &Path) -> Racer {
        let mut child = Command::new(exe)
            .arg(watched)
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "the racer did not start watching");
        Racer {
            child,
            out,
            watched: watched.to_path_buf(),
        }
    }

    /// Stops it: (names it saw, files it opened, descriptors that read data).
    fn finish(mut self, stop_in: &Path) -> (u64, u64, u64) {
        assert!(stop_in == self.watched);
        std::fs::write(stop_in.join("stop"), b"").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        wait_bounded(&mut self.child, Duration::from_secs(10), "racer");
        let _ = std::fs::remove_file(stop_in.join("stop"));
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect();
        assert_eq!(v.len(), 3, "racer said {line:?}");
        (v[0], v[1], v[2])
    }
}

/// How many output files the race test writes (`RDPIPE_RACES` to change).
fn races() -> u64 {
    std::env::var("RDPIPE_RACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// `rdrecv KEY FILE` replacing a file of mode 0600, again and again, while
/// another user opens every file that appears in its directory the moment
/// inotify reports it (a descriptor opened on the temporary file would
/// survive the rename and read the published file). The temporary file is
/// created 0600, so the racer never opens one.
#[test]
fn another_user_never_opens_a_private_output_file_while_it_is_written() {
    let Some((_bin_dir, racer)) = racer_or_skip() else {
        return;
    };
    let dir = Scratch::new("race");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path("secret");
    std::fs::write(&out, b"the old secret").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = Racer::start(&racer, &dir.0);
    let n = races();
    for i in 0..n {
        let rx = Receiver::start(&[KEY, out.to_str().unwrap()], &[], None);
        let data = format!("secret number {i}\n");
        send(
            &["127.0.0.1", &rx.port.to_string(), KEY],
            &[],
            Some(data.as_bytes()),
        )
        .expect_code(0);
        rx.finish().expect_code(0);
    }
    let (seen, opened, leaked) = r.finish(&dir.0);
    // Each race makes a temporary file and renames it over `secret`.
    assert!(seen >= 2 * n, "the racer saw {seen} names in {n} races");
    assert_eq!(
        (opened, leaked),
        (0, 0),
        "another user opened {opened} files (and read {leaked}) in {n} races"
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        format!("secret number {}\n", n - 1).as_bytes()
    );
    let md = std::fs::metadata(&out).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o600);
    assert_eq!(dir.names(), ["secret"]);
}

/// `rdcp --checksum` lists the destination (names, sizes, mtimes, content
/// hashes) into a file on the sources' host. Another user watching /tmp
/// opens whatever rdcp makes there the moment it appears: the copy's private
/// directory (0700) lets it open nothing. Afterwards nothing of the copy is
/// left in its TMPDIR, and a directory that a killed run left (older than an
/// hour) is removed by the next copy.
#[test]
fn rdcp_keeps_its_listing_where_no_other_user_reads_it() {
    let Some((_bin_dir, racer)) = racer_or_skip() else {
        return;
    };
    let d = Scratch::new("listing");
    std::fs::create_dir_all(d.path("src/tree")).unwrap();
    for i in 0..20 {
        std::fs::write(
            d.path(&format!("src/tree/private-name-{i}")),
            vec![b'x'; i * 100],
        )
        .unwrap();
    }
    let tmp = d.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let copy = |extra: &[&str]| {
        let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        a.extend([d.s("src/tree"), d.s("dst/")]);
        let mut c = Command::new(rdcp());
        c.args(&a).env("TMPDIR", &tmp);
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "rdcp {a:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    std::fs::create_dir(d.path("dst")).unwrap();
    copy(&["-r"]);
    let r = Racer::start(&racer, &tmp);
    copy(&["-r", "--checksum"]);
    copy(&["-r", "--resume", "--streams", "2"]);
    let (seen, opened, leaked) = r.finish(&tmp);
    assert!(
        seen >= 2,
        "the racer saw {seen} names: did rdcp use TMPDIR?"
    );
    assert_eq!((opened, leaked), (0, 0), "another user opened the listing");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");

    // A killed run's directory, two hours old, goes with the next copy.
    let stale = tmp.join(format!(".rdcp-{}", "ab".repeat(16)));
    std::fs::create_dir(&stale).unwrap();
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(stale.join("listing"), b"old").unwrap();
    let status = Command::new("touch")
        .args(["-d", "2 hours ago"])
        .arg(&stale)
        .status()
        .unwrap();
    assert!(status.success());
    copy(&["-r", "--resume"]);
    assert!(!stale.exists(), "the stale directory is still there");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
}

/// Names that retitle the window, write the clipboard (OSC 52), ring the
/// bell and forge a line of their own.
const HOSTILE: [&str; 3] = [
    "a\x1b]0;owned\x07",
    "b\x1b]52;c;ZWNobyBoaQ==\x07",
    "c\nrdcp: all 3 files copied whole\r",
];

/// What must never reach the user's terminal raw from a hostile peer.
fn assert_no_control(stderr: &str) {
    for (i, l) in stderr.lines().enumerate() {
        assert!(
            !l.chars().any(|c| c.is_control()),
            "line {i} holds a control character: {l:?}\nwhole stderr: {stderr:?}"
        );
        assert!(!l.starts_with("rdcp: all"), "a forged line: {l:?}");
    }
}

/// A hostile rdcp sender (a remote tree whose names hold escape sequences and
/// newlines) against a destination where those files cannot be written, so
/// that the receiving side names each one in a line; and a remote command
/// whose stderr holds the same sequences, forwarded by rdpipe. Every line
/// shows them escaped, one entry one line.
#[test]
fn hostile_names_and_remote_stderr_reach_the_terminal_escaped() {
    need_ssh!();
    let ssh = LocalSsh::start("hostile");
    let d = &ssh.dir;
    std::fs::create_dir_all(d.path("src")).unwrap();
    for n in HOSTILE {
        std::fs::write(d.path("src").join(n), b"x").unwrap();
        // The destination has a directory where each file goes: the
        // receiving side reports it by name.
        std::fs::create_dir_all(d.path("dst/src").join(n).join("inside")).unwrap();
    }
    std::fs::write(d.path("src/fine"), b"fine").unwrap();
    let json = d.path("r.json");
    let mut a = ssh.base_args();
    a.extend([
        "-r".into(),
        "--json".into(),
        json.to_str().unwrap().into(),
        format!("h1:{}", d.s("src")),
        d.s("dst"),
    ]);
    let r = run_rdcp(&a, None, LIMIT);
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert_no_control(&r.stderr);
    for shown in [
        "a\\e]0;owned\\x07: ",
        "b\\e]52;c;ZWNobyBoaQ==\\x07: ",
        "c\\nrdcp: all 3 files copied whole\\r: ",
    ] {
        assert!(
            r.stderr
                .contains(&format!("cannot write {}/src/{shown}", d.s("dst"))),
            "no line naming {shown:?}:\n{}",
            r.stderr
        );
    }
    assert_eq!(std::fs::read(d.path("dst/src/fine")).unwrap(), b"fine");
    // The report is valid JSON whatever the names.
    let _: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();

    // The same sequences on a remote command's stderr, through rdpipe, and
    // in a failing remote command's messages.
    let mut a = ssh.base_args();
    a.push(
        r#"h1:printf 'x\033]0;owned\007 y\rrdpipe: all fine\n' >&2; printf 'z\033[2J' >&2; cat"#
            .into(),
    );
    let r = run(&a, Some(b"data\n".to_vec()), LIMIT);
    r.ok();
    assert_eq!(r.stdout, b"data\n");
    assert_no_control(&r.stderr);
    assert!(
        r.stderr.contains("x\\e]0;owned\\x07 y\\rrdpipe: all fine"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("z\\e[2J"), "{}", r.stderr);
}

/// A sender's set-uid and set-gid files arrive with those bits as `cp -a`
/// and `rsync -a` as root keep them; with `--no-setid` they arrive without
/// them (one warning line with the count), a set-gid directory keeps its
/// bit, and the owner is still kept.
#[test]
fn no_setid_drops_what_a_sender_could_hand_out() {
    need_ssh!();
    if !is_root() {
        skip(&test_name(), "needs root (owners and set-uid files)");
        return;
    }
    let ssh = LocalSsh::start("setid");
    let d = &ssh.dir;
    std::fs::create_dir_all(d.path("src/sgid-dir")).unwrap();
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    for (name, m) in [
        ("suid", 0o4755),
        ("sgid", 0o2755),
        ("both", 0o6711),
        ("plain", 0o755),
    ] {
        let p = d.path("src").join(name);
        std::fs::write(&p, b"#!/bin/sh\n").unwrap();
        if name == "suid" {
            // Before the mode: chown clears set-uid.
            std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        mode(&p, m).unwrap();
    }
    mode(&d.path("src/sgid-dir"), 0o2775).unwrap();
    let copy = |dst: &str, extra: &[&str]| {
        let mut a = ssh.base_args();
        a.push("-r".into());
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend([format!("h1:{}", d.s("src")), d.s(dst)]);
        let r = run_rdcp(&a, None, LIMIT);
        r.ok();
        r
    };
    let modes = |root: &str| -> Vec<(String, u32, u32)> {
        let mut v: Vec<_> = std::fs::read_dir(d.path(root))
            .unwrap()
            .flatten()
            .map(|e| {
                let md = e.metadata().unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    md.mode() & 0o7777,
                    md.uid(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let r = copy("kept", &[]);
    assert!(!r.stderr.contains("set-uid"), "{}", r.stderr);
    assert_eq!(
        modes("kept"),
        [
            ("both".into(), 0o6711, 0),
            ("plain".into(), 0o755, 0),
            ("sgid".into(), 0o2755, 0),
            ("sgid-dir".into(), 0o2775, 0),
            ("suid".into(), 0o4755, NOBODY),
        ]
    );
    let r = copy("dropped", &["--no-setid"]);
    assert_eq!(
        r.stderr
            .lines()
            .filter(|l| l.contains("dropped the set-uid/set-gid bits of 3 files (--no-setid)"))
            .count(),
        1,
        "{}",
        r.stderr
    );
    assert_eq!(
        modes("dropped"),
        [
            ("both".into(), 0o0711, 0),
            ("plain".into(), 0o755, 0),
            ("sgid".into(), 0o0755, 0),
            ("sgid-dir".into(), 0o2775, 0),
            ("suid".into(), 0o0755, NOBODY),
        ]
    );
    // -n says what it would do.
    let mut a = ssh.base_args();
    a.extend([
        "-n".into(),
        "-r".into(),
        "--no-setid".into(),
        format!("h1:{}", d.s("src")),
        d.s("x"),
    ]);
    let r = run_rdcp(&a, None, LIMIT);
    r.ok();
    assert!(
        r.stdout_str()
            .contains("keeping modes less set-uid/set-gid, and times"),
        "{}",
        r.stdout_str()
    );
    let _ = std::io::stderr().flush();
}
