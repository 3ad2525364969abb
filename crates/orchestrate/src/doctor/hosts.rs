//! Gathering each host's findings for `rdpipe doctor`: this machine's probe
//! in-process; every remote host in parallel through an ssh launcher of its
//! own ([`rdpipe_launch::SshLauncher`]), running `rdrecv --doctor-probe` there (and
//! `rdrecv --version` when that fails), plus the host's data address (as a
//! pipeline would choose it) and what it resolves to.

use super::{DoctorConfig, HostReport};
use rdpipe_agent::inventory::{self, HostProbe};
use rdpipe_launch::command_line::remote_command_line;
use rdpipe_launch::install::{prepare_host, AgentBinary};
use rdpipe_launch::ssh::SshConfig;
use rdpipe_launch::{Launcher, SshLauncher};
use rdpipe_plan::{parse_data_host, parse_segment, Host, PlanError, RemoteHost};
use std::collections::HashMap;
use std::net::ToSocketAddrs;
use std::path::Path;
use std::sync::Arc;

/// A host to check: as written, and parsed.
#[derive(Debug, Clone)]
pub struct Target {
    /// As written (`h1`, `user@h1`, `[h1:2222]`, `-`).
    pub arg: String,
    /// Parsed.
    pub host: Host,
}

/// Parses the HOST arguments with the rules of a segment's host part.
pub fn parse(args: &[String]) -> Result<Vec<Target>, PlanError> {
    if args.is_empty() {
        return Err(PlanError::Empty);
    }
    args.iter()
        .map(|a| {
            Ok(Target {
                arg: a.clone(),
                host: parse_segment(&format!("{a}:true"))?.host,
            })
        })
        .collect()
}

fn ssh_config(cfg: &DoctorConfig) -> SshConfig {
    SshConfig {
        config_file: cfg.ssh_config.clone(),
        options: cfg.ssh_options.clone(),
        connect_timeout: cfg.connect_timeout.min(60),
        outage: 0,
    }
}

/// The data address of `r` and where it comes from, as a pipeline chooses it.
fn data_address(
    r: &RemoteHost,
    overrides: &HashMap<String, String>,
    ssh: &SshConfig,
) -> (String, &'static str) {
    if let Some(a) = overrides.get(&r.spec).or_else(|| overrides.get(&r.name)) {
        return (a.clone(), "--data-host");
    }
    let h = ssh.hostname(r);
    let from = if h == r.name { "name" } else { "ssh HostName" };
    (h, from)
}

fn resolve(addr: &str) -> Vec<String> {
    let mut v: Vec<String> = (addr, 0u16)
        .to_socket_addrs()
        .map(|it| it.map(|s| s.ip().to_string()).collect())
        .unwrap_or_default();
    v.sort();
    v.dedup();
    v
}

/// What probing one remote host gave.
struct Probed {
    ssh_error: Option<String>,
    missing: bool,
    probe: Option<HostProbe>,
    probe_error: Option<String>,
    other_version: Option<String>,
    agent: Option<String>,
    install_error: Option<String>,
}

/// Runs `line` on `host` through its launcher: (exit status, stdout,
/// stderr); status 127 when the program was not found.
async fn remote(
    l: &dyn Launcher,
    host: &RemoteHost,
    line: String,
) -> Result<(i32, String, String), String> {
    match l.shell(0, host, line, None).await {
        Ok(o) => Ok((o.code.unwrap_or(-1), o.stdout, o.stderr)),
        Err(e) => Err(e.cause.to_string()),
    }
}

fn last_line(s: &str) -> Option<String> {
    s.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(str::to_string)
}

async fn probe_remote(
    ssh: SshConfig,
    host: RemoteHost,
    exe: std::path::PathBuf,
    bin: String,
    probe_args: Vec<String>,
    install: Option<Arc<AgentBinary>>,
) -> Probed {
    let mut p = Probed {
        ssh_error: None,
        missing: false,
        probe: None,
        probe_error: None,
        other_version: None,
        agent: None,
        install_error: None,
    };
    let limit = std::time::Duration::from_secs(ssh.connect_timeout.max(30));
    let l: Arc<dyn Launcher> = Arc::new(SshLauncher::new(ssh, 1, None, exe));
    let hosts = [(host.clone(), vec![0])];
    if let Err(e) = l.prepare(&hosts).await {
        p.ssh_error = e.first().map(|e| e.cause.to_string());
        l.close().await;
        return p;
    }
    let mut bin = bin;
    if let Some(agent) = install {
        // As a pipeline would: rdrecv in PATH if it speaks our protocol, else
        // the cached or a freshly installed copy.
        match prepare_host(l.clone(), 0, host.clone(), agent, limit).await {
            Ok(None) => p.agent = Some("rdrecv in PATH".into()),
            Ok(Some(path)) => {
                p.agent = Some(format!("{path} (self-installed)"));
                bin = path;
            }
            Err(e) => {
                p.install_error = Some(e.to_string());
                l.close().await;
                return p;
            }
        }
    }
    match remote(&*l, &host, remote_command_line(&bin, &probe_args, &[])).await {
        Err(e) => p.probe_error = Some(e),
        Ok((127, _, _)) => p.missing = true,
        Ok((0, out, err)) => {
            // Login scripts may print before it: the report is the last line.
            match last_line(&out).map(|l| serde_json::from_str::<HostProbe>(&l)) {
                Some(Ok(probe)) => p.probe = Some(probe),
                Some(Err(e)) => p.probe_error = Some(format!("unreadable report: {e}")),
                None => {
                    p.probe_error =
                        Some(last_line(&err).unwrap_or_else(|| "no report on stdout".into()))
                }
            }
        }
        Ok((code, _, err)) => {
            p.probe_error = Some(match last_line(&err) {
                Some(l) => format!("exit status {code}: {l}"),
                None => format!("exit status {code}"),
            })
        }
    }
    if p.probe.is_none() && !p.missing {
        let version = remote(
            &*l,
            &host,
            remote_command_line(&bin, &["--version".into()], &[]),
        )
        .await;
        if let Ok((0, out, _)) = version {
            p.other_version = last_line(&out);
        }
    }
    l.close().await;
    p
}

/// Every host's findings, in the order given.
pub fn gather(cfg: &DoctorConfig, targets: &[Target], exe: &Path) -> Vec<HostReport> {
    let ssh = ssh_config(cfg);
    let overrides: HashMap<String, String> = cfg
        .data_host
        .iter()
        .filter_map(|d| parse_data_host(d).ok())
        .collect();
    let bin = match &cfg.remote_bin {
        Some(d) => format!("{}/rdrecv", d.trim_end_matches('/')),
        None => "rdrecv".to_string(),
    };
    let probe_args: Vec<String> = vec![
        "--doctor-probe".into(),
        "--chunk-size".into(),
        cfg.chunk_size.to_string(),
        "--slots".into(),
        cfg.slots.to_string(),
    ];
    let mut reports: Vec<HostReport> = targets
        .iter()
        .map(|t| HostReport::new(&t.arg, t.host.is_local()))
        .collect();
    for (t, r) in targets.iter().zip(&mut reports) {
        match &t.host {
            Host::Local => r.probe = Some(inventory::collect(cfg.chunk_size, cfg.slots)),
            Host::Remote(h) => {
                let (addr, from) = data_address(h, &overrides, &ssh);
                r.data_ips = resolve(&addr);
                r.data_address = Some(addr);
                r.data_address_from = Some(from);
                r.rdrecv = Some(remote_command_line(&bin, &probe_args, &[]));
            }
        }
    }
    let remote: Vec<(usize, RemoteHost)> = targets
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match &t.host {
            Host::Remote(h) => Some((i, h.clone())),
            Host::Local => None,
        })
        .collect();
    if remote.is_empty() {
        return reports;
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            for (i, _) in &remote {
                reports[*i].ssh_error = Some(format!("cannot start the runtime: {e}"));
            }
            return reports;
        }
    };
    // Self-install as a pipeline would (not with --no-install or --remote-bin).
    let mut agent = None;
    if cfg.install && cfg.remote_bin.is_none() {
        match AgentBinary::read(exe) {
            Ok(b) => agent = Some(Arc::new(b)),
            Err(e) => {
                for (i, _) in &remote {
                    reports[*i].install_error = Some(format!(
                        "cannot read this rdpipe ({}) to install it: {e}",
                        exe.display()
                    ));
                }
                return reports;
            }
        }
    }
    let probed: Vec<(usize, Probed)> = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for (i, h) in &remote {
            let job = probe_remote(
                ssh.clone(),
                h.clone(),
                exe.to_path_buf(),
                bin.clone(),
                probe_args.clone(),
                agent.clone(),
            );
            let i = *i;
            set.spawn(async move { (i, job.await) });
        }
        let mut v = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(x) = r {
                v.push(x);
            }
        }
        v
    });
    for (i, p) in probed {
        let r = &mut reports[i];
        r.ssh_error = p.ssh_error;
        r.rdrecv_missing = p.missing;
        r.probe = p.probe;
        r.probe_error = p.probe_error;
        r.other_version = p.other_version;
        r.agent = p.agent;
        r.install_error = p.install_error;
    }
    reports
}
