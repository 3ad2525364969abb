//! From arguments to a plan: segments parsed (or rdcp's prepared ones), the
//! data address of each remote host resolved (`--data-host`, else what the
//! run's launcher says: `ssh -G`'s HostName, Slurm's NodeAddr), each host
//! once.

use super::Config;
use rdpipe_launch::Launcher;
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
    let cache: RefCell<HashMap<RemoteHost, String>> = RefCell::new(HashMap::new());
    let resolve = |r: &RemoteHost| -> String {
        if let Some(a) = overrides.get(&r.spec).or_else(|| overrides.get(&r.name)) {
            return a.clone();
        }
        if let Some(a) = cache.borrow().get(r) {
            return a.clone();
        }
        let h = launcher.data_address(r);
        cache.borrow_mut().insert(r.clone(), h.clone());
        h
    };
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
                &resolve,
            ))
        }
        None if a.forward.is_some() => {
            rdpipe_plan::plan_forward(a.forward.as_ref().expect("a forward"), &resolve)
        }
        None if !a.sources.is_empty() => {
            if !a.sinks.is_empty() {
                return Err(PlanError::FromAndTo);
            }
            rdpipe_plan::plan_gather(&a.sources, &a.segments, a.gather, &resolve)
        }
        None => plan_fanout(&a.segments, &a.sinks, stdin_is_input, &resolve),
    }
}
