//! The launchers of a run: one for its local segments and the one
//! `--launcher` names for every remote host. This is the one place that
//! looks at `--launcher`; everything else holds a [`Launcher`].

use super::Config;
use super::LocalExe;
use rdpipe_launch::ssh::SshConfig;
use rdpipe_launch::{Launcher, LocalLauncher, RemoteLauncher, SrunLauncher, SshLauncher};
use rdpipe_plan::Host;
use std::sync::Arc;
use std::time::Duration;

/// The launchers of a run.
#[derive(Clone)]
pub struct Launchers {
    local: Arc<dyn Launcher>,
    remote: Arc<dyn Launcher>,
}

impl Launchers {
    /// Those `a` asks for (nothing starts yet).
    pub fn for_run(a: &Config, exe: &LocalExe) -> Launchers {
        let remote: Arc<dyn Launcher> = match a.launcher {
            RemoteLauncher::Ssh => Arc::new(SshLauncher::new(
                ssh_config(a),
                a.max_sessions,
                a.persist,
                exe.exe.clone(),
            )),
            RemoteLauncher::Srun => Arc::new(SrunLauncher::new(
                a.jobid.clone(),
                Duration::from_secs(a.connect_timeout.max(30)),
                a.persist.is_some(),
            )),
        };
        Launchers {
            local: Arc::new(LocalLauncher {
                exe: exe.exe.clone(),
            }),
            remote,
        }
    }

    /// The launcher that starts a segment on `host`.
    pub fn of(&self, host: &Host) -> &Arc<dyn Launcher> {
        match host {
            Host::Local => &self.local,
            Host::Remote(_) => &self.remote,
        }
    }

    /// The launcher of every remote host.
    pub fn remote(&self) -> &Arc<dyn Launcher> {
        &self.remote
    }
}

/// How this run calls ssh.
pub fn ssh_config(a: &Config) -> SshConfig {
    SshConfig {
        config_file: a.ssh_config.clone(),
        options: a.ssh_options.clone(),
        connect_timeout: a.connect_timeout.min(60),
        outage: a.reconnect_timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdpipe_plan::{plan, RemoteHost};

    fn config(launcher: RemoteLauncher) -> Config {
        let mut a = Config::for_tests(vec!["h1:tr a-z A-Z".into(), "h2:rev".into()]);
        a.launcher = launcher;
        a
    }

    fn dry_run(a: &Config, segments: &[&str]) -> String {
        let exe = LocalExe {
            exe: "/usr/bin/rdpipe".into(),
        };
        let l = Launchers::for_run(a, &exe);
        let segs: Vec<String> = segments.iter().map(|s| s.to_string()).collect();
        let p = plan(&segs, true, &|r: &RemoteHost| r.name.clone()).unwrap();
        p.describe(&|h| l.of(h).describe_host(h)) + &l.remote().describe_hosts(&p.remote_hosts())
    }

    #[test]
    fn the_plan_names_the_ssh_launcher_and_its_connections() {
        let t = dry_run(
            &config(RemoteLauncher::Ssh),
            &["h1:tr a-z A-Z", "-:cat", "b:"],
        );
        assert!(t.contains("(ssh h1)"), "{t}");
        assert!(t.contains("(local, no ssh)"), "{t}");
        assert!(
            t.contains("[3] b                relay only: forwards the stream unchanged, no command  (ssh b)"),
            "{t}"
        );
        assert!(
            t.contains("ssh connections:\n  h1: 1 segment(s) over 1 connection(s)"),
            "{t}"
        );
        let many: Vec<&str> = (0..12).map(|_| "h:cat").collect();
        let t = dry_run(&config(RemoteLauncher::Ssh), &many);
        assert!(t.contains("h: 12 segment(s) over 2 connection(s)"), "{t}");
    }

    #[test]
    fn the_plan_names_srun_steps_with_launcher_srun() {
        let t = dry_run(&config(RemoteLauncher::Srun), &["n1:cat", "n2:rev"]);
        assert!(t.contains("(srun n1)"), "{t}");
        assert!(!t.contains("ssh"), "{t}");
        assert!(
            t.contains("srun steps:\n  n1: 1 segment(s), one job step each"),
            "{t}"
        );
    }
}
