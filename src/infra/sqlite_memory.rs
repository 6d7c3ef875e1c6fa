//! SQLite's own memory: from mimalloc, without SQLite's count of it.
//!
//! SQLite allocates through the C library's `malloc` unless told otherwise, and by default
//! counts every allocation and free in statistics kept under a global mutex. The archives'
//! writer makes about twenty allocations a like (statements' records, cursors, pages
//! outside the cache), so a like's profile carried glibc's `malloc` and `free` and two
//! mutex calls for each of them. Both are settings SQLite takes before it starts: mimalloc
//! serves its blocks as it serves Rust's (`app::allocator`), and the statistics are off
//! (engage reads none of them, and sets no soft heap limit, the one thing that needs them).

use std::{
    ffi::{c_int, c_void},
    sync::Once,
};

use libmimalloc_sys as mi;
use libsqlite3_sys as ffi;

/// Sets SQLite's allocator and turns its memory statistics off, once per process, before
/// the first connection: SQLite takes both only before it starts. Called by every pool's
/// connect, so that the first SQLite use of the process is after it. When something else
/// started SQLite first, SQLite refuses the settings and keeps its own, which is still
/// correct, only slower; that is logged.
pub(crate) fn configure() {
    static CONFIGURED: Once = Once::new();
    CONFIGURED.call_once(|| {
        let methods = ffi::sqlite3_mem_methods {
            xMalloc: Some(malloc),
            xFree: Some(free),
            xRealloc: Some(realloc),
            xSize: Some(size),
            xRoundup: Some(roundup),
            xInit: Some(init),
            xShutdown: Some(shutdown),
            pAppData: std::ptr::null_mut(),
        };
        // SAFETY: both options take the arguments given (SQLite copies the methods), and
        // SQLite refuses them with an error code, changing nothing, once it has started.
        let (allocator, statistics) = unsafe {
            (
                ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &methods),
                ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, 0 as c_int),
            )
        };
        if allocator != ffi::SQLITE_OK || statistics != ffi::SQLITE_OK {
            tracing::warn!(
                allocator,
                statistics,
                "SQLite had started before its memory settings: it keeps the C library's malloc"
            );
        }
    });
}

/// A request's size as mimalloc takes it: SQLite never asks for a negative size, but its
/// type allows one.
fn bytes(n: c_int) -> usize {
    usize::try_from(n).unwrap_or(0)
}

// Every block mimalloc hands out is aligned to 8 bytes at least, as SQLite requires.
unsafe extern "C" fn malloc(n: c_int) -> *mut c_void {
    unsafe { mi::mi_malloc(bytes(n)) }
}

unsafe extern "C" fn free(p: *mut c_void) {
    unsafe { mi::mi_free(p) }
}

unsafe extern "C" fn realloc(p: *mut c_void, n: c_int) -> *mut c_void {
    unsafe { mi::mi_realloc(p, bytes(n)) }
}

/// A block's usable size, which SQLite may fill: at least what was asked.
unsafe extern "C" fn size(p: *mut c_void) -> c_int {
    let usable = unsafe { mi::mi_usable_size(p) };
    c_int::try_from(usable).unwrap_or(c_int::MAX)
}

/// The size a request of `n` bytes is served with.
unsafe extern "C" fn roundup(n: c_int) -> c_int {
    let good = unsafe { mi::mi_good_size(bytes(n)) };
    c_int::try_from(good).unwrap_or(n)
}

unsafe extern "C" fn init(_: *mut c_void) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn shutdown(_: *mut c_void) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The methods SQLite is given: blocks aligned as it needs, at least the size asked,
    /// as large as `roundup` says, and keeping their bytes when resized.
    #[test]
    fn the_methods_serve_blocks_as_sqlite_needs_them() {
        for n in [1, 7, 8, 100, 1_000, 4_096, 4_360, 70_000, 3 << 20] {
            // SAFETY: each block is used within its size and freed once.
            unsafe {
                let p = malloc(n).cast::<u8>();
                assert!(!p.is_null());
                assert_eq!(p as usize % 8, 0, "{n} bytes");
                assert!(size(p.cast()) >= n, "{n} bytes");
                assert!(roundup(n) >= n, "{n} bytes");
                std::ptr::write_bytes(p, 0xA5, bytes(n));
                let grown = realloc(p.cast(), n * 2).cast::<u8>();
                assert!(size(grown.cast()) >= n * 2);
                assert!(
                    (0..bytes(n)).all(|i| *grown.add(i) == 0xA5),
                    "{n} bytes kept"
                );
                free(grown.cast());
            }
        }
    }
}
