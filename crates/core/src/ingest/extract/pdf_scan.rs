//! A look over a PDF before `pdf_oxide` parses it. Its object parser recurses once per level
//! of nested arrays and dictionaries, with no limit of its own: a 6.5 KB file of 3,000 nested
//! arrays overflowed the stack and aborted the indexer, and a stack overflow cannot be caught.
//! So the nesting depth is measured here, iteratively, in the file's own bytes and in every
//! stream the parser reads objects or operators from (content streams and object streams,
//! inflated as they are scanned, with no copy kept), and a file nested past [`MAX_NESTING`]
//! is refused. The same pass refuses a stream that inflates past [`MAX_STREAM_INFLATED`]: the
//! parser would hold it whole (a 1 GiB stream peaked at 865 MB).
//!
//! Streams of images, fonts and cross-reference tables are skipped (no object is parsed out
//! of them), and so are streams in filters other than Flate: those the parser does read are
//! rare, and the extraction thread's stack (see `outcome::EXTRACT_STACK`) takes some
//! thousands of levels.

use std::io::Read;

use super::{Budget, NotIndexed};

/// Deepest nesting of arrays and dictionaries let through. Real files stay under 20 levels.
const MAX_NESTING: u32 = 256;
/// Most bytes one stream may inflate to.
const MAX_STREAM_INFLATED: u64 = 64 << 20;
/// Most bytes all scanned streams of one file may inflate to.
const MAX_FILE_INFLATED: u64 = 256 << 20;

/// Refuses a PDF nested too deeply or holding a decompression bomb; reads nothing twice.
pub(super) fn check(bytes: &[u8], budget: &Budget) -> Result<(), NotIndexed> {
    let mut scanner = Nesting::default();
    let mut inflated_total = 0u64;
    let mut pos = 0;
    while pos < bytes.len() {
        match scanner.feed_until_stream(&bytes[pos..]) {
            None => break,
            Some(consumed) => {
                let stream_start = pos + consumed;
                let dict = stream_dictionary(bytes, stream_start);
                let (data, resume) = stream_data(bytes, stream_start, dict);
                let kind = scan_kind(dict);
                if kind != Scan::Skip {
                    inflated_total += scan_stream(data, kind, budget)?;
                    if inflated_total > MAX_FILE_INFLATED {
                        return Err(bomb(MAX_FILE_INFLATED, "its streams together inflate"));
                    }
                }
                budget.check()?;
                pos = resume;
            }
        }
        scanner.fail_if_too_deep()?;
    }
    scanner.fail_if_too_deep()
}

/// The bytes of the dictionary before a stream's `stream` keyword (at most 4 KiB back).
fn stream_dictionary(bytes: &[u8], keyword: usize) -> &[u8] {
    let from = keyword.saturating_sub(4096);
    let window = &bytes[from..keyword];
    let start = find_last(window, b"obj").map(|i| i + 3).unwrap_or(0);
    &window[start..]
}

/// The stream's data and where scanning resumes after `endstream`.
fn stream_data<'a>(bytes: &'a [u8], keyword: usize, dict: &[u8]) -> (&'a [u8], usize) {
    let mut start = keyword + b"stream".len();
    if bytes.get(start) == Some(&b'\r') {
        start += 1;
    }
    if bytes.get(start) == Some(&b'\n') {
        start += 1;
    }
    let start = start.min(bytes.len());
    let rest = &bytes[start..];
    // A direct /Length is trusted when `endstream` follows it; otherwise the keyword is
    // searched for (an indirect length, or a wrong one).
    let declared = direct_length(dict).filter(|&len| {
        rest.get(len..)
            .is_some_and(|after| after.trim_ascii_start().starts_with(b"endstream"))
    });
    let end = declared
        .or_else(|| find(rest, b"endstream"))
        .unwrap_or(rest.len());
    (
        &rest[..end],
        start + end + b"endstream".len().min(rest.len() - end),
    )
}

/// How a stream is scanned: not at all (images, fonts, cross-reference tables and other
/// binary payloads no object is parsed from, or a filter other than Flate), as it is, or
/// inflated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    Skip,
    Plain,
    Inflated,
}

fn scan_kind(dict: &[u8]) -> Scan {
    const BINARY: &[&[u8]] = &[
        b"/Image",
        b"/FontFile",
        b"/Length1",
        b"/Length2",
        b"/Type1C",
        b"/CIDFontType0C",
        b"/OpenType",
        b"/EmbeddedFile",
        b"/XRef",
        b"/XML",
    ];
    if BINARY.iter().any(|key| find(dict, key).is_some()) {
        return Scan::Skip;
    }
    let Some(at) = find(dict, b"/Filter") else {
        return Scan::Plain;
    };
    let rest = dict[at + b"/Filter".len()..].trim_ascii_start();
    // `/FlateDecode`, or an array of names: `[/FlateDecode]`, `[/A85 /Fl]`.
    let names: Vec<&[u8]> = match rest.strip_prefix(b"[") {
        Some(array) => {
            let end = array.iter().position(|&b| b == b']').unwrap_or(array.len());
            array[..end]
                .split(|&b| b == b'/')
                .map(|name| name.trim_ascii())
                .filter(|name| !name.is_empty())
                .collect()
        }
        None => {
            let name = rest.strip_prefix(b"/").unwrap_or(b"");
            let len = name.iter().take_while(|&&b| is_regular(b)).count();
            vec![&name[..len]]
        }
    };
    match names.as_slice() {
        [b"FlateDecode" | b"Fl"] => Scan::Inflated,
        _ => Scan::Skip,
    }
}

/// A byte that continues a PDF name: not white space and not a delimiter.
fn is_regular(b: u8) -> bool {
    !b.is_ascii_whitespace() && !b"()<>[]{}/%".contains(&b)
}

/// Scans one stream's (inflated) content for nesting; returns how many bytes it inflated to.
/// Content that turns out binary (an ICC profile, say) is inflated for its size alone.
fn scan_stream(data: &[u8], kind: Scan, budget: &Budget) -> Result<u64, NotIndexed> {
    let mut scanner = Some(Nesting::default());
    let mut feed = |piece: &[u8]| -> Result<(), NotIndexed> {
        if looks_binary(piece) {
            scanner = None;
        }
        match &mut scanner {
            Some(nesting) => {
                nesting.feed(piece);
                nesting.fail_if_too_deep()
            }
            None => Ok(()),
        }
    };
    if kind == Scan::Plain {
        for piece in data.chunks(64 << 10) {
            feed(piece)?;
        }
        return Ok(0);
    }
    let mut inflater = flate2::read::ZlibDecoder::new(data);
    let mut buf = vec![0u8; 64 << 10];
    let mut inflated = 0u64;
    loop {
        // A corrupt stream is the parser's to report, as it does for any file.
        let n = match inflater.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        inflated += n as u64;
        if inflated > MAX_STREAM_INFLATED {
            return Err(bomb(MAX_STREAM_INFLATED, "a stream inflates"));
        }
        feed(&buf[..n])?;
        budget.check()?;
    }
    Ok(inflated)
}

/// More than an eighth of a piece's first KiB is neither printable ASCII nor white space:
/// binary data, whose stray brackets mean nothing.
fn looks_binary(piece: &[u8]) -> bool {
    let head = &piece[..piece.len().min(1024)];
    let odd = head
        .iter()
        .filter(|b| !(b.is_ascii_graphic() || b.is_ascii_whitespace()))
        .count();
    odd * 8 > head.len()
}

fn bomb(limit: u64, what: &str) -> NotIndexed {
    NotIndexed::failed(
        "too_large_inflated",
        format!(
            "{what} past {} MiB (a decompression bomb?), so the PDF was not parsed",
            limit >> 20
        ),
    )
}

/// The PDF lexer's view of nesting: arrays `[ ]` and dictionaries `<< >>` outside strings
/// `( )`, hex strings `< >` and comments. State carries across fed pieces.
#[derive(Default)]
struct Nesting {
    depth: u32,
    deepest: u32,
    at: u64,
    /// Open parentheses of a literal string (they nest), 0 outside one.
    string: u32,
    escaped: bool,
    comment: bool,
    hex: bool,
    /// The previous byte was `<` (outside a string), or `>`.
    open_angle: bool,
    close_angle: bool,
}

impl Nesting {
    fn fail_if_too_deep(&self) -> Result<(), NotIndexed> {
        if self.deepest <= MAX_NESTING {
            return Ok(());
        }
        Err(NotIndexed::failed(
            "too_deeply_nested",
            format!(
                "arrays or dictionaries nested more than {MAX_NESTING} deep (near byte {}): a crafted file that would overflow the parser, so it was not parsed",
                self.at
            ),
        ))
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    /// Feeds bytes up to and including a `stream` keyword in the file's own structure;
    /// returns how many it took, or `None` when the bytes ran out first.
    fn feed_until_stream(&mut self, bytes: &[u8]) -> Option<usize> {
        for (i, &b) in bytes.iter().enumerate() {
            let outside = self.string == 0 && !self.comment && !self.hex;
            if outside
                && b == b's'
                && bytes[i..].starts_with(b"stream")
                && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
                && matches!(bytes.get(i + 6), Some(b'\r' | b'\n'))
            {
                return Some(i);
            }
            self.byte(b);
            if self.deepest > MAX_NESTING {
                return None;
            }
        }
        None
    }

    fn byte(&mut self, b: u8) {
        self.at += 1;
        if self.comment {
            self.comment = !matches!(b, b'\r' | b'\n');
            return;
        }
        if self.string > 0 {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'(') => self.string += 1,
                (false, b')') => self.string -= 1,
                _ => {}
            }
            return;
        }
        if self.hex {
            self.hex = b != b'>';
            return;
        }
        let (open_angle, close_angle) = (self.open_angle, self.close_angle);
        self.open_angle = false;
        self.close_angle = false;
        match b {
            b'%' => self.comment = true,
            b'(' => self.string = 1,
            b'[' => self.open(),
            b']' => self.depth = self.depth.saturating_sub(1),
            b'<' if open_angle => self.open(),
            b'<' => self.open_angle = true,
            b'>' if close_angle => self.depth = self.depth.saturating_sub(1),
            b'>' => self.close_angle = true,
            _ if open_angle => self.hex = true,
            _ => {}
        }
    }

    fn open(&mut self) {
        self.depth += 1;
        self.deepest = self.deepest.max(self.depth);
    }
}

fn direct_length(dict: &[u8]) -> Option<usize> {
    let at = find(dict, b"/Length")?;
    let rest = dict[at + b"/Length".len()..].trim_ascii_start();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let number = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    // `12 0 R` is a reference to the length, not the length.
    let after = rest[digits..].trim_ascii_start();
    let indirect = after.first().is_some_and(u8::is_ascii_digit);
    (!indirect).then_some(number)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn pdf_with(body: &[u8]) -> Vec<u8> {
        let mut pdf = b"%PDF-1.4\n1 0 obj\n".to_vec();
        pdf.extend_from_slice(body);
        pdf.extend_from_slice(b"\nendobj\n%%EOF\n");
        pdf
    }

    fn refusal(bytes: &[u8]) -> Option<&'static str> {
        match check(bytes, &Budget::unbounded()) {
            Ok(()) => None,
            Err(NotIndexed::Failed { reason, .. }) => Some(reason),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn nested_arrays_and_dictionaries_past_the_limit_are_refused() {
        let deep = format!("{}{}", "[".repeat(3_000), "]".repeat(3_000));
        assert_eq!(
            refusal(&pdf_with(deep.as_bytes())),
            Some("too_deeply_nested")
        );
        let dicts = format!("{}{}", "<</A ".repeat(300), ">>".repeat(300));
        assert_eq!(
            refusal(&pdf_with(dicts.as_bytes())),
            Some("too_deeply_nested")
        );
        let shallow = b"<< /Kids [ [1 2] [3 [4]] ] /S (a [[[[ string) /H <5b5b5b> >> % [[[[";
        assert_eq!(refusal(&pdf_with(shallow)), None);
    }

    #[test]
    fn nesting_inside_a_flate_stream_is_found_and_a_bomb_is_refused() {
        let deflate = |data: &[u8]| {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            z.write_all(data).unwrap();
            z.finish().unwrap()
        };
        let stream = |data: &[u8]| {
            let packed = deflate(data);
            let mut body = format!(
                "<< /Length {} /Filter /FlateDecode >>\nstream\n",
                packed.len()
            )
            .into_bytes();
            body.extend_from_slice(&packed);
            body.extend_from_slice(b"\nendstream");
            pdf_with(&body)
        };
        let deep = "[".repeat(5_000);
        assert_eq!(refusal(&stream(deep.as_bytes())), Some("too_deeply_nested"));
        assert_eq!(refusal(&stream(b"BT (Hello) Tj ET")), None);
        let bomb = vec![b' '; (MAX_STREAM_INFLATED + 1) as usize];
        assert_eq!(refusal(&stream(&bomb)), Some("too_large_inflated"));
        // An image's pixels are not scanned, whatever they hold.
        let mut image = b"<< /Subtype /Image /Length 4000 >>\nstream\n".to_vec();
        image.extend_from_slice("[".repeat(4000).as_bytes());
        image.extend_from_slice(b"\nendstream");
        assert_eq!(refusal(&pdf_with(&image)), None);
    }

    #[test]
    fn only_unfiltered_and_flate_streams_of_objects_are_scanned() {
        assert_eq!(scan_kind(b" << /Length 40 >> "), Scan::Plain);
        assert_eq!(
            scan_kind(b"<< /Filter /FlateDecode /Length 40 >>"),
            Scan::Inflated
        );
        assert_eq!(
            scan_kind(b"<</Filter/FlateDecode/Length 40>>"),
            Scan::Inflated
        );
        assert_eq!(scan_kind(b"<< /Filter [ /FlateDecode ] >>"), Scan::Inflated);
        assert_eq!(
            scan_kind(b"<< /Filter [/FlateDecode /DCTDecode] >>"),
            Scan::Skip
        );
        assert_eq!(scan_kind(b"<< /Filter /LZWDecode >>"), Scan::Skip);
        assert_eq!(
            scan_kind(b"<< /Type /XRef /Filter /FlateDecode >>"),
            Scan::Skip
        );
        assert_eq!(
            scan_kind(b"<< /Subtype /Image /Filter /FlateDecode >>"),
            Scan::Skip
        );
    }
}
