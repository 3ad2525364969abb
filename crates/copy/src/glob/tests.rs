use super::*;
use proptest::prelude::*;
use std::path::PathBuf;

fn m(p: &str, name: &str) -> bool {
    Pattern::new(p).matches(name.as_bytes())
}

#[test]
fn wildcards_as_glob() {
    assert!(m("*", "abc"));
    assert!(m("*", ""));
    assert!(m("run-*", "run-1"));
    assert!(m("run-*", "run-"));
    assert!(!m("run-*", "xrun-1"));
    assert!(m("*.txt", "a.b.txt"));
    assert!(!m("*.txt", "a.txt.gz"));
    assert!(m("a*b*c", "aXXbYYc"));
    assert!(!m("a*b*c", "aXXbYY"));
    assert!(m("?", "é"));
    assert!(!m("?", "ab"));
    assert!(m("a?c", "abc"));
    assert!(m("[abc]", "b"));
    assert!(!m("[abc]", "d"));
    assert!(m("[a-c]x", "bx"));
    assert!(m("[!a-c]x", "dx"));
    assert!(!m("[!a-c]x", "ax"));
    assert!(m("[^a]", "b"));
    assert!(m("[]]", "]"));
    assert!(m("[!]]", "a"));
    assert!(m("[a-]", "-"));
    assert!(m("[[:digit:]]*", "7up"));
    assert!(!m("[[:digit:]]*", "up"));
    assert!(m("[[:alpha:][:digit:]]", "x"));
    // A `[` without its `]` is literal.
    assert!(m("a[b", "a[b"));
    assert!(!m("a[b", "ab"));
    // Escapes.
    assert!(m(r"a\*b", "a*b"));
    assert!(!m(r"a\*b", "aXb"));
    assert!(m(r"\[x]", "[x]"));
    assert!(m(r"[\]]", "]"));
    assert!(m(r"a\", r"a\"));
    // The pattern a*b matches a file literally named so too.
    assert!(m("a*b", "a*b"));
    // A leading `.` only when written.
    assert!(!m("*", ".hidden"));
    assert!(!m("?hidden", ".hidden"));
    assert!(!m("[.]hidden", ".hidden"));
    assert!(m(".*", ".hidden"));
    assert!(m(r"\.h*", ".hidden"));
    assert!(m("a*", "a.b"));
    // Never a `/`.
    assert!(!m("*", "a/b"));
    // Names that are not UTF-8: byte by byte.
    assert!(Pattern::new("a?c").matches(b"a\xffc"));
}

#[test]
fn what_counts_as_a_pattern() {
    assert!(is_pattern("/d/run-*"));
    assert!(is_pattern(r"a\*b"));
    assert!(is_pattern("a[b"));
    assert!(!is_pattern(r"/d/a\b"));
    assert!(!is_pattern("{a,b}"));
    assert_eq!(escape(r"a*b?[c]\d"), r"a\*b\?\[c]\\d");
    assert_eq!(Pattern::new(r"a\*b").literal(), Some(b"a*b".to_vec()));
    assert_eq!(Pattern::new("a[b").literal(), Some(b"a[b".to_vec()));
    assert_eq!(Pattern::new("a*").literal(), None);
}

#[test]
fn expands_on_this_host_sorted() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    for f in [
        "run-2",
        "run-1",
        "run-10",
        ".run-h",
        "other",
        "a*b",
        "sp ace",
        "new\nline",
    ] {
        std::fs::write(root.join(f), b"x").unwrap();
    }
    std::fs::create_dir(root.join("dir-a")).unwrap();
    std::fs::create_dir(root.join("dir-b")).unwrap();
    std::fs::write(root.join("dir-a/f.txt"), b"").unwrap();
    std::fs::write(root.join("dir-b/f.txt"), b"").unwrap();
    std::fs::write(root.join("dir-b/g.txt"), b"").unwrap();
    let base = root.to_str().unwrap();
    let e = |p: &str| -> Vec<String> {
        expand(&format!("{base}/{p}"))
            .unwrap()
            .into_iter()
            .map(|p: PathBuf| p.to_str().unwrap()[base.len() + 1..].to_string())
            .collect()
    };
    assert_eq!(e("run-*"), ["run-1", "run-10", "run-2"]);
    assert_eq!(e("run-?"), ["run-1", "run-2"]);
    assert_eq!(e("run-[!2]*"), ["run-1", "run-10"]);
    assert_eq!(e(".run-*"), [".run-h"]);
    assert_eq!(e("a*b"), ["a*b"]);
    assert_eq!(e(r"a\*b"), ["a*b"]);
    assert_eq!(e("sp*"), ["sp ace"]);
    assert_eq!(e("new?line"), ["new\nline"]);
    assert_eq!(e("dir-*/f.txt"), ["dir-a/f.txt", "dir-b/f.txt"]);
    assert_eq!(e("*/*.txt"), ["dir-a/f.txt", "dir-b/f.txt", "dir-b/g.txt"]);
    assert_eq!(e("d*/"), ["dir-a/", "dir-b/"]);
    // A pattern of a directory that is no directory matches nothing.
    let none = expand(&format!("{base}/run-1/*")).unwrap_err();
    assert!(matches!(none, GlobError::NoMatch { .. }), "{none}");
    let none = expand(&format!("{base}/zz*")).unwrap_err().to_string();
    assert!(
        none.starts_with(&format!("{base}/zz*: no such file")),
        "{none}"
    );
    assert!(!none.contains('\n'));
    assert!(expand(&format!("{base}/x\\*y")).is_err());
}

proptest! {
    /// An escaped name is a pattern that matches exactly that name.
    #[test]
    fn an_escaped_name_matches_itself_only(name in "[^/\0]{1,30}", other in "[^/\0]{1,30}") {
        let p = Pattern::new(&escape(&name));
        prop_assert_eq!(p.literal(), Some(name.clone().into_bytes()));
        prop_assert!(p.matches(name.as_bytes()));
        prop_assert_eq!(p.matches(other.as_bytes()), other == name);
    }

    /// Any text parses (no panic), and `*` around a name's piece finds it.
    #[test]
    fn any_pattern_parses_and_stars_find_infixes(pat in "\\PC{0,30}", name in "[a-z]{0,10}", k in 0usize..10) {
        let _ = Pattern::new(&pat).matches(name.as_bytes());
        let k = k.min(name.len());
        let infix = &name[k..];
        let around = format!("*{}*", escape(infix));
        let start = format!("{}*", escape(&name[..k]));
        prop_assert!(Pattern::new(&around).matches(name.as_bytes()));
        prop_assert!(Pattern::new(&start).matches(name.as_bytes()));
    }
}
