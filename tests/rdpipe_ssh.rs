//! rdpipe against a real sshd on 127.0.0.1 (no privileges needed): host aliases
//! h1..h4 in a generated ssh config all reach the same sshd.

mod support;

use std::time::Duration;
use support::*;

fn args(ssh: &LocalSsh, extra: &[&str]) -> Vec<String> {
    let mut v = ssh.base_args();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

macro_rules! need_ssh {
    ($name:expr) => {
        if !have_ssh() {
            skip($name, "needs openssh-server and openssh-client installed");
            return;
        }
    };
}

#[test]
fn ssh_hello_olleh() {
    need_ssh!("ssh_hello_olleh");
    let ssh = LocalSsh::start("hello");
    let r = run(
        &args(&ssh, &["h1:tr [:lower:] [:upper:]", "h2:rev"]),
        Some(b"hello\n".to_vec()),
        Duration::from_secs(60),
    );
    r.ok();
    assert_eq!(r.stdout_str(), "OLLEH\n", "{}", r.stderr);
}
