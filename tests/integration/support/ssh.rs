//! Real sshd servers for rdpipe: generated host and user keys, an sshd on
//! 127.0.0.1 and a high port (no privileges needed) with a generated ssh
//! configuration of host aliases, all torn down by Drop guards.

use super::procs::poll;
use super::rdpipe::base_args;
use super::scratch::Scratch;
use super::skip::is_root;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Whether sshd and ssh are installed.
pub fn have_ssh() -> bool {
    Path::new("/usr/sbin/sshd").exists()
        && Command::new("ssh")
            .arg("-V")
            .stderr(Stdio::null())
            .status()
            .is_ok()
}

/// The user name this test runs as.
pub fn user() -> String {
    sh(Command::new("id").arg("-un")).trim().to_string()
}

/// Runs `cmd`, failing the test unless it succeeds; its stdout.
pub fn sh(cmd: &mut Command) -> String {
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

/// Host key, user key, authorized_keys.
pub struct Keys {
    pub host_key: PathBuf,
    pub host_pub: String,
    pub user_key: PathBuf,
    pub authorized: PathBuf,
}

impl Keys {
    /// Fresh ed25519 keys in `dir`.
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

/// An sshd configuration `sshd_NAME.conf` listening on `listen:port`.
///
/// Its sessions get HOME `home_NAME` in the scratch directory (the line
/// starting `SetEnv HOME=`): the login shell then reads no rc file of the
/// account running the tests. Those files are not the tests' to depend on, and
/// one of them can stall every login: a pyenv in root's .bashrc takes a lock
/// file in each shell, and a session ended by a test (SIGKILL, a closed
/// connection) mid-rehash leaves it behind, so every later login waits 60 s.
pub fn sshd_config(dir: &Scratch, keys: &Keys, name: &str, listen: &str, port: u16) -> PathBuf {
    let cfg = dir.path(&format!("sshd_{name}.conf"));
    let home = dir.path(&format!("home_{name}"));
    std::fs::create_dir_all(&home).unwrap();
    let text = format!(
        "Port {port}\nListenAddress {listen}\nHostKey {}\nPidFile {}\n\
         AuthorizedKeysFile {}\nStrictModes no\nPasswordAuthentication no\n\
         KbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\n\
         LogLevel ERROR\nMaxStartups 50:30:100\nSetEnv HOME={}\n",
        keys.host_key.display(),
        dir.path(&format!("sshd_{name}.pid")).display(),
        keys.authorized.display(),
        home.display(),
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// A running sshd (killed on drop).
pub struct Sshd {
    pub child: Child,
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

/// Waits until `addr` greets with an SSH banner (the server's readiness).
fn wait_banner(addr: &str, limit: Duration) -> bool {
    poll(limit, Duration::from_millis(20), || {
        let mut s = TcpStream::connect(addr).ok()?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut b = [0u8; 4];
        (s.read_exact(&mut b).is_ok() && &b == b"SSH-").then_some(())
    })
    .is_some()
}

impl LocalSsh {
    /// Generates keys and a configuration in a fresh scratch directory and
    /// starts the sshd (a few ports are tried).
    pub fn start(tag: &str) -> LocalSsh {
        Self::start_with(tag, "")
    }

    /// As [`LocalSsh::start`], with `extra` lines added to sshd's
    /// configuration.
    pub fn start_with(tag: &str, extra: &str) -> LocalSsh {
        let dir = Scratch::new(tag);
        let keys = Keys::generate(&dir);
        if is_root() {
            let _ = std::fs::create_dir_all("/run/sshd");
        }
        for _attempt in 0..5 {
            let port = free_port();
            let cfg = sshd_config(&dir, &keys, "local", "127.0.0.1", port);
            if !extra.is_empty() {
                let mut text = std::fs::read_to_string(&cfg).unwrap();
                text.push_str(extra);
                std::fs::write(&cfg, text).unwrap();
            }
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
        base_args(&self.config)
    }
}
