//! Zip containers: DOCX (WordprocessingML), ODT (OpenDocument) and EPUB.
//!
//! Every member is read through a hard byte limit, since the sizes a zip declares can lie:
//! a zip bomb fails with `too_large_inflated` instead of exhausting memory. All members of a
//! container together inflate to at most a multiple of its own size, and the text taken from
//! them counts against the file's budget.

use std::io::{Cursor, Read};

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;
use zip::ZipArchive;

use super::html::html_blocks;
use super::{Block, BlockKind, Budget, ExtractLimits, Extracted, NotIndexed};

/// How many XML events pass between two looks at the clock.
const CHECK_EVERY: usize = 4096;

struct Container<'a> {
    archive: ZipArchive<Cursor<&'a [u8]>>,
    limits: ExtractLimits,
    /// Most bytes all members may inflate to, for this container's size.
    max_total: u64,
    inflated: u64,
}

impl<'a> Container<'a> {
    fn open(bytes: &'a [u8], limits: &ExtractLimits, what: &str) -> Result<Self, NotIndexed> {
        let archive = ZipArchive::new(Cursor::new(bytes)).map_err(|e| {
            NotIndexed::failed("parse_error", format!("not a valid {what} (zip): {e}"))
        })?;
        Ok(Container {
            archive,
            limits: *limits,
            max_total: limits.inflated_total_for(bytes.len()),
            inflated: 0,
        })
    }

    fn has(&self, name: &str) -> bool {
        self.archive.index_for_name(name).is_some()
    }

    fn read(&mut self, name: &str) -> Result<String, NotIndexed> {
        let mut member = self.archive.by_name(name).map_err(|e| {
            NotIndexed::failed(
                "parse_error",
                format!("missing `{name}` in the container: {e}"),
            )
        })?;
        let budget = self
            .limits
            .max_inflated_member
            .min(self.max_total.saturating_sub(self.inflated));
        let mut bytes = Vec::new();
        (&mut member)
            .take(budget + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| {
                NotIndexed::failed("parse_error", format!("cannot inflate `{name}`: {e}"))
            })?;
        if bytes.len() as u64 > budget {
            return Err(NotIndexed::failed(
                "too_large_inflated",
                format!(
                    "`{name}` inflates past the {} MiB this container may inflate to (zip bomb?)",
                    budget >> 20
                ),
            ));
        }
        self.inflated += bytes.len() as u64;
        Ok(super::decode_text(&bytes).text)
    }
}

fn local_name(e: &BytesStart<'_>) -> Vec<u8> {
    e.local_name().as_ref().to_vec()
}

fn attr(e: &BytesStart<'_>, local: &[u8]) -> Option<String> {
    e.attributes().flatten().find_map(|a| {
        (a.key.local_name().as_ref() == local)
            .then(|| String::from_utf8_lossy(&a.value).into_owned())
    })
}

fn xml_error(name: &str, e: impl std::fmt::Display) -> NotIndexed {
    NotIndexed::failed("parse_error", format!("malformed XML in `{name}`: {e}"))
}

/// The `dc:title` of a metadata document (DOCX core.xml, ODT meta.xml, EPUB OPF).
fn dc_title(xml: &str) -> Option<String> {
    let mut reader = Reader::from_str(xml);
    let mut in_title = false;
    let mut title = String::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) if e.local_name().as_ref() == b"title" => in_title = true,
            Ok(Event::End(e)) if e.local_name().as_ref() == b"title" => break,
            Ok(Event::Text(t)) if in_title => {
                title.push_str(&t.unescape().unwrap_or_default());
            }
            Ok(Event::Eof) | Err(_) => break,
            _ => {}
        }
    }
    let title = title.trim().to_string();
    (!title.is_empty()).then_some(title)
}

/// A document container's main XML part, and the Dublin Core title of its metadata part when
/// it has one.
fn body_and_title(
    bytes: &[u8],
    limits: &ExtractLimits,
    format: &str,
    body: &str,
    metadata: &str,
) -> Result<(String, Option<String>), NotIndexed> {
    let mut container = Container::open(bytes, limits, format)?;
    let xml = container.read(body)?;
    let title = if container.has(metadata) {
        dc_title(&container.read(metadata)?)
    } else {
        None
    };
    Ok((xml, title))
}

/// DOCX: paragraphs of `word/document.xml`; `Heading N` / `Title` styles become headings.
pub(crate) fn extract_docx(
    bytes: &[u8],
    limits: &ExtractLimits,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    let (xml, title) = body_and_title(
        bytes,
        limits,
        "DOCX",
        "word/document.xml",
        "docProps/core.xml",
    )?;
    let mut reader = Reader::from_str(&xml);
    let mut blocks = Vec::new();
    let mut buf = String::new();
    let mut level: Option<u8> = None;
    let mut in_text = false;
    let mut offset = 0u64;
    for events in 0usize.. {
        if events.is_multiple_of(CHECK_EVERY) {
            budget.check()?;
        }
        let event = reader
            .read_event()
            .map_err(|e| xml_error("word/document.xml", e))?;
        match event {
            Event::Start(e) | Event::Empty(e) => match local_name(&e).as_slice() {
                b"p" => {
                    buf.clear();
                    level = None;
                }
                b"pStyle" => {
                    let style = attr(&e, b"val").unwrap_or_default().to_ascii_lowercase();
                    level = if style == "title" {
                        Some(1)
                    } else {
                        style
                            .strip_prefix("heading")
                            .and_then(|n| n.trim().parse::<u8>().ok())
                            .map(|n| n.clamp(1, 6))
                    };
                }
                b"t" => in_text = true,
                b"tab" => buf.push('\t'),
                b"br" | b"cr" => buf.push('\n'),
                _ => {}
            },
            Event::Text(t) if in_text => {
                buf.push_str(
                    &t.unescape()
                        .map_err(|e| xml_error("word/document.xml", e))?,
                );
            }
            Event::End(e) => match e.local_name().as_ref() {
                b"t" => in_text = false,
                b"p" => {
                    let kind = level.map(BlockKind::Heading);
                    if !push_block(&mut blocks, &mut buf, kind, &mut offset, budget) {
                        break;
                    }
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(Extracted {
        title,
        format: "docx",
        blocks,
        warning: None,
        reader_text: String::new(),
        ocr_pages: Vec::new(),
    })
}

/// Ends the paragraph in `buf`; false once the file's text allowance is spent.
fn push_block(
    blocks: &mut Vec<Block>,
    buf: &mut String,
    kind: Option<BlockKind>,
    offset: &mut u64,
    budget: &Budget,
) -> bool {
    let text = buf.trim();
    let mut admitted = true;
    if !text.is_empty() {
        admitted = budget.admit(text.len());
        if admitted {
            let mut block = Block::new(kind.unwrap_or(BlockKind::Text), text.to_string());
            let len = block.text.len() as u64;
            block.bytes = Some((*offset, *offset + len));
            *offset += len + 1;
            blocks.push(block);
        }
    }
    buf.clear();
    admitted
}

/// ODT: `text:h` (with its outline level) and `text:p` of `content.xml`.
pub(crate) fn extract_odt(
    bytes: &[u8],
    limits: &ExtractLimits,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    let (xml, title) = body_and_title(bytes, limits, "ODT", "content.xml", "meta.xml")?;
    let mut reader = Reader::from_str(&xml);
    let mut blocks = Vec::new();
    let mut buf = String::new();
    let mut level: Option<u8> = None;
    let mut depth = 0usize;
    let mut offset = 0u64;
    for events in 0usize.. {
        if events.is_multiple_of(CHECK_EVERY) {
            budget.check()?;
        }
        let event = reader
            .read_event()
            .map_err(|e| xml_error("content.xml", e))?;
        match event {
            Event::Start(e) => match local_name(&e).as_slice() {
                b"h" | b"p" if e.name().as_ref().starts_with(b"text:") => {
                    // A paragraph nested in another (a note, a frame) starts a block of its own.
                    let kind = level.map(BlockKind::Heading);
                    if !push_block(&mut blocks, &mut buf, kind, &mut offset, budget) {
                        break;
                    }
                    depth += 1;
                    level = (local_name(&e) == b"h").then(|| {
                        attr(&e, b"outline-level")
                            .and_then(|l| l.parse::<u8>().ok())
                            .unwrap_or(1)
                            .clamp(1, 6)
                    });
                }
                _ => {}
            },
            Event::Empty(e) => match local_name(&e).as_slice() {
                b"s" => {
                    let n = attr(&e, b"c")
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(1usize);
                    buf.push_str(&" ".repeat(n.min(64)));
                }
                b"tab" => buf.push('\t'),
                b"line-break" => buf.push('\n'),
                _ => {}
            },
            Event::Text(t) if depth > 0 => {
                buf.push_str(&t.unescape().map_err(|e| xml_error("content.xml", e))?);
            }
            Event::End(e) => match e.local_name().as_ref() {
                b"h" | b"p" if e.name().as_ref().starts_with(b"text:") => {
                    let kind = level.map(BlockKind::Heading);
                    if !push_block(&mut blocks, &mut buf, kind, &mut offset, budget) {
                        break;
                    }
                    level = None;
                    depth = depth.saturating_sub(1);
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(Extracted {
        title,
        format: "odt",
        blocks,
        warning: None,
        reader_text: String::new(),
        ocr_pages: Vec::new(),
    })
}

/// EPUB: the spine's XHTML chapters in reading order.
pub(crate) fn extract_epub(
    bytes: &[u8],
    limits: &ExtractLimits,
    budget: &Budget,
) -> Result<Extracted, NotIndexed> {
    let mut container = Container::open(bytes, limits, "EPUB")?;
    let manifest_xml = container.read("META-INF/container.xml")?;
    let opf_path = first_attr(&manifest_xml, b"rootfile", b"full-path").ok_or_else(|| {
        NotIndexed::failed("parse_error", "META-INF/container.xml names no rootfile")
    })?;
    let opf = container.read(&opf_path)?;
    let base = opf_path
        .rsplit_once('/')
        .map(|(d, _)| format!("{d}/"))
        .unwrap_or_default();
    let mut items = std::collections::HashMap::new();
    let mut spine = Vec::new();
    let mut reader = Reader::from_str(&opf);
    loop {
        match reader.read_event().map_err(|e| xml_error(&opf_path, e))? {
            Event::Start(e) | Event::Empty(e) => match local_name(&e).as_slice() {
                b"item" => {
                    if let (Some(id), Some(href)) = (attr(&e, b"id"), attr(&e, b"href")) {
                        items.insert(id, href);
                    }
                }
                b"itemref" => spine.extend(attr(&e, b"idref")),
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    let mut blocks = Vec::new();
    let mut offset = 0u64;
    // A chapter listed again in the spine is read once: a 10 KB EPUB that listed one chapter
    // thousands of times peaked at 1.1 GB.
    let mut read = std::collections::HashSet::new();
    'chapters: for idref in spine {
        let Some(href) = items.get(&idref) else {
            continue;
        };
        let member = format!(
            "{base}{}",
            percent_decode(href.split('#').next().unwrap_or(href))
        );
        if !read.insert(member.clone()) {
            continue;
        }
        let chapter = container.read(&member)?;
        for mut block in html_blocks(&chapter, false, budget)?.blocks {
            if !budget.admit(block.text.len()) {
                break 'chapters;
            }
            let len = block.text.len() as u64;
            block.bytes = Some((offset, offset + len));
            offset += len + 1;
            blocks.push(block);
        }
    }
    Ok(Extracted {
        title: dc_title(&opf),
        format: "epub",
        blocks,
        warning: None,
        reader_text: String::new(),
        ocr_pages: Vec::new(),
    })
}

fn first_attr(xml: &str, element: &[u8], name: &[u8]) -> Option<String> {
    let mut reader = Reader::from_str(xml);
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) | Ok(Event::Empty(e)) if e.local_name().as_ref() == element => {
                return attr(&e, name)
            }
            Ok(Event::Eof) | Err(_) => return None,
            _ => {}
        }
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
