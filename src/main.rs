use clap::Parser;

// glibc's malloc took a quarter of the CPU time of a remarks page in `perf` (GraphQL
// resolution allocates many small, short-lived values across threads); mimalloc's
// thread-local free lists take most of that back. BENCHMARKS.md has the before and after.
#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;

fn main() -> std::process::ExitCode {
    // `TOKIO_WORKER_THREADS` still sets the workers, as under `#[tokio::main]`.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(idle::return_freed_memory)
        .build()
        .expect("the runtime starts: it only needs threads and an epoll descriptor")
        .block_on(serve())
}

/// mimalloc as Rust's allocator, asked through its plain entry points.
///
/// The `mimalloc` crate asks for every block through the aligned ones (`mi_malloc_aligned`),
/// whatever the alignment. mimalloc 3 serves those from a free list only for blocks of up
/// to 1 KiB and while their page has one free; otherwise it over-allocates by the alignment
/// and adjusts the pointer, unless the size happens to be a power of two. async-graphql boxes
/// a future of a kilobyte or more for every field it resolves, so under callgrind that
/// path was about 9 % of a leaderboard page's instructions. Every block mimalloc hands out
/// is aligned to a word, so a layout asking for no more is served by `mi_malloc`, whose
/// free lists take any size; only larger alignments take the aligned entry points.
mod allocator {
    use std::{
        alloc::{GlobalAlloc, Layout},
        ffi::c_void,
    };

    use libmimalloc_sys as mi;

    /// The alignment of every mimalloc block: a word.
    const BLOCK_ALIGN: usize = std::mem::size_of::<usize>();

    pub struct Mimalloc;

    // SAFETY: every pointer comes from mimalloc and goes back to it. A layout is served by
    // the plain entry points only when its alignment is one every block has, and a block's
    // layout keeps its alignment through `realloc`, so a block is never resized by the
    // other family.
    unsafe impl GlobalAlloc for Mimalloc {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            unsafe {
                if layout.align() <= BLOCK_ALIGN {
                    mi::mi_malloc(layout.size()).cast()
                } else {
                    mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
                }
            }
        }

        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            unsafe {
                if layout.align() <= BLOCK_ALIGN {
                    mi::mi_zalloc(layout.size()).cast()
                } else {
                    mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
                }
            }
        }

        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
            unsafe { mi::mi_free(ptr.cast::<c_void>()) }
        }

        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            unsafe {
                if layout.align() <= BLOCK_ALIGN {
                    mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
                } else {
                    mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Blocks of every size class engage uses, at every alignment, come back aligned,
        /// zeroed when asked, and keep their bytes when they grow or shrink.
        #[test]
        fn blocks_are_aligned_and_keep_their_bytes() {
            let sizes = [
                1,
                7,
                8,
                24,
                48,
                100,
                1000,
                1025,
                1500,
                4096,
                70_000,
                3 << 20,
            ];
            for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
                for size in sizes {
                    let layout = Layout::from_size_align(size, align).unwrap();
                    unsafe {
                        let zeroed = Mimalloc.alloc_zeroed(layout);
                        assert_eq!(zeroed as usize % align, 0, "{size} bytes at {align}");
                        assert!(std::slice::from_raw_parts(zeroed, size)
                            .iter()
                            .all(|&b| b == 0));
                        Mimalloc.dealloc(zeroed, layout);

                        let mut block = Mimalloc.alloc(layout);
                        let mut held = layout;
                        assert_eq!(block as usize % align, 0, "{size} bytes at {align}");
                        for i in 0..size {
                            *block.add(i) = i as u8;
                        }
                        // Grown, then shrunk below the first size: the bytes both keep stay.
                        for new_size in [size * 3, size / 2 + 1] {
                            block = Mimalloc.realloc(block, held, new_size);
                            held = Layout::from_size_align(new_size, align).unwrap();
                            assert_eq!(block as usize % align, 0, "{new_size} bytes at {align}");
                            let kept = (size / 2 + 1).min(new_size);
                            assert!((0..kept).all(|i| *block.add(i) == i as u8));
                        }
                        Mimalloc.dealloc(block, held);
                    }
                }
            }
        }
    }
}

/// Giving freed memory back to the system once a worker has nothing to do.
///
/// mimalloc keeps the pages a thread freed until that thread collects, which it does only
/// every so many allocations: a worker that served a burst (1,500 connections' header
/// buffers: 40–60 MB) and then fell idle held those pages for ever. A worker that parks
/// collects its own heap, at most once a second, so that the pages it freed are purged
/// (after mimalloc's purge delay) while the instance is quiet. Purging at every free
/// (`purge_delay=0`) would give the memory back as fast, at the cost of a system call in
/// the request path whenever a page empties.
mod idle {
    use std::{
        cell::Cell,
        time::{Duration, Instant},
    };

    const EVERY: Duration = Duration::from_secs(1);

    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }

    pub fn return_freed_memory() {
        let now = Instant::now();
        let due = LAST
            .get()
            .is_none_or(|last| now.duration_since(last) >= EVERY);
        if due {
            LAST.set(Some(now));
            // SAFETY: collects the calling thread's own heap; it takes no pointer and is
            // safe to call at any time from any thread that allocates.
            unsafe { libmimalloc_sys::mi_collect(false) };
        }
    }
}

async fn serve() -> std::process::ExitCode {
    // A missing .env is normal; a malformed one is worth saying, through the logger once it
    // is installed (the log format may come from the .env itself).
    let dotenv = dotenvy::dotenv().err().filter(|error| !error.not_found());
    let cli = engage::app::cli::Cli::parse();
    // Flushes the spans not yet exported when dropped, after the last request.
    let json = cli.config.log_format == engage::infra::telemetry::LogFormat::Json;
    let _telemetry = match engage::infra::telemetry::init(cli.config.log_format) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("engage: {error:#}");
            return std::process::ExitCode::FAILURE;
        }
    };

    if let Some(error) = dotenv {
        tracing::warn!("engage: ignoring .env: {error}");
    }
    match engage::app::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            if json {
                tracing::error!("engage: {error:#}");
            } else {
                eprintln!("engage: {error:#}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}
