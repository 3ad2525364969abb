//! The Slurm allocation a run's steps go into: its job and nodes, the
//! `srun` command line of a step, a node's address, munged's socket, and
//! the cancelling of a run's leftover steps.

use std::process::Stdio;

/// Why srun cannot start this run's agents.
#[derive(Debug, thiserror::Error)]
pub enum SrunError {
    /// Neither `--jobid` nor `SLURM_JOB_ID`.
    #[error(
        "--launcher srun needs a Slurm allocation: run rdpipe inside one (salloc, sbatch) \
         or pass --jobid JOB"
    )]
    NoAllocation,
    /// A Slurm command could not run or failed.
    #[error("{command}: {message}")]
    Command {
        /// The command, e.g. `squeue -j 12`.
        command: String,
        /// Its error or last stderr line.
        message: String,
    },
    /// munge does not work on this host (its message names the host and
    /// the fix).
    #[error(transparent)]
    Munge(#[from] rdpipe_control::munge::MungeError),
    /// The allocation's node list did not parse.
    #[error("job {job}: cannot read its node list '{list}': {message}")]
    NodeList {
        /// The job.
        job: String,
        /// What squeue said.
        list: String,
        /// Why.
        message: String,
    },
}

/// One run's use of srun: the allocation and the name of its steps.
#[derive(Debug, Clone)]
pub struct Srun {
    /// The job whose allocation the steps run in.
    pub job: String,
    /// The name every step of this run gets (`rdpipe.PID`).
    pub step_name: String,
    /// munged's socket as Slurm's configuration names it (`AuthInfo`), for
    /// rdpipe's and the agents' munge calls; munge's default when None.
    pub munge_socket: Option<std::path::PathBuf>,
}

/// Runs a Slurm command; its stdout, or the error with its last stderr line.
fn slurm_cmd(program: &str, args: &[&str]) -> Result<String, SrunError> {
    let command = format!("{program} {}", args.join(" "));
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| SrunError::Command {
            command: command.clone(),
            message: format!("cannot run it: {e} (is Slurm's client installed?)"),
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let message = err
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .map_or_else(|| format!("{}", out.status), str::to_string);
        return Err(SrunError::Command { command, message });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Srun {
    /// The allocation: `jobid`, else `SLURM_JOB_ID`.
    pub fn new(jobid: Option<&str>) -> Result<Srun, SrunError> {
        let job = match jobid {
            Some(j) => j.to_string(),
            None => std::env::var("SLURM_JOB_ID")
                .ok()
                .filter(|j| !j.trim().is_empty())
                .ok_or(SrunError::NoAllocation)?,
        };
        Ok(Srun {
            job: job.trim().to_string(),
            step_name: format!("rdpipe.{}", std::process::id()),
            munge_socket: None,
        })
    }

    /// munged's socket from Slurm's configuration (`scontrol show config`,
    /// its `AuthInfo=socket=PATH`); None when it names none or cannot be read.
    pub fn read_munge_socket() -> Option<std::path::PathBuf> {
        slurm_cmd("scontrol", &["show", "config"])
            .ok()
            .and_then(|out| rdpipe_control::munge::auth_socket(&out))
    }

    /// The allocation's nodes, in Slurm's order.
    pub fn nodes(&self) -> Result<Vec<String>, SrunError> {
        let out = slurm_cmd("squeue", &["-h", "-j", &self.job, "-o", "%N"])?;
        let list = out.lines().map(str::trim).find(|l| !l.is_empty());
        let Some(list) = list else {
            return Err(SrunError::Command {
                command: format!("squeue -j {}", self.job),
                message: "no such running job (has the allocation ended?)".into(),
            });
        };
        rdpipe_plan::hostlist::expand(list).map_err(|e| SrunError::NodeList {
            job: self.job.clone(),
            list: list.to_string(),
            message: e.to_string(),
        })
    }

    /// `node`'s address as Slurm knows it (`NodeAddr`); the name itself when
    /// Slurm does not say. Every node's is read once per run (one
    /// `scontrol show node -o`, not one call per host).
    pub fn node_addr(node: &str) -> String {
        static ADDRS: std::sync::OnceLock<std::collections::HashMap<String, String>> =
            std::sync::OnceLock::new();
        ADDRS
            .get_or_init(|| {
                slurm_cmd("scontrol", &["show", "node", "-o"])
                    .map(|out| node_addrs(&out))
                    .unwrap_or_default()
            })
            .get(node)
            .cloned()
            .unwrap_or_else(|| node.to_string())
    }

    /// The arguments of `srun` that start `line` (a shell command line) as one
    /// task on `node`.
    pub fn args(&self, node: &str, line: &str) -> Vec<String> {
        [
            format!("--jobid={}", self.job),
            format!("--job-name={}", self.step_name),
            format!("--nodelist={node}"),
            "--nodes=1".into(),
            "--ntasks=1".into(),
            // Steps share the allocation's CPUs (every segment of a node at
            // once), as processes over ssh would.
            "--overlap".into(),
            // The control channel is lines: each goes on as written.
            "--unbuffered".into(),
            "--quiet".into(),
            "sh".into(),
            "-c".into(),
            // exec: the task is the agent itself (dash does not always exec
            // a lone command), so a signal to the task reaches the agent.
            format!("exec {line}"),
        ]
        .into()
    }

    /// The `srun` command that starts `line` on `node`.
    pub fn command(&self, node: &str, line: &str) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("srun");
        c.args(self.args(node, line)).kill_on_drop(true);
        // srun passes rdpipe's environment to the step: not this one.
        c.env_remove(rdpipe_control::keylog::KEYLOG_ENV);
        c
    }

    /// Cancels every step of this run still in the allocation; how many.
    pub fn cancel_steps(&self) -> usize {
        let Ok(out) = slurm_cmd("squeue", &["-h", "-s", "-j", &self.job, "-o", "%i %j"]) else {
            return 0;
        };
        let mine: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, name)| name.trim() == self.step_name)
            .map(|(id, _)| id.trim())
            .collect();
        for id in &mine {
            tracing::debug!("teardown: scancel {id} (a step of this run still alive)");
            if let Err(e) = slurm_cmd("scancel", &["--signal=KILL", id]) {
                tracing::warn!("cannot cancel job step {id}: {e}");
            }
        }
        mine.len()
    }
}

/// `NodeName` → `NodeAddr` from `scontrol show node -o` (one node a line).
fn node_addrs(out: &str) -> std::collections::HashMap<String, String> {
    out.lines()
        .filter_map(|l| {
            let field = |k: &str| l.split_whitespace().find_map(|w| w.strip_prefix(k));
            let addr = field("NodeAddr=").filter(|a| !a.is_empty() && *a != "(null)")?;
            Some((field("NodeName=")?.to_string(), addr.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_run_one_task_on_the_named_node_in_the_allocation() {
        let s = Srun {
            job: "42".into(),
            step_name: "rdpipe.7".into(),
            munge_socket: Some("/run/m sock".into()),
        };
        let a = s.args("n003", "rdrecv --agent 'a b'");
        assert_eq!(a[0], "--jobid=42");
        assert!(a.contains(&"--nodelist=n003".to_string()));
        assert!(a.contains(&"--job-name=rdpipe.7".to_string()));
        assert!(a.contains(&"--ntasks=1".to_string()));
        assert_eq!(a[a.len() - 3..], ["sh", "-c", "exec rdrecv --agent 'a b'"]);
    }

    #[test]
    fn node_addresses_come_from_one_listing() {
        let out = "NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.99.0.11 NodeHostName=n1\n\
                   NodeName=n2 NodeAddr=(null) State=IDLE\n\
                   NodeName=gpu07 NodeAddr=gpu07-ib State=IDLE\n";
        let m = node_addrs(out);
        assert_eq!(m.get("n1").map(String::as_str), Some("10.99.0.11"));
        assert_eq!(m.get("gpu07").map(String::as_str), Some("gpu07-ib"));
        assert!(!m.contains_key("n2"));
    }

    #[test]
    fn no_allocation_is_a_clear_error() {
        if std::env::var_os("SLURM_JOB_ID").is_none() {
            let e = Srun::new(None).unwrap_err();
            assert!(e.to_string().contains("--jobid"), "{e}");
        }
        assert_eq!(Srun::new(Some(" 17 ")).unwrap().job, "17");
    }
}
