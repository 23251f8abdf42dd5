//! Markdown (pulldown-cmark, with source offsets) and HTML (scraper).

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use scraper::{Html, Node};

use super::{Block, BlockKind, Extracted, LineIndex, NotIndexed};

/// Markdown: headings, paragraphs, list items, table rows and code blocks, each with its lines
/// and byte range in the file.
pub(crate) fn extract_markdown(text: &str, offset: usize) -> Result<Extracted, NotIndexed> {
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
            });
        }
        buf.clear();
        *range = None;
    };

    for (event, span) in Parser::new_ext(text, options).into_offset_iter() {
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

    fn walk(&mut self, node: ego_tree::NodeRef<'_, Node>) {
        match node.value() {
            Node::Text(t) => self.buf.push_str(t),
            Node::Element(el) => {
                let name = el.name();
                if SKIPPED.contains(&name) {
                    return;
                }
                if let Some(level) = name
                    .strip_prefix('h')
                    .and_then(|n| n.parse::<u8>().ok())
                    .filter(|l| (1..=6).contains(l))
                {
                    self.flush(BlockKind::Text);
                    self.children(node);
                    self.flush(BlockKind::Heading(level));
                } else if name == "pre" {
                    self.flush(BlockKind::Text);
                    self.children(node);
                    self.flush(BlockKind::Code);
                } else if BLOCK_LEVEL.contains(&name) {
                    self.flush(BlockKind::Text);
                    self.children(node);
                    self.flush(BlockKind::Text);
                } else {
                    if name == "td" || name == "th" {
                        self.buf.push(' ');
                    }
                    self.children(node);
                }
            }
            _ => self.children(node),
        }
    }

    fn children(&mut self, node: ego_tree::NodeRef<'_, Node>) {
        for child in node.children() {
            self.walk(child);
        }
    }
}

fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// HTML: text of the body in document order, split at block elements, with headings kept as
/// structure and `<pre>` as code. Lines are located approximately (see [`HtmlWalker::flush`]).
pub(crate) fn extract_html(text: &str, offset: usize) -> Result<Extracted, NotIndexed> {
    let mut extracted = html_blocks(text, true);
    for b in &mut extracted.blocks {
        b.bytes = b.bytes.map(|(s, e)| (s + offset as u64, e + offset as u64));
    }
    Ok(extracted)
}

/// HTML to blocks; `with_lines` locates blocks in the source (off for EPUB chapters).
pub(crate) fn html_blocks(text: &str, with_lines: bool) -> Extracted {
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
    walker.walk(document.tree.root());
    walker.flush(BlockKind::Text);
    let title = title.or_else(|| {
        walker
            .blocks
            .iter()
            .find(|b| b.kind == BlockKind::Heading(1))
            .map(|b| b.text.clone())
    });
    Extracted {
        title,
        format: "html",
        blocks: walker.blocks,
        warning: None,
        reader_text: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_keeps_structure_and_lines() {
        let md = "---\ntitle: Front\n---\n# Top\n\nSome *text* here.\n\n## Sub\n\n```rust\nfn main() {}\n```\n\n- one\n- two\n";
        let e = extract_markdown(md, 0).unwrap();
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
        let e = extract_html(html, 0).unwrap();
        assert_eq!(e.title.as_deref(), Some("T"));
        let texts: Vec<_> = e.blocks.iter().map(|b| b.text.as_str()).collect();
        assert_eq!(texts, vec!["Hello", "First para", "let x = 1;\nlet y;"]);
        assert_eq!(e.blocks[0].kind, BlockKind::Heading(1));
        assert_eq!(e.blocks[2].kind, BlockKind::Code);
        assert_eq!(e.blocks[0].lines, Some((3, 3)));
    }
}
