//! Three (or up to nine) "hosts" in network namespaces (root only), each with its own sshd,
//! joined by veth pairs to a bridge in a fourth namespace where rdpipe runs.
//! Namespaces, links and servers are removed by Drop, also when a test fails.

use super::procs::{kill, poll, ps, wait_until};
use super::rdpipe::base_args;
use super::rdpipe::{start, Run, Started};
use super::scratch::Scratch;
use super::ssh::{sh, sshd_config, Keys, Sshd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Three (or N, [`Netns::start_with`]) "hosts" in network namespaces `PFX1..`, each with its own sshd on
/// 10.99.0.1N:22, joined by veth pairs to a bridge in a fourth namespace `PFX0`
/// (10.99.0.1), where rdpipe runs (the orchestrating machine). Aliases `n1`..`n3`
/// in the generated ssh config. Removed (namespaces, veths, sshds) on drop.
pub struct Netns {
    pub prefix: String,
    pub dir: Scratch,
    pub config: PathBuf,
    /// How many hosts (`n1`..`nN`).
    pub hosts: usize,
    sshds: Vec<Sshd>,
    pub sshd_pids: Vec<u32>,
}

/// `ip ARGS...`, which must succeed.
fn ip(args: &[&str]) {
    sh(Command::new("ip").args(args));
}

impl Netns {
    /// The name of namespace `n` (0: rdpipe's, 1..=hosts: the hosts').
    pub fn ns(&self, n: usize) -> String {
        format!("{}{n}", self.prefix)
    }

    /// Builds the namespaces, links, keys, configuration and sshds (three hosts).
    pub fn start(tag: &str) -> Netns {
        Netns::start_with(tag, 3)
    }

    /// [`Netns::start`] with `hosts` hosts `n1`..`nN` (at most 16: host N's
    /// address is 10.99.0.1N, 10.99.0.110 to .116 past 9).
    pub fn start_with(tag: &str, hosts: usize) -> Netns {
        assert!((1..=16).contains(&hosts));
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("rdp{}{tag}{n}x", std::process::id() % 100000);
        let dir = Scratch::new(&format!("ns{tag}"));
        let mut me = Netns {
            prefix: prefix.clone(),
            dir,
            config: PathBuf::new(),
            hosts,
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
        for h in 1..=hosts {
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
        for h in 1..=hosts {
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
        for h in 1..=hosts {
            let ns = me.ns(h);
            wait_until(
                format!("sshd listening in {ns}"),
                Duration::from_secs(10),
                || {
                    let o = Command::new("ip")
                        .args(["netns", "exec", &ns, "ss", "-Hltn", "sport = :22"])
                        .output()
                        .unwrap();
                    (!String::from_utf8_lossy(&o.stdout).trim().is_empty()).then_some(())
                },
            );
        }
        me
    }

    /// `ip netns exec NS0` as a prefix for rdpipe.
    pub fn exec_prefix(&self) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.ns(0)]
    }

    /// `-F CONFIG --remote-bin DIR`.
    pub fn base_args(&self) -> Vec<String> {
        base_args(&self.config)
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

    /// rdpipe started on host 0 with this network's ssh options and `extra`.
    pub fn start_rdpipe<S: AsRef<str>>(&self, extra: &[S], input: Option<Vec<u8>>) -> Started {
        let p = self.exec_prefix();
        let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
        let mut a = self.base_args();
        a.extend(extra.iter().map(|s| s.as_ref().to_string()));
        start(&p, &a, input)
    }

    /// The same, finished (killed past `limit` seconds).
    pub fn rdpipe<S: AsRef<str>>(&self, extra: &[S], input: Option<Vec<u8>>, limit: u64) -> Run {
        self.start_rdpipe(extra, input)
            .finish(Duration::from_secs(limit))
    }

    /// No process of any pipeline left on any host (within 8 s).
    pub fn assert_clean(&self) {
        let left = self.wait_clean(Duration::from_secs(8));
        let pids: Vec<u32> = left.iter().flat_map(|(_, v)| v.clone()).collect();
        assert!(
            left.is_empty(),
            "processes left over: {left:?}\n{}",
            ps(&pids)
        );
    }

    /// Waits until every namespace holds nothing but its sshd; returns the
    /// leftovers (empty when clean).
    pub fn wait_clean(&self, limit: Duration) -> Vec<(usize, Vec<u32>)> {
        let left = || -> Vec<(usize, Vec<u32>)> {
            (0..=self.hosts)
                .map(|n| (n, self.stray_pids(n)))
                .filter(|(_, v)| !v.is_empty())
                .collect()
        };
        match poll(limit, Duration::from_millis(100), || {
            left().is_empty().then_some(())
        }) {
            Some(()) => Vec::new(),
            None => left(),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in 0..=self.hosts {
            for p in self.stray_pids(n) {
                kill("-9", p);
            }
        }
        self.sshds.clear();
        for n in 0..=self.hosts {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .stderr(Stdio::null())
                .status();
        }
    }
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

/// Resets (`ss -K`, as a middlebox that drops them would) the established
/// TCP connections of process `pid` in namespace `ns`, those on the
/// loopback too only `with_loopback`; how many it found.
pub fn reset_connections_of(ns: &str, pid: u32, with_loopback: bool) -> usize {
    let ss = |args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", ns, "ss"])
            .args(args)
            .output()
            .expect("run ss")
    };
    let out = ss(&["-tnpH", "state", "established"]);
    let mut n = 0;
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if !l.contains(&format!("pid={pid},")) || (!with_loopback && l.contains("127.0.0.1:")) {
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let Some((_, port)) = f.get(2).and_then(|a| a.rsplit_once(':')) else {
            continue;
        };
        let filter = format!("( sport = :{port} or dport = :{port} )");
        let k = ss(&["-K", "-tnH", "state", "established", &filter]);
        n += String::from_utf8_lossy(&k.stdout).lines().count();
    }
    n
}
