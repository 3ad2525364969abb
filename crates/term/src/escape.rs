//! Text from elsewhere made safe for a terminal: file names a sender chose,
//! the lines of remote stderr rdpipe forwards, anything that goes into a
//! message. A control character in such text (ESC starting a CSI or OSC
//! sequence that retitles the window or writes the clipboard, BEL, a
//! carriage return that overwrites the line, a newline that forges a line of
//! its own) would act on the user's terminal. [`escaped`] writes every one of
//! them as a visible escape instead, as `ls -b` does: `\n`, `\r`, `\t`, `\e`
//! and `\xNN` (C0, DEL, and the C1 range U+0080..U+009F, which some terminals
//! read as 8-bit CSI), and bytes that are not UTF-8 as `\xNN`. So one entry
//! stays one line and nothing in it reaches the terminal as a command.
//!
//! A backslash is written as it is: messages quote paths that hold them,
//! and the escapes above exist only to be seen, not to be parsed back.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must be escaped.
fn is_escaped(c: char) -> bool {
    c.is_control()
}

fn push_escape(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\x1b' => out.push_str("\\e"),
        c if (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `s` with every control character escaped (see the module doc); borrowed
/// when there is none.
pub fn escaped(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_escaped(c) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escaped`] for bytes: what is not UTF-8 is written `\xNN`, byte by byte.
pub fn escaped_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len() + 8);
    for chunk in b.utf8_chunks() {
        out.push_str(&escaped(chunk.valid()));
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn what_a_hostile_name_holds_is_shown_not_done() {
        // Retitle the window, write the clipboard (OSC 52), ring, forge a line.
        let name = "a\x1b]0;owned\x07b\x1b]52;c;ZWNobyBoaQ==\x1b\\\nrdcp: all 3 copied whole\r";
        assert_eq!(
            escaped(name),
            "a\\e]0;owned\\x07b\\e]52;c;ZWNobyBoaQ==\\e\\\\nrdcp: all 3 copied whole\\r"
        );
        assert_eq!(escaped("tab\there\u{9b}2J\u{7f}"), "tab\\there\\x9b2J\\x7f");
        assert!(matches!(escaped("plain/ünï ©"), Cow::Borrowed(_)));
        assert_eq!(
            escaped_bytes(b"x\xff\x9b[2J\xc3\xa9\n"),
            "x\\xff\\x9b[2J\u{e9}\\n"
        );
    }

    proptest! {
        /// Whatever the input, the output holds no control character (so no
        /// escape sequence and one line), and text without any is unchanged.
        #[test]
        fn no_control_character_survives(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let out = escaped_bytes(&b);
            prop_assert!(!out.chars().any(char::is_control), "{out:?}");
            if let Ok(s) = std::str::from_utf8(&b) {
                prop_assert_eq!(&*escaped(s), out.as_str());
                if !s.chars().any(char::is_control) {
                    prop_assert_eq!(out.as_str(), s);
                }
            }
        }
    }
}
