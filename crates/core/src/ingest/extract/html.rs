//! HTML: the text of the body from html5ever's tokenizer, as it streams, with no tree built.
//!
//! A document tree costs many bytes per byte of HTML: a highlighted source page of the
//! standard library (8.5 MB, a `<span>` per token) needed about 100 MB more with one, and two
//! such pages read side by side on two workers stood on a whole-tree index run's peak. The walk needs only element
//! names and nesting, which the tokens give in document order.

use std::cell::RefCell;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};
use html5ever::LocalName;

use super::{Block, BlockKind, Budget, Extracted, LineIndex, NotIndexed};

/// How many tokens pass between two looks at the clock.
const CHECK_EVERY: usize = 1024;

/// How much of the file the tokenizer is given at a time: a walk whose budget ran out (looked
/// at every [`CHECK_EVERY`] tokens) is not fed more.
const FEED_BYTES: usize = 64 << 10;

/// Elements whose content is not document text (navigation, scripts, UI chrome).
const SKIPPED: &[&str] = &[
    "head", "script", "style", "noscript", "template", "nav", "svg", "button", "select", "form",
    "iframe", "canvas", "noframes",
];

/// Elements that end a block of text.
const BLOCK_LEVEL: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "aside",
    "header",
    "footer",
    "li",
    "dt",
    "dd",
    "blockquote",
    "table",
    "tr",
    "ul",
    "ol",
    "dl",
    "figure",
    "figcaption",
    "details",
    "summary",
    "br",
    "hr",
    "body",
];

/// HTML start tags that end an SVG or MathML element left open (the tree builder's list).
const BREAKS_OUT_OF_FOREIGN: &[&str] = &[
    "b",
    "big",
    "blockquote",
    "body",
    "br",
    "center",
    "code",
    "dd",
    "div",
    "dl",
    "dt",
    "em",
    "embed",
    "head",
    "hr",
    "i",
    "img",
    "li",
    "listing",
    "menu",
    "meta",
    "nobr",
    "ol",
    "p",
    "pre",
    "ruby",
    "s",
    "small",
    "span",
    "strike",
    "strong",
    "sub",
    "sup",
    "table",
    "tt",
    "u",
    "ul",
    "var",
];

/// SVG elements whose content is HTML again (the tree builder's integration points): a block
/// tag there does not end the SVG.
const HTML_INSIDE_FOREIGN: &[&str] = &["foreignobject", "desc", "title"];

/// A table's own structure, where a `<form>` holds nothing.
const TABLE_PARTS: &[&str] = &["table", "tbody", "thead", "tfoot", "tr"];

/// Elements with no end tag and nothing inside.
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
];

/// What `<head>` may hold: any other start tag, or text, begins the body (as the parser's tree
/// builder has it when `</head>` is left out).
const HEAD_CONTENT: &[&str] = &[
    "base", "link", "meta", "noscript", "script", "style", "template", "title",
];

/// How far down the open elements an end tag is looked for; past this it is ignored. Matching
/// is at the top for a well-formed page, and a crafted run of stray end tags costs no more.
const END_TAG_REACH: usize = 256;

/// Deepest element nesting an HTML file may have. Real pages nest under a hundred deep; a file
/// past this is crafted, and is refused rather than walked.
const MAX_HTML_NESTING: usize = 50_000;

/// HTML: text of the body in document order, split at block elements, with headings kept as
/// structure and `<pre>` as code. Lines are located approximately (see [`Blocks::flush`]).
pub(crate) fn extract_html(
    text: &str,
    offset: usize,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    let mut extracted = html_blocks(text, true, budget)?;
    for b in &mut extracted.blocks {
        b.bytes = b.bytes.map(|(s, e)| (s + offset as u64, e + offset as u64));
    }
    Ok(extracted)
}

/// HTML to blocks; `with_lines` locates blocks in the source (off for EPUB chapters).
pub(crate) fn html_blocks(
    text: &str,
    with_lines: bool,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    refuse_deep_nesting(text)?;
    let walk = Walk {
        blocks: Blocks {
            source: text,
            lines: with_lines.then(|| LineIndex::new(text)),
            cursor: 0,
            buf: String::new(),
            blocks: Vec::new(),
        },
        open: Vec::new(),
        skipping: Vec::new(),
        title: None,
        title_text: None,
        tokens: 0,
        failed: None,
    };
    let tokenizer = Tokenizer::new(
        WalkSink {
            walk: RefCell::new(walk),
            budget,
        },
        TokenizerOpts::default(),
    );
    let input = BufferQueue::default();
    for piece in pieces(text, FEED_BYTES) {
        input.push_back(StrTendril::from_slice(piece));
        let _ = tokenizer.feed(&input);
        if tokenizer.sink.walk.borrow().failed.is_some() {
            break;
        }
    }
    tokenizer.end();
    let mut walk = tokenizer.sink.walk.into_inner();
    if let Some(failed) = walk.failed {
        return Err(failed);
    }
    walk.close_all();
    let title = walk.title.or_else(|| {
        walk.blocks
            .blocks
            .iter()
            .find(|b| b.kind == BlockKind::Heading(1))
            .map(|b| b.text.clone())
    });
    Ok(Extracted {
        title,
        format: "html",
        blocks: walk.blocks.blocks,
        warning: None,
        reader_text: String::new(),
        ocr_pages: Vec::new(),
    })
}

/// `text` in pieces of about `size` bytes, each cut at a character boundary.
fn pieces(text: &str, size: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = size.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, after) = rest.split_at(end);
        rest = after;
        Some(piece)
    })
}

/// The text gathered so far and the blocks it was cut into.
struct Blocks<'a> {
    source: &'a str,
    lines: Option<LineIndex>,
    cursor: usize,
    buf: String,
    blocks: Vec<Block>,
}

impl Blocks<'_> {
    fn flush(&mut self, kind: BlockKind) {
        let text = if kind == BlockKind::Code {
            self.buf.trim_matches('\n').to_string()
        } else {
            collapse_whitespace(&self.buf)
        };
        self.buf.clear();
        if text.trim().is_empty() {
            return;
        }
        let mut block = Block::new(kind, text);
        if let Some(lines) = &self.lines {
            // Tokens keep no byte positions: find the block's opening words in the source,
            // searching forward from the previous block within a bounded window.
            let probe: String = block.text.chars().take(24).collect();
            let mut window_end = (self.cursor + (64 << 10)).min(self.source.len());
            while !self.source.is_char_boundary(window_end) {
                window_end -= 1;
            }
            let window = self.source.get(self.cursor..window_end).unwrap_or("");
            if let Some(found) = window.find(probe.as_str()) {
                let start = self.cursor + found;
                let end = start + block.text.len().min(self.source.len() - start);
                block.lines = Some(lines.lines_of(start, end));
                block.bytes = Some((start as u64, end as u64));
                self.cursor = start + probe.len();
            }
        }
        self.blocks.push(block);
    }
}

/// An element open at this point of the walk, and the kind of block its end closes.
struct Open {
    name: LocalName,
    closes: Option<BlockKind>,
}

/// The walk's state between tokens.
struct Walk<'a> {
    blocks: Blocks<'a>,
    /// Open elements, outermost first (skipped ones are not kept).
    open: Vec<Open>,
    /// The skipped elements the walk is inside, outermost first.
    skipping: Vec<LocalName>,
    title: Option<String>,
    /// The text of a `<title>` being read.
    title_text: Option<String>,
    tokens: usize,
    failed: Option<NotIndexed>,
}

impl Walk<'_> {
    fn start_tag(&mut self, name: &LocalName, self_closing: bool) -> TokenSinkResult<()> {
        let n: &str = name;
        // `<title/>` or `<script src=…/>` (XHTML, EPUB) is empty: reading it as open would
        // take the rest of the chapter for its text.
        let empty = self_closing && (n == "title" || SKIPPED.contains(&n));
        if let Some(foreign) = self.skipping.iter().position(|s| is_foreign(s)) {
            let in_html_point = self.skipping[foreign..]
                .iter()
                .any(|s| HTML_INSIDE_FOREIGN.contains(&&**s));
            if !in_html_point && (BREAKS_OUT_OF_FOREIGN.contains(&n) || heading_level(n).is_some())
            {
                // HTML's own block tags end an SVG or MathML left open.
                self.skipping.truncate(foreign);
            } else {
                // SVG and MathML have no raw text elements, and `<x/>` closes itself there.
                if (is_foreign(n) || HTML_INSIDE_FOREIGN.contains(&n)) && !self_closing {
                    self.skipping.push(name.clone());
                }
                return TokenSinkResult::Continue;
            }
        }
        if self.in_head_only() && !HEAD_CONTENT.contains(&n) {
            // The body begins where `</head>` was left out.
            self.skipping.clear();
        }
        if empty {
            return TokenSinkResult::Continue;
        }
        if n == "title" {
            self.title_text = Some(String::new());
            return raw_text(n);
        }
        if n == "form"
            && self.skipping.is_empty()
            && self
                .open
                .last()
                .is_some_and(|o| TABLE_PARTS.contains(&&*o.name))
        {
            // A form between a table's rows holds none of them: the parser leaves it empty.
            return TokenSinkResult::Continue;
        }
        if SKIPPED.contains(&n) {
            self.skipping.push(name.clone());
            return raw_text(n);
        }
        if !self.skipping.is_empty() {
            return raw_text(n);
        }
        self.close_implied_by(n);
        let closes = block_kind(n);
        match closes {
            Some(_) => self.blocks.flush(BlockKind::Text),
            None if n == "td" || n == "th" => self.blocks.buf.push(' '),
            None => {}
        }
        if !VOID.contains(&n) {
            self.open.push(Open {
                name: name.clone(),
                closes,
            });
        }
        raw_text(n)
    }

    /// Ends what a start tag implies is over, as the tree builder does: an open `<li>` at the
    /// next `<li>`, a `<p>` at a block, a cell at the next cell. Without it, a `<pre>` of a
    /// thousand `<a name=…>` lines would bury its own end tag past [`END_TAG_REACH`].
    fn close_implied_by(&mut self, name: &str) {
        let sibling: Option<(&[&str], &[&str])> = match name {
            "li" => Some((&["li"], &["ul", "ol", "menu", "table"])),
            "dt" | "dd" => Some((&["dt", "dd"], &["dl", "table"])),
            "tr" => Some((&["tr"], &["table", "tbody", "thead", "tfoot"])),
            "td" | "th" => Some((&["td", "th"], &["tr", "table"])),
            "option" => Some((&["option"], &["select", "optgroup", "datalist"])),
            _ => None,
        };
        if let Some((same, within)) = sibling {
            self.close_open(|o| same.contains(&&*o.name), |o| within.contains(&&*o.name));
        }
        if name == "a" {
            self.close_open(|o| &*o.name == "a", |o| o.closes.is_some());
        }
        if block_kind(name).is_some() && !matches!(name, "body" | "br" | "tr") {
            self.close_open(|o| &*o.name == "p", |o| o.closes.is_some());
        }
    }

    /// Closes the innermost open element that `is_target`, unless one that `stops` is inside
    /// it (an `<a>` or `<p>` is not ended across a block; only the top of the stack is looked at).
    fn close_open(&mut self, is_target: impl Fn(&Open) -> bool, stops: impl Fn(&Open) -> bool) {
        let reach = self.open.len().saturating_sub(END_TAG_REACH);
        for at in (reach..self.open.len()).rev() {
            let open = &self.open[at];
            if is_target(open) {
                self.close_from(at);
                return;
            }
            if stops(open) {
                return;
            }
        }
    }

    fn end_tag(&mut self, name: &LocalName) {
        let n: &str = name;
        if n == "title" && self.title_text.is_some() {
            self.end_title();
            return;
        }
        let open_at = self.innermost_open(name);
        if !self.skipping.is_empty() {
            let reach = self.skipping.len().saturating_sub(END_TAG_REACH);
            if let Some(at) = self.skipping[reach..].iter().rposition(|s| s == name) {
                self.skipping.truncate(reach + at);
                return;
            }
            // The end of an element open around the skipped one ends it too (`<div><button>x
            // </div>`): what follows is the page again.
            if open_at.is_none() {
                return;
            }
            self.skipping.clear();
        }
        match open_at {
            Some(at) => self.close_from(at),
            // `</br>` is read as `<br>`.
            None if n == "br" => self.blocks.flush(BlockKind::Text),
            None => {}
        }
    }

    fn characters(&mut self, text: &str) {
        if let Some(title) = &mut self.title_text {
            title.push_str(text);
            return;
        }
        if !self.skipping.is_empty() {
            // Text in the head begins the body when `</head>` was left out.
            if self.in_head_only() && !text.trim().is_empty() {
                self.skipping.clear();
            } else {
                return;
            }
        }
        self.blocks.buf.push_str(text);
    }

    /// Where the open element an end tag of `name` ends is: the innermost of that name, or
    /// for a heading's end tag the innermost heading (as the tree builder has it).
    fn innermost_open(&self, name: &LocalName) -> Option<usize> {
        let heading = heading_level(name).is_some();
        let reach = self.open.len().saturating_sub(END_TAG_REACH);
        self.open[reach..]
            .iter()
            .rposition(|o| o.name == *name || (heading && heading_level(&o.name).is_some()))
            .map(|at| reach + at)
    }

    /// Inside `<head>` and nothing else skipped.
    fn in_head_only(&self) -> bool {
        self.skipping.len() == 1 && &*self.skipping[0] == "head"
    }

    fn end_title(&mut self) {
        if let Some(text) = self.title_text.take() {
            let text = collapse_whitespace(&text);
            if self.title.is_none() && !text.is_empty() {
                self.title = Some(text);
            }
        }
    }

    /// Closes the open elements from `at` up, innermost first, each ending its block.
    fn close_from(&mut self, at: usize) {
        let closed: Vec<Open> = self.open.drain(at..).collect();
        for open in closed.into_iter().rev() {
            if let Some(kind) = open.closes {
                self.blocks.flush(kind);
            }
        }
    }

    /// The end of the file ends what is still open, and the text after the last block.
    fn close_all(&mut self) {
        self.close_from(0);
        self.blocks.flush(BlockKind::Text);
    }
}

/// Feeds the walk the tokenizer's tokens, looking at the budget as it goes; once the budget is
/// spent the rest is ignored and the reason kept.
struct WalkSink<'a, 'b> {
    walk: RefCell<Walk<'a>>,
    budget: &'b Budget,
}

impl TokenSink for WalkSink<'_, '_> {
    type Handle = ();

    fn process_token(&self, token: Token, _line_number: u64) -> TokenSinkResult<()> {
        let mut walk = self.walk.borrow_mut();
        if walk.failed.is_some() {
            return TokenSinkResult::Continue;
        }
        walk.tokens += 1;
        if walk.tokens.is_multiple_of(CHECK_EVERY) {
            if let Err(e) = self.budget.check() {
                walk.failed = Some(e);
                return TokenSinkResult::Continue;
            }
        }
        match token {
            Token::TagToken(Tag {
                kind: TagKind::StartTag,
                name,
                self_closing,
                ..
            }) => walk.start_tag(&name, self_closing),
            Token::TagToken(Tag {
                kind: TagKind::EndTag,
                name,
                ..
            }) => {
                walk.end_tag(&name);
                TokenSinkResult::Continue
            }
            Token::CharacterTokens(text) => {
                walk.characters(&text);
                TokenSinkResult::Continue
            }
            _ => TokenSinkResult::Continue,
        }
    }
}

/// The tokenizer state an HTML element's content is read in: a script's `i<n` is no tag.
fn raw_text(name: &str) -> TokenSinkResult<()> {
    match name {
        "script" => TokenSinkResult::RawData(RawKind::ScriptData),
        "style" | "iframe" | "noscript" | "noembed" | "noframes" | "xmp" => {
            TokenSinkResult::RawData(RawKind::Rawtext)
        }
        "title" | "textarea" => TokenSinkResult::RawData(RawKind::Rcdata),
        _ => TokenSinkResult::Continue,
    }
}

fn is_foreign(name: &str) -> bool {
    name == "svg" || name == "math"
}

fn heading_level(name: &str) -> Option<u8> {
    name.strip_prefix('h')
        .and_then(|n| n.parse::<u8>().ok())
        .filter(|l| (1..=6).contains(l))
}

/// The block an element's end closes, if it is one that ends a block.
fn block_kind(name: &str) -> Option<BlockKind> {
    if let Some(level) = heading_level(name) {
        Some(BlockKind::Heading(level))
    } else if name == "pre" {
        Some(BlockKind::Code)
    } else if BLOCK_LEVEL.contains(&name) {
        Some(BlockKind::Text)
    } else {
        None
    }
}

/// Refuses HTML nested past [`MAX_HTML_NESTING`], by a look at its tags: elements that have
/// no end tag, or whose end tag may be left out, are not counted, nor are `<x/>` tags inside
/// SVG and MathML (elsewhere HTML ignores the slash, and so does this count).
fn refuse_deep_nesting(text: &str) -> Result<(), NotIndexed> {
    const UNCOUNTED: &[&str] = &[
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr", "p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup",
        "tbody", "thead", "tfoot", "colgroup", "rb", "rt", "rp", "html", "head", "body",
    ];
    let bytes = text.as_bytes();
    let (mut depth, mut deepest, mut foreign) = (0usize, 0usize, 0usize);
    let mut at = 0;
    let skip_past = |from: usize, end: &[u8]| {
        bytes[from..]
            .windows(end.len())
            .position(|w| w.eq_ignore_ascii_case(end))
            .map_or(bytes.len(), |i| from + i + end.len())
    };
    while let Some(found) = bytes[at..].iter().position(|&b| b == b'<') {
        let start = at + found + 1;
        if bytes[start..].starts_with(b"!--") {
            at = skip_past(start, b"-->");
            continue;
        }
        let closing = bytes.get(start) == Some(&b'/');
        let name_start = start + usize::from(closing);
        let name_len = bytes[name_start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        at = name_start + name_len;
        if name_len == 0 {
            continue;
        }
        let name = text[name_start..at].to_ascii_lowercase();
        if !closing && (name == "script" || name == "style") {
            // Their text is not markup: `i<n` in a script is no tag.
            at = skip_past(at, format!("</{name}").as_bytes());
            continue;
        }
        if UNCOUNTED.contains(&name.as_str()) {
            continue;
        }
        let tag_end = bytes[at..bytes.len().min(at + 4096)]
            .iter()
            .position(|&b| b == b'>');
        let self_closing =
            foreign > 0 && tag_end.is_some_and(|end| end > 0 && bytes[at + end - 1] == b'/');
        if name == "svg" || name == "math" {
            foreign = if closing {
                foreign.saturating_sub(1)
            } else {
                foreign + 1
            };
        }
        if closing {
            depth = depth.saturating_sub(1);
        } else if !self_closing {
            depth += 1;
            deepest = deepest.max(depth);
            if deepest > MAX_HTML_NESTING {
                return Err(NotIndexed::failed(
                    "too_deeply_nested",
                    format!("elements nested more than {MAX_HTML_NESTING} deep (near byte {start}): a crafted file, so it was not parsed"),
                ));
            }
        }
    }
    Ok(())
}

fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_skips_chrome_and_finds_lines() {
        let html = "<html><head><title>T</title><script>x()</script></head>\n<body><nav>menu</nav>\n<h1>Hello</h1>\n<p>First   para</p>\n<pre>let x = 1;\nlet y;</pre></body></html>";
        let e = extract_html(html, 0, &Budget::unbounded()).unwrap();
        assert_eq!(e.title.as_deref(), Some("T"));
        let texts: Vec<_> = e.blocks.iter().map(|b| b.text.as_str()).collect();
        assert_eq!(texts, vec!["Hello", "First para", "let x = 1;\nlet y;"]);
        assert_eq!(e.blocks[0].kind, BlockKind::Heading(1));
        assert_eq!(e.blocks[2].kind, BlockKind::Code);
        assert_eq!(e.blocks[0].lines, Some((3, 3)));
    }

    #[test]
    fn html_with_tags_left_out_reads_as_the_parser_builds_it() {
        // No `</head>`; a script holding tag-like text; an SVG with its own title and
        // self-closing shapes; paragraphs and items never closed; a heading ended by another
        // heading's tag; `</br>`.
        let html = "<title>Page  one</title><meta charset=utf-8><script>if (a</div>b) {}</script>\
            <h2>Intro</h3><p>First<p>Second</br>third\
            <svg><title>icon</title><path d=\"M0\"/><circle/></svg><ul><li>one<li>two</ul>\
            <nav><p>menu</p></nav><pre>\ncode &lt;T&gt;\n</pre>tail";
        let e = extract_html(html, 0, &Budget::unbounded()).unwrap();
        assert_eq!(e.title.as_deref(), Some("Page one"));
        let blocks: Vec<_> = e.blocks.iter().map(|b| (b.kind, b.text.as_str())).collect();
        assert_eq!(
            blocks,
            vec![
                (BlockKind::Heading(2), "Intro"),
                (BlockKind::Text, "First"),
                (BlockKind::Text, "Second"),
                (BlockKind::Text, "third"),
                (BlockKind::Text, "one"),
                (BlockKind::Text, "two"),
                (BlockKind::Code, "code <T>"),
                (BlockKind::Text, "tail"),
            ]
        );
    }

    #[test]
    fn html_skipped_or_left_open_ends_where_the_parser_ends_it() {
        let lines: String = (1..=300)
            .map(|i| format!("<a name=L{i}>line {i}\n"))
            .collect();
        let html = format!(
            "<title/><div><button>press</div><p>after a button</p>\
             <svg><path d=M0/><p>after an svg</p>\
             <svg><foreignObject><div>inside</div></foreignObject></svg><p>out</p>\
             <table><form><tr><td>Name</td></tr></form></table><pre>{lines}</pre><p>end"
        );
        let e = extract_html(&html, 0, &Budget::unbounded()).unwrap();
        assert_eq!(e.title, None);
        let blocks: Vec<_> = e.blocks.iter().map(|b| (b.kind, b.text.as_str())).collect();
        assert_eq!(
            blocks[..4],
            [
                (BlockKind::Text, "after a button"),
                (BlockKind::Text, "after an svg"),
                (BlockKind::Text, "out"),
                (BlockKind::Text, "Name"),
            ]
        );
        assert_eq!(blocks[4].0, BlockKind::Code, "{:.60}", blocks[4].1);
        assert!(blocks[4].1.starts_with("line 1\nline 2\n") && blocks[4].1.ends_with("line 300"));
        assert_eq!(blocks[5..], [(BlockKind::Text, "end")]);
    }

    #[test]
    fn html_nested_far_past_the_thread_stack_is_walked_without_recursion() {
        let depth = 20_000;
        let html = format!(
            "<html><body>{}deep text{}</body></html>",
            "<div><span>".repeat(depth),
            "</span></div>".repeat(depth)
        );
        // 256 KiB of stack: the recursive walk overflowed 8 MiB on this file.
        let extracted = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || extract_html(&html, 0, &Budget::unbounded()))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(extracted.blocks.len(), 1);
        assert_eq!(extracted.blocks[0].text, "deep text");
    }

    #[test]
    fn an_html_walk_past_its_deadline_stops() {
        let html = "<p>one</p>".repeat(10_000);
        let budget = Budget::new(1, std::time::Duration::ZERO);
        assert!(matches!(
            extract_html(&html, 0, &budget),
            Err(NotIndexed::Failed {
                reason: "timeout",
                ..
            })
        ));
    }

    #[test]
    fn html_nested_past_the_parser_limit_is_refused_and_ordinary_pages_are_not() {
        let deep = "<div>".repeat(MAX_HTML_NESTING + 1);
        assert!(matches!(
            extract_html(&deep, 0, &Budget::unbounded()),
            Err(NotIndexed::Failed {
                reason: "too_deeply_nested",
                ..
            })
        ));
        // Unclosed paragraphs and list items, void elements, scripts and comments do not nest.
        let page = format!(
            "<html><body><script>for (i=0;i<n;i++) {{}}{}</script><!-- <div><div> -->{}{}<div>end</div>",
            "if (a<b) {}".repeat(60_000),
            "<p>para<br><img src=x>".repeat(60_000),
            "<li><svg><path d=\"M0\"/></svg>".repeat(60_000)
        );
        assert!(refuse_deep_nesting(&page).is_ok());
        // `<div/>` opens a div in HTML: a million of them nest a million deep.
        assert!(refuse_deep_nesting(&"<div/>".repeat(MAX_HTML_NESTING + 1)).is_err());
    }
}
