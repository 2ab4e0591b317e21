//! The command line of armhv's console (issue 18): a line editor fed one byte at a time from
//! the serial terminal, with a history and tab completion of commands, VM names and log levels.
//!
//! The console opens it with a Ctrl-A key, writes [`PROMPT`], then hands it every byte typed,
//! with the VM names to complete and a writer for what the terminal must show (to send to the
//! UART as is). [`Editor::feed`] says when a line is complete ([`Key::Line`]) or the user leaves
//! ([`Key::Close`]). The editor executes nothing: the caller handles [`CONSOLE_WORDS`] itself,
//! gives the other lines to [`parse`](crate::parse), writes the answer, then the prompt again.
//!
//! | key | does |
//! |---|---|
//! | printable ASCII | appended, up to [`MAX_LINE`] bytes |
//! | Backspace (DEL or BS) | deletes the last character |
//! | Ctrl-U | clears the line |
//! | Ctrl-C | drops the line: `^C`, a new prompt |
//! | Enter (CR, LF, or CR LF: once) | [`Key::Line`], the line as typed (it may be empty) |
//! | Ctrl-D | on an empty line: [`Key::Close`] |
//! | Up, Down (`ESC [ A`/`B`, `ESC O A`/`B`) | the last [`HISTORY`] distinct lines, newest first |
//! | Tab | completes the last word (below) |
//!
//! Down past the newest line shows an empty line again. A line that comes back from the
//! history and is edited is a new line: the history keeps the old one.
//!
//! Tab completes the first word from the commands (`list`, every [`Verb`], `log`, `help`) and
//! [`CONSOLE_WORDS`]; the second after a verb or `focus` from the VM names, after `log` from the
//! [`LogLevel`]s. One match is completed, with a space after it; several are completed to their
//! longest common prefix, and a second Tab in a row, when that adds nothing, lists them.
//!
//! A key that cannot do anything (line full, nothing to delete, no older or newer line, no
//! completion, Ctrl-D on a non-empty line, a non-ASCII byte) rings the terminal's bell (BEL).
//! Other escape sequences (the other arrows, Home, F1, Alt-x, ...) are read whole and ignored,
//! and so are the other control characters. The cursor stays at the end of the line.
//!
//! The editor allocates nothing: its buffers are arrays (about 4.6 KiB in all) and
//! [`Editor::new`] is `const`, so it can be a `static` used from the console's interrupt
//! handler, and no terminal can make it grow. No byte sequence makes it panic (a test feeds it
//! random bytes; `fuzz/fuzz_targets/control_editor.rs` fuzzes it).
//!
//! ```
//! use control::editor::{Editor, Key, PROMPT};
//!
//! let mut editor = Editor::new();
//! let mut screen = String::from(PROMPT);
//! let mut line = None;
//! for &b in b"sto\tw\t\r" {
//!     if let Key::Line(l) = editor.feed(b, &["web", "db"], &mut screen) {
//!         line = Some(String::from(l));
//!     }
//! }
//! assert_eq!(line.as_deref(), Some("stop web "));
//! assert_eq!(screen, "armhv> stop web \r\n");
//! assert!(control::parse(line.unwrap().as_bytes()).is_ok());
//! ```

use core::fmt::{self, Write};

use crate::command::{LogLevel, MAX_LINE, Verb};

/// What the command line shows before each line.
pub const PROMPT: &str = "armhv> ";

/// How many lines the history keeps.
pub const HISTORY: usize = 16;

/// Words the console's command line takes besides the command language, which the caller
/// handles before [`parse`](crate::parse): `focus NAME` (the console's input goes to VM `NAME`)
/// and `exit` (leave the command line, as Ctrl-D does). Tab completes them as commands, and VM
/// names after `focus`.
pub const CONSOLE_WORDS: &[&str] = &["focus", "exit"];

/// The first words, in [`HELP`](crate::command::HELP)'s order.
const COMMANDS: [&str; 3 + Verb::ALL.len() + CONSOLE_WORDS.len()] = {
    let mut words = [""; 3 + Verb::ALL.len() + CONSOLE_WORDS.len()];
    words[0] = "list";
    let mut i = 0;
    while i < Verb::ALL.len() {
        words[1 + i] = Verb::ALL[i].name();
        i += 1;
    }
    words[1 + Verb::ALL.len()] = "log";
    words[2 + Verb::ALL.len()] = "help";
    let mut i = 0;
    while i < CONSOLE_WORDS.len() {
        words[3 + Verb::ALL.len() + i] = CONSOLE_WORDS[i];
        i += 1;
    }
    words
};

const LEVELS: [&str; LogLevel::ALL.len()] = {
    let mut words = [""; LogLevel::ALL.len()];
    let mut i = 0;
    while i < LogLevel::ALL.len() {
        words[i] = LogLevel::ALL[i].name();
        i += 1;
    }
    words
};

const CTRL_C: u8 = 0x03;
const CTRL_D: u8 = 0x04;
const BS: u8 = 0x08;
const TAB: u8 = b'\t';
const CTRL_U: u8 = 0x15;
const ESC: u8 = 0x1b;
const DEL: u8 = 0x7f;
const BEL: &str = "\x07";

/// What the caller must do after a byte (besides sending what [`Editor::feed`] wrote).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key<'a> {
    /// Nothing: the line is being typed.
    Nothing,
    /// Enter: a complete line, as typed (printable ASCII, perhaps empty or only spaces; at most
    /// [`MAX_LINE`] bytes, without its line ending, so [`parse`](crate::parse) takes it). The
    /// editor has written `\r\n` and is ready for the next line: the caller writes its answer,
    /// then [`PROMPT`].
    Line(&'a str),
    /// Ctrl-D on an empty line: leave the command line. The editor has written `\r\n`; it keeps
    /// its history for the next time.
    Close,
}

/// The command line's state: the line, the history, a half-read escape sequence.
#[derive(Clone, Debug)]
pub struct Editor {
    line: Text,
    /// The last line entered, which [`Key::Line`] borrows.
    entered: Text,
    /// Oldest first; `history[..count]` are non-empty, without leading or trailing spaces, and
    /// distinct.
    history: [Text; HISTORY],
    count: usize,
    /// The history entry shown, while Up and Down browse it.
    browsing: Option<usize>,
    escape: Escape,
    /// The last byte was a CR taken as Enter: a LF now is the same Enter.
    after_cr: bool,
    /// The last byte was a Tab.
    after_tab: bool,
}

impl Default for Editor {
    fn default() -> Self {
        Self::new()
    }
}

impl Editor {
    pub const fn new() -> Self {
        Self {
            line: Text::EMPTY,
            entered: Text::EMPTY,
            history: [Text::EMPTY; HISTORY],
            count: 0,
            browsing: None,
            escape: Escape::None,
            after_cr: false,
            after_tab: false,
        }
    }

    /// What the command line shows before each line: [`PROMPT`].
    pub const fn prompt(&self) -> &'static str {
        PROMPT
    }

    /// The line being typed, for a caller that must redraw it (`\r\x1b[K`, [`PROMPT`], the
    /// line) after writing something else over it, such as a log message.
    pub fn line(&self) -> &str {
        self.line.as_str()
    }

    /// Feeds one byte typed; writes what the terminal must show into `echo` (the character
    /// typed, `\x08 \x08` to erase one, a redraw `\r\x1b[K` + prompt + line, `\r\n` for Enter,
    /// BEL for a key refused) and returns what happened. `names` are the VM names that Tab
    /// completes (a name that is not printable ASCII without spaces is never offered). Errors
    /// from `echo` are ignored: the editor's state does not depend on what the terminal shows.
    pub fn feed(&mut self, byte: u8, names: &[&str], echo: &mut dyn Write) -> Key<'_> {
        let after_cr = core::mem::replace(&mut self.after_cr, false);
        let after_tab = core::mem::replace(&mut self.after_tab, false);
        match self.escape(byte) {
            Step::Swallowed => {}
            Step::Up => self.up(echo),
            Step::Down => self.down(echo),
            Step::Byte => match byte {
                b'\n' if after_cr => {}
                b'\r' | b'\n' => {
                    self.after_cr = byte == b'\r';
                    put(echo, "\r\n");
                    return self.enter();
                }
                b' '..=b'~' => {
                    if self.line.push(&[byte]) {
                        let _ = echo.write_char(char::from(byte));
                    } else {
                        put(echo, BEL);
                    }
                }
                DEL | BS => put(echo, if self.line.pop() { "\x08 \x08" } else { BEL }),
                CTRL_U => {
                    self.line.clear();
                    self.browsing = None;
                    self.redraw(echo);
                }
                CTRL_C => {
                    self.line.clear();
                    self.browsing = None;
                    put(echo, "^C\r\n");
                    put(echo, PROMPT);
                }
                CTRL_D if self.line.is_empty() => {
                    self.browsing = None;
                    put(echo, "\r\n");
                    return Key::Close;
                }
                CTRL_D => put(echo, BEL),
                TAB => {
                    self.after_tab = true;
                    self.complete(names, after_tab, echo);
                }
                0x80.. => put(echo, BEL),
                _ => {}
            },
        }
        Key::Nothing
    }

    /// Reads `byte` as part of an escape sequence, if it is one: ESC `[` parameters and
    /// intermediates (0x20 to 0x3f) then a final byte (0x40 to 0x7e); ESC `O`, parameters (0x30
    /// to 0x3f) and a final byte; ESC and one byte (Alt). A control byte or a non-ASCII one cuts a sequence short and
    /// counts as itself, so Enter or Ctrl-C always work; ESC starts a new one.
    fn escape(&mut self, byte: u8) -> Step {
        let (next, step) = match (self.escape, byte) {
            (Escape::None, ESC) => (Escape::Esc, Step::Swallowed),
            (Escape::None, _) => (Escape::None, Step::Byte),
            (Escape::Esc, b'[') => (Escape::Csi, Step::Swallowed),
            (Escape::Esc, b'O') => (Escape::Ss3, Step::Swallowed),
            (Escape::Csi, 0x20..=0x3f) => (Escape::Csi, Step::Swallowed),
            // Old xterms' modified function keys: ESC O 5 P.
            (Escape::Ss3, 0x30..=0x3f) => (Escape::Ss3, Step::Swallowed),
            (Escape::Csi | Escape::Ss3, b'A') => (Escape::None, Step::Up),
            (Escape::Csi | Escape::Ss3, b'B') => (Escape::None, Step::Down),
            (_, 0x20..=0x7e) => (Escape::None, Step::Swallowed),
            (_, ESC) => (Escape::Esc, Step::Swallowed),
            _ => (Escape::None, Step::Byte),
        };
        self.escape = next;
        step
    }

    fn enter(&mut self) -> Key<'_> {
        self.entered = self.line;
        self.line.clear();
        self.browsing = None;
        let line = self.entered.as_str().trim_matches(' ');
        if !line.is_empty() {
            // The history keeps one copy of a line, where it was entered last.
            if let Some(i) = self.history[..self.count].iter().position(|h| h.as_str() == line) {
                self.history[i..self.count].rotate_left(1);
                self.count -= 1;
            } else if self.count == HISTORY {
                self.history.rotate_left(1);
                self.count -= 1;
            }
            self.history[self.count] = Text::new(line);
            self.count += 1;
        }
        Key::Line(self.entered.as_str())
    }

    fn up(&mut self, echo: &mut dyn Write) {
        let older = match self.browsing {
            None => self.count.checked_sub(1),
            Some(i) => i.checked_sub(1),
        };
        match older {
            Some(i) => self.show(Some(i), echo),
            None => put(echo, BEL),
        }
    }

    fn down(&mut self, echo: &mut dyn Write) {
        match self.browsing {
            Some(i) if i + 1 < self.count => self.show(Some(i + 1), echo),
            Some(_) => self.show(None, echo),
            None => put(echo, BEL),
        }
    }

    /// Shows history entry `entry`, or an empty line.
    fn show(&mut self, entry: Option<usize>, echo: &mut dyn Write) {
        self.browsing = entry;
        self.line = entry.map_or(Text::EMPTY, |i| self.history[i]);
        self.redraw(echo);
    }

    fn redraw(&self, echo: &mut dyn Write) {
        put(echo, "\r\x1b[K");
        put(echo, PROMPT);
        put(echo, self.line.as_str());
    }

    /// Tab; `again` if the byte before was a Tab too.
    fn complete(&mut self, names: &[&str], again: bool, echo: &mut dyn Write) {
        let line = self.line.as_str();
        let start = line.rfind(' ').map_or(0, |i| i + 1);
        let (before, word) = line.split_at(start);
        let mut words = before.split(' ').filter(|w| !w.is_empty());
        let candidates: &[&str] = match (words.next(), words.next()) {
            (None, _) => &COMMANDS,
            (Some("log"), None) => &LEVELS,
            (Some(w), None) if w == "focus" || Verb::ALL.iter().any(|v| v.name() == w) => names,
            _ => &[],
        };
        let mut count = 0;
        let mut first = "";
        let mut common = 0;
        for m in matches(candidates, word) {
            if count == 0 {
                (first, common) = (m, m.len());
            } else {
                common =
                    first.bytes().zip(m.bytes()).take(common).take_while(|(a, b)| a == b).count();
            }
            count += 1;
        }
        let typed = word.len();
        match count {
            0 => put(echo, BEL),
            1 => self.insert(&[&first[typed..], " "], echo),
            _ if common > typed => self.insert(&[&first[typed..common]], echo),
            _ if again => {
                put(echo, "\r\n");
                for (n, m) in matches(candidates, word).enumerate() {
                    put(echo, if n == 0 { "" } else { "  " });
                    put(echo, m);
                }
                put(echo, "\r\n");
                put(echo, PROMPT);
                put(echo, line);
            }
            _ => put(echo, BEL),
        }
    }

    /// Appends `parts` to the line and shows them, if they all fit.
    fn insert(&mut self, parts: &[&str], echo: &mut dyn Write) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if self.line.len + len > MAX_LINE {
            put(echo, BEL);
            return;
        }
        for part in parts {
            self.line.push(part.as_bytes());
            put(echo, part);
        }
    }
}

/// The candidates that complete `word`: each once, and only words a line may hold (non-empty,
/// printable ASCII, no spaces).
fn matches<'a, 'n>(candidates: &'a [&'n str], word: &'a str) -> impl Iterator<Item = &'n str> {
    candidates.iter().enumerate().filter_map(move |(i, &c)| {
        let word_like = !c.is_empty() && c.bytes().all(|b| b.is_ascii_graphic());
        (word_like && c.starts_with(word) && !candidates[..i].contains(&c)).then_some(c)
    })
}

fn put(echo: &mut dyn Write, s: &str) {
    let _ = echo.write_str(s);
}

/// Where an escape sequence is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Escape {
    None,
    /// After ESC.
    Esc,
    /// After ESC `[`, and perhaps parameters.
    Csi,
    /// After ESC `O`.
    Ss3,
}

/// What a byte is, escape sequences considered.
enum Step {
    /// Part of an escape sequence.
    Swallowed,
    Up,
    Down,
    /// Not in an escape sequence: a key.
    Byte,
}

/// A line: printable ASCII, at most [`MAX_LINE`] bytes.
#[derive(Clone, Copy)]
struct Text {
    len: usize,
    bytes: [u8; MAX_LINE],
}

impl Text {
    const EMPTY: Self = Self { len: 0, bytes: [0; MAX_LINE] };

    /// `s` (printable ASCII), cut to [`MAX_LINE`] bytes.
    fn new(s: &str) -> Self {
        let mut text = Self::EMPTY;
        let len = s.len().min(MAX_LINE);
        text.bytes[..len].copy_from_slice(&s.as_bytes()[..len]);
        text.len = len;
        text
    }

    fn as_str(&self) -> &str {
        // Printable ASCII only, so always UTF-8.
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `s` (printable ASCII) if it fits.
    fn push(&mut self, s: &[u8]) -> bool {
        let end = self.len + s.len();
        if end > MAX_LINE {
            return false;
        }
        self.bytes[self.len..end].copy_from_slice(s);
        self.len = end;
        true
    }

    fn pop(&mut self) -> bool {
        let popped = self.len > 0;
        self.len = self.len.saturating_sub(1);
        popped
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A terminal's line as the editor's echo leaves it: what a user sees, for the tests and the
/// fuzz target to check against the editor's own line. It panics on an echo a terminal would
/// show wrongly (a line feed away from the left margin, a backspace at it, an escape sequence
/// other than EL 0, a byte that is not printable).
#[derive(Debug)]
pub struct Screen {
    row: alloc::vec::Vec<u8>,
    col: usize,
}

impl Default for Screen {
    fn default() -> Self {
        Self::new()
    }
}

impl Screen {
    /// A fresh command line: the prompt, the cursor after it.
    pub fn new() -> Self {
        Self { row: PROMPT.bytes().collect(), col: PROMPT.len() }
    }

    /// Applies `echo`, as a terminal would.
    pub fn show(&mut self, echo: &str) {
        let mut bytes = echo.bytes();
        while let Some(b) = bytes.next() {
            match b {
                b'\r' => self.col = 0,
                b'\n' => {
                    assert_eq!(self.col, 0, "LF without CR: {echo:?}");
                    self.row.clear();
                }
                0x08 => {
                    assert!(self.col > 0, "BS at the left margin: {echo:?}");
                    self.col -= 1;
                }
                0x07 => {}
                ESC => {
                    assert_eq!((bytes.next(), bytes.next()), (Some(b'['), Some(b'K')), "{echo:?}");
                    self.row.truncate(self.col);
                }
                b' '..=b'~' => {
                    if self.col < self.row.len() {
                        self.row[self.col] = b;
                    } else {
                        self.row.push(b);
                    }
                    self.col += 1;
                }
                _ => panic!("echoed {b:#x}: {echo:?}"),
            }
        }
    }

    /// Checks that the terminal shows the prompt and `line`, the cursor after it.
    pub fn check(&self, line: &str) {
        let (shown, after) = self.row.split_at(self.col);
        assert_eq!(alloc::string::String::from_utf8_lossy(shown), alloc::format!("{PROMPT}{line}"));
        assert!(
            after.iter().all(|&b| b == b' '),
            "{:?}",
            alloc::string::String::from_utf8_lossy(after)
        );
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use alloc::string::{String, ToString};
    use alloc::vec::Vec;
    use alloc::{format, vec};

    use super::*;
    use crate::command::{ParseError, parse};

    const NAMES: &[&str] = &["web", "db1", "db2", "dns"];

    /// What a feed returned, owned.
    #[derive(Debug, PartialEq, Eq)]
    enum Got {
        Line(String),
        Close,
    }

    /// Feeds `bytes`; returns the echo and the lines and closes.
    fn feed(ed: &mut Editor, bytes: &[u8], names: &[&str]) -> (String, Vec<Got>) {
        let mut echo = String::new();
        let mut got = Vec::new();
        for &b in bytes {
            match ed.feed(b, names, &mut echo) {
                Key::Nothing => {}
                Key::Line(line) => got.push(Got::Line(line.to_string())),
                Key::Close => got.push(Got::Close),
            }
        }
        (echo, got)
    }

    fn line(s: &str) -> Got {
        Got::Line(s.to_string())
    }

    /// `lines`, each entered.
    fn entered(lines: &[&str]) -> Editor {
        let mut ed = Editor::new();
        for l in lines {
            let (_, got) = feed(&mut ed, format!("{l}\r").as_bytes(), NAMES);
            assert_eq!(got, [line(l)]);
        }
        ed
    }

    fn history(ed: &Editor) -> Vec<&str> {
        ed.history[..ed.count].iter().map(Text::as_str).collect()
    }

    fn redraw(line: &str) -> String {
        format!("\r\x1b[K{PROMPT}{line}")
    }

    #[test]
    fn typing_and_enter() {
        let mut ed = Editor::new();
        assert_eq!(ed.prompt(), "armhv> ");
        let (echo, got) = feed(&mut ed, b"start web", NAMES);
        assert_eq!((echo.as_str(), got.as_slice(), ed.line()), ("start web", &[][..], "start web"));
        let (echo, got) = feed(&mut ed, b"\r", NAMES);
        assert_eq!((echo.as_str(), got), ("\r\n", vec![line("start web")]));
        assert_eq!(ed.line(), "");
        // An empty line is a line too, and the editor is ready for the next.
        assert_eq!(feed(&mut ed, b"\rlist\n", NAMES).1, [line(""), line("list")]);
    }

    #[test]
    fn crlf_is_one_enter() {
        let mut ed = Editor::new();
        let (echo, got) = feed(&mut ed, b"list\r\n\r\nhelp\n\n\r\r", NAMES);
        assert_eq!(got, [line("list"), line(""), line("help"), line(""), line(""), line("")]);
        assert_eq!(echo, "list\r\n\r\nhelp\r\n\r\n\r\n\r\n");
        // Only right after the CR: a LF after another byte is an Enter.
        assert_eq!(feed(&mut ed, b"a\rb\n", NAMES).1, [line("a"), line("b")]);
        assert_eq!(feed(&mut ed, b"\r\x15\n", NAMES).1, [line(""), line("")]);
    }

    #[test]
    fn backspace() {
        let mut ed = Editor::new();
        let (echo, _) = feed(&mut ed, b"lisx\x7ft\x08t", NAMES);
        assert_eq!(echo, "lisx\x08 \x08t\x08 \x08t");
        assert_eq!(ed.line(), "list");
        // Nothing to delete: the bell.
        let (echo, _) = feed(&mut ed, b"\x7f\x7f\x7f\x7f\x7f", NAMES);
        assert_eq!(echo, "\x08 \x08".repeat(4) + "\x07");
        assert_eq!(ed.line(), "");
    }

    #[test]
    fn ctrl_u_clears_the_line() {
        let mut ed = Editor::new();
        let (echo, got) = feed(&mut ed, b"stop web\x15", NAMES);
        assert_eq!(echo, format!("stop web{}", redraw("")));
        assert!(got.is_empty());
        assert_eq!(feed(&mut ed, b"list\r", NAMES).1, [line("list")]);
    }

    #[test]
    fn ctrl_c_drops_the_line() {
        let mut ed = Editor::new();
        let (echo, got) = feed(&mut ed, b"sto\x03", NAMES);
        assert_eq!(echo, "sto^C\r\narmhv> ");
        assert!(got.is_empty());
        assert_eq!(ed.line(), "");
        assert_eq!(feed(&mut ed, b"list\r", NAMES).1, [line("list")]);
        assert_eq!(history(&ed), ["list"]);
        // On an empty line too; it never closes.
        assert_eq!(feed(&mut ed, b"\x03\x03", NAMES), ("^C\r\narmhv> ".repeat(2), vec![]));
    }

    #[test]
    fn ctrl_d_on_an_empty_line_closes() {
        let mut ed = entered(&["list"]);
        assert_eq!(feed(&mut ed, b"a\x04", NAMES), ("a\x07".into(), vec![]));
        assert_eq!(feed(&mut ed, b"\x7f\x04", NAMES), ("\x08 \x08\r\n".into(), vec![Got::Close]));
        // The history stays for the next time.
        assert_eq!(feed(&mut ed, b"\x1b[A\r", NAMES).1, [line("list")]);
    }

    #[test]
    fn history_up_and_down() {
        let mut ed = entered(&["start web", "stop web", "", "   ", "info web"]);
        assert_eq!(history(&ed), ["start web", "stop web", "info web"]);
        let up = |ed: &mut Editor| feed(ed, b"\x1b[A", NAMES).0;
        let down = |ed: &mut Editor| feed(ed, b"\x1bOB", NAMES).0;
        // Nothing newer than the line being typed.
        assert_eq!(down(&mut ed), "\x07");
        assert_eq!(up(&mut ed), redraw("info web"));
        assert_eq!(up(&mut ed), redraw("stop web"));
        assert_eq!(feed(&mut ed, b"\x1bOA", NAMES).0, redraw("start web"));
        // Nothing older than the oldest: the bell, and the line stays.
        assert_eq!(up(&mut ed), "\x07");
        assert_eq!(ed.line(), "start web");
        assert_eq!(down(&mut ed), redraw("stop web"));
        assert_eq!(down(&mut ed), redraw("info web"));
        // Past the newest: an empty line, then the bell.
        assert_eq!(down(&mut ed), redraw(""));
        assert_eq!(down(&mut ed), "\x07");
        assert_eq!(ed.line(), "");
        // A line taken from the history and edited is a new line; the history keeps the old.
        assert_eq!(feed(&mut ed, b"\x1b[A\x1b[A\x7f\x7f\x7fdb1\r", NAMES).1, [line("stop db1")]);
        assert_eq!(history(&ed), ["start web", "stop web", "info web", "stop db1"]);
        // Entering a line again moves it to the newest.
        assert_eq!(feed(&mut ed, b"\x1b[A\x1b[A\x1b[A\r", NAMES).1, [line("stop web")]);
        assert_eq!(history(&ed), ["start web", "info web", "stop db1", "stop web"]);
        assert_eq!(feed(&mut ed, b"\x1b[A", NAMES).0, redraw("stop web"));
    }

    #[test]
    fn history_keeps_distinct_lines_and_the_last_16() {
        let mut ed = entered(&["list", "list", " list ", "help", "list"]);
        assert_eq!(history(&ed), ["help", "list"]);
        assert_eq!(feed(&mut ed, b"\x1b[A\x1b[A", NAMES).0, redraw("list") + &redraw("help"));
        assert_eq!(feed(&mut ed, b"\x1b[A", NAMES).0, "\x07");

        let lines: Vec<String> = (0..20).map(|n| format!("info vm{n}")).collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let mut ed = entered(&lines);
        assert_eq!(history(&ed), lines[4..]);
        let (_, got) = feed(&mut ed, &[b"\x1b[A".repeat(20), b"\r".to_vec()].concat(), NAMES);
        assert_eq!(got, [line("info vm4")]);
    }

    #[test]
    fn completes_commands() {
        let complete = |typed: &str| {
            let mut ed = Editor::new();
            feed(&mut ed, typed.as_bytes(), NAMES);
            let (echo, _) = feed(&mut ed, b"\t", NAMES);
            (echo, ed.line().to_string())
        };
        assert_eq!(complete("sta"), ("rt ".into(), "start ".into()));
        assert_eq!(complete("p"), ("ause ".into(), "pause ".into()));
        assert_eq!(complete("lo"), ("g ".into(), "log ".into()));
        assert_eq!(complete("h"), ("elp ".into(), "help ".into()));
        assert_eq!(complete("i"), ("nfo ".into(), "info ".into()));
        assert_eq!(complete("  f"), ("ocus ".into(), "  focus ".into()));
        assert_eq!(complete("e"), ("xit ".into(), "exit ".into()));
        // A whole word gets its space.
        assert_eq!(complete("stop"), (" ".into(), "stop ".into()));
        // Several: restart, resume share "res".
        assert_eq!(complete("r"), ("es".into(), "res".into()));
        assert_eq!(complete("res"), ("\x07".into(), "res".into()));
        assert_eq!(complete("x"), ("\x07".into(), "x".into()));
        assert_eq!(complete("List"), ("\x07".into(), "List".into()));
    }

    #[test]
    fn a_second_tab_lists_the_matches() {
        let mut ed = Editor::new();
        assert_eq!(feed(&mut ed, b"r\t", NAMES).0, "res");
        assert_eq!(feed(&mut ed, b"\t", NAMES).0, "\r\nrestart  resume\r\narmhv> res");
        // And again while Tab is pressed.
        assert_eq!(feed(&mut ed, b"\t", NAMES).0, "\r\nrestart  resume\r\narmhv> res");
        assert_eq!(feed(&mut ed, b"u\t", NAMES).0, "ume ");

        // Nothing to add on the first Tab: the bell, then the list.
        let mut ed = Editor::new();
        assert_eq!(feed(&mut ed, b"\t", NAMES).0, "\x07");
        assert_eq!(
            feed(&mut ed, b"\t", NAMES).0,
            "\r\nlist  start  stop  restart  pause  resume  info  log  help  focus  exit\r\narmhv> "
        );
        // Another key between the Tabs: the bell again.
        assert_eq!(feed(&mut ed, b"s\t", NAMES).0, "st");
        assert_eq!(feed(&mut ed, b"x\x7f\t", NAMES).0, "x\x08 \x08\x07");
        assert_eq!(feed(&mut ed, b"\t", NAMES).0, "\r\nstart  stop\r\narmhv> st");
    }

    #[test]
    fn completes_vm_names_after_a_verb_or_focus() {
        let mut ed = Editor::new();
        assert_eq!(feed(&mut ed, b"stop w\t", NAMES).0, "stop web ");
        assert_eq!(feed(&mut ed, b"\r", NAMES).1, [line("stop web ")]);
        assert_eq!(feed(&mut ed, b"start d\t", NAMES).0, "start d\x07");
        assert_eq!(feed(&mut ed, b"\t", NAMES).0, "\r\ndb1  db2  dns\r\narmhv> start d");
        assert_eq!(feed(&mut ed, b"b\t", NAMES).0, "b\x07");
        assert_eq!(feed(&mut ed, b"\t", NAMES).0, "\r\ndb1  db2\r\narmhv> start db");
        assert_eq!(feed(&mut ed, b"2\t\r", NAMES).1, [line("start db2 ")]);
        assert_eq!(
            feed(&mut ed, b"focus   \t\t", NAMES).0,
            "focus   \x07\r\nweb  db1  db2  dns\r\narmhv> focus   "
        );
        assert_eq!(feed(&mut ed, b"\x15info dn\t", NAMES).0, redraw("") + "info dns ");
        // No VM, or no VM of that beginning: the bell.
        assert_eq!(feed(&mut ed, b"\x15restart d\t", &[]).0, redraw("") + "restart d\x07");
        assert_eq!(feed(&mut ed, b"\x15pause x\t", NAMES).0, redraw("") + "pause x\x07");
    }

    #[test]
    fn offers_only_names_a_line_can_hold_and_each_once() {
        let names = ["vm1", "vm1", "", "vm 2", "vm\x1b3", "vm\u{e9}", "vm5"];
        let mut ed = Editor::new();
        assert_eq!(feed(&mut ed, b"info v\t\t", &names).0, "info vm\r\nvm1  vm5\r\narmhv> info vm");
        assert_eq!(feed(&mut ed, b"1\t", &names).0, "1 ");
    }

    #[test]
    fn completes_log_levels() {
        let mut ed = Editor::new();
        assert_eq!(feed(&mut ed, b"log d\t", NAMES).0, "log debug ");
        assert_eq!(
            feed(&mut ed, b"\x15log \t\t", NAMES).0,
            redraw("") + "log \x07\r\nerror  warn  info  debug  trace\r\narmhv> log "
        );
        assert_eq!(feed(&mut ed, b"t\t\r", NAMES).1, [line("log trace ")]);
        // Names are not levels.
        assert_eq!(feed(&mut ed, b"log w\t", NAMES).0, "log warn ");
    }

    #[test]
    fn nothing_to_complete_rings() {
        for typed in ["list ", "help x", "exit ", "stop web ", "stop web x", "log debug ", "bogus "]
        {
            let mut ed = Editor::new();
            feed(&mut ed, typed.as_bytes(), NAMES);
            assert_eq!(feed(&mut ed, b"\t\t", NAMES).0, "\x07\x07", "{typed:?}");
            assert_eq!(ed.line(), typed);
        }
    }

    #[test]
    fn the_line_is_bounded() {
        let mut ed = Editor::new();
        let (echo, _) = feed(&mut ed, &[b'a'; MAX_LINE + 2], NAMES);
        assert_eq!(echo, "a".repeat(MAX_LINE) + "\x07\x07");
        assert_eq!(ed.line().len(), MAX_LINE);
        // What the editor gives, `parse` takes (the word is unknown, the line not too long).
        let (_, got) = feed(&mut ed, b"\r", NAMES);
        let [Got::Line(l)] = got.as_slice() else { panic!("{got:?}") };
        assert!(matches!(parse(l.as_bytes()), Err(ParseError::Unknown(_))));

        // A completion that does not fit is refused whole.
        let mut ed = Editor::new();
        let typed = format!("stop {}w", " ".repeat(MAX_LINE - 8));
        feed(&mut ed, typed.as_bytes(), NAMES);
        assert_eq!(feed(&mut ed, b"\t", NAMES).0, "\x07");
        assert_eq!(ed.line(), typed);
        feed(&mut ed, b"\x7f\x7fw", NAMES);
        assert_eq!(feed(&mut ed, b"\t", NAMES).0, "eb ");
        assert_eq!(ed.line().len(), MAX_LINE);
    }

    #[test]
    fn other_escape_sequences_are_swallowed() {
        let mut ed = entered(&["list"]);
        // Shift-F1 of old xterms, Right, Left, Home, Ctrl-Left, F1, F5, Alt-x, ESC ESC [ C, Home
        // in SS3, a cursor shape (with an intermediate byte).
        let keys: &[&[u8]] = &[
            b"\x1bO5P",
            b"\x1b[C",
            b"\x1b[D",
            b"\x1b[1~",
            b"\x1b[1;5D",
            b"\x1bOP",
            b"\x1b[15~",
            b"\x1bx",
            b"\x1b\x1b[C",
            b"\x1bOH",
            b"\x1b[ q",
        ];
        for key in keys {
            assert_eq!(feed(&mut ed, &[b"a", *key, b"b"].concat(), NAMES).0, "ab", "{key:?}");
        }
        assert_eq!(ed.line(), "ab".repeat(keys.len()));
        // A control byte cuts a sequence short and does its work.
        assert_eq!(feed(&mut ed, b"\x1b[1\x03", NAMES).0, "^C\r\narmhv> ");
        assert_eq!(feed(&mut ed, b"x\x1b\r", NAMES).1, [line("x")]);
        assert_eq!(feed(&mut ed, b"y\x1bO\x7f", NAMES).0, "y\x08 \x08");
        // Modified arrows browse the history too.
        assert_eq!(feed(&mut ed, b"\x1b[1;5A", NAMES).0, redraw("x"));
        // Other control characters and non-ASCII bytes.
        assert_eq!(feed(&mut ed, b"\x00\x01\x02\x1a", NAMES).0, "");
        assert_eq!(feed(&mut ed, "\u{e9}".as_bytes(), NAMES).0, "\x07\x07");
        assert_eq!(ed.line(), "x");
    }

    fn check_invariants(ed: &Editor) {
        let printable =
            |t: &Text| t.len <= MAX_LINE && t.as_str().bytes().all(|b| (b' '..=b'~').contains(&b));
        assert!(printable(&ed.line) && printable(&ed.entered));
        assert!(ed.count <= HISTORY);
        let history = &ed.history[..ed.count];
        for (i, h) in history.iter().enumerate() {
            assert!(printable(h) && !h.is_empty());
            assert_eq!(h.as_str().trim_matches(' '), h.as_str());
            assert!(!history[..i].iter().any(|o| o.as_str() == h.as_str()));
        }
        assert!(ed.browsing.is_none_or(|i| i < ed.count));
    }

    /// Random bytes, mostly ones the editor handles: no panic, the invariants hold, and the
    /// terminal always shows the prompt and the line.
    #[test]
    fn random_bytes() {
        const ALPHABET: &[u8] =
            b"sto pavmwebd1l\t\t\t\r\n\x7f\x08\x15\x03\x04\x1b\x1b[[OAB1;~\x00\xc3";
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut ed = Editor::new();
        let mut screen = Screen::new();
        let (mut lines, mut closes, mut longest, mut most) = (0, 0, 0, 0);
        let mut fed = 0;
        while fed < 100_000 {
            let r = next();
            let burst = if r % 1000 == 0 { MAX_LINE + 10 } else { 1 };
            let byte = match (r >> 32) & 3 {
                0 => (r >> 40) as u8,
                _ => ALPHABET[(r >> 40) as usize % ALPHABET.len()],
            };
            for _ in 0..burst {
                let names = if (r >> 20) & 1 == 0 { NAMES } else { &["db1", "", "x y", "db1"][..] };
                let mut echo = String::new();
                match ed.feed(if burst > 1 { b'w' } else { byte }, names, &mut echo) {
                    Key::Nothing => screen.show(&echo),
                    Key::Line(l) => {
                        assert!(
                            l.len() <= MAX_LINE && l.bytes().all(|b| (b' '..=b'~').contains(&b))
                        );
                        assert!(!matches!(
                            parse(l.as_bytes()),
                            Err(ParseError::TooLong(_)
                                | ParseError::NotAscii(_)
                                | ParseError::Control(_))
                        ));
                        lines += 1;
                        screen.show(&echo);
                        screen.show(PROMPT);
                    }
                    Key::Close => {
                        closes += 1;
                        screen.show(&echo);
                        screen.show(PROMPT);
                    }
                }
                check_invariants(&ed);
                screen.check(ed.line());
                longest = longest.max(ed.line().len());
                most = most.max(ed.count);
                fed += 1;
            }
        }
        // The walk went everywhere worth going.
        assert!(lines > 1000 && closes > 10, "{lines} lines, {closes} closes");
        assert_eq!((longest, most), (MAX_LINE, HISTORY));
    }
}
