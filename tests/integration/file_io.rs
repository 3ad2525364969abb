//! Regular files on either end of rdsend → rdrecv: the sender reading FILE or a
//! stdin redirected from one (odd sizes, empty, part-read, growing and shrinking
//! while read, non-regular inputs), on tmpfs and on a disk-backed directory; the
//! receiver writing FILE with `--direct` (O_DIRECT), also through rdpipe's
//! `> FILE`, and its fallback on a filesystem that refuses O_DIRECT (ramfs).

use crate::support::*;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const KIB: usize = 1024;
const MIB: usize = 1 << 20;

/// Directories to put test files in: tmpfs (/dev/shm) and a disk-backed one
/// (/var/tmp, where O_DIRECT reaches the device), whichever exist here.
pub fn file_dirs(tag: &str) -> Vec<Dir> {
    ["/dev/shm", "/var/tmp"]
        .into_iter()
        .filter(|d| Path::new(d).is_dir())
        .map(|d| Dir::new(d, tag))
        .collect()
}

/// A fresh directory under `base`, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    fn new(base: &str, tag: &str) -> Dir {
        let d = PathBuf::from(format!("{base}/rdpt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    pub fn s(&self, name: &str) -> String {
        self.path(name).to_string_lossy().into_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts rdsend with `args` and the given stdin.
fn start_send(args: &[&str], stdin: Stdio) -> (Child, String) {
    let mut cmd = Command::new(bin("rdsend"));
    cmd.args(args)
        .env_remove("RDPIPE_KEY")
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let line = describe(&cmd);
    (cmd.spawn().expect("spawn rdsend"), line)
}

/// Waits for a started rdsend and collects it.
fn finish_send((mut child, cmdline): (Child, String)) -> Finished {
    let mut err = child.stderr.take().unwrap();
    let h = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = wait_bounded(&mut child, Duration::from_secs(60), &cmdline);
    Finished {
        status,
        stdout: Vec::new(),
        stderr: h.join().unwrap(),
        cmdline,
    }
}

/// rdsend (FILE as argument, or as stdin when `as_stdin`) → rdrecv → its stdout.
fn send_file(src: &Path, as_stdin: bool, extra: &[&str]) -> (Finished, Finished) {
    let r = Receiver::start(&["k"], &[], None);
    let port = r.port.to_string();
    let path = src.to_string_lossy().into_owned();
    let mut args = vec!["127.0.0.1", port.as_str(), "k"];
    let stdin = if as_stdin {
        Stdio::from(File::open(src).unwrap())
    } else {
        args.push(&path);
        Stdio::null()
    };
    let mut all = extra.to_vec();
    all.extend(args);
    let s = finish_send(start_send(&all, stdin));
    (s, r.finish())
}

#[test]
fn regular_files_of_odd_sizes_are_byte_exact_as_argument_and_as_stdin() {
    let sizes = [
        0,
        1,
        4095,
        4097,
        256 * KIB - 1,
        256 * KIB + 4097,
        MIB + 1,
        3 * MIB + 12345,
    ];
    for dir in file_dirs("oddin") {
        for (i, &len) in sizes.iter().enumerate() {
            let src = dir.path(&format!("in{i}"));
            let data = random_bytes(len, 300 + i as u64);
            std::fs::write(&src, &data).unwrap();
            for as_stdin in [false, true] {
                let (s, r) = send_file(&src, as_stdin, &[]);
                s.expect_code(0);
                r.expect_code(0);
                assert!(
                    r.stdout == data,
                    "{} ({len} bytes, as stdin: {as_stdin}): {} bytes arrived, content differs",
                    src.display(),
                    r.stdout.len()
                );
                assert!(
                    !s.stderr.contains("changed size"),
                    "a steady file was reported as changed: {}",
                    s.stderr
                );
            }
        }
    }
}

#[test]
fn a_part_read_stdin_file_sends_the_rest_without_a_size_warning() {
    let dir = Scratch::new("partin");
    let src = dir.path("in");
    let data = random_bytes(MIB + 999, 31);
    std::fs::write(&src, &data).unwrap();
    let r = Receiver::start(&["k"], &[], None);
    let port = r.port.to_string();
    let mut f = File::open(&src).unwrap();
    f.seek(std::io::SeekFrom::Start(1000)).unwrap();
    let s = finish_send(start_send(&["127.0.0.1", &port, "k"], Stdio::from(f)));
    let r = r.finish();
    s.expect_code(0);
    r.expect_code(0);
    assert!(r.stdout == data[1000..], "the rest of the file differs");
    assert!(!s.stderr.contains("changed size"), "{}", s.stderr);
}

#[test]
fn non_regular_inputs_fifo_and_dev_null() {
    let dir = Scratch::new("fifoin");
    let fifo = dir.s("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo {fifo}");
    let data = random_bytes(2 * MIB + 77, 5);
    let writer = {
        let (fifo, data) = (fifo.clone(), data.clone());
        std::thread::spawn(move || {
            let mut w = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            for piece in data.chunks(10_000) {
                w.write_all(piece).unwrap();
            }
        })
    };
    let (s, r) = send_file(Path::new(&fifo), false, &[]);
    writer.join().unwrap();
    s.expect_code(0);
    r.expect_code(0);
    assert!(r.stdout == data, "FIFO input differs");
    let (s, r) = send_file(Path::new("/dev/null"), true, &[]);
    s.expect_code(0);
    r.expect_code(0);
    assert!(r.stdout.is_empty());
}

/// Sends an 8 MiB file paced at 4 MB/s into an rdrecv FILE, and calls `change`
/// on the source once the receiver's temporary file has data.
fn change_while_read(tag: &str, change: impl FnOnce(&Path)) -> (Finished, Finished, Vec<u8>) {
    let dir = Scratch::new(tag);
    let src = dir.path("in");
    let dst = dir.s("out");
    std::fs::write(&src, random_bytes(8 * MIB, 77)).unwrap();
    let r = Receiver::start(&["k", &dst], &[], None);
    let port = r.port.to_string();
    let src_s = src.to_string_lossy().into_owned();
    let args = [
        "--rate-limit",
        "4M",
        "--chunk-size",
        "64K",
        "127.0.0.1",
        &port,
        "k",
        &src_s,
    ];
    let s = start_send(&args, Stdio::null());
    wait_until(
        "data in the temporary file",
        Duration::from_secs(20),
        || dir.temp_has_data().then_some(()),
    );
    change(&src);
    let s = finish_send(s);
    let r = r.finish();
    let out = read(&dir.path("out"));
    (s, r, out)
}

#[test]
fn a_file_that_grows_while_read_is_sent_to_its_new_end_with_a_warning() {
    let extra = random_bytes(MIB, 78);
    let mut whole = random_bytes(8 * MIB, 77);
    whole.extend_from_slice(&extra);
    let (s, r, out) = change_while_read("grow", |p| {
        let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
        f.write_all(&extra).unwrap();
    });
    s.expect_code(0)
        .expect_stderr("changed size while it was read: sent 9437184 bytes, it had 8388608");
    r.expect_code(0);
    assert!(
        out == whole,
        "{} bytes arrived, not the grown file",
        out.len()
    );
}

#[test]
fn a_file_that_shrinks_while_read_sends_a_verified_prefix_with_a_warning() {
    let orig = random_bytes(8 * MIB, 77);
    let (s, r, out) = change_while_read("shrink", |p| {
        File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_len((3 * MIB + 123) as u64)
            .unwrap();
    });
    s.expect_code(0)
        .expect_stderr("changed size while it was read: sent ");
    r.expect_code(0);
    assert!(
        out.len() >= 3 * MIB + 123 && out.len() < orig.len(),
        "{} bytes arrived",
        out.len()
    );
    assert!(out == orig[..out.len()], "not a prefix of the file");
}

/// rdsend (FILE, or the bytes through a pipe on stdin) → `rdrecv -v --direct` `dst`.
fn recv_direct(dst: &str, data: &[u8], through_pipe: bool, src: &Path) -> (Finished, Finished) {
    let r = Receiver::start(&["-v", "--direct", "k", dst], &[], None);
    let port = r.port.to_string();
    let s = if through_pipe {
        send(&["127.0.0.1", &port, "k"], &[], Some(data))
    } else {
        std::fs::write(src, data).unwrap();
        send(
            &["127.0.0.1", &port, "k", &src.to_string_lossy()],
            &[],
            None,
        )
    };
    (s, r.finish())
}

#[test]
fn receiver_direct_writes_odd_sizes_byte_exact_on_disk_and_tmpfs() {
    let sizes = [0, 1, 4095, 4097, MIB + 1, 3 * MIB + 12345];
    for dir in file_dirs("direct") {
        for (i, &len) in sizes.iter().enumerate() {
            let data = random_bytes(len, 500 + i as u64);
            for through_pipe in [false, true] {
                let dst = dir.s("out");
                let (s, r) = recv_direct(&dst, &data, through_pipe, &dir.path("in"));
                s.expect_code(0);
                r.expect_code(0);
                assert!(
                    !r.stderr.contains("not O_DIRECT"),
                    "{}: O_DIRECT refused: {}",
                    dir.0.display(),
                    r.stderr
                );
                assert!(
                    read(Path::new(&dst)) == data,
                    "{dst}: {len} bytes (through a pipe: {through_pipe}) differ"
                );
                let left: Vec<_> = std::fs::read_dir(&dir.0)
                    .unwrap()
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().contains(".rdpipe-"))
                    .collect();
                assert!(left.is_empty(), "temporary files left: {left:?}");
            }
        }
    }
}

#[test]
fn direct_needs_a_file() {
    let out = Command::new(bin("rdrecv"))
        .args(["--direct", "0", "k"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--direct"));
}

/// A ramfs mounted on a scratch directory (ramfs has no O_DIRECT), unmounted on drop.
struct Ramfs(Scratch);

impl Ramfs {
    fn mount() -> Option<Ramfs> {
        let s = Scratch::new("ramfs");
        let ok = Command::new("mount")
            .args(["-t", "ramfs", "rdpt-ramfs"])
            .arg(&s.0)
            .status()
            .is_ok_and(|st| st.success());
        ok.then_some(Ramfs(s))
    }
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0 .0).status();
    }
}

#[test]
fn direct_on_a_filesystem_that_refuses_it_writes_the_same_bytes_with_a_note() {
    if !is_root() {
        skip(&test_name(), "needs root (mounting a ramfs)");
        return;
    }
    let Some(fs) = Ramfs::mount() else {
        skip(&test_name(), "cannot mount a ramfs here");
        return;
    };
    let data = random_bytes(2 * MIB + 333, 9);
    let dst = fs.0.s("out");
    let (s, r) = recv_direct(&dst, &data, false, &fs.0.path("in"));
    s.expect_code(0);
    r.expect_code(0).expect_stderr(
        "writing through the page cache, not O_DIRECT: its filesystem refuses O_DIRECT",
    );
    assert!(read(Path::new(&dst)) == data, "ramfs output differs");
}

#[test]
fn rdpipe_direct_writes_a_file_segment_byte_exact() {
    for dir in file_dirs("pdirect") {
        let data = random_bytes(5 * MIB + 4321, 11);
        let dst = dir.s("out");
        let r = run(
            &["-v".to_string(), "--direct".into(), format!("-:> {dst}")],
            Some(data.clone()),
            Duration::from_secs(60),
        );
        r.ok();
        assert!(read(Path::new(&dst)) == data, "{dst} differs");
        // `--to` sinks' `> FILE` too (a relaying sink and the last one).
        let (a, b) = (dir.s("a"), dir.s("b"));
        let r = run(
            &[
                "--direct".to_string(),
                "--to".into(),
                format!("-:> {a}"),
                "--to".into(),
                format!("-:> {b}"),
            ],
            Some(data.clone()),
            Duration::from_secs(60),
        );
        r.ok();
        assert!(read(Path::new(&a)) == data, "{a} differs");
        assert!(read(Path::new(&b)) == data, "{b} differs");
    }
}
