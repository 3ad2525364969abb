//! Remote wildcards as scp has them (`rdcp 'host:/data/run-*' dst/`): a
//! source path with `*`, `?` or `[...]` is expanded on the sources' host as
//! glob(3) does, without a shell: `*` any run of characters, `?` one,
//! `[abc]`, `[a-z]`, `[!a]` (or `[^a]`) and `[[:alpha:]]` one of a set; a
//! wildcard never matches `/`, nor a leading `.` (only a `.` written so
//! does), and `\` makes the next character literal (`\*` is a `*`). A `[`
//! without its `]` is literal. No braces, no `~` (the agent expands `~`
//! before).
//!
//! This file is the matcher of one path component ([`Pattern`]); walking
//! the directories for a whole path is [`expand`](mod@expand).

pub mod expand;
pub use expand::{expand, GlobError};

/// The characters that make a path a pattern (escaped or not).
const MAGIC: [char; 3] = ['*', '?', '['];

/// Whether `path` is a pattern: it holds `*`, `?` or `[`, escaped or not.
/// A path without any is a name, taken exactly as written (backslashes
/// included).
pub fn is_pattern(path: &str) -> bool {
    path.contains(MAGIC)
}

/// The pattern that matches exactly `name`: its `*`, `?`, `[` and `\`
/// escaped.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if MAGIC.contains(&c) || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A named class inside brackets (`[:alpha:]`).
type Class = fn(u32) -> bool;

/// One element of a bracket expression.
#[derive(Clone, Copy)]
enum Item {
    /// A range of characters, both ends included (one character: equal ends).
    Range(u32, u32),
    /// A POSIX class.
    Class(Class),
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Item::Range(a, b) => write!(f, "Range({a}, {b})"),
            Item::Class(_) => write!(f, "Class"),
        }
    }
}

/// One token of a pattern.
#[derive(Debug, Clone)]
enum Tok {
    /// This character.
    Char(u32),
    /// `?`.
    One,
    /// `*`.
    Any,
    /// `[...]`: one character in (or, `negated`, not in) the items.
    Set { negated: bool, items: Vec<Item> },
}

/// One path component's pattern (no `/` in it).
#[derive(Debug, Clone)]
pub struct Pattern {
    toks: Vec<Tok>,
}

fn class(name: &str) -> Option<Class> {
    Some(match name {
        "alpha" => |c| char::from_u32(c).is_some_and(char::is_alphabetic),
        "digit" => |c| (b'0' as u32..=b'9' as u32).contains(&c),
        "alnum" => |c| char::from_u32(c).is_some_and(char::is_alphanumeric),
        "upper" => |c| char::from_u32(c).is_some_and(char::is_uppercase),
        "lower" => |c| char::from_u32(c).is_some_and(char::is_lowercase),
        "space" => |c| char::from_u32(c).is_some_and(char::is_whitespace),
        "blank" => |c| c == b' ' as u32 || c == b'\t' as u32,
        "punct" => |c| {
            u8::try_from(c)
                .ok()
                .filter(u8::is_ascii)
                .is_some_and(|b| b.is_ascii_punctuation())
        },
        "print" => |c| char::from_u32(c).is_some_and(|ch| !ch.is_control()),
        "graph" => |c| char::from_u32(c).is_some_and(|ch| !ch.is_control() && !ch.is_whitespace()),
        "cntrl" => |c| char::from_u32(c).is_some_and(char::is_control),
        "xdigit" => |c| {
            u8::try_from(c)
                .ok()
                .filter(u8::is_ascii)
                .is_some_and(|b| b.is_ascii_hexdigit())
        },
        _ => return None,
    })
}

/// Parses the bracket expression whose `[` is just before `s`: its token
/// and how many characters of `s` it took (through its `]`), or `None`
/// when it has no `]` (then the `[` is literal).
fn bracket(s: &[char]) -> Option<(Tok, usize)> {
    let mut i = 0;
    let negated = matches!(s.first(), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut items = Vec::new();
    let mut first = true;
    loop {
        let c = *s.get(i)?;
        if c == ']' && !first {
            return Some((Tok::Set { negated, items }, i + 1));
        }
        first = false;
        if c == '[' && s.get(i + 1) == Some(&':') {
            // `[:name:]`, else a literal `[`.
            let rest = &s[i + 2..];
            if let Some(end) = rest.windows(2).position(|w| w == [':', ']']) {
                let name: String = rest[..end].iter().collect();
                if let Some(f) = class(&name) {
                    items.push(Item::Class(f));
                    i += 2 + end + 2;
                    continue;
                }
            }
        }
        let (lo, used) = match c {
            '\\' => (*s.get(i + 1)?, 2),
            c => (c, 1),
        };
        i += used;
        // `a-z`, unless the `-` is the last before `]`.
        if s.get(i) == Some(&'-') && s.get(i + 1).is_some_and(|&n| n != ']') {
            let (hi, used) = match s[i + 1] {
                '\\' => (*s.get(i + 2)?, 3),
                c => (c, 2),
            };
            i += used;
            items.push(Item::Range(lo as u32, hi as u32));
        } else {
            items.push(Item::Range(lo as u32, lo as u32));
        }
    }
}

impl Pattern {
    /// The pattern of one path component (a `/` in it matches nothing).
    pub fn new(component: &str) -> Pattern {
        let s: Vec<char> = component.chars().collect();
        let mut toks = Vec::new();
        let mut i = 0;
        while i < s.len() {
            let c = s[i];
            i += 1;
            match c {
                '\\' => match s.get(i) {
                    Some(&n) => {
                        toks.push(Tok::Char(n as u32));
                        i += 1;
                    }
                    None => toks.push(Tok::Char('\\' as u32)),
                },
                '?' => toks.push(Tok::One),
                '*' => {
                    if !matches!(toks.last(), Some(Tok::Any)) {
                        toks.push(Tok::Any);
                    }
                }
                '[' => match bracket(&s[i..]) {
                    Some((t, used)) => {
                        toks.push(t);
                        i += used;
                    }
                    None => toks.push(Tok::Char('[' as u32)),
                },
                c => toks.push(Tok::Char(c as u32)),
            }
        }
        Pattern { toks }
    }

    /// The name this pattern matches when it has no wildcard (its escapes
    /// undone), else `None`.
    pub fn literal(&self) -> Option<Vec<u8>> {
        let mut s = String::new();
        for t in &self.toks {
            match t {
                Tok::Char(c) => s.push(char::from_u32(*c)?),
                _ => return None,
            }
        }
        Some(s.into_bytes())
    }

    /// Whether the file name `name` matches (a name that is not UTF-8 is
    /// matched byte by byte).
    pub fn matches(&self, name: &[u8]) -> bool {
        let chars: Vec<u32> = match std::str::from_utf8(name) {
            Ok(s) => s.chars().map(|c| c as u32).collect(),
            Err(_) => name.iter().map(|&b| u32::from(b)).collect(),
        };
        if chars.first() == Some(&('.' as u32))
            && !matches!(self.toks.first(), Some(Tok::Char(c)) if *c == '.' as u32)
        {
            return false;
        }
        if chars.contains(&('/' as u32)) {
            return false;
        }
        let one = |t: &Tok, c: u32| match t {
            Tok::Char(x) => *x == c,
            Tok::One => true,
            Tok::Any => unreachable!("handled by the caller"),
            Tok::Set { negated, items } => {
                items.iter().any(|it| match it {
                    Item::Range(lo, hi) => (*lo..=*hi).contains(&c),
                    Item::Class(f) => f(c),
                }) != *negated
            }
        };
        // The classic one-star backtracking: linear in memory, at worst
        // quadratic in time.
        let (mut p, mut n) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while n < chars.len() {
            match self.toks.get(p) {
                Some(Tok::Any) => {
                    star = Some((p, n));
                    p += 1;
                }
                Some(t) if one(t, chars[n]) => {
                    p += 1;
                    n += 1;
                }
                _ => match star {
                    Some((sp, sn)) => {
                        p = sp + 1;
                        n = sn + 1;
                        star = Some((sp, sn + 1));
                    }
                    None => return false,
                },
            }
        }
        self.toks[p..].iter().all(|t| matches!(t, Tok::Any))
    }
}

#[cfg(test)]
mod tests;
