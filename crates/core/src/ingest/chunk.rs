//! Structure-aware chunking.
//!
//! Rules, in order: a heading starts a new chunk (and is its first line, so the chunk reads on
//! its own) unless the chunk so far holds fewer than `min_section_tokens` (then a short
//! section and the next share a chunk, named by the first heading with text under it); blocks
//! are packed into a chunk while it stays within `max_tokens`; a
//! block larger than that is cut into windows of `max_tokens` at token boundaries, each window
//! overlapping the previous by `overlap_tokens`; when a chunk fills up between blocks, the
//! next one starts with the trailing blocks that fit in `overlap_tokens`. Every chunk keeps
//! its heading path, page, line and byte range.
//!
//! Tokens are counted with [`count_tokens`], an estimate of WordPiece tokens (MiniLM-style
//! models) that needs no model: the real tokenizer would cost more than the extraction.

use super::extract::{Block, BlockKind, Budget, LineIndex, NotIndexed};
use crate::store::{ChunkLocation, NewChunk};

/// Chunk sizes, in estimated model tokens.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct ChunkOptions {
    /// Most tokens in a chunk. Default 200 (fits a 256-token embedding window with room for a
    /// title prefix).
    pub max_tokens: usize,
    /// Tokens repeated between consecutive chunks of one section. Default 32.
    pub overlap_tokens: usize,
    /// A heading starts a new chunk only once the current one holds this many tokens, so
    /// short sections (and headings with nothing under them) pack together. Default 0: every
    /// heading starts a chunk.
    #[serde(default)]
    pub min_section_tokens: usize,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions {
            max_tokens: 200,
            overlap_tokens: 32,
            min_section_tokens: 0,
        }
    }
}

/// Estimated WordPiece tokens: a word is one token per ~6 characters, each punctuation mark
/// is one.
pub fn count_tokens(text: &str) -> usize {
    let mut count = 0;
    for_each_token(text, |_, _| count += 1);
    count
}

/// Byte spans of estimated tokens.
fn token_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    for_each_token(text, |s, e| spans.push((s, e)));
    spans
}

/// Calls `token` with the byte span of each estimated token, in order. Counting is on the
/// indexing hot path, so nothing is allocated here.
fn for_each_token(text: &str, mut token: impl FnMut(usize, usize)) {
    let mut word_start: Option<usize> = None;
    let close_word = |token: &mut dyn FnMut(usize, usize), start: usize, end: usize| {
        // Long words split into pieces of about 6 bytes, like WordPiece does.
        let mut s = start;
        while end - s > 8 {
            let mut cut = s + 6;
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            token(s, cut);
            s = cut;
        }
        token(s, end);
    };
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() || c == '_' {
            if word_start.is_none() {
                word_start = Some(i);
            }
        } else {
            if let Some(s) = word_start.take() {
                close_word(&mut token, s, i);
            }
            if !c.is_whitespace() {
                token(i, i + c.len_utf8());
            }
        }
    }
    if let Some(s) = word_start {
        close_word(&mut token, s, text.len());
    }
}

#[derive(Clone)]
struct Piece {
    text: String,
    tokens: usize,
    page: Option<u32>,
    lines: Option<(u32, u32)>,
    bytes: Option<(u64, u64)>,
    reader: Option<(u64, u64)>,
    ocr_confidence: Option<u8>,
}

/// Cuts blocks into chunks.
/// Checks the budget's deadline every this many blocks.
const CHECK_EVERY: usize = 256;

pub(crate) fn chunk_blocks(
    blocks: &[Block],
    options: &ChunkOptions,
    budget: &Budget,
) -> Result<Vec<NewChunk>, NotIndexed> {
    let max = options.max_tokens.max(16);
    let overlap = options.overlap_tokens.min(max / 2);
    let mut headings: Vec<(u8, String)> = Vec::new();
    let mut chunks = Vec::new();
    let mut current: Vec<Piece> = Vec::new();
    let mut current_tokens = 0usize;
    let mut heading_path = String::new();
    // The heading path the current chunk is cited by: the first heading with text under it.
    let mut chunk_heading = String::new();
    let mut chunk_has_text = false;

    for (i, block) in blocks.iter().enumerate() {
        if i.is_multiple_of(CHECK_EVERY) {
            budget.check()?;
        }
        let tokens = count_tokens(&block.text);
        if tokens == 0 {
            continue;
        }
        if let BlockKind::Heading(level) = block.kind {
            if current_tokens >= options.min_section_tokens || current_tokens + tokens > max {
                emit(&mut chunks, &mut current, &chunk_heading);
                current_tokens = 0;
            }
            headings.retain(|(l, _)| *l < level);
            headings.push((level, block.text.clone()));
            heading_path = headings
                .iter()
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join(" › ");
        }
        // A page break ends a chunk, so every hit cites one page.
        if current.last().is_some_and(|p| p.page != block.page) {
            emit(&mut chunks, &mut current, &chunk_heading);
            current_tokens = 0;
        }
        if current.is_empty() {
            chunk_heading = heading_path.clone();
            chunk_has_text = false;
        }
        if !chunk_has_text {
            // Headings with nothing under them yet: the chunk is named by the newest.
            chunk_heading = heading_path.clone();
        }
        chunk_has_text |= !matches!(block.kind, BlockKind::Heading(_));
        if tokens > max {
            emit(&mut chunks, &mut current, &chunk_heading);
            current_tokens = 0;
            for piece in windows(block, max, overlap) {
                chunks.push(to_chunk(std::slice::from_ref(&piece), &heading_path));
            }
            continue;
        }
        if current_tokens + tokens > max {
            // Carry the trailing blocks that fit in the overlap into the next chunk.
            let mut carried = Vec::new();
            let mut carried_tokens = 0;
            for piece in current.iter().rev() {
                if carried_tokens + piece.tokens > overlap || carried.len() + 1 == current.len() {
                    break;
                }
                carried_tokens += piece.tokens;
                carried.push(piece.clone());
            }
            emit(&mut chunks, &mut current, &chunk_heading);
            chunk_heading = heading_path.clone();
            carried.reverse();
            current = carried;
            current_tokens = carried_tokens;
        }
        current_tokens += tokens;
        current.push(Piece {
            text: block.text.clone(),
            tokens,
            page: block.page,
            lines: block.lines,
            bytes: block.bytes,
            reader: block.reader,
            ocr_confidence: block.ocr_confidence,
        });
    }
    emit(&mut chunks, &mut current, &chunk_heading);
    Ok(chunks)
}

fn emit(chunks: &mut Vec<NewChunk>, current: &mut Vec<Piece>, heading_path: &str) {
    if !current.is_empty() {
        chunks.push(to_chunk(current, heading_path));
        current.clear();
    }
}

fn to_chunk(pieces: &[Piece], heading_path: &str) -> NewChunk {
    let text = pieces
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n");
    let min = |f: fn(&Piece) -> Option<u64>| pieces.iter().filter_map(f).min();
    let max = |f: fn(&Piece) -> Option<u64>| pieces.iter().filter_map(f).max();
    NewChunk {
        token_count: pieces.iter().map(|p| p.tokens).sum::<usize>() as u32,
        text,
        heading_path: heading_path.to_string(),
        location: ChunkLocation {
            page: pieces.iter().find_map(|p| p.page),
            line_start: min(|p| p.lines.map(|l| l.0 as u64)).map(|v| v as u32),
            line_end: max(|p| p.lines.map(|l| l.1 as u64)).map(|v| v as u32),
            byte_start: min(|p| p.bytes.map(|b| b.0)),
            byte_end: max(|p| p.bytes.map(|b| b.1)),
            // A page break ends a chunk, so its pieces share one page and one confidence.
            ocr_confidence: pieces.iter().find_map(|p| p.ocr_confidence),
        },
        reader_span: min(|p| p.reader.map(|r| r.0)).zip(max(|p| p.reader.map(|r| r.1))),
    }
}

/// Overlapping windows over one oversized block, cut at token boundaries (preferring the end
/// of a line or sentence within the last quarter of the window).
fn windows(block: &Block, max: usize, overlap: usize) -> Vec<Piece> {
    let text = &block.text;
    let spans = token_spans(text);
    // Lines of each window come from one index of the block, not a recount from its start.
    let line_index = block.lines.map(|_| LineIndex::new(text));
    let mut out = Vec::new();
    let mut first = 0usize;
    while first < spans.len() {
        let mut last = (first + max).min(spans.len()) - 1;
        if last + 1 < spans.len() {
            let floor = first + max * 3 / 4;
            if let Some(better) = (floor..=last).rev().find(|&t| {
                let end = spans[t].1;
                let next = text[end..].chars().next();
                matches!(&text[spans[t].0..end], "." | ";" | "}" | "!" | "?") || next == Some('\n')
            }) {
                last = better;
            }
        }
        let start = if first == 0 { 0 } else { spans[first].0 };
        let end = if last + 1 == spans.len() {
            text.len()
        } else {
            spans[last].1
        };
        let slice = &text[start..end];
        let lines = block
            .lines
            .zip(line_index.as_ref())
            .map(|((l0, _), index)| {
                let (a, b) = index.lines_of(start, start + slice.trim_end().len());
                (l0 + a - 1, l0 + b - 1)
            });
        out.push(Piece {
            text: slice.trim().to_string(),
            tokens: last + 1 - first,
            page: block.page,
            lines,
            bytes: block
                .bytes
                .map(|(b0, _)| (b0 + start as u64, b0 + end as u64)),
            reader: block
                .reader
                .map(|(r0, r1)| ((r0 + start as u64).min(r1), (r0 + end as u64).min(r1))),
            ocr_confidence: block.ocr_confidence,
        });
        if last + 1 >= spans.len() {
            break;
        }
        first = (last + 1).saturating_sub(overlap).max(first + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(kind: BlockKind, text: &str, line: u32) -> Block {
        let mut b = Block::new(kind, text.to_string());
        b.lines = Some((line, line + text.matches('\n').count() as u32));
        b
    }

    #[test]
    fn headings_start_chunks_and_build_paths() {
        let blocks = vec![
            block(BlockKind::Heading(1), "Guide", 1),
            block(BlockKind::Text, "Intro text.", 3),
            block(BlockKind::Heading(2), "Install", 5),
            block(BlockKind::Text, "Run the installer.", 7),
            block(BlockKind::Heading(2), "Use", 9),
            block(BlockKind::Text, "Open it.", 11),
        ];
        let chunks = chunk_blocks(&blocks, &ChunkOptions::default(), &Budget::unbounded()).unwrap();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0].heading_path, "Guide");
        assert_eq!(chunks[1].heading_path, "Guide › Install");
        assert_eq!(chunks[1].text, "Install\n\nRun the installer.");
        assert_eq!(chunks[2].heading_path, "Guide › Use");
        assert_eq!(chunks[1].location.line_start, Some(5));
        assert_eq!(chunks[1].location.line_end, Some(7));
    }

    #[test]
    fn short_sections_pack_together_named_by_their_first_heading_with_text() {
        let blocks = vec![
            block(BlockKind::Heading(1), "The Book", 1),
            block(BlockKind::Heading(1), "Profiles", 2),
            block(BlockKind::Text, "Profiles change compiler settings.", 3),
            block(BlockKind::Heading(2), "Dev", 5),
            block(BlockKind::Text, "The dev profile is for development.", 7),
            block(BlockKind::Heading(2), "Release", 9),
            block(
                BlockKind::Text,
                &"Optimised builds for shipping. ".repeat(8),
                11,
            ),
            block(BlockKind::Heading(2), "Test", 13),
            block(BlockKind::Text, "Used by cargo test.", 15),
        ];
        let options = ChunkOptions {
            min_section_tokens: 12,
            ..Default::default()
        };
        let chunks = chunk_blocks(&blocks, &options, &Budget::unbounded()).unwrap();
        let paths: Vec<&str> = chunks.iter().map(|c| c.heading_path.as_str()).collect();
        // The book's name has nothing under it: it joins Profiles, which the chunk is named by;
        // Dev is too short alone and joins too; Release fills its own; Test ends the page.
        assert_eq!(paths, ["Profiles", "Profiles › Release", "Profiles › Test"]);
        assert!(chunks[0].text.starts_with("The Book\n\nProfiles\n\n"));
        assert!(chunks[0].text.contains("Dev\n\nThe dev profile"));
        assert_eq!(chunks[0].location.line_start, Some(1));
        // Every heading starting a chunk (the default) gives one chunk a section.
        assert_eq!(
            chunk_blocks(&blocks, &ChunkOptions::default(), &Budget::unbounded())
                .unwrap()
                .len(),
            5
        );
    }

    #[test]
    fn large_blocks_become_overlapping_windows() {
        let words: Vec<String> = (0..500).map(|i| format!("w{i}")).collect();
        let text = words.join(" ");
        let options = ChunkOptions {
            max_tokens: 100,
            overlap_tokens: 20,
            ..Default::default()
        };
        let chunks = chunk_blocks(
            &[block(BlockKind::Text, &text, 1)],
            &options,
            &Budget::unbounded(),
        )
        .unwrap();
        assert!(chunks.len() >= 6, "{}", chunks.len());
        for c in &chunks {
            assert!(c.token_count as usize <= 100);
        }
        // Consecutive windows share their boundary words.
        let first_end = chunks[0].text.split(' ').next_back().unwrap();
        assert!(chunks[1].text.contains(first_end));
        assert!(chunks.last().unwrap().text.ends_with("w499"));
    }

    #[test]
    fn windows_know_their_lines() {
        let text: Vec<String> = (0..300).map(|i| format!("line{i}")).collect();
        let options = ChunkOptions {
            max_tokens: 50,
            overlap_tokens: 10,
            ..Default::default()
        };
        let chunks = chunk_blocks(
            &[block(BlockKind::Code, &text.join("\n"), 10)],
            &options,
            &Budget::unbounded(),
        )
        .unwrap();
        assert!(chunks.len() > 5);
        for c in &chunks {
            let first: u32 = c.text.lines().next().unwrap()[4..].parse().unwrap();
            let last: u32 = c.text.lines().last().unwrap()[4..].parse().unwrap();
            assert_eq!(c.location.line_start, Some(10 + first), "{}", c.text);
            assert_eq!(c.location.line_end, Some(10 + last), "{}", c.text);
        }
    }

    #[test]
    fn small_blocks_pack_up_to_the_limit_with_overlap() {
        let blocks: Vec<Block> = (0..40)
            .map(|i| {
                block(
                    BlockKind::Text,
                    &format!("paragraph number {i} has words."),
                    i * 2 + 1,
                )
            })
            .collect();
        let options = ChunkOptions {
            max_tokens: 40,
            overlap_tokens: 8,
            ..Default::default()
        };
        let chunks = chunk_blocks(&blocks, &options, &Budget::unbounded()).unwrap();
        assert!(chunks.len() > 5);
        for c in &chunks {
            assert!(c.token_count <= 40);
        }
        // The last paragraph of a chunk opens the next one.
        let tail = chunks[0].text.rsplit("\n\n").next().unwrap();
        assert!(chunks[1].text.starts_with(tail));
    }

    #[test]
    fn token_estimate() {
        assert_eq!(count_tokens("hello, world"), 3);
        assert_eq!(count_tokens("internationalization"), 3);
        assert_eq!(count_tokens(""), 0);
    }
}
