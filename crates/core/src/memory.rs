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
