//! PDF text through `pdf_oxide` (pure Rust): one block per paragraph, with its page. Pages
//! without a text layer (scans) are listed for the OCR lane, which reads them through the
//! same function with a page reader.

use pdf_oxide::PdfDocument;

use super::{paragraphs, pdf_scan, Block, BlockKind, Budget, Extracted, NotIndexed};

/// Fewer visible characters than this on a page and it has no text layer worth the name (a
/// scan, perhaps with a stamped page number): OCR reads it.
const MIN_PAGE_TEXT_CHARS: usize = 32;

/// Text recognised from a page's pixels.
pub(crate) struct RecognisedPage {
    pub text: String,
    /// Tesseract's mean word confidence, 0 to 100.
    pub confidence: u8,
}

/// Reads a page (0-based) that has no text layer; `None` leaves it unread.
pub(crate) type PageReader<'a> =
    dyn FnMut(&PdfDocument, usize) -> Result<Option<RecognisedPage>, NotIndexed> + 'a;

/// The text lane: pages without a text layer are only listed (`Extracted::ocr_pages`).
pub(crate) fn extract(bytes: &[u8], budget: &Budget) -> Result<Extracted, NotIndexed> {
    extract_pages(bytes, budget, None)
}

/// Every page's text: its text layer, or what `read_scan` recognises when it has none.
pub(crate) fn extract_pages(
    bytes: &[u8],
    budget: &Budget,
    mut read_scan: Option<&mut PageReader<'_>>,
) -> Result<Extracted, NotIndexed> {
    if !bytes.starts_with(b"%PDF")
        && !bytes[..bytes.len().min(1024)]
            .windows(4)
            .any(|w| w == b"%PDF")
    {
        return Err(NotIndexed::failed(
            "parse_error",
            "not a PDF (no %PDF header)",
        ));
    }
    pdf_scan::check(bytes, budget)?;
    let doc = pdf_oxide::PdfDocument::from_bytes(bytes.to_vec())
        .map_err(|e| NotIndexed::failed("parse_error", format!("malformed PDF: {e}")))?;
    if doc.is_encrypted() && !doc.authenticate(b"").unwrap_or(false) {
        return Err(NotIndexed::failed(
            "encrypted",
            "the PDF is password-protected; remove the password to index it",
        ));
    }
    let pages = doc
        .page_count()
        .map_err(|e| NotIndexed::failed("parse_error", format!("malformed PDF: {e}")))?;
    let mut blocks = Vec::new();
    let mut ocr_pages = Vec::new();
    let mut failed_pages = 0usize;
    let mut offset = 0u64;
    'pages: for page in 0..pages {
        budget.check()?;
        let text = match doc.extract_text(page) {
            Ok(t) => t,
            Err(_) => {
                failed_pages += 1;
                continue;
            }
        };
        let mut confidence = None;
        let visible = text.chars().filter(|c| !c.is_whitespace()).count();
        let text = if visible >= MIN_PAGE_TEXT_CHARS {
            text
        } else {
            match read_scan
                .as_mut()
                .map(|read| read(&doc, page))
                .transpose()?
            {
                Some(Some(recognised)) => {
                    confidence = Some(recognised.confidence);
                    recognised.text
                }
                _ => {
                    ocr_pages.push(page as u32 + 1);
                    text
                }
            }
        };
        for (start, end) in paragraphs(&text) {
            if !budget.admit(end - start) {
                break 'pages;
            }
            let mut block = Block::new(BlockKind::Text, text[start..end].to_string());
            block.page = Some(page as u32 + 1);
            block.ocr_confidence = confidence;
            block.bytes = Some((offset + start as u64, offset + end as u64));
            blocks.push(block);
        }
        offset += text.len() as u64 + 1;
    }
    // A file cut short (a copy or download in progress) has no end-of-file marker.
    let tail = &bytes[bytes.len().saturating_sub(1024)..];
    let truncated = !tail.windows(5).any(|w| w == b"%%EOF");
    if blocks.is_empty() {
        return Err(if truncated {
            NotIndexed::failed(
                "parse_error",
                "malformed PDF: the file is truncated (no %%EOF marker)",
            )
        } else if pages > 0 && failed_pages == pages {
            NotIndexed::failed(
                "parse_error",
                format!("malformed PDF: none of its {pages} page(s) could be read"),
            )
        } else if !ocr_pages.is_empty() {
            // A scan: nothing to index until OCR has read it.
            return Ok(Extracted {
                title: None,
                format: "pdf",
                blocks,
                warning: None,
                reader_text: String::new(),
                ocr_pages,
            });
        } else {
            NotIndexed::skipped(
                "no_text",
                "the PDF has no extractable text (scanned images?)",
            )
        });
    }
    let warning = match (failed_pages > 0, truncated) {
        (true, _) => Some(format!(
            "{failed_pages} of {pages} page(s) could not be read"
        )),
        (false, true) => {
            Some("the PDF looks truncated (no %%EOF marker); its text may be incomplete".into())
        }
        _ => None,
    };
    Ok(Extracted {
        title: None,
        format: "pdf",
        blocks,
        warning,
        reader_text: String::new(),
        ocr_pages,
    })
}
