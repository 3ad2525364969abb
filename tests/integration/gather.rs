//! Many hosts into one (`rdpipe --from HOST:CMD ...`) across network-namespace
//! hosts with their own sshd (root only; SKIPPED otherwise): the line merge
//! (every line exactly once, whole, in its source's order, tagged), `--each`
//! (each source's stream byte-exact in its own file, `RDPIPE_SOURCE`), a
//! failing source named while the others complete (`--min-ok`), a source
//! host killed mid-stream, a hostlist of sources, the `--json` sources,
//! `--compress` per source, and SIGINT leaving no process on any host.

use crate::support::*;

use std::collections::HashMap;
use std::time::Duration;

/// A source of numbered lines: `S:N:FILL\n` for N in 0..COUNT, FILL of a
/// length that varies with N (some lines longer than 1 MiB, longer than
/// any buffer), and with `tail`, a last line without `\n`.
const GEN: &str = r#"import sys
s, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer
for i in range(n):
    ln = (i * 7919) % 300
    if i % 397 == 200:
        ln = (1 << 20) + 4099 + i
    out.write(b"%s:%d:%s\n" % (s.encode(), i, bytes([97 + i % 26]) * ln))
if len(sys.argv) > 3:
    out.write(b"%s:tail:no-newline" % s.encode())
"#;

/// The fill of line `i` of [`GEN`].
fn fill(i: usize) -> Vec<u8> {
    let ln = if i % 397 == 200 {
        (1 << 20) + 4099 + i
    } else {
        (i * 7919) % 300
    };
    vec![b'a' + (i % 26) as u8; ln]
}

/// Checks a merged stream: every line whole and right, each source's lines
/// exactly once and in order (`counts`: source name → lines), tags as given
/// (`tags`: source name → its prefix), and a source's `tail` line where it
/// had one. Returns the order in which the sources' lines came.
fn check_merge(
    out: &[u8],
    counts: &HashMap<&str, usize>,
    tags: Option<&HashMap<&str, String>>,
    tails: &[&str],
) -> Vec<String> {
    assert!(out.ends_with(b"\n"), "the merged stream ends inside a line");
    let mut seen: HashMap<String, Vec<usize>> = HashMap::new();
    let mut tail_seen: Vec<String> = Vec::new();
    let mut order = Vec::new();
    for line in out[..out.len() - 1].split(|&b| b == b'\n') {
        let line = match tags {
            Some(tags) => {
                let (tag, rest) = tags
                    .values()
                    .find_map(|t| line.strip_prefix(t.as_bytes()).map(|r| (t.clone(), r)))
                    .unwrap_or_else(|| {
                        panic!(
                            "untagged line {:?}",
                            String::from_utf8_lossy(&line[..line.len().min(60)])
                        )
                    });
                let src = std::str::from_utf8(rest.split(|&b| b == b':').next().unwrap()).unwrap();
                assert_eq!(tags[src], tag, "line of {src} tagged {tag:?}");
                rest
            }
            None => line,
        };
        let mut parts = line.splitn(3, |&b| b == b':');
        let src = String::from_utf8(parts.next().unwrap().to_vec()).unwrap();
        let n = std::str::from_utf8(parts.next().expect("a number")).unwrap();
        let body = parts.next().expect("a fill");
        if n == "tail" {
            assert_eq!(body, b"no-newline");
            tail_seen.push(src);
            continue;
        }
        let n: usize = n.parse().unwrap();
        assert!(
            body == fill(n).as_slice(),
            "line {src}:{n} damaged ({} bytes)",
            body.len()
        );
        order.push(src.clone());
        seen.entry(src).or_default().push(n);
    }
    for (src, &count) in counts {
        let got = seen.remove(*src).unwrap_or_default();
        assert_eq!(got.len(), count, "{src}: {} lines of {count}", got.len());
        assert!(
            got.iter().enumerate().all(|(k, &n)| k == n),
            "{src}: out of order"
        );
    }
    assert!(
        seen.is_empty(),
        "lines of unknown sources: {:?}",
        seen.keys()
    );
    tail_seen.sort();
    assert_eq!(tail_seen, tails);
    order
}

fn write_gen(net: &Netns) -> String {
    std::fs::write(net.dir.path("gen.py"), GEN).unwrap();
    format!("python3 {}", net.dir.s("gen.py"))
}

#[test]
fn gather_line_merge_whole_lines_in_order_tagged() {
    need_root!("network namespaces");
    let net = Netns::start_with("ga", 4);
    let gen = write_gen(&net);
    // Four hosts, one line source each (n2's last line without a newline),
    // merged on rdpipe's stdout with tags.
    let mut a: Vec<String> = vec!["--tag".into()];
    for h in 1..=4 {
        a.push("--from".into());
        let tail = if h == 2 { " tail" } else { "" };
        a.push(format!("n{h}:{gen} s{h} 1200{tail}"));
    }
    let r = net.rdpipe(&a, None, 240);
    r.ok();
    let counts: HashMap<&str, usize> =
        [("s1", 1200), ("s2", 1200), ("s3", 1200), ("s4", 1200)].into();
    let tags: HashMap<&str, String> = (1..=4)
        .map(|h| (["s1", "s2", "s3", "s4"][h - 1], format!("n{h}: ")))
        .collect();
    let order = check_merge(&r.stdout, &counts, Some(&tags), &["s2"]);
    // The sources were taken in turn, not one after another.
    let switches = order.windows(2).filter(|w| w[0] != w[1]).count();
    eprintln!(
        "line merge: {} lines, {switches} switches between sources",
        order.len()
    );
    assert!(switches >= 3, "{switches} switches");
    net.assert_clean();

    // Into a sink pipeline on n1, two sources on n2 (tags name the index),
    // no tags on the second run: the file holds every line whole.
    let out = net.dir.s("merged");
    let r = net.rdpipe(
        &[
            "--tag".to_string(),
            "--from".into(),
            format!("n2:{gen} a 500"),
            "--from".into(),
            format!("n2:{gen} b 500 tail"),
            "--from".into(),
            format!("n3:{gen} c 700"),
            "n1:cat".to_string(),
            format!("n1:> {out}"),
        ],
        None,
        240,
    );
    r.ok();
    let merged = std::fs::read(&out).unwrap();
    let counts: HashMap<&str, usize> = [("a", 500), ("b", 500), ("c", 700)].into();
    let tags: HashMap<&str, String> = [
        ("a", "n2[1]: ".to_string()),
        ("b", "n2[2]: ".into()),
        ("c", "n3: ".into()),
    ]
    .into();
    check_merge(&merged, &counts, Some(&tags), &["b"]);
    net.assert_clean();
}

#[test]
fn gather_each_source_byte_exact_in_its_own_file() {
    need_root!("network namespaces");
    let net = Netns::start_with("gb", 4);
    let d = &net.dir;
    let mut sums = Vec::new();
    let mut a: Vec<String> = vec![
        "--each".into(),
        "-v".into(),
        "--json".into(),
        d.s("report.json"),
    ];
    for h in 1..=4 {
        let data = random_bytes((8 << 20) + h * 4097, h as u64);
        sums.push(xxh3_hex(&data));
        std::fs::write(d.path(&format!("src{h}")), &data).unwrap();
        a.push("--from".into());
        // Half read the file themselves, half through a command.
        a.push(if h % 2 == 0 {
            format!("n{h}:< {}", d.s(&format!("src{h}")))
        } else {
            format!("n{h}:cat {}", d.s(&format!("src{h}")))
        });
    }
    // Each instance records its RDPIPE_SOURCE, then the stream goes to a
    // file named after the source's host.
    a.push(format!(
        "n1:echo \"$RDPIPE_SOURCE $RDPIPE_SOURCE_INDEX\" > {}/env.$RDPIPE_SOURCE_INDEX; cat",
        d.s("")
    ));
    a.push(format!("n1:> {}", d.s("out.%h.%i")));
    let r = net.rdpipe(&a, None, 240);
    r.ok();
    assert!(r.stdout.is_empty());
    for h in 1..=4 {
        let got = file_xxh3(&d.path(&format!("out.n{h}.{h}")));
        assert_eq!(got, sums[h - 1], "n{h}'s stream differs");
        let env = std::fs::read_to_string(d.path(&format!("env.{h}"))).unwrap();
        assert_eq!(env.trim(), format!("n{h} {h}"));
        let line = format!("rdpipe: source {h} [{}] n{h} ", 3 * h - 2);
        assert!(
            r.stderr
                .lines()
                .any(|l| l.starts_with(&line) && l.contains(": ok: ") && l.contains(&sums[h - 1])),
            "no '{line}... ok':\n{}",
            r.stderr
        );
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("report.json")).unwrap()).unwrap();
    let sources = v["sources"].as_array().expect("sources in the report");
    assert_eq!(sources.len(), 4);
    for (k, s) in sources.iter().enumerate() {
        assert_eq!(s["index"], k + 1);
        assert_eq!(s["host"], format!("n{}", k + 1));
        assert!(s["ok"] == true && s["verified"] == true, "{s}");
        assert_eq!(s["checksum"], sums[k].as_str());
    }
    net.assert_clean();
}

/// `--compress` on a gather: each source's hop compresses at its source and
/// is decompressed at the sink, byte-exact, text shrunk and random data sent
/// as it is (each chunk that does not shrink goes raw).
#[test]
fn gather_compress_each_source_hop() {
    need_root!("network namespaces");
    let net = Netns::start("gg");
    let d = &net.dir;
    let text: Vec<u8> = (0..300_000u32)
        .flat_map(|i| format!("{i:08} sensor 7 reading {}\n", i % 977).into_bytes())
        .collect();
    let rnd = random_bytes((3 << 20) + 17, 54);
    std::fs::write(d.path("text"), &text).unwrap();
    std::fs::write(d.path("rnd"), &rnd).unwrap();
    let a: Vec<String> = vec![
        "--each".into(),
        "--compress=zstd:1".into(),
        "--json".into(),
        d.s("report.json"),
        "--from".into(),
        format!("n1:< {}", d.s("text")),
        "--from".into(),
        format!("n2:cat {}", d.s("text")),
        "--from".into(),
        format!("n3:< {}", d.s("rnd")),
        format!("n3:> {}", d.s("out.%h")),
    ];
    let r = net.rdpipe(&a, None, 120);
    r.ok();
    for (h, want) in [("n1", &text), ("n2", &text), ("n3", &rnd)] {
        let got = std::fs::read(d.path(&format!("out.{h}"))).unwrap();
        assert!(got == *want, "{h}'s stream differs ({} bytes)", got.len());
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("report.json")).unwrap()).unwrap();
    let hops = v["hops"].as_array().expect("hops in the report");
    assert_eq!(hops.len(), 3, "{v}");
    for hop in hops {
        let from = hop["from"].as_str().unwrap();
        let c = &hop["compress"];
        assert_eq!(c["mode"], "zstd:1", "{from}: {hop}");
        let (before, after) = (
            c["bytes_before"].as_u64().unwrap(),
            c["bytes_after"].as_u64().unwrap(),
        );
        if from == "n3" {
            assert_eq!(before, rnd.len() as u64, "{hop}");
            assert!(after >= before, "random data shrank? {hop}");
        } else {
            assert_eq!(before, text.len() as u64, "{hop}");
            assert!(after * 4 < before, "{from}: text not compressed: {hop}");
        }
    }
    net.assert_clean();
}

#[test]
fn gather_failing_source_is_named_and_the_others_complete() {
    need_root!("network namespaces");
    let net = Netns::start("gc");
    let gen = write_gen(&net);
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        a.extend([
            "--from".into(),
            format!("n1:{gen} a 800"),
            "--from".into(),
            "n2:echo b:0:; exit 3".into(),
            "--from".into(),
            format!("n3:{gen} c 800"),
        ]);
        a
    };
    let r = net.rdpipe(&args(&[]), None, 120);
    assert_eq!(r.code(), Some(3), "{}", r.stderr);
    // The others' lines all arrived (and n2's one whole line).
    let counts: HashMap<&str, usize> = [("a", 800), ("c", 800), ("b", 1)].into();
    check_merge(&r.stdout, &counts, None, &[]);
    assert!(
        r.stderr.lines().any(|l| l
            .starts_with("rdpipe: source 2 [3] n2 'echo b:0:; exit 3': FAILED (")
            && l.contains("exited with status 3")),
        "{}",
        r.stderr
    );
    // The root cause is the run's error; with every source needed, the
    // merged output did not end as good (rdpipe's stdout saw it aborted).
    assert!(
        r.stderr.contains(
            "rdpipe: error: n2 [3] 'echo b:0:; exit 3': the command exited with status 3"
        ),
        "{}",
        r.stderr
    );
    for s in ["source 1 [1] n1", "source 3 [5] n3"] {
        assert!(
            r.stderr
                .lines()
                .any(|l| l.starts_with(&format!("rdpipe: {s} ")) && l.contains(": ok: ")),
            "{s}:\n{}",
            r.stderr
        );
    }
    net.assert_clean();
    // --min-ok 2: the same run succeeds, with a warning.
    let r = net.rdpipe(&args(&["--min-ok", "2"]), None, 120);
    r.ok();
    assert!(
        r.stderr
            .contains("rdpipe: warning: 1 of 3 sources failed; 2 succeeded (--min-ok 2)"),
        "{}",
        r.stderr
    );
    net.assert_clean();
    // Into a '> FILE': replaced only when enough sources arrived whole (all
    // without --min-ok), as any '> FILE' only for a good stream.
    let out = net.dir.s("merged");
    std::fs::write(&out, b"old\n").unwrap();
    let into_file = |extra: &[&str]| {
        let mut a = args(extra);
        a.push(format!("n1:> {out}"));
        net.rdpipe(&a, None, 120)
    };
    let r = into_file(&[]);
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert_eq!(
        std::fs::read(&out).unwrap(),
        b"old\n",
        "replaced after a failed source"
    );
    let r = into_file(&["--min-ok", "2"]);
    r.ok();
    let counts: HashMap<&str, usize> = [("a", 800), ("c", 800), ("b", 1)].into();
    check_merge(&std::fs::read(&out).unwrap(), &counts, None, &[]);
    net.assert_clean();
}

#[test]
fn gather_source_host_killed_mid_stream() {
    need_root!("network namespaces");
    let net = Netns::start("gd");
    let d = &net.dir;
    let gen = write_gen(&net);
    let out = d.s("merged");
    // --min-ok 2: the merge ends as good with the two others (with every
    // source needed, it would end as failed and stop `cat`).
    let s = net.start_rdpipe(
        &[
            "--min-ok".to_string(),
            "2".into(),
            "--from".into(),
            format!("n1:{gen} a 600"),
            "--from".into(),
            "n2:while :; do echo b:x:forever; done".into(),
            "--from".into(),
            format!("n3:{gen} c 600"),
            format!("n1:cat > {out}"),
        ],
        None,
    );
    // Readiness: n2's lines are arriving.
    wait_until("n2's lines at the sink", Duration::from_secs(60), || {
        let got = std::fs::read(&out).unwrap_or_default();
        (got.windows(10).filter(|w| w == b"b:x:foreve").count() > 1000).then_some(())
    });
    // n2 dies: its ssh session, agent and command.
    for p in net.stray_pids(2) {
        kill("-9", p);
    }
    let r = s.finish(Duration::from_secs(60));
    r.ok();
    assert!(
        r.stderr.lines().any(|l| l
            .starts_with("rdpipe: source 2 [3] n2 'while :; do echo b:x:forever; done': FAILED (")
            && l.contains("the agent died")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("rdpipe: warning: 1 of 3 sources failed; 2 succeeded (--min-ok 2)"),
        "{}",
        r.stderr
    );
    // Everything the others sent, whole; n2's lines whole too.
    let merged = std::fs::read(&out).unwrap();
    let kept: Vec<u8> = merged
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && !l.starts_with(b"b:"))
        .flat_map(|l| l.iter().copied().chain([b'\n']))
        .collect();
    let counts: HashMap<&str, usize> = [("a", 600), ("c", 600)].into();
    check_merge(&kept, &counts, None, &[]);
    assert!(merged
        .split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b"b:"))
        .all(|l| l == b"b:x:forever"));
    net.assert_clean();
}

#[test]
fn gather_from_a_hostlist_is_one_source_per_host() {
    need_root!("network namespaces");
    let net = Netns::start_with("ge", 16);
    let gen = write_gen(&net);
    let r = net.rdpipe(
        &[
            "--from".to_string(),
            format!("n[1-16]:{gen} s 100"),
            "-v".into(),
            "--json".into(),
            net.dir.s("report.json"),
        ],
        None,
        240,
    );
    r.ok();
    let lines = r.stdout_str();
    assert_eq!(lines.lines().count(), 1600, "{}", r.stderr);
    for h in 1..=16 {
        assert!(
            r.stderr.lines().any(|l| l
                .starts_with(&format!("rdpipe: source {h} [{}] n{h} ", 2 * h - 1))
                && l.contains(": ok: ")),
            "n{h}:\n{}",
            r.stderr
        );
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(net.dir.path("report.json")).unwrap())
            .unwrap();
    let sources = v["sources"].as_array().expect("sources in the report");
    assert_eq!(sources.len(), 16);
    assert!(
        sources.iter().all(|s| s["lines"] == 100 && s["ok"] == true),
        "{sources:?}"
    );
    // -n names every source and the merge.
    let r = net.rdpipe(&["-n", "--from", "n[1-3]:cat /x"], None, 30);
    r.ok();
    let plan = r.stdout_str();
    assert!(
        plan.contains("gather: 3 source(s) into [7] local by line merge"),
        "{plan}"
    );
    // --from with --to: a usage error.
    let r = net.rdpipe(&["--from", "n1:x", "--to", "n2:y"], None, 30);
    assert_eq!(r.code(), Some(2), "{}", r.stderr);
    net.assert_clean();
}

#[test]
fn gather_sigint_mid_stream_leaves_nothing() {
    need_root!("network namespaces");
    let net = Netns::start("gf");
    let mark = format!("GATHERMARK{}", std::process::id());
    let s = net.start_rdpipe(
        &[
            "--from".to_string(),
            format!("n1:yes {mark}"),
            "--from".into(),
            format!("n2:yes {mark}"),
            format!("n3:cat >/dev/null # {mark}"),
        ],
        None,
    );
    wait_for(&format!("^yes {mark}"), Duration::from_secs(20));
    wait_for(&format!("cat >/dev/null # {mark}"), Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(500));
    s.interrupt();
    net.assert_clean();
}

#[test]
fn gather_spool_absorbs_a_stalled_sink() {
    need_root!("network namespaces");
    let net = Netns::start("gg");
    let d = &net.dir;
    let size = 24usize << 20;
    let mut sums = Vec::new();
    for h in 1..=2 {
        let data = random_bytes(size + h, 40 + h as u64);
        sums.push(xxh3_hex(&data));
        std::fs::write(d.path(&format!("src{h}")), &data).unwrap();
    }
    // The sink holds its input until GO exists; each source marks the end
    // of its writing. With a spool larger than each stream, both sources
    // finish while the sink is still held (without one they could not:
    // socket and pipe buffers hold a few MiB).
    let source = |h: usize| {
        format!(
            "n{h}:cat {src}; touch {done}",
            src = d.s(&format!("src{h}")),
            done = d.s(&format!("DONE{h}"))
        )
    };
    let held = format!(
        "n3:while [ ! -e {go} ]; do sleep 0.05; done; cat > {dir}/out.$RDPIPE_SOURCE_INDEX",
        go = d.s("GO"),
        dir = d.s("")
    );
    let s = net.start_rdpipe(
        &[
            "-v".to_string(),
            "--json".into(),
            d.s("report.json"),
            "--each".into(),
            "--spool".into(),
            "64M".into(),
            "--from".into(),
            source(1),
            "--from".into(),
            source(2),
            held,
        ],
        None,
    );
    wait_until(
        "both sources done while the sink is held",
        Duration::from_secs(60),
        || (d.path("DONE1").exists() && d.path("DONE2").exists()).then_some(()),
    );
    let held_back = |p: &str| std::fs::metadata(d.path(p)).map_or(0, |m| m.len());
    assert_eq!(
        held_back("out.1") + held_back("out.2"),
        0,
        "the sink was not held"
    );
    std::fs::write(d.path("GO"), b"").unwrap();
    let r = s.finish(Duration::from_secs(120));
    r.ok();
    for h in 1..=2 {
        assert_eq!(file_xxh3(&d.path(&format!("out.{h}"))), sums[h - 1]);
        assert!(
            r.stderr
                .lines()
                .any(|l| l.starts_with(&format!("rdpipe: source {h} "))
                    && l.contains(": ok: ")
                    && l.contains(", spool peak ")),
            "{}",
            r.stderr
        );
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path("report.json")).unwrap()).unwrap();
    for s in v["sources"].as_array().unwrap() {
        assert!(
            s["peak_backlog"].as_u64().unwrap() >= (size as u64) / 2,
            "{s}"
        );
    }
    net.assert_clean();

    // A line merge with a spool in a file on the sink's host: the same,
    // and the spool file is gone (unlinked at once).
    for f in ["DONE1", "DONE2", "GO"] {
        std::fs::remove_file(d.path(f)).unwrap();
    }
    let gen = write_gen(&net);
    std::fs::create_dir_all(d.path("spooldir")).unwrap();
    let out = d.s("merged");
    let s = net.start_rdpipe(
        &[
            "--spool".to_string(),
            format!("32M:{}", d.s("spooldir")),
            "--from".into(),
            format!("n1:{gen} a 2000; touch {}", d.s("DONE1")),
            "--from".into(),
            format!("n2:{gen} b 2000; touch {}", d.s("DONE2")),
            format!(
                "n3:while [ ! -e {go} ]; do sleep 0.05; done; cat > {out}",
                go = d.s("GO")
            ),
        ],
        None,
    );
    wait_until(
        "both line sources done while the sink is held",
        Duration::from_secs(60),
        || (d.path("DONE1").exists() && d.path("DONE2").exists()).then_some(()),
    );
    std::fs::write(d.path("GO"), b"").unwrap();
    s.finish(Duration::from_secs(120)).ok();
    let counts: HashMap<&str, usize> = [("a", 2000), ("b", 2000)].into();
    check_merge(&std::fs::read(&out).unwrap(), &counts, None, &[]);
    assert_eq!(std::fs::read_dir(d.path("spooldir")).unwrap().count(), 0);
    net.assert_clean();
}

#[test]
fn gather_a_source_host_down_at_the_start_costs_only_that_source() {
    need_root!("network namespaces");
    let net = Netns::start("gh");
    // n3's sshd is gone: its ssh master cannot start.
    kill("-9", net.sshd_pids[2]);
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        a.extend(["--tag".into(), "--from".into(), "n[1-3]:seq 1 500".into()]);
        a
    };
    let r = net.rdpipe(&args(&[]), None, 120);
    assert_ne!(r.code(), Some(0), "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("rdpipe: source 3 [5] n3 'seq 1 500': FAILED (n3")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("rdpipe: error: n3: ssh: connection failed"),
        "{}",
        r.stderr
    );
    // --min-ok 2: the two others' lines, whole, and a warning.
    let r = net.rdpipe(&args(&["--min-ok", "2"]), None, 120);
    r.ok();
    let out = r.stdout_str();
    for h in 1..=2 {
        let mine: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("n{h}: ")))
            .collect();
        let want: Vec<String> = (1..=500).map(|i| i.to_string()).collect();
        assert_eq!(mine, want, "n{h}'s lines");
    }
    assert!(
        r.stderr
            .contains("rdpipe: warning: 1 of 3 sources failed; 2 succeeded (--min-ok 2)"),
        "{}",
        r.stderr
    );
    net.assert_clean();
}
