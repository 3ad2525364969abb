//! Self-install and ssh's shell semantics, across network namespaces (root).
//!
//! Host n2 is made "bare": its sshd runs in a private mount namespace where
//! libibverbs and librdmacm are /dev/null (no rdma-core), root's home is an
//! empty scratch directory (so the cache starts empty and no rc file runs),
//! /usr/local/bin (first in sshd's PATH) is a scratch directory for fake tools,
//! and /etc/passwd is a private copy whose root shell a test can change. No
//! rdrecv is in its PATH, and the tests pass no `--remote-bin` unless they test
//! shells. Each test checks that no process is left over.

use crate::support::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn skip_test(test: &str, why: &str) {
    skip(test, why);
}

macro_rules! need_install_host {
    ($name:expr) => {
        if !is_root() {
            skip_test($name, "needs root (network and mount namespaces)");
            return;
        }
        if !have_ssh() {
            skip_test($name, "needs openssh-server and openssh-client installed");
            return;
        }
        if Command::new("unshare").arg("--version").output().is_err() {
            skip_test($name, "needs unshare (util-linux)");
            return;
        }
    };
}

const RDMA_LIBS: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];

/// Where the dynamic loader finds `soname` (`ldconfig -p`), if anywhere.
fn lib_path(soname: &str) -> Option<String> {
    let out = Command::new("ldconfig").arg("-p").output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (name, path) = l.trim().split_once(" => ")?;
        (name.split_whitespace().next() == Some(soname)).then(|| path.to_string())
    })
}

fn listening(ns: &str) -> bool {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Hltn", "sport = :22"])
        .output()
        .unwrap();
    !String::from_utf8_lossy(&o.stdout).trim().is_empty()
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Host `h` of `net` made bare (see the module doc): its sshd replaced by one
/// in a private mount namespace. Killed on drop (declare it after the Netns).
struct Bare {
    child: Child,
    pid: u32,
    home: PathBuf,
    bin: PathBuf,
    passwd: PathBuf,
    libs: Vec<String>,
}

impl Bare {
    fn start(net: &Netns, h: usize) -> Bare {
        let ns = net.ns(h);
        kill("-TERM", net.sshd_pids[h - 1]);
        wait_until("the old sshd gone", Duration::from_secs(10), || {
            !listening(&ns)
        });
        let home = net.dir.path(&format!("home{h}"));
        let bin = net.dir.path(&format!("bin{h}"));
        let passwd = net.dir.path(&format!("passwd{h}"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy("/etc/passwd", &passwd).unwrap();
        let libs: Vec<String> = RDMA_LIBS.iter().filter_map(|l| lib_path(l)).collect();
        let mut script = String::from("set -e; ");
        for l in &libs {
            script += &format!("mount --bind /dev/null '{l}'; ");
        }
        for (from, to) in [
            (&home, "/root"),
            (&bin, "/usr/local/bin"),
            (&passwd, "/etc/passwd"),
        ] {
            script += &format!("mount --bind '{}' {to}; ", from.display());
        }
        // Its sessions' HOME is the private /root (whose cache the tests read),
        // not the scratch home the shared configuration names.
        let conf = net.dir.path(&format!("sshd_n{h}.conf"));
        let text = std::fs::read_to_string(&conf).unwrap();
        let text: String = text
            .lines()
            .filter(|l| !l.starts_with("SetEnv HOME="))
            .map(|l| format!("{l}\n"))
            .collect();
        let conf = net.dir.path(&format!("sshd_bare{h}.conf"));
        std::fs::write(&conf, text).unwrap();
        script += &format!("exec /usr/sbin/sshd -D -e -f '{}'", conf.display());
        let log = std::fs::File::create(net.dir.path(&format!("sshd_bare{h}.log"))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "unshare", "--mount", "--propagation"])
            .args(["private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run sshd in a mount namespace");
        let pid = child.id();
        let me = Bare {
            child,
            pid,
            home,
            bin,
            passwd,
            libs,
        };
        wait_until(
            "the bare host's sshd listening",
            Duration::from_secs(10),
            || listening(&ns),
        );
        me
    }

    /// Puts an executable `name` with `text` into the host's /usr/local/bin.
    fn fake(&self, name: &str, text: &str) {
        let p = self.bin.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Sets root's login shell there (rewrites the private passwd in place).
    fn root_shell(&self, shell: &str) {
        let text = std::fs::read_to_string(&self.passwd).unwrap();
        let out: Vec<String> = text
            .lines()
            .map(|l| {
                let mut f: Vec<&str> = l.split(':').collect();
                if f.len() == 7 && f[2] == "0" {
                    f[6] = shell;
                }
                f.join(":")
            })
            .collect();
        std::fs::write(&self.passwd, out.join("\n") + "\n").unwrap();
    }

    /// The cache entries there: `~/.cache/rdma-pipe/*/rdrecv`.
    fn cached(&self) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(self.home.join(".cache/rdma-pipe")) else {
            return vec![];
        };
        rd.filter_map(|e| Some(e.ok()?.path().join("rdrecv")))
            .filter(|p| p.exists())
            .collect()
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn go(net: &Netns, extra: &[&str], input: Option<Vec<u8>>, limit: u64) -> Run {
    let p = net.exec_prefix();
    let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
    let mut a = vec!["-F".to_string(), net.config.to_string_lossy().into_owned()];
    a.extend(extra.iter().map(|s| s.to_string()));
    start(&p, &a, input).finish(Duration::from_secs(limit))
}

/// No process is left in any namespace but the sshds.
fn assert_clean(net: &Netns, bare: &Bare) {
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let left: Vec<u32> = (0..=3)
            .flat_map(|n| net.stray_pids(n))
            .filter(|p| *p != bare.pid)
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left over: {left:?}\n{}",
            ps(&left)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn error_lines(r: &Run) -> Vec<&str> {
    r.stderr
        .lines()
        .filter(|l| l.starts_with("rdpipe: error:"))
        .collect()
}

#[test]
fn self_install_on_a_host_without_rdrecv_or_rdma_core() {
    need_install_host!("self_install_on_a_host_without_rdrecv_or_rdma_core");
    let net = Netns::start("si");
    let bare = Bare::start(&net, 2);
    // The RDMA libraries really are hidden there.
    for l in &bare.libs {
        let o = Command::new("nsenter")
            .args(["-t", &bare.pid.to_string(), "-m", "cat", l])
            .output()
            .unwrap();
        assert!(o.status.success() && o.stdout.is_empty(), "{l}: {o:?}");
    }
    let data = random_bytes(3 << 20, 11);

    // --no-install: today's error.
    let r = go(&net, &["--no-install", "n2:cat"], Some(data.clone()), 60);
    assert_eq!(r.code(), Some(127), "{}", r.stderr);
    assert_eq!(
        error_lines(&r),
        ["rdpipe: error: n2: rdrecv not found (install rdma-pipe there or pass --remote-bin)"],
        "{}",
        r.stderr
    );
    assert!(bare.cached().is_empty());

    // First run: installs itself once (two segments on n2), TCP, byte-exact.
    let r = go(&net, &["-v", "n2:cat", "n2:cat"], Some(data.clone()), 120);
    r.ok();
    assert!(
        r.stdout == data,
        "stdout differs ({} bytes)",
        r.stdout.len()
    );
    let installs = r
        .stderr
        .matches("n2: no usable rdrecv in PATH; installing")
        .count();
    assert_eq!(installs, 1, "{}", r.stderr);
    assert!(r.stderr.contains("[1] n2 -> [2] n2: tcp"), "{}", r.stderr);
    let cached = bare.cached();
    assert_eq!(cached.len(), 1, "{cached:?}");
    let entry = cached[0]
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        entry.starts_with(concat!(env!("CARGO_PKG_VERSION"), "-")),
        "{entry}"
    );
    let rdpipe_len = std::fs::metadata(rdpipe()).unwrap().len();
    let m1 = std::fs::metadata(&cached[0]).unwrap();
    assert_eq!(m1.len(), rdpipe_len);
    assert_eq!(m1.mode() & 0o777, 0o755);
    // Nothing half-written left beside it.
    assert_eq!(
        std::fs::read_dir(cached[0].parent().unwrap())
            .unwrap()
            .count(),
        1
    );

    // Second run: the cached copy, nothing uploaded.
    let r = go(&net, &["-vv", "n2:cat"], Some(data.clone()), 60);
    r.ok();
    assert!(r.stdout == data);
    assert!(!r.stderr.contains("installing"), "{}", r.stderr);
    assert!(
        r.stderr.contains("n2: using the cached agent in"),
        "{}",
        r.stderr
    );
    let m2 = std::fs::metadata(&cached[0]).unwrap();
    assert_eq!(
        (m1.ino(), m1.mtime(), m1.mtime_nsec()),
        (m2.ino(), m2.mtime(), m2.mtime_nsec())
    );
    assert_eq!(bare.cached().len(), 1);

    // `rdpipe doctor` finds its way to the same cached agent and reports the
    // host through it: the RDMA libraries are the one problem.
    let p = net.exec_prefix();
    let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
    let cfg = net.config.to_string_lossy().into_owned();
    let a: Vec<String> = ["doctor", "-F", &cfg, "--size", "0", "--json", "n2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let r = start(&p, &a, None).finish(Duration::from_secs(60));
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let host = &v["hosts"][0];
    assert!(
        host["agent"].as_str().unwrap().contains("self-installed"),
        "{v:#}"
    );
    assert_eq!(host["probe"]["libraries"]["loaded"], false, "{v:#}");
    assert_eq!(v["problems"].as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(bare.cached().len(), 1);
    assert_clean(&net, &bare);
}

#[test]
fn self_install_replaces_an_older_agent() {
    need_install_host!("self_install_replaces_an_older_agent");
    let net = Netns::start("so");
    let bare = Bare::start(&net, 2);
    // An rdrecv of agent protocol 1 first in PATH.
    bare.fake("rdrecv", "#!/bin/sh\necho 'HELLO 1'\nexec cat >/dev/null\n");
    let r = go(&net, &["--no-install", "n2:cat"], Some(b"x\n".to_vec()), 60);
    assert_eq!(r.code(), Some(1), "{}", r.stderr);
    assert_eq!(
        error_lines(&r),
        [format!(
            "rdpipe: error: n2: rdrecv there speaks agent protocol 1, not {} (install the \
             same rdma-pipe version there)",
            rdpipe_control::PROTOCOL
        )],
        "{}",
        r.stderr
    );
    let r = go(
        &net,
        &["-v", "n2:cat", "n2:rev"],
        Some(b"abc\n".to_vec()),
        120,
    );
    r.ok();
    assert_eq!(r.stdout_str(), "cba\n");
    assert!(
        r.stderr
            .contains("n2: no usable rdrecv in PATH; installing"),
        "{}",
        r.stderr
    );
    assert_eq!(bare.cached().len(), 1);
    assert_clean(&net, &bare);
}

/// A planted cache binary (another user's, or anything that is not this
/// build): of the same size and answering `--agent-protocol` as this build
/// does, it is not run as the agent (it would get the hop keys on stdin):
/// the probe's SHA-256 differs and rdpipe uploads over it. A cache entry
/// that group or others may write, or that another user owns, is refused
/// with one line saying how to fix it (exit 127, as every install failure).
#[test]
fn self_install_never_runs_a_planted_cache_binary() {
    need_install_host!("self_install_never_runs_a_planted_cache_binary");
    let net = Netns::start("sp");
    let bare = Bare::start(&net, 2);
    go(&net, &["n2:cat"], Some(b"x\n".to_vec()), 120).ok();
    let cached = bare.cached();
    assert_eq!(cached.len(), 1, "{cached:?}");
    let real = std::fs::read(rdpipe()).unwrap();
    // The impostor: a shell script of exactly the real binary's size.
    let stolen = bare.home.join("stolen");
    let id = rdpipe_control::AgentId::this();
    let mut fake = format!(
        "#!/bin/sh\nfor a; do [ \"$a\" = --agent-protocol ] && {{ echo '{id}'; exit 0; }}; done\n\
         cat > /root/stolen; exit 0\n#"
    )
    .into_bytes();
    assert!(fake.len() < real.len());
    fake.resize(real.len(), b'#');
    std::fs::write(&cached[0], &fake).unwrap();
    let r = go(&net, &["-v", "n2:rev"], Some(b"abc\n".to_vec()), 120);
    r.ok();
    assert_eq!(r.stdout_str(), "cba\n");
    assert!(
        r.stderr
            .contains("n2: no usable rdrecv in PATH; installing"),
        "{}",
        r.stderr
    );
    assert!(!stolen.exists(), "the planted binary ran as the agent");
    assert!(std::fs::read(&cached[0]).unwrap() == real, "not replaced");

    // A cache entry others may write: refused, nothing run or uploaded.
    let entry = cached[0].parent().unwrap().to_path_buf();
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = go(&net, &["n2:cat"], Some(b"x\n".to_vec()), 60);
    assert_eq!(r.code(), Some(127), "{}", r.stderr);
    let e = entry
        .strip_prefix(&bare.home)
        .unwrap()
        .display()
        .to_string();
    assert_eq!(
        error_lines(&r),
        [format!(
            "rdpipe: error: n2: will not run an agent from /root/{e} there: it can be written \
             by group or others (drwxrwxrwx), so another user could swap the binary that gets \
             the hop keys; run chmod go-w /root/{e} there, or pass --remote-bin DIR or \
             --no-install"
        )],
        "{}",
        r.stderr
    );
    // The same host holding a line merge with a source elsewhere: the run
    // fails with the same line, at once, and the other host's source gets
    // no keys, so its command never runs.
    let ran = net.dir.path("source-ran");
    let src = format!("n1:touch {}; echo a", ran.display());
    let r = go(
        &net,
        &["--from", &src, "--from", "n2:echo b", "n2:sort"],
        None,
        25,
    );
    assert_eq!(r.code(), Some(127), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("rdpipe: error: n2: will not run an agent from"),
        "{}",
        r.stderr
    );
    assert!(!ran.exists(), "a source's command ran: {}", r.stderr);
    // Another user's: refused the same way.
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&cached[0], Some(65534), Some(65534)).unwrap();
    let r = go(&net, &["n2:cat"], Some(b"x\n".to_vec()), 60);
    assert_eq!(r.code(), Some(127), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("rdrecv there: it is owned by uid 65534, not by you (uid 0)"),
        "{}",
        r.stderr
    );
    assert_eq!(error_lines(&r).len(), 1, "{}", r.stderr);
    std::os::unix::fs::chown(&cached[0], Some(0), Some(0)).unwrap();
    go(&net, &["n2:cat"], Some(b"x\n".to_vec()), 60).ok();
    assert!(!stolen.exists());
    assert_clean(&net, &bare);
}

#[test]
fn self_install_refuses_another_architecture_or_an_older_glibc() {
    need_install_host!("self_install_refuses_another_architecture_or_an_older_glibc");
    let net = Netns::start("sr");
    let bare = Bare::start(&net, 2);
    bare.fake("uname", "#!/bin/sh\necho riscv64\n");
    let r = go(&net, &["n2:cat"], Some(b"x\n".to_vec()), 60);
    assert_eq!(r.code(), Some(127), "{}", r.stderr);
    let arch = std::env::consts::ARCH;
    assert_eq!(
        error_lines(&r),
        [format!(
            "rdpipe: error: n2: no usable rdrecv there, and it is riscv64 while this rdpipe is \
             built for {arch}: install rdma-pipe for riscv64 there (rdrecv in PATH, or pass \
             --remote-bin DIR)"
        )],
        "{}",
        r.stderr
    );
    std::fs::remove_file(bare.bin.join("uname")).unwrap();
    bare.fake("getconf", "#!/bin/sh\necho 'glibc 2.3'\n");
    let r = go(&net, &["n2:cat"], Some(b"x\n".to_vec()), 60);
    assert_eq!(r.code(), Some(127), "{}", r.stderr);
    let lines = error_lines(&r);
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(
        lines[0].starts_with(
            "rdpipe: error: n2: no usable rdrecv there, and it has glibc 2.3 while this rdpipe \
             needs glibc 2."
        ) && lines[0].ends_with("or older"),
        "{}",
        lines[0]
    );
    assert!(bare.cached().is_empty(), "nothing uploaded");
    assert_clean(&net, &bare);
}

/// `readlink -f PATH`.
fn resolved(p: &str) -> String {
    std::fs::canonicalize(p)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The shell of uid 0 here.
fn local_root_shell() -> String {
    let o = Command::new("getent")
        .args(["passwd", "0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .rsplit(':')
        .next()
        .unwrap()
        .to_string()
}

fn sha256_of(data: &[u8]) -> String {
    use std::io::Write;
    let mut c = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(data).unwrap();
    String::from_utf8_lossy(&c.wait_with_output().unwrap().stdout).into_owned()
}

#[test]
fn commands_run_with_the_login_shell() {
    need_install_host!("commands_run_with_the_login_shell");
    if !Path::new("/bin/bash").exists() {
        return skip_test("commands_run_with_the_login_shell", "needs /bin/bash");
    }
    let net = Netns::start("sh");
    let bare = Bare::start(&net, 2);
    let bin = bin_dir();
    let which = "readlink /proc/$$/exe; :";

    // bash: process substitution works, as with `ssh n2 'tee >(sha256sum > sum)'`.
    bare.root_shell("/bin/bash");
    let data = random_bytes(1 << 20, 3);
    let sum = net.dir.path("sum");
    let tee = format!("n2:tee >(sha256sum > {})", sum.display());
    let r = go(&net, &["--remote-bin", &bin, &tee], Some(data.clone()), 60);
    r.ok();
    assert!(r.stdout == data);
    // The substituted process is not waited for by bash: its file appears soon.
    let want = sha256_of(&data);
    wait_until("sha256sum's output", Duration::from_secs(10), || {
        std::fs::read_to_string(&sum).is_ok_and(|s| s == want)
    });
    let r = go(
        &net,
        &["--remote-bin", &bin, &format!("n2:{which}")],
        None,
        60,
    );
    r.ok();
    assert_eq!(r.stdout_str().trim(), resolved("/bin/bash"));

    // sh (dash here): sh semantics, so the same command is a syntax error.
    bare.root_shell("/bin/sh");
    let r = go(
        &net,
        &["--remote-bin", &bin, &format!("n2:{which}")],
        None,
        60,
    );
    r.ok();
    assert_eq!(r.stdout_str().trim(), resolved("/bin/sh"));
    if resolved("/bin/sh") != resolved("/bin/bash") {
        let r = go(
            &net,
            &["--remote-bin", &bin, &tee],
            Some(b"x\n".to_vec()),
            60,
        );
        assert_eq!(r.code(), Some(2), "{}", r.stderr);
        assert!(
            r.stderr.contains("n2:") && r.stderr.contains("Syntax error"),
            "{}",
            r.stderr
        );
    }

    // A local segment: this machine's user's shell.
    let r = go(&net, &[&format!("-:{which}")], None, 60);
    r.ok();
    assert_eq!(r.stdout_str().trim(), resolved(&local_root_shell()));
    assert_clean(&net, &bare);
}

/// A bash login shell reads its start-up file once per segment, as for
/// `ssh HOST CMD`: what `~/.bashrc` exports reaches the command, and the
/// command's own `bash -c` does not read it again.
#[test]
fn the_login_shells_start_up_file_runs_once_per_segment() {
    need_install_host!("the_login_shells_start_up_file_runs_once_per_segment");
    if !Path::new("/bin/bash").exists() {
        return skip_test(
            "the_login_shells_start_up_file_runs_once_per_segment",
            "needs /bin/bash",
        );
    }
    let net = Netns::start("rc");
    let bare = Bare::start(&net, 2);
    bare.root_shell("/bin/bash");
    let count = bare.home.join("sourced");
    std::fs::write(
        bare.home.join(".bashrc"),
        "echo x >> \"$HOME/sourced\"\nexport RDPIPE_TEST_RC=from-bashrc\n",
    )
    .unwrap();
    let r = go(
        &net,
        &[
            "--remote-bin",
            &bin_dir(),
            "n2:echo \"$RDPIPE_TEST_RC\"",
            "n2:cat",
        ],
        None,
        60,
    );
    r.ok();
    assert_eq!(r.stdout_str(), "from-bashrc\n", "{}", r.stderr);
    let times = std::fs::read_to_string(&count).unwrap_or_default();
    assert_eq!(
        times.lines().count(),
        2,
        "~/.bashrc read {} times for 2 segments",
        times.lines().count()
    );
    assert_clean(&net, &bare);
}
