//! From arguments to a plan: segments parsed (or rdcp's prepared ones), the
//! data address of each remote host resolved (`--data-host`, else what the
//! run's launcher says: `ssh -G`'s HostName, Slurm's NodeAddr), each host
//! once, all at once.

use super::Config;
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
    let mut overrides = HashMap::new();
    for d in &a.data_host {
        let (h, addr) = parse_data_host(d)?;
        overrides.insert(h, addr);
    }
    let given = |r: &RemoteHost| overrides.get(&r.spec).or_else(|| overrides.get(&r.name));
    // Planning is pure: a first pass finds the hosts whose address the
    // launcher must say, then they are asked all at once (for ssh each is a
    // process, `ssh -G`: one after another they add up with many hosts).
    let wanted: RefCell<Vec<RemoteHost>> = RefCell::new(Vec::new());
    plan_with(a, stdin_is_input, &|r: &RemoteHost| {
        if given(r).is_none() && !wanted.borrow().contains(r) {
            wanted.borrow_mut().push(r.clone());
        }
        r.name.clone()
    })?;
    let wanted = wanted.into_inner();
    let mut resolved = HashMap::new();
    for wave in wanted.chunks(MAX_PARALLEL_STARTS) {
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
    plan_with(a, stdin_is_input, &|r: &RemoteHost| match given(r) {
        Some(a) => a.clone(),
        None => resolved
            .get(r)
            .cloned()
            .unwrap_or_else(|| launcher.data_address(r)),
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
