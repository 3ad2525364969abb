//! The words of an agent's command line that say what its segment does
//! (`--cmd`, `--read`, `--write`, `--relay`, rdcp's `--pack`, `--unpack`,
//! `--list`); the agent parses them back (`crate::agent::AgentArgs`).

use crate::plan::Action;

/// The agent arguments of `action`.
pub fn action_args(action: &Action) -> Vec<String> {
    let mut v: Vec<String> = vec![];
    match action {
        Action::Command(c) => v.extend(["--cmd".into(), c.clone()]),
        Action::ReadFile(f) => v.extend(["--read".into(), f.clone()]),
        Action::WriteFile { path, append } => v.extend([
            if *append { "--append" } else { "--write" }.into(),
            path.clone(),
        ]),
        Action::Relay => v.push("--relay".into()),
        Action::Pack {
            sources,
            recursive,
            manifest,
        } => {
            for src in sources {
                v.extend(["--pack".into(), src.clone()]);
            }
            if *recursive {
                v.push("--recursive".into());
            }
            if let Some(m) = manifest {
                v.extend(["--manifest".into(), m.clone()]);
            }
        }
        Action::List {
            dest,
            must_be_dir,
            tops,
        } => {
            v.extend(["--list".into(), dest.clone()]);
            for t in tops {
                v.extend(["--top".into(), t.clone()]);
            }
            if *must_be_dir {
                v.push("--must-be-dir".into());
            }
        }
        Action::Unpack {
            dest,
            must_be_dir,
            preserve,
            resumed_top,
        } => {
            v.extend(["--unpack".into(), dest.clone()]);
            if let Some(t) = resumed_top {
                v.extend(["--top".into(), t.clone()]);
            }
            if *must_be_dir {
                v.push("--must-be-dir".into());
            }
            if *preserve {
                v.push("--preserve".into());
            }
        }
    }
    v
}
