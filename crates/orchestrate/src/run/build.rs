//! From arguments to a plan: segments parsed (or rdcp's prepared ones), the
//! data address of each remote host resolved (`--data-host`, else `ssh -G`'s
//! HostName, or Slurm's NodeAddr with `--launcher srun`), each host once.

use super::Config;
use crate::plan::{parse_data_host, plan_fanout, Pipeline, PlanError, RemoteHost};
use crate::ssh::SshConfig;
use std::cell::RefCell;
use std::collections::HashMap;

/// Builds the plan from the arguments, resolving data addresses (`--data-host`,
/// else `ssh -G`'s HostName, or Slurm's NodeAddr with `--launcher srun`).
pub fn build_plan(a: &Config, stdin_is_input: bool) -> Result<Pipeline, PlanError> {
    let mut overrides = HashMap::new();
    for d in &a.data_host {
        let (h, addr) = parse_data_host(d)?;
        overrides.insert(h, addr);
    }
    let ssh = ssh_config(a);
    let cache: RefCell<HashMap<RemoteHost, String>> = RefCell::new(HashMap::new());
    let resolve = |r: &RemoteHost| -> String {
        if let Some(a) = overrides.get(&r.spec).or_else(|| overrides.get(&r.name)) {
            return a.clone();
        }
        if let Some(a) = cache.borrow().get(r) {
            return a.clone();
        }
        let h = match a.launcher {
            crate::srun::Launcher::Ssh => ssh.hostname(r),
            crate::srun::Launcher::Srun => crate::srun::Srun::node_addr(&r.name),
        };
        cache.borrow_mut().insert(r.clone(), h.clone());
        h
    };
    match &a.prepared {
        Some(segs) => {
            use crate::plan::Action;
            // A chain that starts with no reader takes rdpipe's stdin; one that
            // ends with no writer gives its stdout (rdcp's `-`).
            let reads = |s: &crate::plan::Segment| {
                matches!(
                    s.action,
                    Action::ReadFile(_) | Action::Pack { .. } | Action::List { .. }
                )
            };
            let writes = |s: &crate::plan::Segment| {
                matches!(
                    s.action,
                    Action::WriteFile { .. } | Action::SaveListing { .. } | Action::Unpack { .. }
                )
            };
            let stdin = !segs.first().is_some_and(reads);
            let stdout = !segs.last().is_some_and(writes);
            Ok(crate::plan::plan_chain(
                segs.clone(),
                stdin,
                stdout,
                &resolve,
            ))
        }
        None => plan_fanout(&a.segments, &a.sinks, stdin_is_input, &resolve),
    }
}

pub(super) fn ssh_config(a: &Config) -> SshConfig {
    SshConfig {
        config_file: a.ssh_config.clone(),
        options: a.ssh_options.clone(),
        connect_timeout: a.connect_timeout.min(60),
        outage: a.reconnect_timeout,
    }
}
