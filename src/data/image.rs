//! An image's width and height from the first bytes of its file, without decoding a pixel:
//! PNG's IHDR chunk, JPEG's start-of-frame marker, GIF's logical screen, WebP's VP8/VP8L/VP8X
//! header and BMP's DIB header. Each format puts its size at a known place in its header
//! (JPEG after any metadata segments, so a JPEG may need more than the first bytes read).

/// Why no size came out of the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// The bytes end before the size: read more of the file (all of it, for a JPEG with large
    /// metadata) and ask again.
    Truncated,
    /// No format recognised by its signature.
    Unknown,
    /// A recognised format whose header is wrong.
    Malformed(&'static str),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Truncated => f.write_str("the file ends inside its header"),
            HeaderError::Unknown => f.write_str("not a PNG, JPEG, GIF, WebP or BMP image"),
            HeaderError::Malformed(what) => write!(f, "a malformed header: {what}"),
        }
    }
}

/// `(width, height)` in pixels.
pub fn size(bytes: &[u8]) -> Result<(u32, u32), HeaderError> {
    let (w, h) = if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        png(bytes)?
    } else if bytes.starts_with(&[0xFF, 0xD8]) {
        jpeg(bytes)?
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        (u32::from(le16(bytes, 6)?), u32::from(le16(bytes, 8)?))
    } else if bytes.starts_with(b"RIFF") && bytes.get(8..12).is_some_and(|b| b == b"WEBP") {
        webp(bytes)?
    } else if bytes.starts_with(b"BM") {
        bmp(bytes)?
    } else if bytes.len() < 12 {
        return Err(HeaderError::Truncated);
    } else {
        return Err(HeaderError::Unknown);
    };
    if w == 0 || h == 0 {
        return Err(HeaderError::Malformed("a width or height of 0"));
    }
    Ok((w, h))
}

fn at<const N: usize>(bytes: &[u8], offset: usize) -> Result<[u8; N], HeaderError> {
    bytes.get(offset..offset + N).and_then(|b| b.try_into().ok()).ok_or(HeaderError::Truncated)
}

fn be16(bytes: &[u8], offset: usize) -> Result<u16, HeaderError> {
    at(bytes, offset).map(u16::from_be_bytes)
}

fn le16(bytes: &[u8], offset: usize) -> Result<u16, HeaderError> {
    at(bytes, offset).map(u16::from_le_bytes)
}

fn le24(bytes: &[u8], offset: usize) -> Result<u32, HeaderError> {
    at::<3>(bytes, offset).map(|[a, b, c]| u32::from_le_bytes([a, b, c, 0]))
}

/// The first chunk after the signature is IHDR: width and height, big-endian.
fn png(bytes: &[u8]) -> Result<(u32, u32), HeaderError> {
    if at::<4>(bytes, 12)? != *b"IHDR" {
        return Err(HeaderError::Malformed("the first PNG chunk is not IHDR"));
    }
    Ok((u32::from_be_bytes(at(bytes, 16)?), u32::from_be_bytes(at(bytes, 20)?)))
}

/// Walks the marker segments to the first start-of-frame (SOF0–SOF15 but DHT, JPG and DAC),
/// whose payload is precision, height, width.
fn jpeg(bytes: &[u8]) -> Result<(u32, u32), HeaderError> {
    let mut i = 2;
    loop {
        if at::<1>(bytes, i)?[0] != 0xFF {
            return Err(HeaderError::Malformed("a JPEG segment does not start with 0xFF"));
        }
        let marker = at::<1>(bytes, i + 1)?[0];
        match marker {
            // Fill bytes before a marker.
            0xFF => i += 1,
            // Markers without a length.
            0x01 | 0xD0..=0xD7 => i += 2,
            0xD9 | 0xDA => return Err(HeaderError::Malformed("no start-of-frame before the image data")),
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                return Ok((u32::from(be16(bytes, i + 7)?), u32::from(be16(bytes, i + 5)?)));
            }
            _ => i += 2 + usize::from(be16(bytes, i + 2)?),
        }
    }
}

/// RIFF/WEBP, then the first chunk: lossy `VP8 ` (a 14-bit width and height after its start
/// code), lossless `VP8L` (14-bit width − 1 and height − 1 after its signature byte) or
/// extended `VP8X` (24-bit canvas width − 1 and height − 1).
fn webp(bytes: &[u8]) -> Result<(u32, u32), HeaderError> {
    match &at::<4>(bytes, 12)? {
        b"VP8 " => {
            if at::<3>(bytes, 23)? != [0x9D, 0x01, 0x2A] {
                return Err(HeaderError::Malformed("a VP8 frame without its start code"));
            }
            Ok((u32::from(le16(bytes, 26)? & 0x3FFF), u32::from(le16(bytes, 28)? & 0x3FFF)))
        }
        b"VP8L" => {
            if at::<1>(bytes, 20)?[0] != 0x2F {
                return Err(HeaderError::Malformed("a VP8L chunk without its signature"));
            }
            let bits = u32::from_le_bytes(at(bytes, 21)?);
            Ok(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        b"VP8X" => Ok((le24(bytes, 24)? + 1, le24(bytes, 27)? + 1)),
        _ => Err(HeaderError::Malformed("a WebP file whose first chunk is not VP8, VP8L or VP8X")),
    }
}

/// The DIB header after the 14-byte file header: 16-bit sizes in the old 12-byte core header,
/// signed 32-bit ones (a negative height is a top-down image) in every later one.
fn bmp(bytes: &[u8]) -> Result<(u32, u32), HeaderError> {
    if u32::from_le_bytes(at(bytes, 14)?) == 12 {
        return Ok((u32::from(le16(bytes, 18)?), u32::from(le16(bytes, 20)?)));
    }
    let w = i32::from_le_bytes(at(bytes, 18)?);
    let h = i32::from_le_bytes(at(bytes, 22)?);
    Ok((w.unsigned_abs(), h.unsigned_abs()))
}

/// Tiny valid headers of each format, for tests here and in the command's tests.
pub mod fixtures {
    /// A PNG signature and IHDR chunk (8-bit RGB; the CRC is not checked, so it is zero).
    pub fn png(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        b.extend(w.to_be_bytes());
        b.extend(h.to_be_bytes());
        b.extend([8, 2, 0, 0, 0, 0, 0, 0, 0]);
        b
    }

    /// SOI, an APP0 segment of `metadata` bytes, a quantisation table and a baseline SOF0.
    pub fn jpeg(w: u16, h: u16, metadata: usize) -> Vec<u8> {
        let mut b = vec![0xFF, 0xD8, 0xFF, 0xE0];
        b.extend(((metadata + 2) as u16).to_be_bytes());
        b.extend(std::iter::repeat_n(0x4A, metadata));
        b.extend([0xFF, 0xDB, 0x00, 0x03, 0x00]);
        b.extend([0xFF, 0xC0, 0x00, 0x11, 0x08]);
        b.extend(h.to_be_bytes());
        b.extend(w.to_be_bytes());
        b.extend([3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_and_jpeg_sizes_come_from_their_headers() {
        assert_eq!(size(&fixtures::png(640, 480)), Ok((640, 480)));
        assert_eq!(size(&fixtures::jpeg(1920, 1080, 100)), Ok((1920, 1080)));
        // Fill bytes before a marker are skipped.
        let mut filled = fixtures::jpeg(33, 77, 4);
        filled.insert(2, 0xFF);
        assert_eq!(size(&filled), Ok((33, 77)));
    }

    #[test]
    fn a_jpeg_whose_metadata_outgrows_the_bytes_read_asks_for_more() {
        let whole = fixtures::jpeg(800, 600, 60_000);
        assert_eq!(size(&whole[..4096]), Err(HeaderError::Truncated));
        assert_eq!(size(&whole), Ok((800, 600)));
    }

    #[test]
    fn gif_webp_and_bmp_sizes() {
        assert_eq!(size(b"GIF89a\x40\x01\xf0\x00\0\0\0\0"), Ok((320, 240)));
        let riff = |chunk: &[u8], body: &[u8]| [b"RIFF\0\0\0\0WEBP", chunk, b"\0\0\0\0", body].concat();
        // VP8: a 3-byte frame tag, the start code, 14-bit sizes (the top two bits are scaling).
        assert_eq!(size(&riff(b"VP8 ", &[0, 0, 0, 0x9D, 0x01, 0x2A, 0x80, 0x42, 0xE0, 0x01])), Ok((640, 480)));
        // VP8L: 0x2F, then width − 1 in 14 bits and height − 1 in the next 14.
        let bits: u32 = 639 | (479 << 14);
        assert_eq!(size(&riff(b"VP8L", &[[0x2F].as_slice(), &bits.to_le_bytes()].concat())), Ok((640, 480)));
        assert_eq!(size(&riff(b"VP8X", &[0, 0, 0, 0, 0x7F, 0x02, 0, 0xDF, 0x01, 0])), Ok((640, 480)));
        let mut bmp = b"BM".to_vec();
        bmp.extend([0u8; 12]);
        bmp.extend(40u32.to_le_bytes());
        bmp.extend(100i32.to_le_bytes());
        bmp.extend((-50i32).to_le_bytes());
        assert_eq!(size(&bmp), Ok((100, 50)));
    }

    #[test]
    fn what_is_not_an_image_header_says_why() {
        assert_eq!(size(b"hello, this is text"), Err(HeaderError::Unknown));
        assert_eq!(size(&fixtures::png(640, 480)[..20]), Err(HeaderError::Truncated));
        assert_eq!(size(&fixtures::png(0, 480)), Err(HeaderError::Malformed("a width or height of 0")));
        let mut bad = fixtures::png(1, 1);
        bad[12..16].copy_from_slice(b"IDAT");
        assert!(matches!(size(&bad), Err(HeaderError::Malformed(_))));
        assert_eq!(
            size(&[0xFF, 0xD8, 0xFF, 0xDA, 0, 2]),
            Err(HeaderError::Malformed("no start-of-frame before the image data"))
        );
    }
}
