//! Slurm's hostlist syntax for `--to` sinks: `n[001-064]` is the 64 hosts
//! `n001` … `n064`, in that order.
//!
//! - A bracket holds comma-separated numbers and ranges (`[1-3,7,10-11]`); the
//!   width of a range's first number is kept (`[08-10]`: `08 09 10`).
//! - Several brackets multiply, the last varying fastest (`r[1-2]n[1-2]`:
//!   `r1n1 r1n2 r2n1 r2n2`).
//! - Commas outside brackets separate lists (`a,b[1-2]`: `a b1 b2`).
//! - A `user@` before the list applies to every host (`root@n[1-2]`).
//!
//! A host that starts with `[` is rdpipe's bracketed form (`[fe80::1]`,
//! `[user@host:PORT]`), never a hostlist. Ranges are bounded
//! ([`MAX_HOSTS`]) so that a typo cannot plan a million segments.

use super::PlanError;

/// The most hosts one list may expand to.
pub const MAX_HOSTS: usize = 4096;

/// Expands `host` (the part of a `HOST:CMD` before the colon).
pub fn expand(host: &str) -> Result<Vec<String>, PlanError> {
    let bad = |why: &str| PlanError::BadHostList {
        list: host.to_string(),
        why: why.to_string(),
    };
    if host.starts_with('[') || !host.contains(['[', ']', ',']) {
        return Ok(vec![host.to_string()]);
    }
    let (user, list) = match host.rsplit_once('@') {
        Some((u, l)) if !u.contains('[') => (Some(u), l),
        _ => (None, host),
    };
    let mut out = Vec::new();
    for item in split_top(list).map_err(&bad)? {
        if item.is_empty() {
            return Err(bad("an empty host between commas"));
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while let Some(open) = rest.find('[') {
            let close = rest[open..]
                .find(']')
                .map(|c| open + c)
                .ok_or_else(|| bad("no ']'"))?;
            let prefix = &rest[..open];
            let choices = ranges(&rest[open + 1..close]).map_err(&bad)?;
            let mut next = Vec::with_capacity(names.len() * choices.len());
            for n in &names {
                for c in &choices {
                    next.push(format!("{n}{prefix}{c}"));
                    if next.len() + out.len() > MAX_HOSTS {
                        return Err(bad(&format!("more than {MAX_HOSTS} hosts")));
                    }
                }
            }
            names = next;
            rest = &rest[close + 1..];
        }
        if rest.contains(']') {
            return Err(bad("a ']' without '['"));
        }
        out.extend(names.into_iter().map(|n| format!("{n}{rest}")));
    }
    Ok(match user {
        Some(u) => out.into_iter().map(|h| format!("{u}@{h}")).collect(),
        None => out,
    })
}

/// Splits at commas outside brackets.
fn split_top(s: &str) -> Result<Vec<&str>, &'static str> {
    let (mut depth, mut start, mut v) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '[' if depth > 0 => return Err("nested '['"),
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                v.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced brackets");
    }
    v.push(&s[start..]);
    Ok(v)
}

/// The numbers of one bracket, formatted with their width.
fn ranges(inner: &str) -> Result<Vec<String>, &'static str> {
    let mut v = Vec::new();
    for part in inner.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(a) || !digits(b) {
            return Err("a bracket holds numbers and ranges like [01-16,20]");
        }
        let (lo, hi): (u32, u32) = (a.parse().expect("digits"), b.parse().expect("digits"));
        if lo > hi {
            return Err("a range that goes down");
        }
        if (hi - lo) as usize >= MAX_HOSTS {
            return Err("a range of more than 4096 hosts");
        }
        let width = a.len();
        v.extend((lo..=hi).map(|n| format!("{n:0width$}")));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(s: &str) -> Vec<String> {
        expand(s).unwrap()
    }

    #[test]
    fn expands_like_slurm() {
        assert_eq!(x("host1"), ["host1"]);
        assert_eq!(x("n[1-3]"), ["n1", "n2", "n3"]);
        assert_eq!(x("n[001-003]"), ["n001", "n002", "n003"]);
        assert_eq!(x("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(x("n[1,3-4,9]"), ["n1", "n3", "n4", "n9"]);
        assert_eq!(x("r[1-2]n[1-2]"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(x("a,b[1-2].ib"), ["a", "b1.ib", "b2.ib"]);
        assert_eq!(x("root@n[1-2]"), ["root@n1", "root@n2"]);
        assert_eq!(x("[fe80::1]"), ["[fe80::1]"]);
        assert_eq!(x("[u@h:22]"), ["[u@h:22]"]);
        assert_eq!(x("n[001-064]").len(), 64);
    }

    #[test]
    fn refuses_what_is_not_a_list() {
        for bad in [
            "n[1-",
            "n[a-b]",
            "n[3-1]",
            "n]",
            "a,,b",
            "n[1-99999]",
            "n[[1]]",
            "n[]",
        ] {
            assert!(expand(bad).is_err(), "{bad}");
        }
        assert!(expand("r[1-100]n[1-100]").is_err(), "past MAX_HOSTS");
    }
}
