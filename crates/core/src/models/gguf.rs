//! The string values of a GGUF file's header (`general.architecture`, `general.name`, …):
//! enough to check that a file is the model it claims to be before llama.cpp loads it.

use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::Path;

use crate::error::{Error, Result};

/// Longest string or array a header may hold: a tokenizer's vocabulary is the longest array
/// in practice (about 150k entries); anything past these is a corrupt file, not a model.
const MAX_STRING: u64 = 1 << 20;
const MAX_ARRAY: u64 = 1 << 22;

/// The header's string values by key (arrays and numbers are read past, not kept).
pub fn header_strings(path: &Path) -> Result<HashMap<String, String>> {
    let invalid = |reason: String| Error::InvalidModel {
        path: path.to_path_buf(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = HeaderReader {
        inner: BufReader::new(file),
    };
    let mut magic = [0u8; 4];
    reader
        .inner
        .read_exact(&mut magic)
        .map_err(|e| invalid(e.to_string()))?;
    if &magic != b"GGUF" {
        return Err(invalid("not a GGUF file".into()));
    }
    let version = reader.u32().map_err(invalid)?;
    if !(2..=3).contains(&version) {
        return Err(invalid(format!("GGUF version {version} is not 2 or 3")));
    }
    let _tensors = reader.u64().map_err(invalid)?;
    let entries = reader.u64().map_err(invalid)?;
    let mut strings = HashMap::new();
    for _ in 0..entries.min(MAX_ARRAY) {
        let key = reader.string().map_err(invalid)?;
        let kind = reader.u32().map_err(invalid)?;
        if kind == STRING {
            strings.insert(key, reader.string().map_err(invalid)?);
        } else {
            reader
                .skip_value(kind)
                .map_err(|e| invalid(format!("`{key}`: {e}")))?;
        }
    }
    Ok(strings)
}

const STRING: u32 = 8;
const ARRAY: u32 = 9;

struct HeaderReader<R> {
    inner: R,
}

impl<R: Read> HeaderReader<R> {
    fn bytes<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let mut buf = [0u8; N];
        self.inner
            .read_exact(&mut buf)
            .map_err(|e| format!("header cut short: {e}"))?;
        Ok(buf)
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        let len = self.u64()?;
        if len > MAX_STRING {
            return Err(format!("a {len}-byte string in the header"));
        }
        let mut buf = vec![0u8; len as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|e| format!("header cut short: {e}"))?;
        String::from_utf8(buf).map_err(|_| "a header string is not UTF-8".to_string())
    }

    fn skip(&mut self, n: u64) -> std::result::Result<(), String> {
        let copied = std::io::copy(&mut (&mut self.inner).take(n), &mut std::io::sink())
            .map_err(|e| e.to_string())?;
        if copied < n {
            return Err("header cut short".into());
        }
        Ok(())
    }

    fn skip_value(&mut self, kind: u32) -> std::result::Result<(), String> {
        match kind {
            0 | 1 | 7 => self.skip(1),
            2 | 3 => self.skip(2),
            4..=6 => self.skip(4),
            10..=12 => self.skip(8),
            STRING => self.string().map(|_| ()),
            ARRAY => {
                let element = self.u32()?;
                let count = self.u64()?;
                if count > MAX_ARRAY {
                    return Err(format!("an array of {count} values"));
                }
                (0..count).try_for_each(|_| self.skip_value(element))
            }
            other => Err(format!("unknown value type {other}")),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal GGUF header holding `strings` and one array and one number.
    pub(crate) fn header(strings: &[(&str, &str)]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend(((strings.len() + 2) as u64).to_le_bytes());
        let string = |out: &mut Vec<u8>, s: &str| {
            out.extend((s.len() as u64).to_le_bytes());
            out.extend(s.as_bytes());
        };
        string(&mut out, "some.count");
        out.extend(4u32.to_le_bytes());
        out.extend(7u32.to_le_bytes());
        string(&mut out, "tokenizer.tokens");
        out.extend(ARRAY.to_le_bytes());
        out.extend(STRING.to_le_bytes());
        out.extend(2u64.to_le_bytes());
        string(&mut out, "a");
        string(&mut out, "b");
        for (k, v) in strings {
            string(&mut out, k);
            out.extend(STRING.to_le_bytes());
            string(&mut out, v);
        }
        out
    }

    #[test]
    fn strings_are_read_and_everything_else_is_read_past() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(
            &path,
            header(&[("general.architecture", "qwen2"), ("general.name", "Q")]),
        )
        .unwrap();
        let strings = header_strings(&path).unwrap();
        assert_eq!(strings["general.architecture"], "qwen2");
        assert_eq!(strings["general.name"], "Q");
        assert_eq!(strings.len(), 2);

        let mut cut = header(&[("general.architecture", "qwen2")]);
        cut.truncate(cut.len() - 3);
        std::fs::write(&path, cut).unwrap();
        let err = header_strings(&path).unwrap_err().to_string();
        assert!(err.contains("m.gguf") && err.contains("cut short"), "{err}");

        std::fs::write(&path, b"PK\x03\x04 not a model").unwrap();
        let err = header_strings(&path).unwrap_err().to_string();
        assert!(err.contains("not a GGUF file"), "{err}");
    }
}
