//! `rdcp -r --delete` against a real sshd on 127.0.0.1: DEST becomes SRC's
//! copy itself (a re-run never nests), what SRC lacks is removed inside
//! DEST only (a link out of it as a link, its target untouched), unchanged
//! files are not sent again, `-n` lists and changes nothing, a failed copy
//! removes nothing, `/` and a home directory are refused. Where rsync is
//! installed, the mirror is compared with `rsync -a --delete`'s.

use crate::rdcp::{args, assert_same_tree};
use crate::support::*;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

/// Every path beneath `d`, sorted (`find`'s spelling).
fn names(d: &Path) -> Vec<String> {
    let out = std::process::Command::new("find")
        .arg(".")
        .current_dir(d)
        .output()
        .unwrap();
    let mut v: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    v.sort();
    v
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn have_rsync() -> bool {
    std::process::Command::new("sh")
        .args(["-c", "command -v rsync"])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn rdcp_delete_mirrors_a_tree_and_removes_only_inside_dest() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpdel");
    let d = &ssh.dir;
    let src = d.path("src");
    std::fs::create_dir_all(src.join("sub/deep")).unwrap();
    std::fs::write(src.join("a.txt"), b"hello\n").unwrap();
    std::fs::write(src.join("sub/b"), b"bee").unwrap();
    std::fs::write(src.join("sub/deep/c"), random_bytes(100_000, 3)).unwrap();
    std::os::unix::fs::symlink("../a.txt", src.join("sub/link")).unwrap();
    let dst = format!("h1:{}", d.s("dst"));
    // DEST does not exist: it becomes the copy.
    run_rdcp(
        &args(&ssh, &["-r", "--delete", &d.s("src"), &dst]),
        None,
        LIMIT,
    )
    .ok();
    assert_same_tree(&src, &d.path("dst"));
    // What SRC lacks: a file, a tree, links out of DEST to a file and to a
    // directory; and a file changed at the source.
    let outside = d.path("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("victim"), b"keep me").unwrap();
    std::fs::write(d.path("dst/extra"), b"x").unwrap();
    std::fs::create_dir_all(d.path("dst/old/deep")).unwrap();
    std::fs::write(d.path("dst/old/deep/f"), b"f").unwrap();
    std::os::unix::fs::symlink(outside.join("victim"), d.path("dst/sub/out-file")).unwrap();
    std::os::unix::fs::symlink(&outside, d.path("dst/out-dir")).unwrap();
    std::fs::write(src.join("sub/b"), b"changed bee").unwrap();
    let rsync = have_rsync();
    if rsync {
        let cp = std::process::Command::new("cp")
            .args(["-a", &d.s("dst"), &d.s("rsynced")])
            .status()
            .unwrap();
        assert!(cp.success());
        let r = std::process::Command::new("rsync")
            .args([
                "-a",
                "--delete",
                &format!("{}/", d.s("src")),
                &d.s("rsynced/"),
            ])
            .status()
            .unwrap();
        assert!(r.success());
    } else {
        eprintln!("note: no rsync here; the mirror is not compared with rsync's");
    }
    let before = names(&d.path("dst"));
    let gone = [
        "extra",
        "old",
        "old/deep",
        "old/deep/f",
        "out-dir",
        "sub/out-file",
    ];
    // -n: lists what would go, one line each, and changes nothing.
    let report = d.path("dry.json");
    let r = run_rdcp(
        &args(
            &ssh,
            &[
                "-r",
                "--delete",
                "-n",
                "--json",
                report.to_str().unwrap(),
                &d.s("src"),
                &dst,
            ],
        ),
        None,
        LIMIT,
    );
    r.ok();
    for g in gone {
        let line = format!("rdcp: would delete {dst}/{g}");
        assert!(r.stderr.contains(&line), "{line}:\n{}", r.stderr);
    }
    assert_eq!(
        r.stderr.matches("would delete").count(),
        gone.len(),
        "{}",
        r.stderr
    );
    assert_eq!(names(&d.path("dst")), before);
    assert_eq!(std::fs::read(d.path("dst/sub/b")).unwrap(), b"bee");
    assert_eq!(
        json(&report)["segments"][1]["copy"]["deleted"],
        gone.len(),
        "{:#}",
        json(&report)
    );
    // The mirror, with -v: one line per removed entry, counts in --json.
    let report = d.path("run.json");
    let r = run_rdcp(
        &args(
            &ssh,
            &[
                "-rv",
                "--delete",
                "--json",
                report.to_str().unwrap(),
                &d.s("src"),
                &format!("{dst}/"),
            ],
        ),
        None,
        LIMIT,
    );
    r.ok();
    for g in gone {
        let line = format!("rdcp: deleted {dst}/{g}");
        assert!(r.stderr.contains(&line), "{line}:\n{}", r.stderr);
    }
    let v = json(&report);
    let copy = |i: usize| v["segments"][i]["copy"].clone();
    assert_eq!(copy(1)["deleted"], gone.len(), "{v:#}");
    // Unchanged files were not sent again: only the changed one's bytes.
    assert_eq!(copy(0)["skipped"], 2, "{v:#}");
    assert_eq!(copy(0)["bytes"], b"changed bee".len(), "{v:#}");
    // DEST is SRC's copy, not DEST/src; the links' targets are untouched.
    assert_same_tree(&src, &d.path("dst"));
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep me");
    assert_eq!(names(&outside), vec![".", "./victim"]);
    if rsync {
        assert_eq!(names(&d.path("dst")), names(&d.path("rsynced")));
    }
    // Again: nothing to remove, nothing nested.
    run_rdcp(
        &args(&ssh, &["-r", "--delete", &d.s("src"), &dst]),
        None,
        LIMIT,
    )
    .ok();
    assert_same_tree(&src, &d.path("dst"));
    assert!(!d.path("dst/src").exists());
}

#[test]
fn rdcp_delete_removes_nothing_when_a_file_was_not_copied() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpdelfail");
    let d = &ssh.dir;
    std::fs::create_dir(d.path("src")).unwrap();
    std::fs::write(d.path("src/ok"), b"fine").unwrap();
    std::fs::write(d.path("src/blocked"), b"a file").unwrap();
    // A directory where the source has a file: that file cannot be written
    // (as root too).
    std::fs::create_dir_all(d.path("dst/blocked/inside")).unwrap();
    std::fs::write(d.path("dst/extra"), b"stays").unwrap();
    let r = run_rdcp(
        &args(
            &ssh,
            &["-r", "--delete", &d.s("src"), &format!("h1:{}", d.s("dst"))],
        ),
        None,
        LIMIT,
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("cannot write {}/blocked: ", d.s("dst"))),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "--delete: removed nothing from {}: not everything was copied",
            d.s("dst")
        )),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read(d.path("dst/extra")).unwrap(), b"stays");
    assert!(d.path("dst/blocked/inside").is_dir());
    assert_eq!(std::fs::read(d.path("dst/ok")).unwrap(), b"fine");
}

#[test]
fn rdcp_delete_refuses_root_home_and_what_is_not_one_tree() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpdelno");
    let d = &ssh.dir;
    std::fs::create_dir(d.path("src")).unwrap();
    std::fs::write(d.path("src/f"), b"f").unwrap();
    // Dry runs: refused before anything is read there.
    for (dst, why) in [("h1:/", "onto /"), ("h1:~", "onto a home directory")] {
        let r = run_rdcp(
            &args(&ssh, &["-r", "--delete", "-n", &d.s("src"), dst]),
            None,
            LIMIT,
        );
        assert_eq!(r.code(), Some(1), "{dst}: {}", r.stderr);
        assert!(
            r.stderr
                .contains(&format!("--delete refuses to mirror {why}")),
            "{}",
            r.stderr
        );
        assert!(r.stderr.contains("--force-delete"), "{}", r.stderr);
        assert!(!r.stderr.contains("would delete"), "{}", r.stderr);
    }
    // Usage errors: exit 2, one line, nothing run.
    for (bad, why) in [
        (vec!["--delete", "SRC", "h1:DST"], "needs -r"),
        (vec!["-r", "--delete", "-", "h1:DST"], "- is a stream"),
        (
            vec!["-r", "--delete", "SRC", "SRC", "h1:DST"],
            "mirrors one source",
        ),
    ] {
        let bad: Vec<String> = bad
            .iter()
            .map(|a| match *a {
                "SRC" => d.s("src"),
                "h1:DST" => format!("h1:{}", d.s("dst")),
                a => a.to_string(),
            })
            .collect();
        let refs: Vec<&str> = bad.iter().map(String::as_str).collect();
        let r = run_rdcp(&args(&ssh, &refs), None, LIMIT);
        assert_eq!(r.code(), Some(2), "{bad:?}: {}", r.stderr);
        assert!(r.stderr.contains(why), "{}", r.stderr);
    }
    assert!(!d.path("dst").exists());
}
