//! The reader text of a revision: what `fetch_source_document` pages through. Markdown, plain
//! text and code keep the file's own text, so nothing repeats and the Markdown stays as
//! written; other formats join their blocks, headings written as Markdown headings and code as
//! fenced blocks. Each block learns its byte range in that text, and chunks take the ranges of
//! their blocks, so a page of the text knows which chunks it shows.

use super::{BlockKind, Extracted};

/// The file's own decoded text (`offset` bytes of BOM left out) is the reader text; block
/// ranges are the blocks' file byte ranges, moved past the BOM.
pub(crate) fn original(mut extracted: Extracted, text: String, offset: usize) -> Extracted {
    let offset = offset as u64;
    for block in &mut extracted.blocks {
        block.reader = block.bytes.and_then(|(start, end)| {
            let (start, end) = (start.checked_sub(offset)?, end.checked_sub(offset)?);
            (start <= end && end <= text.len() as u64).then_some((start, end))
        });
    }
    extracted.reader_text = text;
    extracted
}

/// The blocks joined by blank lines are the reader text.
pub(crate) fn joined(mut extracted: Extracted) -> Extracted {
    let mut text = String::with_capacity(extracted.text_bytes() + 2 * extracted.blocks.len());
    for block in &mut extracted.blocks {
        if block.text.trim().is_empty() {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        match block.kind {
            BlockKind::Heading(level) => {
                text.push_str(&"#".repeat(level.clamp(1, 6) as usize));
                text.push(' ');
            }
            BlockKind::Code => text.push_str("```\n"),
            BlockKind::Text => {}
        }
        let start = text.len() as u64;
        text.push_str(&block.text);
        block.reader = Some((start, text.len() as u64));
        if block.kind == BlockKind::Code {
            text.push_str("\n```");
        }
    }
    extracted.reader_text = text;
    extracted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::extract::Block;

    fn extracted(blocks: Vec<Block>) -> Extracted {
        Extracted {
            title: None,
            format: "test",
            blocks,
            warning: None,
            reader_text: String::new(),
            ocr_pages: Vec::new(),
        }
    }

    #[test]
    fn joined_blocks_keep_their_structure_and_know_their_ranges() {
        let joined = joined(extracted(vec![
            Block::new(BlockKind::Heading(2), "Pumps".into()),
            Block::new(BlockKind::Text, "The pump needs 4 bar.".into()),
            Block::new(BlockKind::Code, "pump --start".into()),
        ]));
        assert_eq!(
            joined.reader_text,
            "## Pumps\n\nThe pump needs 4 bar.\n\n```\npump --start\n```"
        );
        for block in &joined.blocks {
            let (start, end) = block.reader.unwrap();
            assert_eq!(
                &joined.reader_text[start as usize..end as usize],
                block.text
            );
        }
    }

    #[test]
    fn the_original_text_maps_file_ranges_past_the_bom() {
        let text = "# Title\n\nBody text.\n".to_string();
        let mut body = Block::new(BlockKind::Text, "Body text.".into());
        body.bytes = Some((3 + 9, 3 + 19));
        let original = original(extracted(vec![body]), text, 3);
        let (start, end) = original.blocks[0].reader.unwrap();
        assert_eq!(
            &original.reader_text[start as usize..end as usize],
            "Body text."
        );
    }
}
