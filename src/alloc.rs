//! The process allocator: mimalloc through its plain entry points.
//!
//! The proxy allocates and frees a few small buffers per request; mimalloc's per-thread free
//! lists do that in about half the instructions of glibc malloc (`bench/callgrind.py`). The
//! `mimalloc` crate sends every call through `mi_malloc_aligned`, whose generic path cost
//! about 600 instructions per proxied request, so ordinary layouts go to `mi_malloc` here.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// Every mimalloc block is aligned to at least a machine word.
const WORD_ALIGN: usize = std::mem::size_of::<usize>();

/// The global allocator of the `weir` binary.
pub struct Mimalloc;

fn plain(layout: &Layout) -> bool {
    layout.align() <= WORD_ALIGN
}

// SAFETY: each method forwards to the mimalloc function with the same contract; layouts whose
// alignment a plain block may not meet use the aligned variants.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_malloc(layout.size()).cast()
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_zalloc(layout.size()).cast()
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>())
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(&layout) {
            mi::mi_realloc(ptr.cast(), new_size).cast()
        } else {
            mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_meet_their_layout_and_keep_contents_across_realloc() {
        let a = Mimalloc;
        for (size, align) in [(1, 1), (8, 8), (24, 8), (48, 16), (100, 32), (5000, 4096)] {
            let layout = Layout::from_size_align(size, align).unwrap();
            unsafe {
                let p = a.alloc(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                p.write_bytes(0xab, size);
                let q = a.realloc(p, layout, size * 3);
                assert_eq!(q as usize % align, 0, "realloc size {size} align {align}");
                assert!((0..size).all(|i| *q.add(i) == 0xab));
                a.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
                let z = a.alloc_zeroed(layout);
                assert!((0..size).all(|i| *z.add(i) == 0));
                a.dealloc(z, layout);
            }
        }
    }
}
