//! Turning file bytes into structured text blocks.
//!
//! Each format has one function returning [`Extracted`]: an ordered list of [`Block`]s
//! (headings, text, code) with where each came from. Extractors never panic the indexer: a
//! panic inside a third-party parser is caught and recorded as that file's failure. No
//! extractor recurses over the input's nesting (a stack overflow cannot be caught), and every
//! one works within the file's [`Budget`] of time and output.

mod budget;
mod data;
mod html;
mod markup;
mod office;
mod pdf;
mod pdf_scan;
pub(crate) mod pixels;
pub(crate) mod reader;
mod text;

use std::path::Path;

pub(crate) use budget::{timeout, Budget};
pub(crate) use pdf::{extract_pages as extract_pdf_pages, RecognisedPage};
pub(crate) use text::decode_text;

/// What a block is, for the chunker's structure rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockKind {
    /// A heading of this level (1 = top).
    Heading(u8),
    /// Prose, a list item, a table row.
    Text,
    /// Source code or preformatted text: kept whole where it fits.
    Code,
}

/// A run of text with its origin.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub kind: BlockKind,
    pub text: String,
    pub page: Option<u32>,
    /// 1-based inclusive line range in the source file, when the format has lines.
    pub lines: Option<(u32, u32)>,
    /// Byte range (file bytes for text formats; extracted text for containers).
    pub bytes: Option<(u64, u64)>,
    /// Byte range in the revision's reader text (see `reader`).
    pub reader: Option<(u64, u64)>,
    /// Read from the page's pixels by OCR, with Tesseract's mean word confidence (0 to 100).
    pub ocr_confidence: Option<u8>,
}

impl Block {
    pub(crate) fn new(kind: BlockKind, text: String) -> Block {
        Block {
            kind,
            text,
            page: None,
            lines: None,
            bytes: None,
            reader: None,
            ocr_confidence: None,
        }
    }
}

/// A file's extracted content.
#[derive(Debug, Clone)]
pub(crate) struct Extracted {
    /// From metadata or the first heading; the indexer falls back to the file name.
    pub title: Option<String>,
    pub format: &'static str,
    pub blocks: Vec<Block>,
    /// Something the user should know, though the file was indexed.
    pub warning: Option<String>,
    /// The text `fetch_source_document` pages through (see `reader`).
    pub reader_text: String,
    /// Pages (1-based) with no text layer, left for the OCR lane.
    pub ocr_pages: Vec<u32>,
}

impl Extracted {
    pub(crate) fn text_bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.text.len()).sum()
    }
}

/// Why a file was not indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotIndexed {
    /// Deliberately left out.
    Skipped {
        reason: &'static str,
        message: String,
    },
    /// Could not be read or parsed.
    Failed {
        reason: &'static str,
        message: String,
    },
}

impl NotIndexed {
    pub(crate) fn failed(reason: &'static str, message: impl Into<String>) -> Self {
        NotIndexed::Failed {
            reason,
            message: message.into(),
        }
    }

    pub(crate) fn skipped(reason: &'static str, message: impl Into<String>) -> Self {
        NotIndexed::Skipped {
            reason,
            message: message.into(),
        }
    }
}

/// Limits that protect the indexer from hostile or huge inputs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExtractLimits {
    /// Most bytes one member of a zip container (DOCX, ODT, EPUB) may inflate to.
    pub max_inflated_member: u64,
    /// Most bytes all members of one container may inflate to.
    pub max_inflated_total: u64,
    /// Most bytes per byte of the container all its members may inflate to (above a floor of
    /// 16 MiB): real documents inflate some 3 to 30 times, a crafted one thousands of times.
    pub max_inflation_ratio: u64,
}

impl Default for ExtractLimits {
    fn default() -> Self {
        ExtractLimits {
            max_inflated_member: 64 << 20,
            max_inflated_total: 256 << 20,
            max_inflation_ratio: 256,
        }
    }
}

impl ExtractLimits {
    /// Most bytes all members of a container of `size` bytes may inflate to.
    pub(crate) fn inflated_total_for(&self, size: usize) -> u64 {
        (size as u64)
            .saturating_mul(self.max_inflation_ratio)
            .max(16 << 20)
            .min(self.max_inflated_total)
    }
}

/// Which extractor a file name selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Markdown,
    Html,
    Pdf,
    Docx,
    Odt,
    Epub,
    Csv,
    Tsv,
    Json,
    JsonLines,
    Code,
    /// A picture (PNG, JPEG, TIFF, WebP, BMP, GIF): its text is read by OCR.
    Image,
    /// Known text, or unknown extension to be sniffed.
    Text,
}

const CODE_EXTENSIONS: &[&str] = &[
    "rs", "py", "js", "mjs", "cjs", "ts", "tsx", "jsx", "go", "c", "h", "cc", "cpp", "cxx", "hpp",
    "hh", "java", "kt", "kts", "scala", "rb", "php", "sh", "bash", "zsh", "fish", "ps1", "swift",
    "cs", "fs", "lua", "pl", "pm", "r", "jl", "hs", "ml", "mli", "ex", "exs", "erl", "clj", "dart",
    "zig", "nim", "sql", "css", "scss", "less", "vue", "svelte", "toml", "yaml", "yml", "ini",
    "cfg", "xml", "gradle", "cmake", "mk", "proto", "graphql", "tf",
];

pub(crate) fn format_of(path: &Path) -> Format {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "md" | "markdown" | "mdx" | "mkd" => Format::Markdown,
        "html" | "htm" | "xhtml" => Format::Html,
        "pdf" => Format::Pdf,
        "docx" => Format::Docx,
        "odt" => Format::Odt,
        "epub" => Format::Epub,
        "csv" => Format::Csv,
        "tsv" => Format::Tsv,
        "json" => Format::Json,
        "jsonl" | "ndjson" => Format::JsonLines,
        e if CODE_EXTENSIONS.contains(&e) => Format::Code,
        e if pixels::IMAGE_EXTENSIONS.contains(&e) => Format::Image,
        _ => Format::Text,
    }
}

/// True when the bytes are not text: a NUL in the first 8 KiB (unless UTF-16 with a BOM).
pub(crate) fn looks_binary(bytes: &[u8]) -> bool {
    if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        return false;
    }
    bytes[..bytes.len().min(8192)].contains(&0)
}

/// Extracts a file's content within its budget. Never panics: a parser panic becomes a
/// `Failed` outcome. Text past the budget's allowance is left out, and the warning says so.
pub(crate) fn extract(
    path: &Path,
    bytes: &[u8],
    limits: &ExtractLimits,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    let mut extracted = extract_format(path, bytes, limits, budget)?;
    if let Some(note) = budget.cap_note(bytes.len() as u64) {
        extracted.warning = Some(match extracted.warning.take() {
            Some(w) => format!("{w}; {note}"),
            None => note,
        });
    }
    Ok(extracted)
}

fn extract_format(
    path: &Path,
    bytes: &[u8],
    limits: &ExtractLimits,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    let format = format_of(path);
    let run = || -> Result<Extracted, NotIndexed> {
        match format {
            Format::Pdf => pdf::extract(bytes, budget).map(reader::joined),
            Format::Docx => office::extract_docx(bytes, limits, budget).map(reader::joined),
            Format::Odt => office::extract_odt(bytes, limits, budget).map(reader::joined),
            Format::Epub => office::extract_epub(bytes, limits, budget).map(reader::joined),
            Format::Image => {
                // Only the header is read here (a bomb is refused by its declared size); the
                // OCR lane decodes and reads the pixels.
                pixels::checked_dimensions(bytes)?;
                Ok(Extracted {
                    title: None,
                    format: "image",
                    blocks: Vec::new(),
                    warning: None,
                    reader_text: String::new(),
                    ocr_pages: vec![1],
                })
            }
            _ => {
                if looks_binary(bytes) {
                    return Err(NotIndexed::skipped(
                        "binary",
                        "binary content (NUL bytes in the first 8 KiB)",
                    ));
                }
                let decoded = decode_text(bytes);
                let mut extracted = match format {
                    Format::Markdown => {
                        markup::extract_markdown(&decoded.text, decoded.offset, budget)
                    }
                    Format::Html => html::extract_html(&decoded.text, decoded.offset, budget),
                    Format::Csv => data::extract_csv(&decoded.text, b',', budget),
                    Format::Tsv => data::extract_csv(&decoded.text, b'\t', budget),
                    Format::Json => data::extract_json(&decoded.text, false, budget),
                    Format::JsonLines => data::extract_json(&decoded.text, true, budget),
                    Format::Code => Ok(text::extract_plain(
                        &decoded.text,
                        decoded.offset,
                        BlockKind::Code,
                        "code",
                    )),
                    _ => Ok(text::extract_plain(
                        &decoded.text,
                        decoded.offset,
                        BlockKind::Text,
                        "text",
                    )),
                }?;
                extracted.warning = decoded.warning;
                Ok(match format {
                    Format::Markdown | Format::Code | Format::Text => {
                        reader::original(extracted, decoded.text, decoded.offset)
                    }
                    _ => reader::joined(extracted),
                })
            }
        }
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(NotIndexed::failed(
                "extractor_panic",
                format!("the {format:?} parser crashed on this file: {what}"),
            ))
        }
    }
}

/// Maps byte offsets of a text to 1-based line numbers.
pub(crate) struct LineIndex {
    newlines: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> LineIndex {
        LineIndex {
            newlines: memchr_all(text.as_bytes()),
        }
    }

    /// Line of the byte at `offset`.
    pub(crate) fn line_of(&self, offset: usize) -> u32 {
        (self.newlines.partition_point(|&nl| nl < offset) + 1) as u32
    }

    /// Inclusive line range of `start..end`.
    pub(crate) fn lines_of(&self, start: usize, end: usize) -> (u32, u32) {
        (
            self.line_of(start),
            self.line_of(end.saturating_sub(1).max(start)),
        )
    }
}

fn memchr_all(bytes: &[u8]) -> Vec<usize> {
    bytes
        .iter()
        .enumerate()
        .filter_map(|(i, b)| (*b == b'\n').then_some(i))
        .collect()
}

/// Splits text into paragraphs at blank lines, keeping byte ranges (relative to `text`).
pub(crate) fn paragraphs(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut end = 0;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let blank = line.trim().is_empty();
        if blank {
            if let Some(s) = start.take() {
                out.push((s, end));
            }
        } else {
            if start.is_none() {
                start = Some(pos);
            }
            end = pos + line.trim_end().len();
        }
        pos += line.len();
    }
    if let Some(s) = start {
        out.push((s, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_split_at_blank_lines() {
        let text = "one\ntwo\n\n  \nthree\n";
        let p = paragraphs(text);
        assert_eq!(p, vec![(0, 7), (12, 17)]);
        assert_eq!(&text[p[1].0..p[1].1], "three");
        let lines = LineIndex::new(text);
        assert_eq!(lines.lines_of(p[0].0, p[0].1), (1, 2));
        assert_eq!(lines.lines_of(p[1].0, p[1].1), (5, 5));
    }

    #[test]
    fn formats_by_extension() {
        assert_eq!(format_of(Path::new("a/B.MD")), Format::Markdown);
        assert_eq!(format_of(Path::new("x.rs")), Format::Code);
        assert_eq!(format_of(Path::new("LICENSE")), Format::Text);
        assert_eq!(format_of(Path::new("scan.JPEG")), Format::Image);
        assert!(looks_binary(b"abc\0def"));
        assert!(!looks_binary(&[0xFF, 0xFE, b'a', 0]));
    }
}
