//! Test helpers both test crates share (the CLI's tests include this file by path): fixture
//! files of every format, polling, and who the tests run as.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Polls `check` until it is true or `secs` pass.
pub fn eventually(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("timed out after {secs}s waiting for: {what}");
}

pub fn write(path: &Path, bytes: impl AsRef<[u8]>) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

/// A valid one-page-per-string PDF with correct xref offsets. `encrypt` adds a standard
/// security handler whose user password is not empty.
pub fn pdf(pages: &[&str], encrypt: bool) -> Vec<u8> {
    let mut objects: Vec<String> = Vec::new();
    let n = pages.len();
    // 1: catalog, 2: pages, 3: font, then per page: page object, content stream.
    objects.push("<< /Type /Catalog /Pages 2 0 R >>".into());
    let kids: Vec<String> = (0..n).map(|i| format!("{} 0 R", 4 + i * 2)).collect();
    objects.push(format!(
        "<< /Type /Pages /Kids [{}] /Count {n} >>",
        kids.join(" ")
    ));
    objects.push("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".into());
    for (i, text) in pages.iter().enumerate() {
        objects.push(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
            5 + i * 2
        ));
        let stream = format!(
            "BT /F1 12 Tf 72 720 Td ({}) Tj ET",
            text.replace('(', "\\(").replace(')', "\\)")
        );
        objects.push(format!(
            "<< /Length {} >>\nstream\n{stream}\nendstream",
            stream.len()
        ));
    }
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, obj) in objects.iter().enumerate() {
        offsets.push(out.len());
        write!(out, "{} 0 obj\n{obj}\nendobj\n", i + 1).unwrap();
    }
    let mut encrypt_ref = String::new();
    if encrypt {
        offsets.push(out.len());
        let id = objects.len() + 1;
        write!(
            out,
            "{id} 0 obj\n<< /Filter /Standard /V 1 /R 2 /O <{}> /U <{}> /P -44 >>\nendobj\n",
            "11".repeat(32),
            "22".repeat(32)
        )
        .unwrap();
        encrypt_ref = format!(" /Encrypt {id} 0 R /ID [<0123456789abcdef0123456789abcdef> <0123456789abcdef0123456789abcdef>]");
    }
    let xref = out.len();
    write!(out, "xref\n0 {}\n0000000000 65535 f \n", offsets.len() + 1).unwrap();
    for o in &offsets {
        writeln!(out, "{o:010} 00000 n ").unwrap();
    }
    write!(
        out,
        "trailer\n<< /Size {} /Root 1 0 R{encrypt_ref} >>\nstartxref\n{xref}\n%%EOF\n",
        offsets.len() + 1
    )
    .unwrap();
    out
}

fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut cursor = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut cursor);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .compression_level(Some(1));
        for (name, data) in entries {
            z.start_file(*name, options).unwrap();
            z.write_all(data).unwrap();
        }
        z.finish().unwrap();
    }
    cursor.into_inner()
}

/// A DOCX with a title, a heading and paragraphs.
pub fn docx(title: &str, heading: &str, paragraphs: &[&str]) -> Vec<u8> {
    let mut body = format!(
        r#"<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>{heading}</w:t></w:r></w:p>"#
    );
    for p in paragraphs {
        body.push_str(&format!(
            r#"<w:p><w:r><w:t xml:space="preserve">{p}</w:t></w:r></w:p>"#
        ));
    }
    let document = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>"#
    );
    let core = format!(
        r#"<?xml version="1.0"?><cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title></cp:coreProperties>"#
    );
    zip(&[
        ("[Content_Types].xml", br#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>"#),
        ("word/document.xml", document.as_bytes()),
        ("docProps/core.xml", core.as_bytes()),
    ])
}

/// A DOCX whose document.xml inflates to `inflated` bytes (a zip bomb).
pub fn docx_bomb(inflated: usize) -> Vec<u8> {
    let mut cursor = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut cursor);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .compression_level(Some(1))
            .large_file(inflated > u32::MAX as usize);
        z.start_file("word/document.xml", options).unwrap();
        z.write_all(b"<w:document xmlns:w=\"w\"><w:body><w:p><w:r><w:t>")
            .unwrap();
        let block = vec![b' '; 1 << 20];
        for _ in 0..inflated / block.len() {
            z.write_all(&block).unwrap();
        }
        z.finish().unwrap();
    }
    cursor.into_inner()
}

pub fn odt(title: &str, heading: &str, paragraph: &str) -> Vec<u8> {
    let content = format!(
        r#"<?xml version="1.0"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text><text:h text:outline-level="1">{heading}</text:h><text:p>{paragraph}<text:s text:c="2"/>end</text:p></office:text></office:body></office:document-content>"#
    );
    let meta = format!(
        r#"<?xml version="1.0"?><office:document-meta xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:dc="http://purl.org/dc/elements/1.1/"><office:meta><dc:title>{title}</dc:title></office:meta></office:document-meta>"#
    );
    zip(&[
        ("mimetype", b"application/vnd.oasis.opendocument.text"),
        ("content.xml", content.as_bytes()),
        ("meta.xml", meta.as_bytes()),
    ])
}

pub fn epub(title: &str, chapters: &[(&str, &str)]) -> Vec<u8> {
    let container = br#"<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>"#;
    let mut manifest = String::new();
    let mut spine = String::new();
    let mut files = Vec::new();
    for (i, (heading, text)) in chapters.iter().enumerate() {
        manifest.push_str(&format!(
            r#"<item id="c{i}" href="chapter%20{i}.xhtml" media-type="application/xhtml+xml"/>"#
        ));
        spine.push_str(&format!(r#"<itemref idref="c{i}"/>"#));
        files.push((
            format!("OEBPS/chapter {i}.xhtml"),
            format!("<html xmlns=\"http://www.w3.org/1999/xhtml\"><body><h1>{heading}</h1><p>{text}</p></body></html>"),
        ));
    }
    let opf = format!(
        r#"<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title></metadata><manifest>{manifest}</manifest><spine>{spine}</spine></package>"#
    );
    let mut entries: Vec<(&str, &[u8])> = vec![
        ("mimetype", b"application/epub+zip"),
        ("META-INF/container.xml", container),
        ("OEBPS/content.opf", opf.as_bytes()),
    ];
    for (name, body) in &files {
        entries.push((name.as_str(), body.as_bytes()));
    }
    zip(&entries)
}

/// True when this process runs as root (permission bits do not stop root).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}
