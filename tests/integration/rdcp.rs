//! rdcp against a real sshd on 127.0.0.1 (aliases h1..h4 of one sshd): trees
//! there and back, host to host, stdin/stdout, and what happens to files that
//! cannot be copied. Every comparison is of bytes, links, modes and times.

use crate::support::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

pub(crate) fn args(ssh: &LocalSsh, extra: &[&str]) -> Vec<String> {
    let mut v = ssh.base_args();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// A small tree with what a copy must keep: odd names, an empty directory, a
/// symbolic link, a hard link, a sparse file, modes and a 6 MiB file.
fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub/empty")).unwrap();
    std::fs::write(root.join("a.txt"), b"hello\n").unwrap();
    std::fs::set_permissions(root.join("a.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::write(root.join("sub/big"), random_bytes(6 << 20, 7)).unwrap();
    std::fs::write(root.join(OsStr::from_bytes(b"new\nline \xff")), b"odd").unwrap();
    std::os::unix::fs::symlink("../a.txt", root.join("sub/link")).unwrap();
    std::fs::hard_link(root.join("a.txt"), root.join("sub/hard")).unwrap();
    let f = std::fs::File::create(root.join("sparse")).unwrap();
    f.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"middle", 4 << 20).unwrap();
}

/// Asserts that `b` is a copy of `a`: same names, bytes, link targets, modes
/// and mtimes (to the second at least), hard links kept, nodes of the same
/// kind and device number.
pub(crate) fn assert_same_tree(a: &Path, b: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(a)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    let mut got: Vec<_> = std::fs::read_dir(b)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    got.sort();
    assert_eq!(names, got, "{} vs {}", a.display(), b.display());
    for n in names {
        let (pa, pb) = (a.join(&n), b.join(&n));
        let (ma, mb) = (
            std::fs::symlink_metadata(&pa).unwrap(),
            std::fs::symlink_metadata(&pb).unwrap(),
        );
        assert_eq!(ma.file_type(), mb.file_type(), "{}", pb.display());
        if ma.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&pa).unwrap(),
                std::fs::read_link(&pb).unwrap()
            );
            continue;
        }
        assert_eq!(
            ma.mode() & 0o7777,
            mb.mode() & 0o7777,
            "mode of {}",
            pb.display()
        );
        if ma.is_dir() {
            assert_same_tree(&pa, &pb);
        } else if !ma.is_file() {
            // A FIFO, socket or device node: never read (it would block).
            assert_eq!(ma.rdev(), mb.rdev(), "device number of {}", pb.display());
        } else {
            assert!(
                std::fs::read(&pa).unwrap() == std::fs::read(&pb).unwrap(),
                "bytes of {}",
                pb.display()
            );
            assert_eq!(ma.nlink(), mb.nlink(), "links of {}", pb.display());
        }
        assert_eq!(ma.mtime(), mb.mtime(), "mtime of {}", pb.display());
    }
}

/// No `.NAME.rdcp-…` temporary file anywhere below `dirs`.
pub(crate) fn assert_no_temporary_files(dirs: &[&str]) {
    let found = std::process::Command::new("find")
        .args(dirs)
        .args(["-name", ".*.rdcp-*"])
        .output()
        .unwrap();
    assert!(
        found.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&found.stdout)
    );
}

#[test]
fn rdcp_tree_there_and_back_and_host_to_host() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcp");
    let d = &ssh.dir;
    make_tree(&d.path("tree"));
    // Extended attributes (copied with -X only): a user attribute on a file
    // and on a directory.
    let set = |p: &str, v: &[u8]| {
        rustix::fs::setxattr(d.path(p), "user.origin", v, rustix::fs::XattrFlags::empty())
    };
    let xattrs = set("tree/a.txt", b"lab 3").is_ok() && set("tree/sub", b"dir").is_ok();
    let origin = |p: &str| {
        let mut b = [0u8; 64];
        rustix::fs::getxattr(d.path(p), "user.origin", &mut b)
            .ok()
            .map(|n| b[..n].to_vec())
    };
    // Local to remote: `there` does not exist, so the copy is named so.
    run_rdcp(
        &args(&ssh, &["-r", &d.s("tree"), &format!("h1:{}", d.s("there"))]),
        None,
        LIMIT,
    )
    .ok();
    assert_same_tree(&d.path("tree"), &d.path("there"));
    let sparse = std::fs::metadata(d.path("there/sparse")).unwrap();
    assert!(
        sparse.blocks() * 512 < 1 << 20,
        "holes kept: {} blocks",
        sparse.blocks()
    );
    // Remote to local, into an existing directory: lands as back/there.
    std::fs::create_dir(d.path("back")).unwrap();
    run_rdcp(
        &args(&ssh, &["-r", &format!("h2:{}", d.s("there")), &d.s("back")]),
        None,
        LIMIT,
    )
    .ok();
    assert_same_tree(&d.path("tree"), &d.path("back/there"));
    // Remote to remote: one hop from h1's agent to h2's, none through rdcp.
    let r = run_rdcp(
        &args(
            &ssh,
            &[
                "-v",
                "-r",
                "-X",
                &format!("h1:{}", d.s("tree")),
                &format!("h2:{}", d.s("h2copy")),
            ],
        ),
        None,
        LIMIT,
    );
    r.ok();
    assert_same_tree(&d.path("tree"), &d.path("h2copy"));
    if xattrs {
        assert_eq!(origin("h2copy/a.txt").as_deref(), Some(&b"lab 3"[..]));
        assert_eq!(origin("h2copy/sub").as_deref(), Some(&b"dir"[..]));
        assert_eq!(origin("there/a.txt"), None, "copied without -X");
    } else {
        eprintln!("note: no user xattrs on this file system; -X not checked");
    }
    assert!(
        r.stderr.contains("rdcp: [1] h1 -> [2] h2: "),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("stdin") && !r.stderr.contains("stdout"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.lines().any(|l| l.starts_with("Bandwidth ")),
        "{}",
        r.stderr
    );
    // Nothing of the copies left running, no temporary file left behind.
    assert!(
        wait_gone(&d.s("h2copy"), Duration::from_secs(10)),
        "{}",
        ps(&pgrep(&d.s("h2copy")))
    );
    assert_no_temporary_files(&[&d.s("there"), &d.s("back"), &d.s("h2copy")]);
}

#[test]
fn rdcp_files_into_a_directory_and_through_stdin_and_stdout() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpfiles");
    let d = &ssh.dir;
    std::fs::write(d.path("one"), random_bytes(300_000, 1)).unwrap();
    std::fs::write(d.path("two"), b"2").unwrap();
    std::fs::create_dir(d.path("into")).unwrap();
    // An existing file at the destination is replaced by the complete copy.
    std::fs::write(d.path("into/two"), b"old").unwrap();
    run_rdcp(
        &args(
            &ssh,
            &[&d.s("one"), &d.s("two"), &format!("h1:{}/", d.s("into"))],
        ),
        None,
        LIMIT,
    )
    .ok();
    assert!(std::fs::read(d.path("into/one")).unwrap() == random_bytes(300_000, 1));
    assert_eq!(std::fs::read(d.path("into/two")).unwrap(), b"2");
    // Several sources need a directory.
    let r = run_rdcp(
        &args(
            &ssh,
            &[&d.s("one"), &d.s("two"), &format!("h1:{}", d.s("nodir"))],
        ),
        None,
        LIMIT,
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("no such directory"), "{}", r.stderr);
    // `-` as the source and as the destination.
    run_rdcp(
        &args(&ssh, &["-", &format!("h2:{}", d.s("fromstdin"))]),
        Some(b"piped\n".to_vec()),
        LIMIT,
    )
    .ok();
    assert_eq!(std::fs::read(d.path("fromstdin")).unwrap(), b"piped\n");
    let r = run_rdcp(
        &args(&ssh, &[&format!("h2:{}", d.s("one")), "-"]),
        None,
        LIMIT,
    );
    r.ok();
    assert!(r.stdout == random_bytes(300_000, 1));
    // Bad operands: exit 2 with one line.
    let r = run_rdcp(
        &args(
            &ssh,
            &[
                &format!("h1:{}", d.s("one")),
                &format!("h2:{}", d.s("two")),
                &d.s("into"),
            ],
        ),
        None,
        LIMIT,
    );
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("different hosts"), "{}", r.stderr);
}

#[test]
fn rdcp_reports_what_it_could_not_copy_and_copies_the_rest() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpfail");
    let d = &ssh.dir;
    std::fs::create_dir_all(d.path("src/sub")).unwrap();
    std::fs::write(d.path("src/ok1"), b"fine").unwrap();
    std::fs::write(d.path("src/blocked"), b"a file").unwrap();
    std::fs::write(d.path("src/sub/x"), b"must not escape").unwrap();
    std::fs::write(d.path("src/zz"), b"after the failures").unwrap();
    // The destination has a directory where a file goes, and a symbolic link
    // (planted by someone else) where the tree has a directory.
    std::fs::create_dir_all(d.path("dst/src/blocked/inside")).unwrap();
    std::fs::create_dir(d.path("outside")).unwrap();
    std::os::unix::fs::symlink(d.path("outside"), d.path("dst/src/sub")).unwrap();
    let json = d.path("r.json");
    let r = run_rdcp(
        &args(
            &ssh,
            &[
                "-r",
                "--json",
                json.to_str().unwrap(),
                &d.s("src"),
                &format!("h1:{}", d.s("dst")),
            ],
        ),
        None,
        LIMIT,
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    // The report counts both sides: what was sent, what was written, what
    // could not be.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let copy = |i: usize| v["segments"][i]["copy"].clone();
    assert_eq!(copy(0)["side"], "pack", "{v:#}");
    assert_eq!(copy(0)["sent"], 6, "{v:#}");
    assert_eq!(copy(0)["bytes"], 43, "{v:#}");
    assert_eq!(copy(0)["unreadable"], 0, "{v:#}");
    assert_eq!(copy(1)["side"], "unpack", "{v:#}");
    assert_eq!(copy(1)["bytes"], 22, "{v:#}");
    assert_eq!(copy(1)["created"], 3, "{v:#}");
    // blocked, sub, and sub/x under it.
    assert_eq!(copy(1)["failed"], 3, "{v:#}");
    assert!(
        r.stderr
            .contains(&format!("cannot write {}/src/blocked: ", d.s("dst"))),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains(&format!("cannot write {}/src/sub: ", d.s("dst"))),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("not all copied"), "{}", r.stderr);
    // The rest arrived; nothing was written through the link.
    assert_eq!(std::fs::read(d.path("dst/src/ok1")).unwrap(), b"fine");
    assert_eq!(
        std::fs::read(d.path("dst/src/zz")).unwrap(),
        b"after the failures"
    );
    assert_eq!(std::fs::read_dir(d.path("outside")).unwrap().count(), 0);
    // A directory without -r is omitted with a warning, and the status says so.
    let r = run_rdcp(
        &args(&ssh, &[&d.s("src"), &format!("h1:{}", d.s("norec"))]),
        None,
        LIMIT,
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("omitting directory"), "{}", r.stderr);
    assert!(!d.path("norec").exists());
}

/// Every "cannot write" line the destination's agent prints reaches rdcp's
/// stderr, the last ones included: the agent writes them just before its
/// failure and exits at once after it, so what is still in its stderr pipe
/// must be relayed first.
#[test]
fn rdcp_every_cannot_write_line_arrives() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpfailmany");
    let d = &ssh.dir;
    let n = 400;
    std::fs::create_dir_all(d.path("src")).unwrap();
    for k in 0..n {
        std::fs::write(d.path(&format!("src/f{k:04}")), b"x").unwrap();
        // A directory where each file goes: none can be written.
        std::fs::create_dir_all(d.path(&format!("dst/src/f{k:04}/inside"))).unwrap();
    }
    for round in 0..3 {
        let r = run_rdcp(
            &args(&ssh, &["-r", &d.s("src"), &format!("h1:{}", d.s("dst"))]),
            None,
            LIMIT,
        );
        assert_eq!(r.code(), Some(1), "{}", r.stderr);
        let missing: Vec<usize> = (0..n)
            .filter(|k| {
                !r.stderr
                    .contains(&format!("cannot write {}/src/f{k:04}: ", d.s("dst")))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "round {round}: {} of {n} 'cannot write' lines missing, the first f{:04}",
            missing.len(),
            missing[0]
        );
    }
}

/// `--specials` host to host: a FIFO, a socket's name and (as root) a
/// character device arrive as nodes with their modes, times, owners and
/// device number; without it each is skipped with a warning naming it and
/// the rest is copied.
#[test]
fn rdcp_specials_copy_nodes_host_to_host_or_are_skipped_by_name() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpspec");
    let d = &ssh.dir;
    std::fs::create_dir(d.path("src")).unwrap();
    std::fs::write(d.path("src/plain"), b"plain").unwrap();
    let node = |name: &str, t: rustix::fs::FileType, mode: u32, dev: u64| {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.path(&format!("src/{name}")),
            t,
            rustix::fs::Mode::from_raw_mode(mode),
            dev,
        )
    };
    node("fifo", rustix::fs::FileType::Fifo, 0o640, 0).unwrap();
    drop(std::os::unix::net::UnixListener::bind(d.path("src/sock")).unwrap());
    let root = rustix::process::geteuid().is_root();
    if root {
        let dev = rustix::fs::makedev(1, 5);
        node("zero", rustix::fs::FileType::CharacterDevice, 0o644, dev).unwrap();
        std::os::unix::fs::chown(d.path("src/zero"), Some(2345), Some(2346)).unwrap();
    } else {
        eprintln!("note: not root; the device node case is not checked");
    }
    let r = run_rdcp(
        &args(
            &ssh,
            &[
                "-r",
                "--specials",
                &format!("h1:{}", d.s("src")),
                &format!("h2:{}", d.s("dst")),
            ],
        ),
        None,
        LIMIT,
    );
    r.ok();
    assert_same_tree(&d.path("src"), &d.path("dst"));
    if root {
        let z = std::fs::symlink_metadata(d.path("dst/zero")).unwrap();
        assert_eq!(z.rdev(), rustix::fs::makedev(1, 5));
        assert_eq!((z.uid(), z.gid()), (2345, 2346));
    }
    // Without --specials: one warning per node, the rest copied, exit 0.
    let r = run_rdcp(
        &args(&ssh, &["-r", &d.s("src"), &format!("h1:{}", d.s("plain"))]),
        None,
        LIMIT,
    );
    r.ok();
    assert!(
        r.stderr
            .contains(&format!("skipping FIFO {}/fifo", d.s("src"))),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("skipping socket "), "{}", r.stderr);
    assert_eq!(std::fs::read(d.path("plain/plain")).unwrap(), b"plain");
    assert!(std::fs::symlink_metadata(d.path("plain/fifo")).is_err());
    assert_no_temporary_files(&[&d.s("dst"), &d.s("plain")]);
}

#[test]
fn rdcp_resume_after_an_interrupted_copy_moves_only_the_rest() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpresume");
    let d = &ssh.dir;
    let size = 48 << 20;
    std::fs::create_dir_all(d.path("src")).unwrap();
    std::fs::write(d.path("src/big"), random_bytes(size, 5)).unwrap();
    std::fs::write(d.path("src/small"), b"small").unwrap();
    let to = format!("h2:{}", d.s("dst"));
    let mut a = args(&ssh, &["-r", "--rate-limit", "16M"]);
    a.extend([format!("h1:{}", d.s("src")), to.clone()]);
    let started = start_tool(&rdcp(), &[], &a, None);
    // Readiness: a third of the file is in its temporary copy.
    wait_until("a partial copy of a third", Duration::from_secs(60), || {
        std::fs::read_dir(d.path("dst"))
            .ok()?
            .filter_map(Result::ok)
            .find(|e| e.file_name().as_bytes().starts_with(b".big.rdcp-"))
            .filter(|e| e.metadata().is_ok_and(|m| m.len() > size as u64 / 3))
    });
    started.interrupt();
    assert!(
        !d.path("dst/big").exists(),
        "no partial file under its name"
    );
    let r = run_rdcp(
        &args(
            &ssh,
            &[
                "-v",
                "-r",
                "--resume",
                "--json",
                &d.s("r.json"),
                &format!("h1:{}", d.s("src")),
                &to,
            ],
        ),
        None,
        LIMIT,
    );
    r.ok();
    assert_same_tree(&d.path("src"), &d.path("dst"));
    // The copy's hop (not the listing's) moved less than 70% of the file.
    let moved: u64 = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("rdcp: [1] h1 -> [2] h2: "))
        .find_map(|l| {
            l.split(", ")
                .find_map(|f| f.split_once(" bytes in ")?.0.parse().ok())
        })
        .unwrap_or_else(|| panic!("no hop line:\n{}", r.stderr));
    eprintln!("rdcp --resume moved {moved} of {size} bytes");
    assert!(
        moved < size as u64 * 7 / 10,
        "moved {moved} of {size}:\n{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("1 continued from a partial copy"),
        "{}",
        r.stderr
    );
    // The report says the same: one file continued, a third or more of it
    // not sent.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("r.json")).unwrap()).unwrap();
    let pack = &v["segments"][0]["copy"];
    assert_eq!(pack["resumed"], 1, "{v:#}");
    assert!(
        pack["skipped_bytes"].as_u64().unwrap() > size as u64 / 3,
        "{v:#}"
    );
    assert_no_temporary_files(&[&d.s("dst")]);

    // `-q`: the same resume (now with nothing left to send) says nothing of it;
    // without `-q` it says what it skipped.
    let quiet = run_rdcp(
        &args(
            &ssh,
            &["-q", "-r", "--resume", &format!("h1:{}", d.s("src")), &to],
        ),
        None,
        LIMIT,
    );
    quiet.ok();
    assert!(!quiet.stderr.contains("resume:"), "{}", quiet.stderr);
    let told = run_rdcp(
        &args(
            &ssh,
            &["-r", "--resume", &format!("h1:{}", d.s("src")), &to],
        ),
        None,
        LIMIT,
    );
    told.ok();
    assert!(
        told.stderr
            .contains("rdcp: resume: 2 files complete at the destination"),
        "{}",
        told.stderr
    );

    // Damage the copy in place and put its mtime back: `--resume` trusts
    // size and mtime and sends nothing; `-c` compares content and repairs it.
    let when = std::fs::metadata(d.path("dst/big"))
        .unwrap()
        .modified()
        .unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.path("dst/big"))
            .unwrap();
        f.write_all_at(b"bit rot", size as u64 / 2).unwrap();
        f.set_modified(when).unwrap();
    }
    let again = |flag: &str| {
        let mut a = args(&ssh, &["-v", "-r", flag]);
        a.extend([format!("h1:{}", d.s("src")), to.clone()]);
        let r = run_rdcp(&a, None, LIMIT);
        r.ok();
        r.stderr
    };
    let trusted = again("--resume");
    assert!(trusted.contains("2 files complete"), "{trusted}");
    assert_ne!(
        std::fs::read(d.path("dst/big")).unwrap(),
        std::fs::read(d.path("src/big")).unwrap()
    );
    let checked = again("-c");
    assert!(
        checked.contains("big: the destination's copy has its size and mtime but other content"),
        "{checked}"
    );
    assert!(checked.contains("1 files complete"), "{checked}");
    assert_same_tree(&d.path("src"), &d.path("dst"));
    assert_no_temporary_files(&[&d.s("dst")]);

    // Interrupted again, then a plain run (no --resume): once its writer
    // (the receiving agent, its PID in the name) has ended, the temporary
    // the interrupted run left goes too.
    std::fs::write(d.path("src/big"), random_bytes(size, 6)).unwrap();
    let big = [
        format!("h1:{}", d.s("src/big")),
        format!("h2:{}", d.s("dst/big")),
    ];
    let mut a = args(&ssh, &["--rate-limit", "16M"]);
    a.extend(big.clone());
    let started = start_tool(&rdcp(), &[], &a, None);
    let tmp = wait_until("a partial copy again", Duration::from_secs(60), || {
        std::fs::read_dir(d.path("dst"))
            .ok()?
            .filter_map(Result::ok)
            .find(|e| e.file_name().as_bytes().starts_with(b".big.rdcp-"))
    })
    .file_name();
    started.interrupt();
    let pid = tmp
        .to_string_lossy()
        .rsplit('-')
        .nth(1)
        .unwrap()
        .to_string();
    wait_until(
        "the interrupted agent to end",
        Duration::from_secs(30),
        || (!Path::new(&format!("/proc/{pid}")).exists()).then_some(()),
    );
    assert!(d.path("dst").join(&tmp).exists(), "{tmp:?} was left");
    let mut a = args(&ssh, &["-p"]);
    a.extend(big);
    run_rdcp(&a, None, LIMIT).ok();
    assert_same_tree(&d.path("src"), &d.path("dst"));
    assert_no_temporary_files(&[&d.s("dst")]);
}

/// Bytes of `path` in the page cache (util-linux's fincore); `None` without it.
fn cached(path: &Path) -> Option<u64> {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(text.trim().parse().unwrap_or_else(|_| {
        panic!(
            "fincore {}: {text:?} {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    }))
}

#[test]
fn rdcp_direct_passes_the_page_cache_by_on_both_sides() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpdirect");
    let d = &ssh.dir;
    std::fs::create_dir_all(d.path("src")).unwrap();
    let probe = rustix::fs::open(
        d.path("src/probe"),
        rustix::fs::OFlags::CREATE | rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::DIRECT,
        rustix::fs::Mode::from_raw_mode(0o600),
    );
    std::fs::remove_file(d.path("src/probe")).ok();
    if let Err(e) = probe {
        skip(
            &test_name(),
            &format!("the test directory refuses O_DIRECT: {e}"),
        );
        return;
    }
    let size = (32 << 20) + 4321;
    let big = d.path("src/big");
    std::fs::write(&big, random_bytes(size, 9)).unwrap();
    std::fs::write(d.path("src/small"), b"small").unwrap();
    let f = std::fs::File::open(&big).unwrap();
    f.sync_all().unwrap();
    rustix::fs::fadvise(&f, 0, 0, rustix::fs::Advice::DontNeed).unwrap();
    let Some(before) = cached(&big) else {
        skip(&test_name(), "needs fincore (util-linux-extra)");
        return;
    };
    let copy = |flags: &[&str], to: &str| {
        let mut a = args(&ssh, flags);
        a.extend([format!("h1:{}", d.s("src")), format!("h2:{}", d.s(to))]);
        run_rdcp(&a, None, LIMIT).ok();
    };
    copy(&["-r", "--direct"], "dst");
    // Read and written past the cache: at most the unaligned tail and the
    // small file went through it.
    let (src_after, dst) = (cached(&big).unwrap(), cached(&d.path("dst/big")).unwrap());
    assert!(
        src_after <= before + (64 << 10),
        "the source was read through the cache: {before} -> {src_after} bytes cached"
    );
    assert!(dst <= 64 << 10, "the copy is in the cache: {dst} bytes");
    // Without --direct the same copy is cached: the check above means something.
    copy(&["-r"], "plain");
    let plain = cached(&d.path("plain/big")).unwrap();
    eprintln!(
        "bytes cached: source {before} -> {src_after}, --direct copy {dst}, plain copy {plain}"
    );
    assert!(
        plain > size as u64 / 2,
        "a plain copy left {plain} bytes cached"
    );
    assert_same_tree(&d.path("src"), &d.path("dst"));
    assert_no_temporary_files(&[&d.s("dst")]);
}
