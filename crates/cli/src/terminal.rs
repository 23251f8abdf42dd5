//! What may reach a terminal. File names, titles, document text, chat answers and error
//! messages come from files a stranger may have written (a shared drive, a downloads folder,
//! a synced repository), so every human-readable line the CLI prints passes through
//! [`printable`] or one of its variants first. A raw ESC could clear the screen
//! (`\x1b[2J`), retitle the terminal (`\x1b]0;…\x07`) or hide text; a carriage return or a
//! newline in a file name could overwrite a line or fake a search result; a bidirectional
//! override (U+202E) could make `exe.txt` read as `txt.exe` (issue 38, item 6).
//!
//! Such characters are shown as visible escapes (`\x1b`, `\u{202e}`) instead. JSON output
//! (`--json`) is never passed through here: it stays exact, and JSON escapes control
//! characters itself.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;

/// What a piece of text is, which decides what happens to its whitespace.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layout {
    /// A name, title, path or id: one line, every control character escaped (a newline in a
    /// file name would fake an output line).
    Field,
    /// Running text (a chat answer, a message): `\n` and `\t` kept, `\r\n` becomes `\n`, every
    /// other control character escaped.
    Text,
    /// A snippet flattened onto one line: whitespace of any kind becomes a space.
    Flat,
}

/// Bidirectional formatting characters: embeddings and overrides (U+202A–U+202E), isolates
/// (U+2066–U+2069) and the marks (U+200E, U+200F, U+061C). They reorder what follows them on
/// the line. The line and paragraph separators (U+2028, U+2029) end a line in some terminals.
fn is_bidi_or_separator(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{061C}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// C0 and C1 controls and DEL (`char::is_control`), and the bidirectional characters.
fn is_unsafe(c: char) -> bool {
    c.is_control() || is_bidi_or_separator(c)
}

fn escape(s: &str, layout: Layout) -> Cow<'_, str> {
    let needs_work = s.chars().any(|c| match layout {
        Layout::Field => is_unsafe(c),
        Layout::Text => is_unsafe(c) && c != '\n' && c != '\t',
        Layout::Flat => is_unsafe(c) || (c.is_whitespace() && c != ' '),
    });
    if !needs_work {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match layout {
            Layout::Text if c == '\n' || c == '\t' => out.push(c),
            // A carriage return right before a newline only ends the line (CRLF text).
            Layout::Text if c == '\r' && chars.peek() == Some(&'\n') => {}
            Layout::Flat if c.is_whitespace() => out.push(' '),
            _ if is_unsafe(c) => push_escaped(&mut out, c),
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `\x1b` for ASCII controls, `\u{9b}` or `\u{202e}` beyond.
fn push_escaped(out: &mut String, c: char) {
    let code = u32::from(c);
    let _ = if code < 0x80 {
        write!(out, "\\x{code:02x}")
    } else {
        write!(out, "\\u{{{code:x}}}")
    };
}

/// A name, title, path, id or message for one line of human-readable output: every control
/// character (newlines included) and bidirectional override shown as a visible escape.
pub fn printable(s: &str) -> Cow<'_, str> {
    escape(s, Layout::Field)
}

/// A path for human-readable output (see [`printable`]).
pub fn printable_path(path: &Path) -> String {
    printable(&path.to_string_lossy()).into_owned()
}

/// Running text (a chat answer, a conversation's messages, a document's text): line breaks
/// and tabs kept, everything else as [`printable`] does.
pub fn printable_text(s: &str) -> Cow<'_, str> {
    escape(s, Layout::Text)
}

/// Text put on one line: whitespace of any kind (newlines, tabs, U+2028) becomes a space,
/// other controls are escaped. For pieces of a line the caller assembles.
pub fn flatten(s: &str) -> Cow<'_, str> {
    escape(s, Layout::Flat)
}

/// Text flattened onto one line (a snippet, a chunk preview): runs of whitespace of any kind
/// become one space, other controls are escaped, and the ends are trimmed.
pub fn one_line(s: &str) -> String {
    flatten(s).split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Escapes text that arrives in pieces (a streamed chat answer) as [`printable_text`] would
/// escape the whole: a carriage return at the end of one piece waits to see whether a
/// newline starts the next.
#[derive(Default)]
pub struct TextStream {
    held_cr: bool,
}

impl TextStream {
    /// The printable form of the next piece.
    pub fn push(&mut self, piece: &str) -> String {
        let mut text = String::with_capacity(piece.len() + 1);
        if std::mem::take(&mut self.held_cr) {
            text.push('\r');
        }
        text.push_str(piece);
        if text.ends_with('\r') {
            text.pop();
            self.held_cr = true;
        }
        printable_text(&text).into_owned()
    }

    /// What is still held back when the stream ends.
    pub fn finish(&mut self) -> String {
        if std::mem::take(&mut self.held_cr) {
            printable_text("\r").into_owned()
        } else {
            String::new()
        }
    }
}

/// The log's writer: standard error, each event's line escaped as [`printable`] escapes a
/// name (its final newline kept). tracing-subscriber escapes ESC, BEL and C1 controls in field
/// values itself but leaves carriage returns, newlines and bidirectional overrides, which a
/// file name logged with `%path` may carry. With `colour`, ESC is left alone: the only raw ESC
/// in a line is then the subscriber's own colour.
#[derive(Clone, Copy)]
pub struct LogWriter {
    /// The subscriber colours its lines.
    pub colour: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        *self
    }
}

impl Write for LogWriter {
    /// The subscriber formats an event into one buffer and writes it whole.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (line, end) = match text.strip_suffix('\n') {
            Some(line) => (line, "\n"),
            None => (&*text, ""),
        };
        let mut out = log_line(line, self.colour);
        out.push_str(end);
        std::io::stderr().lock().write_all(out.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// A log line without its newline, escaped (ESC kept when the subscriber colours).
fn log_line(line: &str, colour: bool) -> String {
    let mut out = String::with_capacity(line.len() + 16);
    for c in line.chars() {
        match c {
            '\x1b' if colour => out.push(c),
            '\t' => out.push(c),
            c if is_unsafe(c) => push_escaped(&mut out, c),
            c => out.push(c),
        }
    }
    out
}

/// Whether to write colour (ANSI escapes) to a stream: only to a terminal, and never when
/// `NO_COLOR` is set (<https://no-color.org>). A log file or a pipe gets plain text.
pub fn colour(stream: &impl IsTerminal) -> bool {
    stream.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let s = "Annual report — café, 東京, naïve.pdf";
        assert!(matches!(printable(s), Cow::Borrowed(_)));
        assert!(matches!(
            printable_text("two\nlines\tand a tab"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn escape_and_bell_are_shown_not_sent() {
        assert_eq!(printable("a\x1bb\x07c"), "a\\x1bb\\x07c");
        assert_eq!(printable("\x7f"), "\\x7f");
    }

    #[test]
    fn csi_sequences_cannot_clear_the_screen_or_hide_text() {
        let out = printable("\x1b[2J\x1b[8mhidden\x1b[0m");
        assert_eq!(out, "\\x1b[2J\\x1b[8mhidden\\x1b[0m");
        assert!(!out.contains('\x1b'));
    }

    #[test]
    fn an_osc_title_sequence_cannot_retitle_the_terminal() {
        let out = printable("\x1b]0;pwned\x07report.md");
        assert_eq!(out, "\\x1b]0;pwned\\x07report.md");
        // The string-terminator form too.
        assert_eq!(printable("\x1b]2;x\x1b\\"), "\\x1b]2;x\\x1b\\");
    }

    #[test]
    fn c1_controls_are_escaped() {
        // U+009B is a one-character CSI in terminals that honour C1 controls.
        assert_eq!(printable("a\u{9b}2Jb"), "a\\u{9b}2Jb");
        assert_eq!(printable("\u{85}\u{9d}"), "\\u{85}\\u{9d}");
    }

    #[test]
    fn bidirectional_overrides_and_isolates_are_escaped() {
        assert_eq!(
            printable("invoice\u{202e}fdp.exe"),
            "invoice\\u{202e}fdp.exe"
        );
        for c in [
            '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{2066}', '\u{2067}', '\u{2068}',
            '\u{2069}', '\u{200e}', '\u{200f}', '\u{61c}', '\u{2028}', '\u{2029}',
        ] {
            let s = c.to_string();
            assert_eq!(printable(&s), format!("\\u{{{:x}}}", c as u32));
            assert_eq!(printable_text(&s), format!("\\u{{{:x}}}", c as u32));
        }
    }

    #[test]
    fn a_carriage_return_cannot_overwrite_a_line() {
        assert_eq!(printable("safe.txt\rEVIL"), "safe.txt\\x0dEVIL");
        assert_eq!(printable_text("safe\rEVIL"), "safe\\x0dEVIL");
        // CRLF text keeps its line break.
        assert_eq!(printable_text("one\r\ntwo"), "one\ntwo");
    }

    #[test]
    fn a_newline_in_a_name_cannot_fake_a_line_but_text_keeps_its_lines() {
        let name = "a.md\n 2. fake.md  [notes, score 9.99]";
        assert_eq!(printable(name), "a.md\\x0a 2. fake.md  [notes, score 9.99]");
        assert_eq!(printable("tab\there"), "tab\\x09here");
        assert_eq!(
            printable_text("para one\n\n\tpara two"),
            "para one\n\n\tpara two"
        );
    }

    #[test]
    fn one_line_flattens_whitespace_and_escapes_the_rest() {
        assert_eq!(one_line("  a\n\tb\r\nc\u{2028}d  "), "a b c d");
        assert_eq!(one_line("x\x1b[31my"), "x\\x1b[31my");
    }

    #[test]
    fn a_path_is_escaped() {
        let p = Path::new("/docs/\x1b[2Jnotes\u{202e}.md");
        assert_eq!(printable_path(p), "/docs/\\x1b[2Jnotes\\u{202e}.md");
    }

    #[test]
    fn log_lines_are_escaped_but_keep_their_colour() {
        assert_eq!(
            log_line("\x1b[2mWARN\x1b[0m skipped a\rb\u{202e}c", true),
            "\x1b[2mWARN\x1b[0m skipped a\\x0db\\u{202e}c"
        );
        assert_eq!(log_line("x\x1b[2Jy\nz", false), "x\\x1b[2Jy\\x0az");
    }

    #[test]
    fn a_stream_escapes_as_the_whole_would() {
        let pieces = ["Hello\r", "\nworld\x1b", "]0;t\x07 and\r", "x", "\r"];
        let mut stream = TextStream::default();
        let mut out: String = pieces.iter().map(|p| stream.push(p)).collect();
        out.push_str(&stream.finish());
        assert_eq!(out, printable_text(&pieces.concat()));
        assert_eq!(out, "Hello\nworld\\x1b]0;t\\x07 and\\x0dx\\x0d");
    }
}
