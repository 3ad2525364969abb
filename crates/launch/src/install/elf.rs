//! The GNU C library version an executable needs: the highest `GLIBC_x.y`
//! among the symbol versions its ELF version-needs section (`.gnu.version_r`)
//! asks for, read without any tool. Only 64-bit little-endian ELF files (the
//! targets rdpipe is built for) are read; anything else needs nothing known.

use std::fmt;
use std::str::FromStr;

/// A glibc version, `2.34`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GlibcVersion {
    /// 2.
    pub major: u32,
    /// 34.
    pub minor: u32,
}

impl fmt::Display for GlibcVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for GlibcVersion {
    type Err = ();
    /// `2.34`, `2.17.1` (the patch level is ignored), `2.35-0ubuntu3` (a
    /// distribution suffix is ignored).
    fn from_str(s: &str) -> Result<Self, ()> {
        let s = s.split(['-', '+', '~']).next().unwrap_or("");
        let mut it = s.split('.');
        let major = it.next().and_then(|m| m.parse().ok()).ok_or(())?;
        let minor = it.next().and_then(|m| m.parse().ok()).ok_or(())?;
        Ok(GlibcVersion { major, minor })
    }
}

const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(o..o.checked_add(2)?)?.try_into().ok()?,
    ))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(o..o.checked_add(4)?)?.try_into().ok()?,
    ))
}
fn u64_at(b: &[u8], o: usize) -> Option<usize> {
    let v = u64::from_le_bytes(b.get(o..o.checked_add(8)?)?.try_into().ok()?);
    usize::try_from(v).ok()
}
fn cstr_at(b: &[u8], o: usize) -> Option<&str> {
    let rest = b.get(o..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// One section header: (type, offset, size, link, info).
fn section(
    elf: &[u8],
    shoff: usize,
    entsize: usize,
    i: usize,
) -> Option<(u32, usize, usize, u32, u32)> {
    let h = shoff.checked_add(i.checked_mul(entsize)?)?;
    // The header's 64 bytes must lie in the file (no offset past it wraps).
    elf.get(h..h.checked_add(64)?)?;
    Some((
        u32_at(elf, h + 4)?,
        u64_at(elf, h + 24)?,
        u64_at(elf, h + 32)?,
        u32_at(elf, h + 40)?,
        u32_at(elf, h + 44)?,
    ))
}

/// Every symbol version `elf` needs from its libraries (`GLIBC_2.34`, ...).
pub fn needed_versions(elf: &[u8]) -> Vec<String> {
    needed(elf).unwrap_or_default()
}

fn needed(elf: &[u8]) -> Option<Vec<String>> {
    if elf.get(0..4)? != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return None;
    }
    let shoff = u64_at(elf, 0x28)?;
    let entsize = usize::from(u16_at(elf, 0x3a)?);
    let shnum = usize::from(u16_at(elf, 0x3c)?);
    if entsize < 64 {
        return None;
    }
    let mut out = Vec::new();
    for i in 0..shnum {
        let (ty, off, size, link, count) = section(elf, shoff, entsize, i)?;
        if ty != SHT_GNU_VERNEED {
            continue;
        }
        let (_, stroff, strsize, _, _) = section(elf, shoff, entsize, link as usize)?;
        let strtab = elf.get(stroff..stroff.checked_add(strsize)?)?;
        let sec = elf.get(off..off.checked_add(size)?)?;
        let mut vn = 0usize;
        for _ in 0..count {
            let cnt = u16_at(sec, vn + 2)?;
            let mut aux = vn.checked_add(u32_at(sec, vn + 8)? as usize)?;
            for _ in 0..cnt {
                out.push(cstr_at(strtab, u32_at(sec, aux + 8)? as usize)?.to_string());
                match u32_at(sec, aux + 12)? {
                    0 => break,
                    n => aux = aux.checked_add(n as usize)?,
                }
            }
            match u32_at(sec, vn + 12)? {
                0 => break,
                n => vn = vn.checked_add(n as usize)?,
            }
        }
    }
    Some(out)
}

/// The highest glibc version `elf` needs; None when it needs none (not
/// dynamically linked against glibc, or not an ELF file this reads).
pub fn glibc_needed(elf: &[u8]) -> Option<GlibcVersion> {
    needed_versions(elf)
        .iter()
        .filter_map(|v| v.strip_prefix("GLIBC_")?.parse().ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order() {
        let v = |s: &str| s.parse::<GlibcVersion>().unwrap();
        assert!(v("2.34") > v("2.9"));
        assert_eq!(v("2.17.1"), v("2.17"));
        assert_eq!(v("2.35-0ubuntu3.1").to_string(), "2.35");
        assert!("PRIVATE".parse::<GlibcVersion>().is_err());
        assert!("2".parse::<GlibcVersion>().is_err());
    }

    #[test]
    fn not_elf_needs_nothing() {
        assert_eq!(glibc_needed(b"#!/bin/sh\necho hi\n"), None);
        assert_eq!(glibc_needed(b""), None);
        let mut junk = b"\x7fELF\x02\x01".to_vec();
        junk.resize(200, 0xff);
        assert_eq!(glibc_needed(&junk), None);
    }

    /// This test binary is linked like rdpipe: what it needs agrees with
    /// `objdump -T` where that tool exists.
    #[test]
    fn reads_this_executable() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let need = glibc_needed(&me).expect("a glibc build needs some GLIBC_ version");
        assert!(need >= GlibcVersion { major: 2, minor: 2 }, "{need}");
        let Ok(o) = std::process::Command::new("objdump")
            .arg("-T")
            .arg(std::env::current_exe().unwrap())
            .output()
        else {
            return;
        };
        let text = String::from_utf8_lossy(&o.stdout);
        let max = text
            .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
            .filter_map(|w| w.strip_prefix("GLIBC_")?.parse::<GlibcVersion>().ok())
            .max();
        if o.status.success() && max.is_some() {
            assert_eq!(Some(need), max);
        }
    }
}
