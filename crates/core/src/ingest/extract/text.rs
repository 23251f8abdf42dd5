//! Plain text and source code, and decoding bytes of unknown encoding.

use super::{paragraphs, Block, BlockKind, Extracted, LineIndex};

/// Text decoded from file bytes.
pub(crate) struct Decoded {
    pub text: String,
    /// Bytes skipped at the start of the file (a BOM), so offsets map back to the file.
    pub offset: usize,
    pub warning: Option<String>,
}

/// Decodes bytes as UTF-8 when they are; UTF-16 by BOM; a UTF-8 file with stray legacy bytes
/// (mixed encodings) keeps its UTF-8 and decodes only the stray bytes as Windows-1252; anything
/// else is decoded with the encoding `chardetng` guesses. Every guess leaves a warning.
pub(crate) fn decode_text(bytes: &[u8]) -> Decoded {
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        let mut d = decode_text(rest);
        d.offset += 3;
        return d;
    }
    if let Some((encoding, bom_len)) = encoding_rs::Encoding::for_bom(bytes) {
        let (text, had_errors) = encoding.decode_without_bom_handling(&bytes[bom_len..]);
        return Decoded {
            text: text.into_owned(),
            offset: bom_len,
            warning: had_errors
                .then(|| format!("invalid {} sequences were replaced", encoding.name())),
        };
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Decoded {
            text: text.to_string(),
            offset: 0,
            warning: None,
        };
    }
    let mut invalid = 0usize;
    let mut multibyte = false;
    for chunk in bytes.utf8_chunks() {
        invalid += chunk.invalid().len();
        multibyte |= chunk.valid().bytes().any(|b| b >= 0x80);
    }
    if multibyte {
        let mut text = String::with_capacity(bytes.len());
        for chunk in bytes.utf8_chunks() {
            text.push_str(chunk.valid());
            let (legacy, _, _) = encoding_rs::WINDOWS_1252.decode(chunk.invalid());
            text.push_str(&legacy);
        }
        return Decoded {
            text,
            offset: 0,
            warning: Some(format!(
                "mixed encodings: UTF-8 with {invalid} stray byte(s) decoded as windows-1252"
            )),
        };
    }
    let mut detector = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
    detector.feed(bytes, true);
    let encoding = detector.guess(None, chardetng::Utf8Detection::Allow);
    let (text, _, had_errors) = encoding.decode(bytes);
    Decoded {
        text: text.into_owned(),
        offset: 0,
        warning: Some(format!(
            "not valid UTF-8; decoded as {}{}",
            encoding.name(),
            if had_errors { " with replacements" } else { "" }
        )),
    }
}

/// Plain text or code: one block per paragraph (blank-line separated), with lines and bytes.
pub(crate) fn extract_plain(
    text: &str,
    offset: usize,
    kind: BlockKind,
    format: &'static str,
) -> Extracted {
    let lines = LineIndex::new(text);
    let blocks = paragraphs(text)
        .into_iter()
        .map(|(start, end)| Block {
            kind,
            text: text[start..end].to_string(),
            page: None,
            lines: Some(lines.lines_of(start, end)),
            bytes: Some(((start + offset) as u64, (end + offset) as u64)),
            reader: None,
            ocr_confidence: None,
        })
        .collect();
    Extracted {
        title: None,
        format,
        blocks,
        warning: None,
        reader_text: String::new(),
        ocr_pages: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_passes_through() {
        let d = decode_text("héllo".as_bytes());
        assert_eq!(d.text, "héllo");
        assert!(d.warning.is_none());
    }

    #[test]
    fn latin1_is_detected() {
        let d = decode_text(b"caf\xe9 cr\xe8me br\xfbl\xe9e, d\xe9j\xe0 vu");
        assert_eq!(d.text, "café crème brûlée, déjà vu");
        assert!(d.warning.unwrap().contains("not valid UTF-8"));
    }

    #[test]
    fn mixed_encodings_keep_the_utf8() {
        let mut bytes = "naïve ".as_bytes().to_vec();
        bytes.extend_from_slice(b"caf\xe9");
        let d = decode_text(&bytes);
        assert_eq!(d.text, "naïve café");
        assert!(d.warning.unwrap().contains("mixed encodings"));
    }

    #[test]
    fn bom_is_skipped_and_counted() {
        let d = decode_text(b"\xEF\xBB\xBFhi");
        assert_eq!((d.text.as_str(), d.offset), ("hi", 3));
        let utf16 = [0xFF, 0xFE, b'h', 0, b'i', 0];
        assert_eq!(decode_text(&utf16).text, "hi");
    }
}
