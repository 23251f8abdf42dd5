//! `quarry bench hostile DIR`: writes a folder of small files crafted against the indexer
//! (each one crashed it, hung it or blew up its memory once), indexes it beside an ordinary
//! note, and prints what became of each file, the wall time and the peak RSS. The CLI test
//! `hostile_files_are_recorded_and_the_rest_is_searchable` runs it and checks every outcome.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use quarry_core::{IndexOptions, Library, SearchMode, SearchRequest};

/// One crafted file and what the indexer must make of it.
struct Hostile {
    name: &'static str,
    /// What it did to the indexer before it was bounded.
    attack: &'static str,
    bytes: Vec<u8>,
}

/// The note every run must still find, whatever its neighbours do.
const GOOD_NOTE: &str = "# Okapi\n\nThe okapi lives in the rainforest of the Congo.\n";

pub fn hostile_bench(dir: &Path, data_dir: Option<&Path>) -> Result<ExitCode> {
    let written = write_folder(dir)?;
    let dir = &dir.canonicalize()?;
    let temp = tempfile::tempdir()?;
    let data = data_dir.unwrap_or(temp.path());
    let mut library = Library::open(data)?;
    let source = library.add_source(dir, "hostile", &[], &[])?;
    let started = Instant::now();
    let progress = library
        .writer()?
        .index_all(&IndexOptions::default(), &|_| {})?;
    let secs = started.elapsed().as_secs_f64();
    println!("folder            {}", dir.display());
    for (name, attack) in written {
        let path = dir.join(name);
        let line = match library.document(&path) {
            Ok(doc) => {
                let d = doc.document;
                let note = d.warning.or(d.last_error).unwrap_or_default();
                format!(
                    "{:<8} {:<20} {:>6} chunks  {}",
                    format!("{:?}", d.status).to_lowercase(),
                    d.reason.unwrap_or_default(),
                    doc.chunks.len(),
                    shorten(&note, 110)
                )
            }
            Err(e) => format!("not recorded: {e}"),
        };
        println!("{name:<26} {line}");
        println!("{:<26}   (was: {attack})", "");
    }
    let mut request = SearchRequest::new("okapi rainforest");
    request.settings.mode = SearchMode::Lexical;
    let found = library.search(&request)?.hits.iter().any(|h| {
        h.path
            .file_name()
            .is_some_and(|n| n.to_string_lossy() == "okapi.md")
    });
    println!(
        "files             {} indexed, {} skipped, {} failed (source {})",
        progress.files_indexed, progress.files_skipped, progress.files_failed, source.id
    );
    println!("okapi.md found    {}", if found { "yes" } else { "NO" });
    println!("wall time         {secs:.2} s");
    println!("peak RSS          {}", crate::bench::peak_rss());
    Ok(if found {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Writes the crafted files, a named pipe and the good note into `dir` (created; it must be
/// empty, so nothing of the user's is overwritten); returns each file's name and attack.
fn write_folder(dir: &Path) -> Result<Vec<(&'static str, &'static str)>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    if std::fs::read_dir(dir)?.next().is_some() {
        bail!(
            "{} is not empty: give a new or empty folder for the hostile files",
            dir.display()
        );
    }
    let mut written = Vec::new();
    for file in files() {
        std::fs::write(dir.join(file.name), &file.bytes)
            .with_context(|| format!("writing {}", file.name))?;
        written.push((file.name, file.attack));
    }
    make_fifo(&dir.join("named-pipe.txt"))?;
    written.push(("named-pipe.txt", "a named pipe: the read blocked for good"));
    std::fs::write(dir.join("okapi.md"), GOOD_NOTE)?;
    written.push(("okapi.md", "an ordinary note"));
    Ok(written)
}

#[cfg(unix)]
fn make_fifo(path: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) } != 0 {
        return Err(std::io::Error::last_os_error()).context("mkfifo");
    }
    Ok(())
}

#[cfg(not(unix))]
fn make_fifo(_path: &Path) -> Result<()> {
    Ok(())
}

fn files() -> Vec<Hostile> {
    let deep_tags = format!(
        "<html><body>{}The deepest words sit forty thousand tags down.{}</body></html>",
        "<div>".repeat(40_000),
        "</div>".repeat(40_000)
    );
    vec![
        Hostile {
            name: "deep-tags.html",
            attack: "40,000 nested tags: stack overflow, exit 134",
            bytes: deep_tags.clone().into_bytes(),
        },
        Hostile {
            name: "deep-chapter.epub",
            attack: "an EPUB chapter of 40,000 nested tags: stack overflow",
            bytes: epub(&[("c0", &deep_tags)], 1),
        },
        Hostile {
            name: "nested-arrays.pdf",
            attack: "a 6.5 KB PDF of 3,000 nested arrays: stack overflow in the PDF parser",
            bytes: pdf(&format!(
                "<< /Nested {}{} >>",
                "[".repeat(3_000),
                "]".repeat(3_000)
            )),
        },
        Hostile {
            name: "stream-bomb.pdf",
            attack: "a 1 GiB compressed content stream: 865 MB peak",
            bytes: pdf_stream_bomb(1 << 30),
        },
        Hostile {
            name: "long-header.csv",
            attack: "a 200 KB header repeated into every cell: 3.5 GB peak",
            bytes: format!("{}\n{}", "h".repeat(200_000), "x\n".repeat(5_000)).into_bytes(),
        },
        Hostile {
            name: "long-keys.json",
            attack: "long keys repeated into every value's path: 6 GB peak",
            bytes: long_keys_json(),
        },
        Hostile {
            name: "long-keys.jsonl",
            attack: "20 MB of lines with long key paths: 13 GB peak",
            bytes: long_keys_jsonl(20 << 20),
        },
        Hostile {
            name: "many-paragraphs.docx",
            attack: "70 KB inflating to 20,000 chunks: 65 s and 861 MB for eight",
            bytes: docx_of_paragraphs(60_000),
        },
        Hostile {
            name: "repeated-chapter.epub",
            attack: "one chapter listed over and over in the spine: 1.1 GB peak",
            bytes: epub(
                &[(
                    "c0",
                    &"<p>The same chapter again and again.</p>".repeat(20_000),
                )],
                2_000,
            ),
        },
    ]
}

/// A one-object PDF around `object`, with a correct cross-reference table.
fn pdf(object: &str) -> Vec<u8> {
    pdf_of(&[
        "<< /Type /Catalog /Pages 2 0 R >>".as_bytes().to_vec(),
        b"<< /Type /Pages /Kids [] /Count 0 >>".to_vec(),
        object.as_bytes().to_vec(),
    ])
}

/// A one-page PDF whose content stream inflates to `inflated` bytes of spaces.
fn pdf_stream_bomb(inflated: usize) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    let block = vec![b' '; 1 << 20];
    for _ in 0..inflated / block.len() {
        z.write_all(&block).expect("writing to memory");
    }
    let packed = z.finish().expect("writing to memory");
    let mut stream = format!(
        "<< /Length {} /Filter /FlateDecode >>\nstream\n",
        packed.len()
    )
    .into_bytes();
    stream.extend_from_slice(&packed);
    stream.extend_from_slice(b"\nendstream");
    pdf_of(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>".to_vec(),
        stream,
    ])
}

fn pdf_of(objects: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(object);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    let mut table = format!("xref\n0 {}\n0000000000 65535 f \n", offsets.len() + 1);
    for offset in offsets {
        table.push_str(&format!("{offset:010} 00000 n \n"));
    }
    table.push_str(&format!(
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objects.len() + 1
    ));
    out.extend_from_slice(table.as_bytes());
    out
}

/// About 210 KB: two levels of 2 KB keys over 100 values.
fn long_keys_json() -> Vec<u8> {
    let key = "k".repeat(2_000);
    let leaves: Vec<String> = (0..100).map(|i| format!("\"{key}{i}\": {i}")).collect();
    format!("{{\"{key}\": {{\"{key}\": {{{}}}}}}}", leaves.join(",")).into_bytes()
}

/// `size` bytes of JSON lines, each two 1 KB keys over an array of 1,000 numbers.
fn long_keys_jsonl(size: usize) -> Vec<u8> {
    let key = "k".repeat(1_000);
    let numbers = vec!["7"; 1_000].join(",");
    let line = format!("{{\"{key}\": {{\"{key}\": [{numbers}]}}}}\n");
    line.repeat(size / line.len()).into_bytes()
}

fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut cursor = std::io::Cursor::new(Vec::new());
    let mut z = zip::ZipWriter::new(&mut cursor);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(9));
    for (name, data) in entries {
        z.start_file(*name, options).expect("writing to memory");
        z.write_all(data).expect("writing to memory");
    }
    z.finish().expect("writing to memory");
    cursor.into_inner()
}

/// A DOCX of `paragraphs` copies of one sentence: a few tens of KB that inflate to megabytes.
fn docx_of_paragraphs(paragraphs: usize) -> Vec<u8> {
    let paragraph = "<w:p><w:r><w:t>Every paragraph of this file says the same thing again, and the chunker makes a chunk of each.</w:t></w:r></w:p>";
    let document = format!(
        r#"<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>{}</w:body></w:document>"#,
        paragraph.repeat(paragraphs)
    );
    zip(&[("word/document.xml", document.as_bytes())])
}

/// An EPUB whose spine lists its chapters `times` times over.
fn epub(chapters: &[(&str, &str)], times: usize) -> Vec<u8> {
    let container = br#"<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>"#;
    let manifest: String = chapters
        .iter()
        .map(|(id, _)| {
            format!(r#"<item id="{id}" href="{id}.xhtml" media-type="application/xhtml+xml"/>"#)
        })
        .collect();
    let spine: String = chapters
        .iter()
        .map(|(id, _)| format!(r#"<itemref idref="{id}"/>"#))
        .collect::<String>()
        .repeat(times);
    let opf = format!(
        r#"<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0"><manifest>{manifest}</manifest><spine>{spine}</spine></package>"#
    );
    let bodies: Vec<(String, String)> = chapters
        .iter()
        .map(|(id, body)| {
            (
                format!("{id}.xhtml"),
                format!("<html xmlns=\"http://www.w3.org/1999/xhtml\"><body>{body}</body></html>"),
            )
        })
        .collect();
    let mut entries: Vec<(&str, &[u8])> = vec![
        ("mimetype", b"application/epub+zip"),
        ("META-INF/container.xml", container),
        ("content.opf", opf.as_bytes()),
    ];
    for (name, body) in &bodies {
        entries.push((name.as_str(), body.as_bytes()));
    }
    zip(&entries)
}
