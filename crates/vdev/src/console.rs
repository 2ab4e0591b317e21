//! The one physical console that armhv and every VM print to, as a line discipline.
//!
//! Each VM's output is printed as whole lines tagged with its name, so the lines of VMs running
//! on different CPUs never interleave mid-line. The VM that has the console's input may also
//! print part of a line (a prompt, the echo of what is typed): that line stays *open*, the
//! cursor at its end. Anything else printed meanwhile erases the open line, prints itself and
//! redraws the open line after it, so every line still appears whole, on a terminal and in a
//! transcript that applies the erase.
//!
//! When the focus moves to another VM while a line is open, that line is *parked*: erased,
//! and kept, so that when its VM ends it (or is typed at again) it is printed whole and not in
//! two halves.
//!
//! Portable: the physical UART is a [`Terminal`], and the tests here use a byte vector.

/// Back to the line's start and clear it (ECMA-48 CR, EL 2). A guest cannot produce it: its
/// `\r` are dropped (see [`LineConsole::vm_line`]), so transcripts can apply it too.
pub const ERASE_LINE: &str = "\r\x1b[2K";
/// How much of an open line is kept for redrawing; a longer one is redrawn cut short.
pub const OPEN_LINE_MAX: usize = 256;
/// The open line's owner while it is armhv's command line ([`LineConsole::prompt`]).
const PROMPT: usize = usize::MAX;
/// How much of a VM's name is kept for a parked line's tag.
const NAME_MAX: usize = 32;

/// Where the console's bytes go. `\n` is a newline; the terminal adds a `\r` if it needs one.
pub trait Terminal {
    fn write(&mut self, bytes: &[u8]);
}

/// A VM's partly printed line.
#[derive(Clone, Copy)]
struct Partial {
    vm: usize,
    name: [u8; NAME_MAX],
    name_len: usize,
    text: [u8; OPEN_LINE_MAX],
    len: usize,
}

impl Partial {
    fn new(vm: usize, name: &str) -> Self {
        let mut p =
            Partial { vm, name: [0; NAME_MAX], name_len: 0, text: [0; OPEN_LINE_MAX], len: 0 };
        // Cut at a character boundary, so the tag stays valid text.
        let mut end = name.len().min(NAME_MAX);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        p.name[..end].copy_from_slice(&name.as_bytes()[..end]);
        p.name_len = end;
        p
    }

    fn name(&self) -> &[u8] {
        &self.name[..self.name_len]
    }

    fn text(&self) -> &[u8] {
        &self.text[..self.len]
    }

    fn append(&mut self, text: &[u8]) {
        let n = text.len().min(OPEN_LINE_MAX - self.len);
        self.text[self.len..self.len + n].copy_from_slice(&text[..n]);
        self.len += n;
    }
}

/// The console's lines for up to `VMS` VMs (a VM numbered beyond that still prints; a partial
/// line of it is ended rather than parked).
pub struct LineConsole<const VMS: usize> {
    open: Option<Partial>,
    parked: [Option<Partial>; VMS],
}

impl<const VMS: usize> Default for LineConsole<VMS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const VMS: usize> LineConsole<VMS> {
    pub const fn new() -> Self {
        Self { open: None, parked: [None; VMS] }
    }

    /// Prints a whole line that is not a VM's (`print` writes it without its `\n`): the open
    /// line, if any, is erased first and redrawn after.
    pub fn line<T: Terminal>(&mut self, t: &mut T, print: impl FnOnce(&mut T)) {
        if self.open.is_some() {
            t.write(ERASE_LINE.as_bytes());
        }
        print(t);
        t.write(b"\n");
        if let Some(open) = &self.open {
            tag(t, open.name());
            put_vm_bytes(t, open.text());
        }
    }

    /// Prints a complete line of VM `vm`'s output, without its `\n`.
    pub fn vm_line(&mut self, t: &mut impl Terminal, vm: usize, name: &str, line: &[u8]) {
        if self.open.as_ref().is_some_and(|o| o.vm == vm) {
            // The end of its own open line.
            self.open = None;
            put_vm_bytes(t, line);
            t.write(b"\n");
            return;
        }
        let parked = self.parked.get_mut(vm).and_then(Option::take);
        self.line(t, |t| {
            tag(t, name.as_bytes());
            if let Some(p) = &parked {
                put_vm_bytes(t, p.text());
            }
            put_vm_bytes(t, line);
        });
    }

    /// Prints the start (or more) of a line of VM `vm`'s output; the line stays open.
    pub fn vm_partial(&mut self, t: &mut impl Terminal, vm: usize, name: &str, text: &[u8]) {
        if self.open.as_ref().is_some_and(|o| o.vm != vm) {
            self.park(t);
        }
        if self.open.is_none() {
            let open = self.parked.get_mut(vm).and_then(Option::take);
            let open = open.unwrap_or_else(|| Partial::new(vm, name));
            tag(t, open.name());
            put_vm_bytes(t, open.text());
            self.open = Some(open);
        }
        put_vm_bytes(t, text);
        if let Some(open) = self.open.as_mut() {
            open.append(text);
        }
    }

    /// Draws armhv's own command line as the open line, `text` (prompt and typing) replacing
    /// what it showed: other output erases and redraws it as it does a VM's open line.
    pub fn prompt(&mut self, t: &mut impl Terminal, text: &[u8]) {
        if self.open.as_ref().is_some_and(|o| o.vm != PROMPT) {
            self.park(t);
        }
        t.write(ERASE_LINE.as_bytes());
        let mut line = Partial::new(PROMPT, "armhv");
        line.append(text);
        tag(t, line.name());
        put_vm_bytes(t, line.text());
        self.open = Some(line);
    }

    /// Ends armhv's command line: kept in the transcript as it stands (`keep`, a command
    /// entered), or erased.
    pub fn end_prompt(&mut self, t: &mut impl Terminal, keep: bool) {
        if self.open.as_ref().is_some_and(|o| o.vm == PROMPT) {
            self.open = None;
            t.write(if keep { b"\n" } else { ERASE_LINE.as_bytes() });
        }
    }

    /// Takes the open line off the terminal and keeps it for its VM.
    fn park(&mut self, t: &mut impl Terminal) {
        let Some(open) = self.open.take() else { return };
        match self.parked.get_mut(open.vm) {
            Some(slot) => {
                t.write(ERASE_LINE.as_bytes());
                *slot = Some(open);
            }
            // No room to keep it: ended as it stands.
            None => t.write(b"\n"),
        }
    }
}

fn tag(t: &mut impl Terminal, name: &[u8]) {
    t.write(b"[");
    t.write(name);
    t.write(b"] ");
}

/// A guest's bytes as the console shows them: tab, backspace and escape sequences are the
/// guest's business with the terminal; other control characters would confuse it (and `\r`
/// comes with each `\n`).
fn put_vm_bytes(t: &mut impl Terminal, bytes: &[u8]) {
    for &b in bytes {
        let b = if b == b'\t' || b == 0x08 || b == 0x1b || (0x20..0x7f).contains(&b) {
            b
        } else if b == b'\r' {
            continue;
        } else {
            b'?'
        };
        t.write(&[b]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use alloc::vec::Vec;

    #[derive(Default)]
    struct Screen(Vec<u8>);

    impl Terminal for Screen {
        fn write(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
        }
    }

    impl Screen {
        /// What a terminal shows: an erase removes the partial line it is on.
        fn shown(&self) -> String {
            let mut out = String::new();
            let text = String::from_utf8(self.0.clone()).unwrap();
            for (i, piece) in text.split(ERASE_LINE).enumerate() {
                if i > 0 {
                    out.truncate(out.rfind('\n').map_or(0, |n| n + 1));
                }
                out.push_str(piece);
            }
            out
        }
    }

    type Console = LineConsole<4>;

    #[test]
    fn whole_lines_are_tagged() {
        let (mut c, mut s) = (Console::new(), Screen::default());
        c.vm_line(&mut s, 0, "a", b"hello\r");
        c.vm_line(&mut s, 1, "b", b"world");
        c.line(&mut s, |s| s.write(b"armhv: note"));
        assert_eq!(s.shown(), "[a] hello\n[b] world\narmhv: note\n");
    }

    #[test]
    fn an_open_line_is_redrawn_below_other_lines() {
        let (mut c, mut s) = (Console::new(), Screen::default());
        c.vm_partial(&mut s, 0, "a", b"a# ");
        c.vm_line(&mut s, 1, "b", b"boot");
        c.vm_partial(&mut s, 0, "a", b"ls");
        c.line(&mut s, |s| s.write(b"armhv: note"));
        assert_eq!(s.shown(), "[b] boot\narmhv: note\n[a] a# ls");
        c.vm_line(&mut s, 0, "a", b"");
        assert_eq!(s.shown(), "[b] boot\narmhv: note\n[a] a# ls\n");
    }

    #[test]
    fn a_line_open_when_the_focus_moves_is_printed_whole_later() {
        let (mut c, mut s) = (Console::new(), Screen::default());
        c.vm_partial(&mut s, 0, "a", b"a# ec");
        // The focus moves to b, whose prompt opens a line: a's is parked, not ended.
        c.vm_partial(&mut s, 1, "b", b"b# ");
        assert_eq!(s.shown(), "[b] b# ");
        // a ends its line while b's is open.
        c.vm_line(&mut s, 0, "a", b"ho");
        assert_eq!(s.shown(), "[a] a# echo\n[b] b# ");
        c.vm_line(&mut s, 1, "b", b"true");
        assert_eq!(s.shown(), "[a] a# echo\n[b] b# true\n");
    }

    #[test]
    fn a_parked_line_is_reopened_when_the_focus_comes_back() {
        let (mut c, mut s) = (Console::new(), Screen::default());
        c.vm_partial(&mut s, 2, "c", b"c# ");
        c.vm_partial(&mut s, 1, "b", b"b# ");
        c.vm_partial(&mut s, 2, "c", b"x");
        assert_eq!(s.shown(), "[c] c# x");
        c.vm_line(&mut s, 1, "b", b"");
        c.vm_line(&mut s, 2, "c", b"");
        assert_eq!(s.shown(), "[b] b# \n[c] c# x\n");
    }

    #[test]
    fn a_vm_beyond_the_table_ends_its_line_instead() {
        let (mut c, mut s) = (Console::new(), Screen::default());
        c.vm_partial(&mut s, 9, "far", b"f# ");
        c.vm_partial(&mut s, 0, "a", b"a# ");
        c.vm_line(&mut s, 9, "far", b"done");
        assert_eq!(s.shown(), "[far] f# \n[far] done\n[a] a# ");
    }

    #[test]
    fn long_lines_and_control_bytes() {
        let (mut c, mut s) = (Console::new(), Screen::default());
        c.vm_partial(&mut s, 0, "a", &[b'x'; OPEN_LINE_MAX + 10]);
        // Parked: only what fits is kept for the whole line.
        c.vm_partial(&mut s, 1, "b", b"\x07\t");
        c.vm_line(&mut s, 0, "a", b"!");
        let kept = "x".repeat(OPEN_LINE_MAX);
        assert_eq!(s.shown(), alloc::format!("[a] {kept}!\n[b] ?\t"));
    }
}
