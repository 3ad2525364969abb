//! The binaries on a host without rdma-core: no load-time dependency on libibverbs
//! or librdmacm (they are `dlopen`ed on first RDMA use), and with both hidden (as
//! root: /dev/null bind-mounted over them in a private mount namespace) `auto`
//! moves a stream byte-exact over TCP and says why at `-v`, while `--transport
//! rdma` exits 7 saying what to install. Self-contained on purpose.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BINS: [&str; 3] = [
    env!("CARGO_BIN_EXE_rdsend"),
    env!("CARGO_BIN_EXE_rdrecv"),
    env!("CARGO_BIN_EXE_rdpipe"),
];
const RDMA_LIBS: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];
const INSTALL: &str = "install rdma-core (libibverbs, librdmacm)";
const EXIT_NO_RDMA: i32 = 7;

#[test]
fn binaries_have_no_rdma_library_dependency() {
    for bin in BINS {
        let out = Command::new("ldd").arg(bin).output().expect("run ldd");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "ldd {bin}: {text}");
        for lib in RDMA_LIBS {
            assert!(
                !text.contains(lib),
                "{bin} needs {lib} at load time:\n{text}"
            );
        }
    }
}

/// Where the dynamic loader finds `soname` (`ldconfig -p`), if anywhere.
fn lib_path(soname: &str) -> Option<String> {
    let out = Command::new("ldconfig").arg("-p").output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (name, path) = l.trim().split_once(" => ")?;
        (name.split_whitespace().next() == Some(soname)).then(|| path.to_string())
    })
}

/// `bin args...` in a private mount namespace where every RDMA library the
/// loader would find is /dev/null.
fn hidden(libs: &[String], bin: &str, args: &[&str]) -> Command {
    let mut script = String::from("set -e; ");
    for l in libs {
        script += &format!("mount --bind /dev/null '{l}'; ");
    }
    script += "exec \"$@\"";
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
        bin,
    ]);
    c.args(args);
    c
}

fn skip(why: &str) {
    crate::support::skip(&crate::support::test_name(), why);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Starts `rdrecv ARGS --announce-fd 1 0 KEY OUT` without the libraries; returns
/// the child and the port it announced on stdout.
fn start_rdrecv(libs: &[String], extra: &[&str], out: &Path) -> (std::process::Child, String) {
    let mut args = extra.to_vec();
    args.extend(["--announce-fd", "1", "0", "k3y", out.to_str().unwrap()]);
    let mut child = hidden(libs, BINS[1], &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rdrecv");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .expect("read the announced port");
    let Some(port) = line.trim().strip_prefix("PORT ").map(str::to_string) else {
        let o = child.wait_with_output().unwrap();
        panic!("rdrecv announced {line:?}; stderr: {}", text(&o.stderr))
    };
    (child, port)
}

fn rdsend(libs: &[String], extra: &[&str], port: &str, input: &Path) -> Output {
    let mut args = extra.to_vec();
    args.extend(["127.0.0.1", port, "k3y", input.to_str().unwrap()]);
    hidden(libs, BINS[0], &args).output().expect("run rdsend")
}

#[test]
fn runs_without_rdma_core() {
    if std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        != 0
    {
        return skip("needs root (a mount namespace hiding the RDMA libraries)");
    }
    let libs: Vec<String> = RDMA_LIBS.iter().filter_map(|l| lib_path(l)).collect();
    // The namespace must really hide them: each reads as empty inside it.
    for l in &libs {
        let o = hidden(&libs, "cat", &[l]).output().expect("run unshare");
        if !o.status.success() {
            return skip(&format!("unshare/mount failed: {}", text(&o.stderr).trim()));
        }
        assert!(o.stdout.is_empty(), "{l} still readable in the namespace");
    }

    let v = hidden(&libs, BINS[1], &["--version"]).output().unwrap();
    assert!(v.status.success(), "rdrecv --version: {v:?}");
    assert!(text(&v.stdout).starts_with("rdrecv "), "{v:?}");

    let dir: PathBuf = std::env::temp_dir().join(format!("rdpipe-no-rdma-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in");
    let data: Vec<u8> = (0..3_000_017u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&input, &data).unwrap();

    // auto: TCP, byte-exact, and -v says why.
    let out = dir.join("out");
    let (rx, port) = start_rdrecv(&libs, &["-v"], &out);
    let tx = rdsend(&libs, &["-v"], &port, &input);
    let rx = rx.wait_with_output().unwrap();
    assert!(tx.status.success(), "rdsend: {}", text(&tx.stderr));
    assert!(rx.status.success(), "rdrecv: {}", text(&rx.stderr));
    assert!(
        std::fs::read(&out).unwrap() == data,
        "output differs from input"
    );
    for (who, err) in [("rdsend", text(&tx.stderr)), ("rdrecv", text(&rx.stderr))] {
        assert!(err.contains("over tcp"), "{who}: {err}");
        assert!(
            err.contains("auto uses TCP") && err.contains(INSTALL),
            "{who}: {err}"
        );
    }

    // --transport rdma: exit 7 with what to install, on both ends.
    let (rx, port) = start_rdrecv(&libs, &["--transport", "rdma"], &dir.join("out2"));
    let tx = rdsend(&libs, &["--transport", "rdma"], &port, &input);
    let rx = rx.wait_with_output().unwrap();
    for (who, o) in [("rdsend", &tx), ("rdrecv", &rx)] {
        assert_eq!(
            o.status.code(),
            Some(EXIT_NO_RDMA),
            "{who}: {}",
            text(&o.stderr)
        );
        assert!(
            text(&o.stderr).contains(INSTALL),
            "{who}: {}",
            text(&o.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
