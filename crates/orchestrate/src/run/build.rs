//! From arguments to a plan: segments parsed (or rdcp's prepared ones), the
//! data address of each remote host resolved (`--data-host`, else what the
//! run's launcher says: `ssh -G`'s HostName, Slurm's NodeAddr), each host
//! once, all at once, while the run starts its hosts' connections.

use super::verdict::Cause;
use super::{Config, Runner};
use rdpipe_launch::{Launcher, MAX_PARALLEL_STARTS};
use rdpipe_plan::{parse_data_host, plan_fanout, Pipeline, PlanError, RemoteHost};
use std::cell::RefCell;
use std::collections::HashMap;

/// Builds the plan from the arguments, resolving data addresses (`--data-host`,
/// else the remote hosts' `launcher`'s).
pub fn build_plan(
    a: &Config,
    launcher: &dyn Launcher,
    stdin_is_input: bool,
) -> Result<Pipeline, PlanError> {
    let (_, wanted) = plan_names(a, stdin_is_input)?;
    plan_resolved(a, stdin_is_input, &resolve_all(launcher, &wanted))
}

/// The `--data-host` overrides.
fn overrides(a: &Config) -> Result<HashMap<String, String>, PlanError> {
    let mut o = HashMap::new();
    for d in &a.data_host {
        let (h, addr) = parse_data_host(d)?;
        o.insert(h, addr);
    }
    Ok(o)
}

/// The plan with each remote host's name standing for its data address
/// where `--data-host` gives none (planning is pure: only the addresses
/// differ from the real plan's), and those hosts: their launcher is to say
/// their addresses ([`resolve_all`]). A run starts its hosts' connections
/// meanwhile, and plans again ([`plan_resolved`]) before any agent starts.
pub fn plan_names(
    a: &Config,
    stdin_is_input: bool,
) -> Result<(Pipeline, Vec<RemoteHost>), PlanError> {
    let o = overrides(a)?;
    let wanted: RefCell<Vec<RemoteHost>> = RefCell::new(Vec::new());
    let p = plan_with(a, stdin_is_input, &|r: &RemoteHost| {
        if let Some(addr) = o.get(&r.spec).or_else(|| o.get(&r.name)) {
            return addr.clone();
        }
        if !wanted.borrow().contains(r) {
            wanted.borrow_mut().push(r.clone());
        }
        r.name.clone()
    })?;
    Ok((p, wanted.into_inner()))
}

/// The data addresses of `hosts` as `launcher` says them, asked all at once
/// (for ssh each is a process, `ssh -G`: one after another they add up with
/// many hosts).
pub fn resolve_all(launcher: &dyn Launcher, hosts: &[RemoteHost]) -> HashMap<RemoteHost, String> {
    let mut resolved = HashMap::new();
    for wave in hosts.chunks(MAX_PARALLEL_STARTS) {
        std::thread::scope(|s| {
            let asks: Vec<_> = wave
                .iter()
                .map(|r| s.spawn(move || (r.clone(), launcher.data_address(r))))
                .collect();
            for ask in asks {
                if let Ok((r, h)) = ask.join() {
                    resolved.insert(r, h);
                }
            }
        });
    }
    resolved
}

/// The plan with the data addresses `--data-host` gives, else those in
/// `resolved` (else the host's name).
pub fn plan_resolved(
    a: &Config,
    stdin_is_input: bool,
    resolved: &HashMap<RemoteHost, String>,
) -> Result<Pipeline, PlanError> {
    let o = overrides(a)?;
    plan_with(a, stdin_is_input, &|r: &RemoteHost| {
        o.get(&r.spec)
            .or_else(|| o.get(&r.name))
            .or_else(|| resolved.get(r))
            .cloned()
            .unwrap_or_else(|| r.name.clone())
    })
}

/// The plan of the arguments, with `resolve` saying each remote host's data
/// address.
fn plan_with(
    a: &Config,
    stdin_is_input: bool,
    resolve: &dyn Fn(&RemoteHost) -> String,
) -> Result<Pipeline, PlanError> {
    match &a.prepared {
        Some(segs) => {
            use rdpipe_plan::Action;
            // A chain that starts with no reader takes rdpipe's stdin; one that
            // ends with no writer gives its stdout (rdcp's `-`).
            let reads = |s: &rdpipe_plan::Segment| {
                matches!(
                    s.action,
                    Action::ReadFile(_) | Action::Pack { .. } | Action::List { .. }
                )
            };
            let writes = |s: &rdpipe_plan::Segment| {
                matches!(
                    s.action,
                    Action::WriteFile { .. } | Action::SaveListing { .. } | Action::Unpack { .. }
                )
            };
            let stdin = !segs.first().is_some_and(reads);
            let stdout = !segs.last().is_some_and(writes);
            Ok(rdpipe_plan::plan_chain(
                segs.clone(),
                stdin,
                stdout,
                resolve,
            ))
        }
        None if a.forward.is_some() => {
            rdpipe_plan::plan_forward(a.forward.as_ref().expect("a forward"), resolve)
        }
        None if !a.sources.is_empty() => {
            if !a.sinks.is_empty() {
                return Err(PlanError::FromAndTo);
            }
            rdpipe_plan::plan_gather(&a.sources, &a.segments, a.gather, resolve)
        }
        None => plan_fanout(&a.segments, &a.sinks, stdin_is_input, resolve),
    }
}

/// The data addresses being asked (on a blocking thread), while the plan
/// still lacks them.
pub(super) type AddressAsk = Option<tokio::task::JoinHandle<HashMap<RemoteHost, String>>>;

impl Runner {
    /// Starts asking the data addresses the plan lacks.
    pub(super) fn ask_addresses(&self) -> AddressAsk {
        let (_, wanted) = self.addresses.as_ref()?;
        if wanted.is_empty() {
            return None;
        }
        let launcher = self.launchers.remote().clone();
        let wanted = wanted.clone();
        Some(tokio::task::spawn_blocking(move || {
            resolve_all(&*launcher, &wanted)
        }))
    }

    /// Plans again with the addresses `ask` got (the same plan, with
    /// addresses); false when that fails (reported).
    pub(super) async fn plan_addresses(&mut self, ask: AddressAsk) -> bool {
        let (Some((stdin_is_input, _)), Some(ask)) = (self.addresses.take(), ask) else {
            return true;
        };
        let resolved = match ask.await {
            Ok(r) => r,
            Err(e) => {
                self.fail(None, Cause::Local(format!("address task failed: {e}")));
                return false;
            }
        };
        match plan_resolved(&self.config, stdin_is_input, &resolved) {
            Ok(p) => {
                self.plan = p;
                self.disc = super::discover::Discovery::new(
                    &self.plan,
                    &self.config.data_host,
                    self.config.transport,
                    self.launchers.remote().address_origin(),
                );
                true
            }
            Err(e) => {
                self.fail(None, Cause::Local(e.to_string()));
                false
            }
        }
    }
}
