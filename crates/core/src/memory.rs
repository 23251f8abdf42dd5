//! Handing freed memory back to the system: a leaf every layer may call after it lets go of
//! something large (a model session, an evaluation's library).

/// Asks the allocator to give freed pages back (glibc keeps them otherwise, and a released
/// ONNX session would still count in the app's resident memory).
pub(crate) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Starts a new peak: the process's peak resident memory (`VmHWM`) drops to what it holds now,
/// so [`peak_resident_bytes`] then reads the peak of what follows. Linux only; a no-op
/// elsewhere or where `/proc` refuses.
pub(crate) fn reset_peak_resident() {
    #[cfg(target_os = "linux")]
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak resident memory, in bytes, since it started or since
/// [`reset_peak_resident`]; `None` where the system does not say.
pub(crate) fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_reset_peak_forgets_memory_given_back() {
        let big = vec![1u8; 256 << 20];
        let before = peak_resident_bytes().unwrap();
        assert!(before >= 256 << 20, "{before}");
        drop(std::hint::black_box(big));
        return_freed_memory();
        reset_peak_resident();
        let after = peak_resident_bytes().unwrap();
        assert!(after < before, "{after} < {before}");
    }
}
