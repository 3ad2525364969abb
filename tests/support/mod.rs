//! Test support for rdpipe: real sshd servers with generated host and user keys
//! and a generated ssh configuration (host aliases), either on 127.0.0.1 with a
//! high port (no privileges needed) or one per network namespace joined by veth
//! pairs (root only), plus a runner for the rdpipe binary with a time bound.
//! Everything is torn down by Drop guards, also when a test fails.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The rdpipe binary under test.
pub fn rdpipe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rdpipe"))
}

/// The directory holding rdrecv (for `--remote-bin`).
pub fn bin_dir() -> String {
    Path::new(env!("CARGO_BIN_EXE_rdrecv"))
        .parent()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Whether we are root (network namespaces need it).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Prints the loud skip notice.
pub fn skip(test: &str, why: &str) {
    eprintln!("SKIPPED: {test}: {why}");
}

/// Whether sshd and ssh are installed.
pub fn have_ssh() -> bool {
    Path::new("/usr/sbin/sshd").exists()
        && Command::new("ssh")
            .arg("-V")
            .stderr(Stdio::null())
            .status()
            .is_ok()
}

/// Deterministic pseudo-random bytes.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// xxh3-64, as rdpipe -v prints it.
pub fn xxh3_hex(data: &[u8]) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(data))
}

fn sh(cmd: &mut Command) -> String {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A scratch directory with short path (control sockets live elsewhere, but keys
/// and configs are referenced by ssh), removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let d = PathBuf::from(format!("/tmp/rdpt-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    pub fn s(&self, name: &str) -> String {
        self.path(name).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Host key, user key, authorized_keys.
pub struct Keys {
    pub host_key: PathBuf,
    pub host_pub: String,
    pub user_key: PathBuf,
    pub authorized: PathBuf,
}

impl Keys {
    pub fn generate(dir: &Scratch) -> Keys {
        let host_key = dir.path("host_key");
        let user_key = dir.path("id_test");
        for k in [&host_key, &user_key] {
            sh(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "rdpipe-test", "-f"])
                .arg(k));
        }
        let authorized = dir.path("authorized_keys");
        std::fs::copy(user_key.with_extension("pub"), &authorized).unwrap();
        let host_pub = std::fs::read_to_string(host_key.with_extension("pub"))
            .unwrap()
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        Keys {
            host_key,
            host_pub,
            user_key,
            authorized,
        }
    }
}

fn sshd_config(dir: &Scratch, keys: &Keys, name: &str, listen: &str, port: u16) -> PathBuf {
    let cfg = dir.path(&format!("sshd_{name}.conf"));
    let text = format!(
        "Port {port}\nListenAddress {listen}\nHostKey {}\nPidFile {}\n\
         AuthorizedKeysFile {}\nStrictModes no\nPasswordAuthentication no\n\
         KbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\n\
         LogLevel ERROR\nMaxStartups 50:30:100\n",
        keys.host_key.display(),
        dir.path(&format!("sshd_{name}.pid")).display(),
        keys.authorized.display(),
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

fn user() -> String {
    sh(Command::new("id").arg("-un")).trim().to_string()
}

/// A running sshd (killed on drop).
pub struct Sshd {
    child: Child,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One sshd on 127.0.0.1 and a high port; aliases `h1`..`h4` all point at it;
/// `closed` points at a port nobody listens on.
pub struct LocalSsh {
    pub dir: Scratch,
    pub config: PathBuf,
    pub port: u16,
    _sshd: Sshd,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_banner(addr: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(addr) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut b = [0u8; 4];
            if s.read_exact(&mut b).is_ok() && &b == b"SSH-" {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

impl LocalSsh {
    pub fn start(tag: &str) -> LocalSsh {
        let dir = Scratch::new(tag);
        let keys = Keys::generate(&dir);
        if is_root() {
            let _ = std::fs::create_dir_all("/run/sshd");
        }
        for _attempt in 0..5 {
            let port = free_port();
            let cfg = sshd_config(&dir, &keys, "local", "127.0.0.1", port);
            let log = std::fs::File::create(dir.path("sshd.log")).unwrap();
            let child = Command::new("/usr/sbin/sshd")
                .args(["-D", "-e", "-f"])
                .arg(&cfg)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("run sshd");
            let sshd = Sshd { child };
            if !wait_banner(&format!("127.0.0.1:{port}"), Duration::from_secs(10)) {
                continue;
            }
            let known = dir.path("known_hosts");
            std::fs::write(&known, format!("[127.0.0.1]:{port} {}\n", keys.host_pub)).unwrap();
            let config = dir.path("ssh_config");
            let closed = free_port();
            std::fs::write(
                &config,
                format!(
                    "Host h1 h2 h3 h4\n  HostName 127.0.0.1\n  Port {port}\n\
                     Host closed\n  HostName 127.0.0.1\n  Port {closed}\n\
                     Host noport\n  HostName 127.0.0.1\n\
                     Host *\n  User {}\n  IdentityFile {}\n  IdentitiesOnly yes\n\
                     UserKnownHostsFile {}\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n",
                    user(),
                    keys.user_key.display(),
                    known.display()
                ),
            )
            .unwrap();
            return LocalSsh {
                dir,
                config,
                port,
                _sshd: sshd,
            };
        }
        panic!(
            "sshd did not start; log: {}",
            std::fs::read_to_string(dir.path("sshd.log")).unwrap_or_default()
        );
    }

    /// `-F CONFIG --remote-bin DIR`.
    pub fn base_args(&self) -> Vec<String> {
        vec![
            "-F".into(),
            self.config.to_string_lossy().into_owned(),
            "--remote-bin".into(),
            bin_dir(),
        ]
    }
}

/// What a finished rdpipe run gave.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub cmdline: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn ok(&self) -> &Self {
        assert!(
            self.status.success(),
            "{} failed ({:?}):\n{}",
            self.cmdline,
            self.status,
            self.stderr
        );
        self
    }
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// A started rdpipe (stdin fed from a thread, outputs collected by threads).
pub struct Started {
    pub child: Child,
    pub cmdline: String,
    start: Instant,
    out: std::thread::JoinHandle<Vec<u8>>,
    err: std::thread::JoinHandle<Vec<u8>>,
}

/// Starts `prefix... rdpipe args...` with `input` on stdin (None: /dev/null).
pub fn start(prefix: &[&str], args: &[String], input: Option<Vec<u8>>) -> Started {
    let mut cmd = if prefix.is_empty() {
        Command::new(rdpipe())
    } else {
        let mut c = Command::new(prefix[0]);
        c.args(&prefix[1..]).arg(rdpipe());
        c
    };
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let cmdline = format!("{cmd:?}");
    let mut child = cmd.spawn().expect("run rdpipe");
    if let Some(data) = input {
        let mut sin = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let _ = sin.write_all(&data);
        });
    }
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    Started {
        child,
        cmdline,
        start: Instant::now(),
        out,
        err,
    }
}

impl Started {
    /// Waits at most `limit`, killing rdpipe (and failing the test) past it.
    pub fn finish(mut self, limit: Duration) -> Run {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let err = self.err.join().unwrap_or_default();
                panic!(
                    "{} did not finish within {limit:?}; stderr:\n{}",
                    self.cmdline,
                    String::from_utf8_lossy(&err)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = self.start.elapsed();
        Run {
            status,
            stdout: self.out.join().unwrap_or_default(),
            stderr: String::from_utf8_lossy(&self.err.join().unwrap_or_default()).into_owned(),
            cmdline: self.cmdline,
            elapsed,
        }
    }
}

/// Runs rdpipe to completion within `limit`.
pub fn run(args: &[String], input: Option<Vec<u8>>, limit: Duration) -> Run {
    start(&[], args, input).finish(limit)
}

/// `pgrep -f PATTERN` pids.
pub fn pgrep(pattern: &str) -> Vec<u32> {
    let me = std::process::id();
    Command::new("pgrep")
        .arg("-f")
        .arg(pattern)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .filter(|p| *p != me)
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until no process matches `pattern` (true) or `limit` passes (false).
pub fn wait_gone(pattern: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if pgrep(pattern).is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `ps` lines of the given pids, for failure messages.
pub fn ps(pids: &[u32]) -> String {
    if pids.is_empty() {
        return String::new();
    }
    let list = pids
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    Command::new("ps")
        .args(["-o", "pid,ppid,pgid,args", "-p", &list])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Three "hosts" in network namespaces `PFX1..PFX3`, each with its own sshd on
/// 10.99.0.1N:22, joined by veth pairs to a bridge in a fourth namespace `PFX0`
/// (10.99.0.1), where rdpipe runs (the orchestrating machine). Aliases `n1`..`n3`
/// in the generated ssh config. Removed (namespaces, veths, sshds) on drop.
pub struct Netns {
    pub prefix: String,
    pub dir: Scratch,
    pub config: PathBuf,
    sshds: Vec<Sshd>,
    pub sshd_pids: Vec<u32>,
}

fn ip(args: &[&str]) {
    sh(Command::new("ip").args(args));
}

impl Netns {
    pub fn ns(&self, n: usize) -> String {
        format!("{}{n}", self.prefix)
    }

    pub fn start(tag: &str) -> Netns {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("rdp{}{tag}{n}x", std::process::id() % 100000);
        let dir = Scratch::new(&format!("ns{tag}"));
        let mut me = Netns {
            prefix: prefix.clone(),
            dir,
            config: PathBuf::new(),
            sshds: Vec::new(),
            sshd_pids: Vec::new(),
        };
        let _ = std::fs::create_dir_all("/run/sshd");
        let ns0 = me.ns(0);
        ip(&["netns", "add", &ns0]);
        ip(&["-n", &ns0, "link", "set", "lo", "up"]);
        ip(&["-n", &ns0, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &ns0, "addr", "add", "10.99.0.1/24", "dev", "br0"]);
        ip(&["-n", &ns0, "link", "set", "br0", "up"]);
        for h in 1..=3 {
            let ns = me.ns(h);
            ip(&["netns", "add", &ns]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            // veth pair created inside ns0, one end moved into the host's namespace.
            let a = format!("v{h}a");
            ip(&[
                "-n", &ns0, "link", "add", &a, "type", "veth", "peer", "name", "eth0",
            ]);
            ip(&["-n", &ns0, "link", "set", "eth0", "netns", &ns]);
            ip(&["-n", &ns0, "link", "set", &a, "master", "br0"]);
            ip(&["-n", &ns0, "link", "set", &a, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("10.99.0.1{h}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        }
        let keys = Keys::generate(&me.dir);
        let mut known = String::new();
        let mut cfg = String::new();
        for h in 1..=3 {
            let addr = format!("10.99.0.1{h}");
            let conf = sshd_config(&me.dir, &keys, &format!("n{h}"), &addr, 22);
            let log = std::fs::File::create(me.dir.path(&format!("sshd_n{h}.log"))).unwrap();
            let child = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &me.ns(h),
                    "/usr/sbin/sshd",
                    "-D",
                    "-e",
                    "-f",
                ])
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("run sshd");
            me.sshd_pids.push(child.id());
            me.sshds.push(Sshd { child });
            known.push_str(&format!("{addr} {}\n", keys.host_pub));
            cfg.push_str(&format!("Host n{h}\n  HostName {addr}\n"));
        }
        let known_path = me.dir.path("known_hosts");
        std::fs::write(&known_path, known).unwrap();
        cfg.push_str(&format!(
            "Host *\n  User root\n  IdentityFile {}\n  IdentitiesOnly yes\n\
             UserKnownHostsFile {}\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n",
            keys.user_key.display(),
            known_path.display()
        ));
        me.config = me.dir.path("ssh_config");
        std::fs::write(&me.config, cfg).unwrap();
        // Ready when each sshd listens in its namespace.
        for h in 1..=3 {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let o = Command::new("ip")
                    .args(["netns", "exec", &me.ns(h), "ss", "-Hltn", "sport = :22"])
                    .output()
                    .unwrap();
                if !String::from_utf8_lossy(&o.stdout).trim().is_empty() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "sshd in {} did not start",
                    me.ns(h)
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        me
    }

    /// `ip netns exec NS0` as a prefix for rdpipe.
    pub fn exec_prefix(&self) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.ns(0)]
    }

    /// `-F CONFIG --remote-bin DIR`.
    pub fn base_args(&self) -> Vec<String> {
        vec![
            "-F".into(),
            self.config.to_string_lossy().into_owned(),
            "--remote-bin".into(),
            bin_dir(),
        ]
    }

    /// Pids in namespace `n` other than its sshd listener.
    pub fn stray_pids(&self, n: usize) -> Vec<u32> {
        let o = Command::new("ip")
            .args(["netns", "pids", &self.ns(n)])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|p| !self.sshd_pids.contains(p))
            .collect()
    }

    /// Waits until every namespace holds nothing but its sshd; returns the
    /// leftovers (empty when clean).
    pub fn wait_clean(&self, limit: Duration) -> Vec<(usize, Vec<u32>)> {
        let deadline = Instant::now() + limit;
        loop {
            let left: Vec<(usize, Vec<u32>)> = (0..=3)
                .map(|n| (n, self.stray_pids(n)))
                .filter(|(_, v)| !v.is_empty())
                .collect();
            if left.is_empty() || Instant::now() > deadline {
                return left;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in 0..=3 {
            for p in self.stray_pids(n) {
                let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
            }
        }
        self.sshds.clear();
        for n in 0..=3 {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A seeded xorshift generator for picking random fault points. The seed comes
/// from `RDPIPE_FAULT_SEED` when set (to replay a failure), else from the clock,
/// and is printed either way.
pub struct Rng(u64);

impl Rng {
    pub fn seeded(test: &str) -> Rng {
        let seed = std::env::var("RDPIPE_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("{test}: seed {seed} (replay with RDPIPE_FAULT_SEED={seed})");
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A duration in `[lo, hi)` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo).max(1))
    }
}

/// Waits until a process matches `pattern`; returns its pids.
pub fn wait_for(pattern: &str, limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let p = pgrep(pattern);
        if !p.is_empty() {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "no process matching {pattern:?} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` (e.g. "-9") to `pid`.
pub fn kill(sig: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// VmRSS of a process in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Listening TCP ports in namespace `ns` other than sshd's :22.
pub fn netns_listeners(ns: &str) -> Vec<String> {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Hltn"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.contains(":22 "))
        .map(|l| l.to_string())
        .collect()
}

/// The `comm` of a process.
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}
