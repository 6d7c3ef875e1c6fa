//! mimalloc as Rust's allocator, asked through its plain entry points.
//!
//! The `mimalloc` crate asks for every block through the aligned ones (`mi_malloc_aligned`),
//! whatever the alignment. mimalloc 3 serves those from a free list only for blocks of up
//! to 1 KiB and while their page has one free; otherwise it over-allocates by the alignment
//! and adjusts the pointer, unless the size happens to be a power of two. async-graphql boxes
//! a future of a kilobyte or more for every field it resolves, so under callgrind that
//! path was about 9 % of a leaderboard page's instructions. Every block mimalloc hands out
//! is aligned to a word, so a layout asking for no more is served by `mi_malloc`, whose
//! free lists take any size; only larger alignments take the aligned entry points.

use std::{
    alloc::{GlobalAlloc, Layout},
    ffi::c_void,
};

use libmimalloc_sys as mi;

/// The alignment of every mimalloc block: a word.
const BLOCK_ALIGN: usize = std::mem::size_of::<usize>();

/// Whether the plain entry points serve `layout`: every block they hand out has its
/// alignment. The one place the two families of calls are chosen between.
fn plain(layout: Layout) -> bool {
    layout.align() <= BLOCK_ALIGN
}

/// The process's allocator (`src/main.rs`).
pub struct Mimalloc;

// SAFETY: every pointer comes from mimalloc and goes back to it. A layout is served by
// the plain entry points only when its alignment is one every block has, and a block's
// layout keeps its alignment through `realloc`, so a block is never resized by the
// other family.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe {
            if plain(layout) {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe {
            if plain(layout) {
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
            if plain(layout) {
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
