//! Tesseract 5 through its C API: one engine per OCR worker, one page at a time, each page
//! bounded by a deadline and stopped by a pause (Tesseract's progress monitor asks between
//! words). Pixels come decoded by Rust (`extract::pixels`, the PDF renderer): Tesseract never
//! parses a file.

use std::ffi::{c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use image::GrayImage;
use tesseract_sys::{
    TessBaseAPI, TessBaseAPICreate, TessBaseAPIDelete, TessBaseAPIGetUTF8Text, TessBaseAPIInit3,
    TessBaseAPIMeanTextConf, TessBaseAPIRecognize, TessBaseAPISetImage,
    TessBaseAPISetSourceResolution, TessBaseAPISetVariable, TessDeleteText, TessMonitorCreate,
    TessMonitorDelete, TessMonitorSetCancelFunc, TessMonitorSetCancelThis,
    TessMonitorSetDeadlineMSecs,
};

/// What went wrong before a page could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OcrSetupError {
    /// Machine reason: `ocr_language_missing`, `ocr_unavailable`, `invalid_ocr_language`.
    pub reason: &'static str,
    /// What to do about it, with the install command where one helps.
    pub message: String,
}

/// One page's recognised text.
#[derive(Debug, Clone)]
pub(crate) struct PageText {
    pub text: String,
    /// Tesseract's mean word confidence, 0 to 100.
    pub confidence: u8,
    /// The page's time ran out: the text is what was read by then.
    pub timed_out: bool,
    /// Stopped by a pause: the text is incomplete and is not kept.
    pub cancelled: bool,
}

/// One Tesseract instance with its languages loaded (some 100 ms and 30 MB for English).
pub(crate) struct Tesseract {
    api: *mut TessBaseAPI,
}

// The instance is used by one thread at a time (it moves with its worker).
unsafe impl Send for Tesseract {}

impl Drop for Tesseract {
    fn drop(&mut self) {
        // SAFETY: `api` came from TessBaseAPICreate and is deleted once.
        unsafe { TessBaseAPIDelete(self.api) }
    }
}

impl Tesseract {
    /// An engine reading `languages` (Tesseract codes, `eng`, `deu`, `chi_sim`), each checked
    /// against the installed language data first.
    pub(crate) fn new(languages: &[String]) -> Result<Tesseract, OcrSetupError> {
        let dir = check_languages(languages)?;
        let unavailable = |what: &str| OcrSetupError {
            reason: "ocr_unavailable",
            message: format!("Tesseract could not start: {what}"),
        };
        let path = CString::new(dir.as_os_str().as_bytes()).map_err(|_| unavailable("path"))?;
        let langs = CString::new(languages.join("+")).map_err(|_| unavailable("languages"))?;
        // SAFETY: plain C calls on a handle this function owns; the strings outlive them.
        unsafe {
            let api = TessBaseAPICreate();
            if api.is_null() {
                return Err(unavailable("out of memory"));
            }
            let engine = Tesseract { api };
            if TessBaseAPIInit3(api, path.as_ptr(), langs.as_ptr()) != 0 {
                return Err(unavailable(&format!(
                    "it refused the language data for {} in {}",
                    languages.join("+"),
                    dir.display()
                )));
            }
            // Its diagnostics ("Detected N diacritics", ...) would go to the app's stderr.
            TessBaseAPISetVariable(api, c"debug_file".as_ptr(), c"/dev/null".as_ptr());
            Ok(engine)
        }
    }

    /// Reads one page of grey pixels scanned at `dpi` (0: unknown, Tesseract estimates it),
    /// for at most `time`, stopping early when `cancelled` says so.
    pub(crate) fn read_page(
        &mut self,
        page: &GrayImage,
        dpi: u32,
        time: Duration,
        cancelled: &dyn Fn() -> bool,
    ) -> PageText {
        // Debian's Tesseract is built with OpenMP and asks for 4 threads in its LSTM loops
        // (a `num_threads` clause, which omp_set_num_threads cannot lower): on two cores they
        // wait on each other in the kernel, and a page took 2.7 s instead of 0.6 s. With
        // dynamic adjustment OpenMP gives a loop only the cores that are idle.
        // SAFETY: sets this thread's OpenMP dynamic-adjustment flag; nothing else is touched.
        unsafe { omp_set_dynamic(1) };
        let started = Instant::now();
        let (width, height) = page.dimensions();
        let mut watch = Watch {
            cancelled,
            stopped_by_cancel: false,
        };
        // SAFETY: the pixels, the monitor and `watch` outlive the Recognize call that reads
        // them; the monitor is deleted before `watch` goes out of scope.
        let (text, confidence) = unsafe {
            TessBaseAPISetImage(
                self.api,
                page.as_raw().as_ptr(),
                width as c_int,
                height as c_int,
                1,
                width as c_int,
            );
            TessBaseAPISetSourceResolution(self.api, dpi as c_int);
            let monitor = TessMonitorCreate();
            TessMonitorSetDeadlineMSecs(monitor, time.as_millis().min(i32::MAX as u128) as c_int);
            TessMonitorSetCancelFunc(monitor, Some(stop_requested));
            TessMonitorSetCancelThis(monitor, (&mut watch as *mut Watch<'_>).cast::<c_void>());
            TessBaseAPIRecognize(self.api, monitor);
            TessMonitorDelete(monitor);
            if watch.stopped_by_cancel {
                // Not kept; and nothing more is asked of the engine once paused.
                return PageText {
                    text: String::new(),
                    confidence: 0,
                    timed_out: false,
                    cancelled: true,
                };
            }
            let raw = TessBaseAPIGetUTF8Text(self.api);
            let text = if raw.is_null() {
                String::new()
            } else {
                let text = CStr::from_ptr(raw).to_string_lossy().into_owned();
                TessDeleteText(raw);
                text
            };
            (text, TessBaseAPIMeanTextConf(self.api).clamp(0, 100) as u8)
        };
        PageText {
            text,
            confidence,
            timed_out: started.elapsed() >= time,
            cancelled: false,
        }
    }
}

// libgomp, which Tesseract (and llama.cpp) link already.
#[link(name = "gomp")]
extern "C" {
    fn omp_set_dynamic(dynamic: c_int);
}

/// What the monitor's cancel function reads.
struct Watch<'a> {
    cancelled: &'a dyn Fn() -> bool,
    stopped_by_cancel: bool,
}

/// Tesseract's cancel callback, asked between words.
unsafe extern "C" fn stop_requested(this: *mut c_void, _words: c_int) -> bool {
    // SAFETY: `this` is the `Watch` that `read_page` set, alive for the whole Recognize.
    let watch = unsafe { &mut *this.cast::<Watch<'_>>() };
    // A panic must not unwind into C++.
    let stop = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (watch.cancelled)()))
        .unwrap_or(true);
    watch.stopped_by_cancel |= stop;
    stop
}

/// Where Tesseract's language data is: `TESSDATA_PREFIX` when set, else Debian's and other
/// common places.
fn tessdata_dir() -> Option<PathBuf> {
    if let Some(prefix) = crate::environment::tessdata_prefix() {
        let nested = prefix.join("tessdata");
        return Some(if nested.is_dir() { nested } else { prefix });
    }
    [
        "/usr/share/tesseract-ocr/5/tessdata",
        "/usr/share/tesseract-ocr/4.00/tessdata",
        "/usr/share/tessdata",
        "/usr/local/share/tessdata",
        "/opt/homebrew/share/tessdata",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|dir| dir.is_dir())
}

/// Checks each language code and that its data is installed; the data directory when so.
pub fn check_languages(languages: &[String]) -> Result<PathBuf, OcrSetupError> {
    if languages.is_empty() {
        return Err(OcrSetupError {
            reason: "invalid_ocr_language",
            message: "no OCR language given (for example eng, or eng+deu)".into(),
        });
    }
    for language in languages {
        let valid = !language.is_empty()
            && language.len() <= 24
            && language
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit());
        if !valid {
            return Err(OcrSetupError {
                reason: "invalid_ocr_language",
                message: format!(
                    "'{language}' is not a Tesseract language code (lower-case letters and '_', for example eng, deu, chi_sim)"
                ),
            });
        }
    }
    let dir = tessdata_dir().ok_or_else(|| OcrSetupError {
        reason: "ocr_unavailable",
        message: "Tesseract's language data was not found (no tessdata folder); install it with: sudo apt install tesseract-ocr tesseract-ocr-eng".into(),
    })?;
    for language in languages {
        if !dir.join(format!("{language}.traineddata")).is_file() {
            return Err(missing_language(language, &dir));
        }
    }
    Ok(dir)
}

fn missing_language(language: &str, dir: &Path) -> OcrSetupError {
    OcrSetupError {
        reason: "ocr_language_missing",
        message: format!(
            "the OCR language '{language}' is not installed (no {language}.traineddata in {}); install it with: sudo apt install tesseract-ocr-{}",
            dir.display(),
            language.replace('_', "-")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_language_names_the_package_to_install() {
        let err = check_languages(&["eng".into(), "zzz_test".into()]).unwrap_err();
        assert_eq!(err.reason, "ocr_language_missing");
        assert!(
            err.message
                .contains("sudo apt install tesseract-ocr-zzz-test"),
            "{}",
            err.message
        );
        let err = check_languages(&["../etc/passwd".into()]).unwrap_err();
        assert_eq!(err.reason, "invalid_ocr_language");
        assert!(
            check_languages(&["eng".into()]).is_ok(),
            "setup.sh installs English"
        );
    }

    #[test]
    fn a_blank_page_reads_as_no_text() {
        let mut engine = Tesseract::new(&["eng".into()]).unwrap();
        let blank = GrayImage::from_pixel(600, 400, image::Luma([255]));
        let page = engine.read_page(&blank, 300, Duration::from_secs(30), &|| false);
        assert!(page.text.trim().is_empty(), "{:?}", page.text);
        assert!(!page.cancelled && !page.timed_out);
    }
}
