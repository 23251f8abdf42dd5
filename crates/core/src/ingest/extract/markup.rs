//! Markdown (pulldown-cmark, with source offsets) and HTML (scraper).

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use scraper::{Html, Node};

use super::{Block, BlockKind, Budget, Extracted, LineIndex, NotIndexed};

/// How many parser events or nodes pass between two looks at the clock.
const CHECK_EVERY: usize = 1024;

/// Markdown: headings, paragraphs, list items, table rows and code blocks, each with its lines
/// and byte range in the file.
pub(crate) fn extract_markdown(
    text: &str,
    offset: usize,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    let lines = LineIndex::new(text);
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS
        | Options::ENABLE_FOOTNOTES;
    let mut blocks = Vec::new();
    let mut buf = String::new();
    let mut range: Option<(usize, usize)> = None;
    let mut heading: Option<u8> = None;
    let mut in_code = false;
    let mut in_metadata = false;
    let mut front_title: Option<String> = None;
    let mut first_h1: Option<String> = None;

    let flush = |buf: &mut String,
                 range: &mut Option<(usize, usize)>,
                 kind: BlockKind,
                 blocks: &mut Vec<Block>| {
        let text_part = buf.trim();
        if let (false, Some((s, e))) = (text_part.is_empty(), *range) {
            blocks.push(Block {
                kind,
                text: text_part.to_string(),
                page: None,
                lines: Some(lines.lines_of(s, e)),
                bytes: Some(((s + offset) as u64, (e + offset) as u64)),
                reader: None,
                ocr_confidence: None,
            });
        }
        buf.clear();
        *range = None;
    };

    for (i, (event, span)) in Parser::new_ext(text, options)
        .into_offset_iter()
        .enumerate()
    {
        if i.is_multiple_of(CHECK_EVERY) {
            budget.check()?;
        }
        let extend = |range: &mut Option<(usize, usize)>| {
            *range = Some(match *range {
                Some((s, e)) => (s.min(span.start), e.max(span.end)),
                None => (span.start, span.end),
            });
        };
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                flush(&mut buf, &mut range, BlockKind::Text, &mut blocks);
                heading = Some(heading_level(level));
                extend(&mut range);
            }
            Event::End(TagEnd::Heading(_)) => {
                let level = heading.take().unwrap_or(1);
                if level == 1 && first_h1.is_none() {
                    first_h1 = Some(buf.trim().to_string());
                }
                flush(&mut buf, &mut range, BlockKind::Heading(level), &mut blocks);
            }
            Event::Start(Tag::CodeBlock(_)) => {
                flush(&mut buf, &mut range, BlockKind::Text, &mut blocks);
                in_code = true;
                extend(&mut range);
            }
            Event::End(TagEnd::CodeBlock) => {
                in_code = false;
                flush(&mut buf, &mut range, BlockKind::Code, &mut blocks);
            }
            Event::Start(Tag::MetadataBlock(_)) => in_metadata = true,
            Event::End(TagEnd::MetadataBlock(_)) => in_metadata = false,
            Event::Text(t) if in_metadata => {
                for line in t.lines() {
                    if let Some(v) = line.strip_prefix("title:") {
                        front_title = Some(v.trim().trim_matches(['"', '\'']).to_string());
                    }
                }
            }
            Event::Text(t) | Event::Code(t) | Event::InlineMath(t) | Event::DisplayMath(t) => {
                buf.push_str(&t);
                extend(&mut range);
            }
            Event::InlineHtml(_) | Event::Html(_) => extend(&mut range),
            Event::SoftBreak => buf.push(if in_code { '\n' } else { ' ' }),
            Event::HardBreak => buf.push('\n'),
            Event::End(TagEnd::TableCell) => buf.push_str(" | "),
            Event::End(
                TagEnd::Paragraph
                | TagEnd::Item
                | TagEnd::TableRow
                | TagEnd::TableHead
                | TagEnd::BlockQuote(_)
                | TagEnd::FootnoteDefinition,
            ) if heading.is_none() => {
                flush(&mut buf, &mut range, BlockKind::Text, &mut blocks);
            }
            Event::Start(Tag::Item) => flush(&mut buf, &mut range, BlockKind::Text, &mut blocks),
            _ => {}
        }
    }
    flush(&mut buf, &mut range, BlockKind::Text, &mut blocks);
    Ok(Extracted {
        title: front_title.or(first_h1).filter(|t| !t.is_empty()),
        format: "markdown",
        blocks,
        warning: None,
        reader_text: String::new(),
        ocr_pages: Vec::new(),
    })
}

fn heading_level(level: HeadingLevel) -> u8 {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

/// Elements whose content is not document text (navigation, scripts, UI chrome).
const SKIPPED: &[&str] = &[
    "head", "script", "style", "noscript", "template", "nav", "svg", "button", "select", "form",
    "iframe", "canvas",
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

struct HtmlWalker<'a> {
    source: &'a str,
    lines: Option<LineIndex>,
    cursor: usize,
    buf: String,
    blocks: Vec<Block>,
}

impl HtmlWalker<'_> {
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
            // scraper keeps no source positions: find the block's opening words in the
            // source, searching forward from the previous block within a bounded window.
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

    /// Walks the tree in document order with a stack of its own, not the thread's: a file of
    /// 40,000 nested tags overflowed the thread's stack when this walk recursed.
    fn walk(
        &mut self,
        root: ego_tree::NodeRef<'_, Node>,
        budget: &Budget,
    ) -> Result<(), NotIndexed> {
        let mut stack = vec![Step::Enter(root)];
        let mut visited = 0usize;
        while let Some(step) = stack.pop() {
            let node = match step {
                Step::Enter(node) => node,
                Step::Close(kind) => {
                    self.flush(kind);
                    continue;
                }
            };
            visited += 1;
            if visited.is_multiple_of(CHECK_EVERY) {
                budget.check()?;
            }
            match node.value() {
                Node::Text(t) => self.buf.push_str(t),
                Node::Element(el) => {
                    let name = el.name();
                    if SKIPPED.contains(&name) {
                        continue;
                    }
                    let close = if let Some(level) = name
                        .strip_prefix('h')
                        .and_then(|n| n.parse::<u8>().ok())
                        .filter(|l| (1..=6).contains(l))
                    {
                        Some(BlockKind::Heading(level))
                    } else if name == "pre" {
                        Some(BlockKind::Code)
                    } else if BLOCK_LEVEL.contains(&name) {
                        Some(BlockKind::Text)
                    } else {
                        None
                    };
                    match close {
                        Some(kind) => {
                            self.flush(BlockKind::Text);
                            stack.push(Step::Close(kind));
                        }
                        None if name == "td" || name == "th" => self.buf.push(' '),
                        None => {}
                    }
                    stack.extend(node.children().rev().map(Step::Enter));
                }
                _ => stack.extend(node.children().rev().map(Step::Enter)),
            }
        }
        Ok(())
    }
}

/// One step of the HTML walk: a node to enter, or the end of a block element to flush.
enum Step<'a> {
    Enter(ego_tree::NodeRef<'a, Node>),
    Close(BlockKind),
}

/// Deepest element nesting an HTML file may have. html5ever looks through the open elements
/// for every tag it opens, and it cannot be stopped mid-parse: past this, parsing time grows
/// with the square of the depth. Real pages nest under a hundred deep.
const MAX_HTML_NESTING: usize = 50_000;

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

/// HTML: text of the body in document order, split at block elements, with headings kept as
/// structure and `<pre>` as code. Lines are located approximately (see [`HtmlWalker::flush`]).
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
    let document = Html::parse_document(text);
    let title = document
        .select(&scraper::Selector::parse("title").expect("a valid selector"))
        .next()
        .map(|t| collapse_whitespace(&t.text().collect::<String>()))
        .filter(|t| !t.is_empty());
    let mut walker = HtmlWalker {
        source: text,
        lines: with_lines.then(|| LineIndex::new(text)),
        cursor: 0,
        buf: String::new(),
        blocks: Vec::new(),
    };
    walker.walk(document.tree.root(), budget)?;
    walker.flush(BlockKind::Text);
    let title = title.or_else(|| {
        walker
            .blocks
            .iter()
            .find(|b| b.kind == BlockKind::Heading(1))
            .map(|b| b.text.clone())
    });
    Ok(Extracted {
        title,
        format: "html",
        blocks: walker.blocks,
        warning: None,
        reader_text: String::new(),
        ocr_pages: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_keeps_structure_and_lines() {
        let md = "---\ntitle: Front\n---\n# Top\n\nSome *text* here.\n\n## Sub\n\n```rust\nfn main() {}\n```\n\n- one\n- two\n";
        let e = extract_markdown(md, 0, &Budget::unbounded()).unwrap();
        assert_eq!(e.title.as_deref(), Some("Front"));
        let kinds: Vec<_> = e.blocks.iter().map(|b| (b.kind, b.text.as_str())).collect();
        assert_eq!(
            kinds,
            vec![
                (BlockKind::Heading(1), "Top"),
                (BlockKind::Text, "Some text here."),
                (BlockKind::Heading(2), "Sub"),
                (BlockKind::Code, "fn main() {}"),
                (BlockKind::Text, "one"),
                (BlockKind::Text, "two"),
            ]
        );
        assert_eq!(e.blocks[1].lines, Some((6, 6)));
        let (s, end) = e.blocks[3].bytes.unwrap();
        assert!(md[s as usize..end as usize].contains("fn main"));
    }

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
