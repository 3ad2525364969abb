//! The remote shell's command line for an agent or a script: every word
//! quoted for `sh`, the endpoint tuning variables passed as `env K=V` (ssh
//! and srun pass no environment on).

/// Shell-quotes one word for the remote `sh`.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The endpoint tuning variables set here ([`rdpipe_transport::TUNING_ENV`]),
/// for the agents on other hosts.
pub fn tuning_env() -> Vec<(String, String)> {
    rdpipe_transport::TUNING_ENV
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// The remote shell's command line for an agent: `[env K=V ...] BIN ARGS...`, every
/// word quoted.
pub fn remote_command_line(bin: &str, args: &[String], env: &[(String, String)]) -> String {
    let env_words = (!env.is_empty())
        .then(|| "env".to_string())
        .into_iter()
        .chain(env.iter().map(|(k, v)| sh_quote(&format!("{k}={v}"))));
    env_words
        .chain(std::iter::once(sh_quote(bin)))
        .chain(args.iter().map(|w| sh_quote(w)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `sh -c SCRIPT sh ARGS...` as one quoted line.
pub fn sh_line(script: &str, args: &[&str]) -> String {
    ["sh", "-c", script, "sh"]
        .iter()
        .chain(args)
        .map(|w| sh_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_command_line_quotes_and_passes_the_tuning_env() {
        let args = vec!["--agent".to_string(), "--label".into(), "h 1[1]".into()];
        assert_eq!(
            remote_command_line("/opt/rd pipe/rdrecv", &args, &[]),
            "'/opt/rd pipe/rdrecv' --agent --label 'h 1[1]'"
        );
        let env = vec![
            ("RDPIPE_TCP_SEND".to_string(), "inline".to_string()),
            ("RDPIPE_RDMA_NO_IMM".to_string(), "1; rm -rf /".to_string()),
        ];
        assert_eq!(
            remote_command_line("rdrecv", &args, &env),
            "env RDPIPE_TCP_SEND=inline 'RDPIPE_RDMA_NO_IMM=1; rm -rf /' rdrecv --agent \
             --label 'h 1[1]'"
        );
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("rdrecv"), "rdrecv");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(
            sh_quote("tr [:lower:] [:upper:]"),
            "'tr [:lower:] [:upper:]'"
        );
    }
}
