//! Fuzzes the console's command line: `control::editor::Editor` fed arbitrary bytes, as typed
//! on the serial terminal, with tab completion over a few VM names.
//!
//! Input layout: one byte of flags (bit 0: the VM names also hold ones a line cannot: empty,
//! with a space, a control character, non-ASCII, and a duplicate), then the bytes typed.
//!
//! Checked besides "no panic": the echo is printable ASCII, CR, LF, BS, BEL and `ESC [ K` only,
//! and a terminal that shows it always shows the prompt and the line being typed, the cursor
//! at its end; a line is printable ASCII, at most `MAX_LINE` bytes, and never refused by
//! `parse` as too long, not ASCII or holding a control character; after it the line being typed
//! is empty, and Up brings back the line (without its outer spaces) if it was not blank.
#![no_main]

use control::command::{MAX_LINE, ParseError};
use control::editor::{Editor, Key, PROMPT, Screen};
use control::parse;
use libfuzzer_sys::fuzz_target;

const NAMES: &[&str] = &["vm0", "vm1", "vm10", "web", "ctl"];
const ODD_NAMES: &[&str] = &["vm0", "vm1", "", "vm 2", "vm\x1b3", "vm\u{e9}", "vm1", "web"];

fn printable(s: &str) -> bool {
    s.len() <= MAX_LINE && s.bytes().all(|b| (b' '..=b'~').contains(&b))
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, typed)) = data.split_first() else { return };
    let names = if flags & 1 != 0 { ODD_NAMES } else { NAMES };
    let mut editor = Editor::new();
    let mut screen = Screen::new();
    for &b in typed {
        let mut echo = String::new();
        match editor.feed(b, names, &mut echo) {
            Key::Nothing => screen.show(&echo),
            Key::Line(line) => {
                assert!(printable(line), "{line:?}");
                if let Err(
                    e @ (ParseError::TooLong(_) | ParseError::NotAscii(_) | ParseError::Control(_)),
                ) = parse(line.as_bytes())
                {
                    panic!("{line:?}: {e}");
                }
                let line = String::from(line);
                assert_eq!(editor.line(), "");
                screen.show(&echo);
                screen.show(PROMPT);
                // Up brings the line back.
                let mut after = editor.clone();
                let mut ignored = String::new();
                for &b in b"\x1b[A" {
                    after.feed(b, names, &mut ignored);
                }
                if !line.trim_matches(' ').is_empty() {
                    assert_eq!(after.line(), line.trim_matches(' '));
                }
            }
            Key::Close => {
                assert_eq!(editor.line(), "");
                screen.show(&echo);
                screen.show(PROMPT);
            }
        }
        assert!(printable(editor.line()), "{:?}", editor.line());
        screen.check(editor.line());
    }
});
