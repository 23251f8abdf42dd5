//! Markdown (pulldown-cmark, with source offsets).

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

use super::{Block, BlockKind, Budget, Extracted, LineIndex, NotIndexed};

/// How many parser events pass between two looks at the clock.
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
}
