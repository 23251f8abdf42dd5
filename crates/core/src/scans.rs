//! Scans made on the spot for the OCR tests and `quarry bench ocr`: known text rendered into
//! pixels by ImageMagick (`convert`, which `scripts/setup.sh` installs with the DejaVu fonts),
//! as PNG files and as image-only PDFs, and the word recall of what OCR read back.

use std::io::Write;
use std::process::Command;

use crate::error::{Error, Result};

/// How a page is rendered: font, size and the damage a real scan has.
#[derive(Debug, Clone)]
pub struct Render {
    /// An ImageMagick font name (`convert -list font`), e.g. `DejaVu-Sans`.
    pub font: String,
    /// Points, at 300 dpi.
    pub points: u32,
    /// Degrees the page is turned (a scan fed in askew).
    pub rotate: f32,
    /// Gaussian noise attenuation (0: none; 0.5 is a grainy photocopy).
    pub noise: f32,
    /// Blur radius in pixels (0: none; 1 is a soft phone photo).
    pub blur: f32,
}

impl Render {
    /// Clean text in `font` at `points`.
    pub fn clean(font: &str, points: u32) -> Render {
        Render {
            font: font.into(),
            points,
            rotate: 0.0,
            noise: 0.0,
            blur: 0.0,
        }
    }

    /// `text` on a white page at 300 dpi, wrapped at about 6.5 inches, as a grey PNG.
    pub fn png(&self, text: &str) -> Result<Vec<u8>> {
        let mut command = Command::new("convert");
        command.args([
            "-density",
            "300",
            "-units",
            "PixelsPerInch",
            "-background",
            "white",
        ]);
        command.args(["-fill", "black", "-font", &self.font]);
        command.args(["-pointsize", &self.points.to_string(), "-size", "1950x"]);
        // `caption:` would read a file for text starting with '@'.
        command.arg(format!("caption:{}", text.trim_start_matches('@')));
        command.args(["-bordercolor", "white", "-border", "75"]);
        if self.rotate != 0.0 {
            command.args(["-rotate", &self.rotate.to_string()]);
        }
        if self.noise > 0.0 {
            command.args(["-attenuate", &self.noise.to_string(), "+noise", "Gaussian"]);
        }
        if self.blur > 0.0 {
            command.args(["-blur", &format!("0x{}", self.blur)]);
        }
        command.args(["-colorspace", "Gray", "png:-"]);
        let out = command.output().map_err(|e| Error::Io {
            path: "convert".into(),
            source: std::io::Error::new(
                e.kind(),
                format!("ImageMagick's `convert` is needed to render scans (scripts/setup.sh installs it): {e}"),
            ),
        })?;
        if !out.status.success() {
            return Err(Error::Internal(format!(
                "convert failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(out.stdout)
    }
}

/// `text` in DejaVu Sans at 12 pt, clean, as a grey PNG (panics where ImageMagick is missing:
/// for tests).
pub fn text_png(text: &str) -> Vec<u8> {
    text_png_in(text, "DejaVu-Sans")
}

/// [`text_png`] in another font.
pub fn text_png_in(text: &str, font: &str) -> Vec<u8> {
    Render::clean(font, 12).png(text).expect("rendered")
}

/// A PDF page: typed (a text layer in Helvetica) or scanned (a grey PNG over the whole page
/// at 300 dpi, no text layer).
pub enum Page<'a> {
    /// Text set in Helvetica.
    Typed(&'a str),
    /// A PNG's pixels.
    Scanned(&'a [u8]),
}

/// An image-only PDF (a scan: no text layer), one page per PNG.
pub fn scanned_pdf(pages: &[Vec<u8>]) -> Vec<u8> {
    let pages: Vec<Page<'_>> = pages.iter().map(|png| Page::Scanned(png)).collect();
    pdf_of(&pages)
}

/// A PDF of typed and scanned pages.
pub fn pdf_of(pages: &[Page<'_>]) -> Vec<u8> {
    // 1 catalog, 2 pages, 3 font, then per page: page, content, image (unused when typed).
    let mut objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {} >>",
            (0..pages.len())
                .map(|i| format!("{} 0 R", 4 + i * 3))
                .collect::<Vec<_>>()
                .join(" "),
            pages.len()
        )
        .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    for (i, page) in pages.iter().enumerate() {
        let (content, picture) = (5 + i * 3, 6 + i * 3);
        let (media, draw, image) = match page {
            Page::Typed(text) => (
                (612.0, 792.0),
                format!(
                    "BT /F1 12 Tf 72 720 Td ({}) Tj ET",
                    text.replace('(', "\\(").replace(')', "\\)")
                ),
                b"<< /Length 0 >>\nstream\n\nendstream".to_vec(),
            ),
            Page::Scanned(png) => {
                let gray = image::load_from_memory(png)
                    .expect("a PNG this module rendered")
                    .into_luma8();
                let (w, h) = gray.dimensions();
                let (width, height) = (w as f64 * 72.0 / 300.0, h as f64 * 72.0 / 300.0);
                let mut deflate =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                deflate.write_all(gray.as_raw()).unwrap();
                let data = deflate.finish().unwrap();
                let mut image = format!(
                    "<< /Type /XObject /Subtype /Image /Width {w} /Height {h} /ColorSpace \
                     /DeviceGray /BitsPerComponent 8 /Filter /FlateDecode /Length {} >>\nstream\n",
                    data.len()
                )
                .into_bytes();
                image.extend_from_slice(&data);
                image.extend_from_slice(b"\nendstream");
                (
                    (width, height),
                    format!("q {width:.2} 0 0 {height:.2} 0 0 cm /Im0 Do Q"),
                    image,
                )
            }
        };
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {:.2} {:.2}] /Resources << /Font \
                 << /F1 3 0 R >> /XObject << /Im0 {picture} 0 R >> >> /Contents {content} 0 R >>",
                media.0, media.1
            )
            .into_bytes(),
        );
        objects
            .push(format!("<< /Length {} >>\nstream\n{draw}\nendstream", draw.len()).into_bytes());
        objects.push(image);
    }
    let mut out = b"%PDF-1.5\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        writeln!(out, "{} 0 obj", i + 1).unwrap();
        out.extend_from_slice(object);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    write!(out, "xref\n0 {}\n0000000000 65535 f \n", offsets.len() + 1).unwrap();
    for offset in &offsets {
        writeln!(out, "{offset:010} 00000 n ").unwrap();
    }
    write!(
        out,
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        offsets.len() + 1
    )
    .unwrap();
    out
}

/// A PNG whose header declares `width` × `height` pixels, with a correct checksum, and one
/// pixel of data: a decompression bomb's header in a few dozen bytes.
pub fn png_declaring(width: u32, height: u32) -> Vec<u8> {
    let mut png = Vec::new();
    image::GrayImage::from_pixel(1, 1, image::Luma([255]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    // IHDR: length (8..12), type (12..16), data (16..29), CRC (29..33).
    png[16..20].copy_from_slice(&width.to_be_bytes());
    png[20..24].copy_from_slice(&height.to_be_bytes());
    let crc = crc32(&png[12..29]);
    png[29..33].copy_from_slice(&crc.to_be_bytes());
    png
}

/// CRC-32 (IEEE), as PNG chunks carry it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The share of `truth`'s words that `read` holds (each word counted as often as it occurs in
/// both; case and punctuation aside).
pub fn word_recall(truth: &str, read: &str) -> f64 {
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let truth = words(truth);
    if truth.is_empty() {
        return 1.0;
    }
    let mut left: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for word in words(read) {
        *left.entry(word).or_default() += 1;
    }
    let found = truth
        .iter()
        .filter(|word| match left.get_mut(*word) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        })
        .count();
    found as f64 / truth.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_counts_each_word_as_often_as_both_hold_it() {
        assert_eq!(word_recall("The cat, the hat.", "the CAT sat"), 0.5);
        assert_eq!(word_recall("", "anything"), 1.0);
    }
}
