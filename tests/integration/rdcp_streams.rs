//! `rdcp --streams N` against a real sshd on 127.0.0.1 (aliases h1..h4 of
//! one sshd): a tree with big files copied over several transfers, host to
//! host and from here, byte for byte, with one summary and one report; an
//! interrupted striped copy resumed with only the pieces it lacked.

use crate::rdcp::{args, assert_same_tree};
use crate::support::*;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const MIB: usize = 1 << 20;

/// Nothing of a striped copy left: no temporary file, ledger or marker.
fn assert_nothing_left(dir: &Path) {
    let found = std::process::Command::new("find")
        .arg(dir)
        .args(["-name", ".*rdcp-*"])
        .output()
        .unwrap();
    assert!(
        found.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&found.stdout)
    );
}

/// The bytes each stream's hop moved, from `-v`'s `stream K: ...` lines.
fn moved(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter(|l| l.starts_with("rdcp: stream "))
        .filter_map(|l| {
            l.split(", ")
                .find_map(|f| f.split_once(" bytes in ")?.0.parse().ok())
        })
        .collect()
}

#[test]
fn rdcp_streams_copy_a_tree_host_to_host_and_from_here() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpstreams");
    let d = &ssh.dir;
    std::fs::create_dir_all(d.path("tree/sub/empty")).unwrap();
    std::fs::write(d.path("tree/big"), random_bytes(40 * MIB + 123, 3)).unwrap();
    std::fs::write(d.path("tree/sub/edge"), random_bytes(32 * MIB, 4)).unwrap();
    std::fs::write(d.path("tree/small"), b"small").unwrap();
    std::fs::write(d.path("tree/linked"), random_bytes(33 * MIB, 5)).unwrap();
    std::fs::hard_link(d.path("tree/linked"), d.path("tree/sub/linked2")).unwrap();
    std::os::unix::fs::symlink("big", d.path("tree/link")).unwrap();

    // Host to host, three streams.
    let r = run_rdcp(
        &args(
            &ssh,
            &[
                "-v",
                "-r",
                "--streams",
                "3",
                "--json",
                &d.s("r.json"),
                &format!("h1:{}", d.s("tree")),
                &format!("h2:{}", d.s("copy")),
            ],
        ),
        None,
        LIMIT,
    );
    r.ok();
    assert_same_tree(&d.path("tree"), &d.path("copy"));
    assert_nothing_left(&d.path("copy"));
    assert!(r.stderr.contains("rdcp: 3 streams: "), "{}", r.stderr);
    assert_eq!(
        r.stderr
            .lines()
            .filter(|l| l.starts_with("Bandwidth "))
            .count(),
        1,
        "one Bandwidth line for the copy:\n{}",
        r.stderr
    );
    let m = moved(&r.stderr);
    assert_eq!(m.len(), 3, "{}", r.stderr);
    // Stream 1 carried a piece of each striped file (16 MiB each), stream
    // 2 the third piece of `big` (8 MiB and 123 bytes); the hard-linked
    // file stayed whole on stream 0.
    assert!(m[1] > 32 * MIB as u64 && m[1] < 33 * MIB as u64, "{m:?}");
    assert!(m[2] > 8 * MIB as u64 && m[2] < 9 * MIB as u64, "{m:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("r.json")).unwrap()).unwrap();
    assert_eq!(v["streams"].as_array().map(Vec::len), Some(3), "{v:#}");
    assert_eq!(v["streams"][1]["verdict"]["exit_status"], 0, "{v:#}");
    assert!(
        wait_gone(&d.s("copy"), Duration::from_secs(10)),
        "{}",
        ps(&pgrep(&d.s("copy")))
    );

    // From here into an existing directory, two streams.
    std::fs::create_dir(d.path("into")).unwrap();
    run_rdcp(
        &args(
            &ssh,
            &[
                "-r",
                "--streams",
                "2",
                &d.s("tree"),
                &format!("h1:{}", d.s("into")),
            ],
        ),
        None,
        LIMIT,
    )
    .ok();
    assert_same_tree(&d.path("tree"), &d.path("into/tree"));
    assert_nothing_left(&d.path("into"));

    // One file under another name (its temporary name follows DEST's).
    run_rdcp(
        &args(
            &ssh,
            &[
                "--streams",
                "2",
                &d.s("tree/big"),
                &format!("h2:{}", d.s("renamed.img")),
            ],
        ),
        None,
        LIMIT,
    )
    .ok();
    assert_eq!(
        std::fs::read(d.path("renamed.img")).unwrap(),
        std::fs::read(d.path("tree/big")).unwrap()
    );

    // Into /dev/null: the link check, with one Bandwidth line.
    let r = run_rdcp(
        &args(
            &ssh,
            &["-v", "--streams", "2", &d.s("tree/big"), "h1:/dev/null"],
        ),
        None,
        LIMIT,
    );
    r.ok();
    let sent: u64 = moved(&r.stderr).iter().sum();
    let size = 40 * MIB as u64 + 123;
    assert!(sent > size && sent < size + 4096, "{}", r.stderr);
}

#[test]
fn rdcp_streams_refuse_what_cannot_be_striped_and_say_what_they_would_do() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpstreamsn");
    let d = &ssh.dir;
    std::fs::write(d.path("f"), b"x").unwrap();
    let r = run_rdcp(
        &args(&ssh, &["--streams", "2", "-", &format!("h1:{}", d.s("g"))]),
        Some(b"data".to_vec()),
        LIMIT,
    );
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("--streams"), "{}", r.stderr);
    let r = run_rdcp(
        &args(&ssh, &["--streams", "17", &d.s("f"), "h1:/tmp/x"]),
        None,
        LIMIT,
    );
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    let r = run_rdcp(
        &args(
            &ssh,
            &[
                "-n",
                "--streams",
                "4",
                &d.s("f"),
                &format!("h1:{}", d.s("g")),
            ],
        ),
        None,
        LIMIT,
    );
    r.ok();
    assert!(
        r.stdout_str().contains("streams: 4 transfers"),
        "{}",
        r.stdout_str()
    );
    assert!(!d.path("g").exists());
}

#[test]
fn rdcp_streams_resume_sends_only_the_pieces_an_interrupted_copy_lacks() {
    need_ssh!();
    let ssh = LocalSsh::start("rdcpstreamsresume");
    let d = &ssh.dir;
    let size = 96 * MIB;
    std::fs::create_dir_all(d.path("src")).unwrap();
    std::fs::write(d.path("src/big"), random_bytes(size, 9)).unwrap();
    std::fs::write(d.path("src/small"), b"small").unwrap();
    let to = format!("h2:{}", d.s("dst"));
    let mut a = args(&ssh, &["-r", "--streams", "2", "--rate-limit", "16M"]);
    a.extend([format!("h1:{}", d.s("src")), to.clone()]);
    let started = start_tool(&rdcp(), &[], &a, None);
    // Readiness: the ledger has two of the six pieces done.
    wait_until("two pieces verified", Duration::from_secs(60), || {
        let l = std::fs::read_dir(d.path("dst"))
            .ok()?
            .filter_map(Result::ok)
            .find(|e| e.file_name().as_bytes().ends_with(b".pieces"))?;
        let b = std::fs::read(l.path()).ok()?;
        (b.get(32..)?.iter().filter(|&&s| s == 1).count() >= 2).then_some(())
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
                "--streams",
                "3",
                &format!("h1:{}", d.s("src")),
                &to,
            ],
        ),
        None,
        LIMIT,
    );
    r.ok();
    assert_same_tree(&d.path("src"), &d.path("dst"));
    assert_nothing_left(&d.path("dst"));
    let m: u64 = moved(&r.stderr).iter().sum();
    eprintln!("rdcp --resume --streams 3 moved {m} of {size} bytes");
    assert!(
        m <= (size - 2 * 16 * MIB) as u64 + 4096,
        "moved {m} of {size}:\n{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("1 continued from a partial copy"),
        "{}",
        r.stderr
    );
}
