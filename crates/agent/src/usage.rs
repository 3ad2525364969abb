//! The agent's CPU use for `USAGE` ([`rdpipe_control::Usage`]): its own and its
//! waited-for children's user and system time, from `/proc/self/stat` (what
//! `getrusage(RUSAGE_SELF)` and `getrusage(RUSAGE_CHILDREN)` count, in clock
//! ticks), read once when the segment ends. The children's time counts only
//! from the segment's start ([`command_since`]): what the agent waited for
//! before (its start-up probes, such as `ip`) is not its command's.

use rdpipe_control::{CpuTimes, Usage};
use std::time::Duration;

/// What this process and the children it waited for used so far; none where
/// `/proc` is not mounted.
pub fn measure() -> Option<Usage> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&stat, rustix::param::clock_ticks_per_second())
}

/// `now` with the children's time since `base` only (all of it without a base).
pub fn command_since(now: Usage, base: Option<Usage>) -> Usage {
    let Some(b) = base else { return now };
    Usage {
        agent: now.agent,
        command: CpuTimes {
            user: now.command.user.saturating_sub(b.command.user),
            system: now.command.system.saturating_sub(b.command.system),
        },
    }
}

/// `utime stime cutime cstime` (fields 14 to 17) of a `/proc/PID/stat` line, at
/// `hz` ticks per second. The command name (field 2) is in parentheses and may
/// hold spaces and parentheses: the fields are counted after its last `)`.
pub fn parse_stat(stat: &str, hz: u64) -> Option<Usage> {
    if hz == 0 {
        return None;
    }
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts with field 3 (the state): utime is field 14.
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    let [u, s, cu, cs] = f[..] else { return None };
    let d = |ticks: u64| Duration::from_micros(ticks.saturating_mul(1_000_000) / hz);
    Some(Usage {
        agent: CpuTimes {
            user: d(u),
            system: d(s),
        },
        command: CpuTimes {
            user: d(cu),
            system: d(cs),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_after_the_command_name() {
        let line = "4242 (rd (a) b) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    123 45 6 7 20 0 3 0 100 1000 200";
        let u = parse_stat(line, 100).unwrap();
        assert_eq!(u.agent.user, Duration::from_millis(1230));
        assert_eq!(u.agent.system, Duration::from_millis(450));
        assert_eq!(u.command.user, Duration::from_millis(60));
        assert_eq!(u.command.system, Duration::from_millis(70));
        assert!(parse_stat("4242 (x) S 1 2", 100).is_none());
        assert!(parse_stat("no parenthesis", 100).is_none());
        assert!(parse_stat(line, 0).is_none());
        let base = parse_stat(&line.replace(" 6 7 ", " 2 7 "), 100);
        let c = command_since(u, base).command;
        assert_eq!(c.user, Duration::from_millis(40));
        assert_eq!(c.system, Duration::ZERO);
        assert_eq!(command_since(u, None), u);
    }

    #[test]
    fn this_process_is_measured() {
        let u = measure().expect("/proc/self/stat");
        // Burn a little CPU: the count never goes down.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let v = measure().unwrap();
        assert!(v.agent.total() >= u.agent.total());
    }
}
