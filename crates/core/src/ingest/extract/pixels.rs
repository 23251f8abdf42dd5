//! Images for OCR: their size read from the header before a pixel is decoded (a few KB can
//! declare billions of pixels), then decoded in Rust within a memory limit, first frame only,
//! to the grey pixels Tesseract reads.

use std::io::Cursor;

use image::{GrayImage, ImageReader, Limits};

use super::NotIndexed;

/// Most pixels an image (or a rendered PDF page) may have: an A4 page at 600 dpi is 35
/// megapixels, a phone photo 12 to 50. Larger is a decompression bomb or a poster, and
/// would cost hundreds of MB to decode.
pub(crate) const MAX_PIXELS: u64 = 60_000_000;

/// Most bytes the decoder may hold at once (the colour image before it turns grey).
const MAX_DECODE_BYTES: u64 = 512 << 20;

/// Extensions read as images.
pub(crate) const IMAGE_EXTENSIONS: &[&str] = &[
    "png", "jpg", "jpeg", "jpe", "tif", "tiff", "webp", "bmp", "gif",
];

/// Width and height from the header, refused past [`MAX_PIXELS`] before anything is decoded.
pub(crate) fn checked_dimensions(bytes: &[u8]) -> Result<(u32, u32), NotIndexed> {
    let (width, height) = reader(bytes)?
        .into_dimensions()
        .map_err(|e| NotIndexed::failed("parse_error", format!("unreadable image: {e}")))?;
    let pixels = u64::from(width) * u64::from(height);
    if pixels > MAX_PIXELS {
        return Err(NotIndexed::failed(
            "image_too_large",
            format!(
                "the image declares {width} × {height} pixels ({} megapixels); images over {} \
                 megapixels are not read (a decompression bomb, or a scan far finer than OCR needs)",
                pixels / 1_000_000,
                MAX_PIXELS / 1_000_000
            ),
        ));
    }
    if width == 0 || height == 0 {
        return Err(NotIndexed::failed("parse_error", "the image has no pixels"));
    }
    Ok((width, height))
}

/// The image's first frame as grey pixels, after the header check.
pub(crate) fn decode_gray(bytes: &[u8]) -> Result<GrayImage, NotIndexed> {
    checked_dimensions(bytes)?;
    let mut limits = Limits::default();
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    let mut reader = reader(bytes)?;
    reader.limits(limits);
    let image = reader
        .decode()
        .map_err(|e| NotIndexed::failed("parse_error", format!("corrupt image: {e}")))?;
    Ok(image.into_luma8())
}

fn reader(bytes: &[u8]) -> Result<ImageReader<Cursor<&[u8]>>, NotIndexed> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| NotIndexed::failed("parse_error", format!("unreadable image: {e}")))?;
    if reader.format().is_none() {
        return Err(NotIndexed::failed(
            "parse_error",
            "not an image in a format Quarry reads (PNG, JPEG, TIFF, WebP, BMP, GIF)",
        ));
    }
    Ok(reader)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let mut out = Vec::new();
        GrayImage::from_pixel(width, height, image::Luma([255]))
            .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
            .unwrap();
        out
    }

    /// A BMP header declaring `width` × `height` 24-bit pixels, and no pixels.
    fn bmp_header(width: u32, height: u32) -> Vec<u8> {
        let mut bmp = b"BM".to_vec();
        bmp.extend_from_slice(&(54u32).to_le_bytes()); // file size (a lie the header allows)
        bmp.extend_from_slice(&[0; 4]);
        bmp.extend_from_slice(&54u32.to_le_bytes()); // pixel data offset
        bmp.extend_from_slice(&40u32.to_le_bytes()); // BITMAPINFOHEADER
        bmp.extend_from_slice(&width.to_le_bytes());
        bmp.extend_from_slice(&height.to_le_bytes());
        bmp.extend_from_slice(&1u16.to_le_bytes()); // planes
        bmp.extend_from_slice(&24u16.to_le_bytes()); // bits per pixel
        bmp.extend_from_slice(&[0; 24]); // no compression, sizes and palette left at 0
        bmp
    }

    #[test]
    fn a_declared_size_past_the_limit_is_refused_from_the_header() {
        let bomb = bmp_header(50_000, 50_000);
        assert!(bomb.len() < 100);
        let err = decode_gray(&bomb).unwrap_err();
        let NotIndexed::Failed { reason, message } = err else {
            panic!("refused as a failure")
        };
        assert_eq!(reason, "image_too_large", "{message}");
        assert!(message.contains("50000 × 50000"), "{message}");
    }

    #[test]
    fn a_small_image_decodes_to_grey() {
        let gray = decode_gray(&png(30, 20)).unwrap();
        assert_eq!(gray.dimensions(), (30, 20));
        assert!(matches!(
            decode_gray(b"GIF89a\x01"),
            Err(NotIndexed::Failed { .. })
        ));
        assert!(matches!(
            decode_gray(b"plain words"),
            Err(NotIndexed::Failed {
                reason: "parse_error",
                ..
            })
        ));
    }
}
