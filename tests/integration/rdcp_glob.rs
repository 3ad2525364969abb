//! rdcp's remote wildcards against a real sshd on 127.0.0.1 (aliases h1..h4
//! of one sshd): `*`, `?` and `[...]` expanded on the sources' host as scp
//! does (compared with scp itself where it is installed), no match, several
//! matches into a non-directory, directories with and without -r, odd names;
//! and `--resume` of several files and of wildcard matches continuing the
//! file an interruption cut short, with no temporary file left.

use crate::rdcp::{args, assert_no_temporary_files};
use crate::support::*;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

/// The names in `d`, sorted (empty when it does not exist).
fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn rdcp_remote_wildcards_as_scp() {
    need_ssh!();
    let sftp = Path::new("/usr/lib/openssh/sftp-server");
    let ssh = LocalSsh::start_with("rdcp-glob", &format!("Subsystem sftp {}\n", sftp.display()));
    let d = &ssh.dir;
    let src = d.path("src");
    std::fs::create_dir_all(src.join("dir-a/sub")).unwrap();
    std::fs::write(src.join("dir-a/sub/f"), b"in a tree").unwrap();
    let files: &[&[u8]] = &[
        b"run-1",
        b"run-2",
        b"run-10",
        b".run-hidden",
        b"other",
        b"sp ace.x",
        b"new\nline.x",
        b"a*b",
    ];
    for (k, f) in files.iter().enumerate() {
        let data = random_bytes(1000 + k * 777, k as u64);
        std::fs::write(src.join(std::ffi::OsStr::from_bytes(f)), data).unwrap();
    }
    let s = d.s("src");
    let copy = |ops: &[&str]| run_rdcp(&args(&ssh, ops), None, LIMIT);
    // Each pattern into a directory of its own: exactly the matches, each
    // a copy of its source.
    let cases: &[(&str, &[&str])] = &[
        ("run-*", &["run-1", "run-10", "run-2"]),
        ("run-?", &["run-1", "run-2"]),
        ("run-[!2]*", &["run-1", "run-10"]),
        ("*.x", &["new\nline.x", "sp ace.x"]),
        (".run-*", &[".run-hidden"]),
        ("a*b", &["a*b"]),
        (r"a\*b", &["a*b"]),
    ];
    let scp = Path::new("/usr/bin/scp").exists() && sftp.exists();
    for (k, (pat, want)) in cases.iter().enumerate() {
        let to = d.path(&format!("to{k}"));
        std::fs::create_dir(&to).unwrap();
        copy(&[&format!("h1:{s}/{pat}"), &format!("{}/", to.display())]).ok();
        assert_eq!(names(&to), *want, "{pat}");
        for n in *want {
            assert!(
                std::fs::read(to.join(n)).unwrap() == std::fs::read(src.join(n)).unwrap(),
                "{pat}: {n}"
            );
        }
        if scp {
            // scp (SFTP mode) with the same operands copies the same names.
            let by_scp = d.path(&format!("scp{k}"));
            std::fs::create_dir(&by_scp).unwrap();
            let st = std::process::Command::new("/usr/bin/scp")
                .arg("-q")
                .arg("-F")
                .arg(&ssh.config)
                .arg(format!("h1:{s}/{pat}"))
                .arg(format!("{}/", by_scp.display()))
                .status()
                .unwrap();
            assert!(st.success(), "scp {pat}");
            assert_eq!(names(&by_scp), names(&to), "scp and rdcp: {pat}");
        }
    }
    // A single match into a new name: the copy is named so (as with one
    // source).
    copy(&[&format!("h1:{s}/oth*"), &d.s("single")]).ok();
    assert!(std::fs::read(d.path("single")).unwrap() == std::fs::read(src.join("other")).unwrap());
    // Remote to remote too, into a directory there.
    std::fs::create_dir(d.path("far")).unwrap();
    copy(&[&format!("h1:{s}/run-1*"), &format!("h2:{}/", d.s("far"))]).ok();
    assert_eq!(names(&d.path("far")), ["run-1", "run-10"]);

    // No match: an error naming the pattern, nothing copied.
    std::fs::create_dir(d.path("none")).unwrap();
    let r = copy(&[&format!("h1:{s}/zz*"), &d.s("none")]);
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("{s}/zz*")), "{}", r.stderr);
    assert!(
        r.stderr.contains("no such file or directory"),
        "{}",
        r.stderr
    );
    assert!(names(&d.path("none")).is_empty());
    // Several matches, DEST no directory: refused, nothing created.
    let r = copy(&[&format!("h1:{s}/run-*"), &d.s("notadir")]);
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("is not a directory"), "{}", r.stderr);
    assert!(!d.path("notadir").exists());
    assert_no_temporary_files(&[d.0.to_str().unwrap()]);

    // A directory among the matches: omitted without -r (the files are
    // copied, the exit status says one was not), copied with it.
    std::fs::create_dir(d.path("nor")).unwrap();
    let r = copy(&[&format!("h1:{s}/[do]*"), &d.s("nor")]);
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("omitting directory"), "{}", r.stderr);
    assert_eq!(names(&d.path("nor")), ["other"]);
    std::fs::create_dir(d.path("withr")).unwrap();
    copy(&["-r", &format!("h1:{s}/dir-*"), &d.s("withr")]).ok();
    crate::rdcp::assert_same_tree(&src.join("dir-a"), &d.path("withr/dir-a"));
}

/// Interrupts `rdcp ops...` (at 16 MB/s) once `big`'s temporary copy in
/// `dst` holds a third of `size`.
fn interrupted(ssh: &LocalSsh, ops: &[String], dst: &Path, size: usize) {
    let mut a = args(ssh, &["-p", "--rate-limit", "16M"]);
    a.extend(ops.iter().cloned());
    let started = start_tool(&rdcp(), &[], &a, None);
    wait_until("a partial copy of a third", Duration::from_secs(60), || {
        std::fs::read_dir(dst)
            .ok()?
            .filter_map(Result::ok)
            .find(|e| e.file_name().as_bytes().starts_with(b".big.rdcp-"))
            .filter(|e| e.metadata().is_ok_and(|m| m.len() > size as u64 / 3))
    });
    started.interrupt();
    assert!(!dst.join("big").exists(), "no partial file under its name");
}

/// `rdcp -p --resume --json` of `ops`: the copy's report (the packing
/// side's counts).
fn resumed(ssh: &LocalSsh, ops: &[String], report: &Path) -> serde_json::Value {
    let mut a = args(
        ssh,
        &["-p", "--resume", "--json", &report.display().to_string()],
    );
    a.extend(ops.iter().cloned());
    let r = run_rdcp(&a, None, LIMIT);
    r.ok();
    assert!(
        r.stderr.contains("1 continued from a partial copy"),
        "{}",
        r.stderr
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    v["segments"][0]["copy"].clone()
}

#[test]
fn rdcp_resume_of_several_files_and_of_wildcards_continues_the_partial_copy() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcp-glob-resume");
    let d = &ssh.dir;
    let size = 48 << 20;
    std::fs::create_dir_all(d.path("src")).unwrap();
    std::fs::write(d.path("src/a-small"), b"small one").unwrap();
    std::fs::write(d.path("src/big"), random_bytes(size, 21)).unwrap();
    std::fs::write(d.path("src/z-small"), b"small two").unwrap();
    let same = |dst: &str| {
        for n in ["a-small", "big", "z-small"] {
            assert!(
                std::fs::read(d.path(&format!("{dst}/{n}"))).unwrap()
                    == std::fs::read(d.path(&format!("src/{n}"))).unwrap(),
                "{dst}/{n}"
            );
        }
    };

    // Several local files into a directory on a host.
    std::fs::create_dir(d.path("dst1")).unwrap();
    let ops: Vec<String> = ["a-small", "big", "z-small"]
        .iter()
        .map(|n| d.s(&format!("src/{n}")))
        .chain([format!("h2:{}/", d.s("dst1"))])
        .collect();
    interrupted(&ssh, &ops, &d.path("dst1"), size);
    let pack = resumed(&ssh, &ops, &d.path("r1.json"));
    assert_eq!(pack["resumed"], 1, "{pack:#}");
    assert!(
        pack["skipped_bytes"].as_u64().unwrap() > size as u64 / 3,
        "{pack:#}"
    );
    assert!(
        pack["bytes"].as_u64().unwrap() < size as u64 * 7 / 10,
        "{pack:#}"
    );
    same("dst1");
    assert_no_temporary_files(&[&d.s("dst1")]);

    // The matches of a remote pattern, host to host.
    std::fs::create_dir(d.path("dst2")).unwrap();
    let ops = vec![
        format!("h1:{}/*", d.s("src")),
        format!("h2:{}", d.s("dst2")),
    ];
    interrupted(&ssh, &ops, &d.path("dst2"), size);
    let pack = resumed(&ssh, &ops, &d.path("r2.json"));
    assert_eq!(pack["resumed"], 1, "{pack:#}");
    assert!(
        pack["skipped_bytes"].as_u64().unwrap() > size as u64 / 3,
        "{pack:#}"
    );
    same("dst2");
    assert_no_temporary_files(&[&d.s("dst2")]);

    // A temporary that no longer continues its file (the source changed
    // since) is reused from its start: the file is sent whole, and no
    // temporary is left behind.
    std::fs::create_dir(d.path("dst3")).unwrap();
    let ops = vec![
        format!("h1:{}/[bz]*", d.s("src")),
        format!("h2:{}", d.s("dst3")),
    ];
    interrupted(&ssh, &ops, &d.path("dst3"), size);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.path("src/big"))
            .unwrap();
        f.write_all_at(b"changed at its start", 0).unwrap();
    }
    let mut a = args(&ssh, &["-p", "--resume", "--json", &d.s("r3.json")]);
    a.extend(ops.iter().cloned());
    let r = run_rdcp(&a, None, LIMIT);
    r.ok();
    assert!(
        r.stderr.contains("0 continued from a partial copy"),
        "{}",
        r.stderr
    );
    for n in ["big", "z-small"] {
        assert!(
            std::fs::read(d.path(&format!("dst3/{n}"))).unwrap()
                == std::fs::read(d.path(&format!("src/{n}"))).unwrap(),
            "{n}"
        );
    }
    assert_eq!(names(&d.path("dst3")), ["big", "z-small"]);

    // -c with the wildcard: a damaged copy (mtime put back) is found and
    // repaired; the others are complete.
    let when = std::fs::metadata(d.path("dst2/z-small"))
        .unwrap()
        .modified()
        .unwrap();
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.path("dst2/z-small"))
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"SMALL", 0).unwrap();
        f.set_modified(when).unwrap();
    }
    let mut a = args(&ssh, &["-p", "-c", "-v"]);
    a.extend([
        format!("h1:{}/*-small", d.s("src")),
        format!("h2:{}", d.s("dst2")),
    ]);
    let r = run_rdcp(&a, None, LIMIT);
    r.ok();
    assert!(r.stderr.contains("1 files complete"), "{}", r.stderr);
    assert!(
        std::fs::read(d.path("dst2/z-small")).unwrap() == b"small two",
        "{}",
        r.stderr
    );
}
