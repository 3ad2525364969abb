//! Every name rdcp gives a file of its own in the destination, made and read
//! back in this one place, so that the unpacker that writes them, the
//! listing that finds them again (`rdcp --resume`) and the clean-ups that
//! remove them (the unpacker's of stale temporaries, `unpack/stale.rs`; the
//! listing's of smaller partial copies; `rdcp --delete`'s; the striped
//! copies' in [`crate::stripe`]) all agree on what is ours:
//!
//! - `.NAME.rdcp-PID-N`: a file, link or node being received by process PID,
//!   renamed over NAME once verified ([`new_tmp`]); one a cut stream left is
//!   the partial copy `--resume` continues, and once PID no longer runs, a
//!   run that publishes NAME (or skips it as current) removes it.
//! - `.NAME.rdcp-s<RUN>`: the one temporary file the streams of run RUN (16
//!   hex digits) write a striped file into (`--streams`, [`striped`]).
//! - `.NAME.rdcp-s<RUN>.pieces`: that file's ledger ([`ledger_name`]).
//! - `.rdcp-s<RUN>.K`: stream K's marker in the destination, and
//!   `.rdcp-s<RUN>.K.new` before it is locked ([`marker`]).
//!
//! NAME is the target's name cut to keep the whole within NAME_MAX: its first
//! [`CUT`] bytes in a temporary name; in a striped one whole up to [`CUT`]
//! bytes, else its first 180 and `~` and the xxh3-64 of all of it
//! ([`short`]), so that two long names sharing their start never share a
//! striped file.
//!
//! [`parse`] is the formatting read backwards, and strictly so: it takes a
//! name only when formatting what it found gives those very bytes back. A
//! file of the user's that merely looks alike (`.notes.rdcp-old`, a marker
//! with upper-case digits) is never taken for ours: never listed as a partial
//! copy, continued, or removed.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::LazyLock;

/// What every temporary and striped name has between NAME and its suffix.
pub const TMP_INFIX: &[u8] = b".rdcp-";

/// The most bytes of the target's name a temporary or striped name holds.
pub const CUT: usize = 200;

const MARKER_PREFIX: &[u8] = b".rdcp-s";
const LEDGER_SUFFIX: &[u8] = b".pieces";
const NEW_SUFFIX: &[u8] = b".new";

/// One of our names, taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name<'a> {
    /// `.TARGET.rdcp-PID-SEQ`: a file being received (or left by a cut
    /// stream), TARGET its name cut to [`CUT`] bytes.
    Temp {
        /// The target's name as the temporary name holds it.
        target: &'a [u8],
        /// The receiving process.
        pid: u32,
        /// Its count of temporary names so far.
        seq: u32,
    },
    /// `.TARGET.rdcp-s<RUN>`: a striped file's temporary file, TARGET the
    /// [`short`] form of its name.
    Striped {
        /// The target's name as the striped name holds it.
        target: &'a [u8],
        /// The copy's run.
        run: u64,
    },
    /// `.TARGET.rdcp-s<RUN>.pieces`: the ledger of a striped file.
    Ledger {
        /// The target's name as the striped name holds it.
        target: &'a [u8],
        /// The copy's run.
        run: u64,
    },
    /// `.rdcp-s<RUN>.STREAM` (`.new` after it while it is made): a stream's
    /// marker.
    Marker {
        /// The copy's run.
        run: u64,
        /// Which stream.
        stream: u32,
        /// The name it has before it is locked and renamed into place.
        new: bool,
    },
}

impl<'a> Name<'a> {
    /// The name's bytes.
    pub fn format(&self) -> Vec<u8> {
        match *self {
            Name::Temp { target, pid, seq } => {
                [b".", target, TMP_INFIX, format!("{pid}-{seq}").as_bytes()].concat()
            }
            Name::Striped { target, run } => [b".", target, &striped_suffix(run)].concat(),
            Name::Ledger { target, run } => {
                [b".", target, &striped_suffix(run), LEDGER_SUFFIX].concat()
            }
            Name::Marker { run, stream, new } => {
                let mut m = format!(".rdcp-s{run:016x}.{stream}").into_bytes();
                if new {
                    m.extend_from_slice(NEW_SUFFIX);
                }
                m
            }
        }
    }

    /// The name (as cut) of the file this one stands for; `None` for a
    /// marker, which stands for a stream.
    pub fn target(self) -> Option<&'a [u8]> {
        match self {
            Name::Temp { target, .. }
            | Name::Striped { target, .. }
            | Name::Ledger { target, .. } => Some(target),
            Name::Marker { .. } => None,
        }
    }
}

fn striped_suffix(run: u64) -> Vec<u8> {
    format!(".rdcp-s{run:016x}").into_bytes()
}

/// Takes `file` apart if it is one of our names (see the module doc).
pub fn parse(file: &[u8]) -> Option<Name<'_>> {
    if file.contains(&b'/') || file.contains(&0) {
        return None;
    }
    // A marker cannot also be one of the others: after its first byte it
    // has no `.rdcp-`.
    if let Some(m) = file.strip_prefix(MARKER_PREFIX).and_then(parse_marker) {
        return Some(m);
    }
    let rest = file.strip_prefix(b".")?;
    // Neither a temporary nor a striped name ends in `.pieces` (they end
    // in a digit), so what does is a ledger or not ours.
    let (rest, ledger) = match rest.strip_suffix(LEDGER_SUFFIX) {
        Some(r) => (r, true),
        None => (rest, false),
    };
    // The suffix has no `.`: the last `.rdcp-` starts it.
    let at = rest
        .windows(TMP_INFIX.len())
        .rposition(|w| w == TMP_INFIX)?;
    let (target, suffix) = (&rest[..at], &rest[at + TMP_INFIX.len()..]);
    if target.is_empty() || target.len() > CUT {
        return None;
    }
    if let Some(hex) = suffix.strip_prefix(b"s") {
        let run = hex16(hex)?;
        return Some(if ledger {
            Name::Ledger { target, run }
        } else {
            Name::Striped { target, run }
        });
    }
    if ledger {
        return None;
    }
    let dash = suffix.iter().position(|&b| b == b'-')?;
    Some(Name::Temp {
        target,
        pid: decimal(&suffix[..dash])?,
        seq: decimal(&suffix[dash + 1..])?,
    })
}

/// `RUN.STREAM` or `RUN.STREAM.new`, after a marker's prefix.
fn parse_marker(rest: &[u8]) -> Option<Name<'static>> {
    let (rest, new) = match rest.strip_suffix(NEW_SUFFIX) {
        Some(r) => (r, true),
        None => (rest, false),
    };
    if rest.len() < 18 || rest[16] != b'.' {
        return None;
    }
    Some(Name::Marker {
        run: hex16(&rest[..16])?,
        stream: decimal(&rest[17..])?,
        new,
    })
}

/// Exactly 16 lower-case hex digits, as `{:016x}` writes them.
fn hex16(b: &[u8]) -> Option<u64> {
    if b.len() != 16 || !b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok()
}

/// A decimal `u32` as `{}` writes it: digits only, no leading zero.
fn decimal(b: &[u8]) -> Option<u32> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// The temporary name of `leaf` made by process `pid` as its `seq`th.
pub fn tmp_name(leaf: &[u8], pid: u32, seq: u32) -> Vec<u8> {
    let target = &leaf[..leaf.len().min(CUT)];
    Name::Temp { target, pid, seq }.format()
}

static SEQ: AtomicU32 = AtomicU32::new(0);
/// This process's id, in every temporary name (asked once, not per file).
static PID: LazyLock<u32> = LazyLock::new(std::process::id);

/// A temporary name for `leaf` that no other in this process has had
/// (until its count wraps), nor one of another process (the PID).
pub fn new_tmp(leaf: &[u8]) -> Vec<u8> {
    tmp_name(leaf, *PID, SEQ.fetch_add(1, Ordering::Relaxed))
}

/// The target of `file` if it is a temporary name (`.NAME.rdcp-PID-N`).
pub fn temp_target(file: &[u8]) -> Option<&[u8]> {
    match parse(file)? {
        Name::Temp { target, .. } => Some(target),
        _ => None,
    }
}

/// The target of `file` if it is one of a file's names: temporary, striped,
/// or a striped file's ledger.
pub fn tmp_target(file: &[u8]) -> Option<&[u8]> {
    parse(file)?.target()
}

/// `leaf` as a striped name holds it: whole up to [`CUT`] bytes (NAME_MAX is
/// 255), else its first 180 and the xxh3-64 of all of it.
pub fn short(leaf: &[u8]) -> Cow<'_, [u8]> {
    if leaf.len() <= CUT {
        return leaf.into();
    }
    let h = rdpipe_wire::checksum::xxh3_64(leaf);
    [&leaf[..180], format!("~{h:016x}").as_bytes()]
        .concat()
        .into()
}

/// The striped temporary name of `leaf` in run `run`, the same on every
/// stream.
pub fn striped(leaf: &[u8], run: u64) -> Vec<u8> {
    Name::Striped {
        target: &short(leaf),
        run,
    }
    .format()
}

/// Whether `tmp` is a striped temporary name of `leaf`.
pub fn is_striped_tmp(tmp: &[u8], leaf: &[u8]) -> bool {
    matches!(parse(tmp), Some(Name::Striped { target, .. }) if target == &short(leaf)[..])
}

/// The striped temporary name of `leaf` at the destination for `tmp`, the
/// name a stream gave (`.ANY.rdcp-s<RUN>`: the sender names it after the
/// source, which a copy may rename, so only its RUN is taken); `None` when
/// `tmp` is not such a name.
pub fn dest_tmp(tmp: &[u8], leaf: &[u8]) -> Option<Vec<u8>> {
    match parse(tmp)? {
        Name::Striped { run, .. } => Some(striped(leaf, run)),
        _ => None,
    }
}

/// Whether `file` is a striped temporary file's ledger.
pub fn is_ledger(file: &[u8]) -> bool {
    matches!(parse(file), Some(Name::Ledger { .. }))
}

/// The ledger's name for the striped temporary file `tmp`.
pub fn ledger_name(tmp: &[u8]) -> Vec<u8> {
    [tmp, LEDGER_SUFFIX].concat()
}

/// The name of stream `k`'s marker in run `run`.
pub fn marker(run: u64, k: u32) -> Vec<u8> {
    Name::Marker {
        run,
        stream: k,
        new: false,
    }
    .format()
}

/// Whether `file` is a stream's marker, or one being made.
pub fn is_marker(file: &[u8]) -> bool {
    matches!(parse(file), Some(Name::Marker { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn temporary_names_map_to_their_target() {
        assert_eq!(tmp_target(b".a.txt.rdcp-12-0"), Some(&b"a.txt"[..]));
        assert_eq!(tmp_target(b".x.rdcp-1.rdcp-2-3"), Some(&b"x.rdcp-1"[..]));
        assert_eq!(tmp_target(b"a.rdcp-1-2"), None);
        assert_eq!(tmp_target(b"..rdcp-1-2"), None);
    }

    #[test]
    fn each_kind_of_name_is_spelled_so() {
        assert_eq!(tmp_name(b"a.txt", 12, 0), b".a.txt.rdcp-12-0");
        assert_eq!(striped(b"big", 0xab), b".big.rdcp-s00000000000000ab");
        assert_eq!(
            ledger_name(&striped(b"big", 0xab)),
            b".big.rdcp-s00000000000000ab.pieces"
        );
        assert_eq!(marker(0x77, 1), b".rdcp-s0000000000000077.1");
        let long = vec![b'x'; 300];
        assert_eq!(tmp_name(&long, 1, 2).len(), 1 + CUT + 9);
        assert_eq!(short(&long).len(), 180 + 17);
        assert!(is_striped_tmp(&striped(&long, 3), &long));
    }

    #[test]
    fn look_alikes_are_not_ours() {
        for n in [
            &b".notes.rdcp-old"[..],
            b".a.rdcp-01-2",
            b".a.rdcp-1-",
            b".a.rdcp-1-2-3",
            b".a.rdcp-99999999999-1",
            b".a.rdcp-s00000000000000AB",
            b".a.rdcp-s00ab",
            b".a.rdcp-1-2.pieces",
            b".rdcp-s0000000000000077.01",
            b".rdcp-s0000000000000077.",
            b".rdcp-s0000000000000077",
            b".a.rdcp-1/../../x",
        ] {
            assert_eq!(parse(n), None, "{}", String::from_utf8_lossy(n));
        }
        assert!(!is_marker(b".rdcp-s000000000000007G.1"));
        assert!(is_marker(b".rdcp-s0000000000000077.1.new"));
        // A file named like a marker's start is still a file.
        assert_eq!(temp_target(b".rdcp-sx.rdcp-1-2"), Some(&b"rdcp-sx"[..]));
    }

    /// A file's name as a directory can hold it: no `/`, no NUL, not empty.
    fn leaf() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(
                any::<u8>().prop_filter("a name byte", |b| *b != b'/' && *b != 0),
                1..260
            ),
            // Names that look like ours themselves.
            "[a-z.]{0,8}(\\.rdcp-(s[0-9a-f]{0,17}|[0-9]{0,3}-[0-9]{0,3})(\\.pieces)?)?[a-z.]{0,4}"
                .prop_filter("not empty", |s| !s.is_empty())
                .prop_map(String::into_bytes),
        ]
    }

    proptest! {
        #[test]
        fn every_name_made_parses_back(leaf in leaf(), pid: u32, seq: u32, run: u64, k: u32, new: bool) {
            let t = tmp_name(&leaf, pid, seq);
            let cut = &leaf[..leaf.len().min(CUT)];
            prop_assert_eq!(parse(&t), Some(Name::Temp { target: cut, pid, seq }));
            prop_assert_eq!(temp_target(&t), Some(cut));

            let s = striped(&leaf, run);
            let sh = short(&leaf);
            prop_assert!(sh.len() <= CUT);
            prop_assert_eq!(parse(&s), Some(Name::Striped { target: &sh, run }));
            prop_assert!(is_striped_tmp(&s, &leaf));
            prop_assert_eq!(dest_tmp(&s, b"other"), Some(striped(b"other", run)));
            prop_assert_eq!(dest_tmp(&t, b"other"), None);

            let l = ledger_name(&s);
            prop_assert_eq!(parse(&l), Some(Name::Ledger { target: &sh, run }));
            prop_assert!(is_ledger(&l) && !is_ledger(&s) && !is_ledger(&t));

            let m = Name::Marker { run, stream: k, new };
            let mb = m.format();
            prop_assert_eq!(parse(&mb), Some(m));
            prop_assert_eq!(marker(run, k), Name::Marker { run, stream: k, new: false }.format());
        }

        /// Whatever the bytes, parsing returns (never panics), and takes
        /// only what formatting would have written.
        #[test]
        fn only_our_own_names_are_taken(file in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            "\\.?[a-z.~/]{0,6}(\\.rdcp-(s[0-9a-fA-F]{0,17}|[0-9]{0,12}-[0-9]{0,12})(\\.[0-9]{0,3})?(\\.pieces|\\.new)?)?"
                .prop_map(String::into_bytes),
            "\\.rdcp-s[0-9a-fA-F]{14,18}\\.[0-9]{0,12}(\\.new)?".prop_map(String::into_bytes),
        ]) {
            if let Some(n) = parse(&file) {
                prop_assert_eq!(n.format(), file.clone());
                let _ = (temp_target(&file), tmp_target(&file), is_marker(&file), is_ledger(&file));
            }
        }
    }
}
