//! Request bodies read into recycled buffers: each shard keeps the buffers of requests it
//! has finished with and reads the next bodies into them, so a request costs no fresh
//! allocation, no page faults on new memory, no zero-fill and no reallocation as its body
//! arrives.
//!
//! A body is read into a buffer of exactly its size (`take`), frozen, and shared by
//! everything decoded from it (records, names); once its request is handled the
//! connection hands it back (`give_back`), and it is kept only if nothing else still holds
//! a part of it — a body some task still reads from is simply dropped when the last holder
//! lets go. The produce path copies records out of the body (the log's one copy), so a
//! handled produce request's buffer comes back.
//!
//! A kept buffer keeps the bytes of the body last read into it: the next body overwrites
//! them, so they are never zeroed again; only a buffer that must grow has its new part
//! zeroed. A buffer no kept one can hold is a new one from the allocator, zeroed there
//! (`calloc`: large ones are fresh pages, which the kernel zeroes when first touched, so
//! a body's memory is really used only as its bytes arrive; its size was already taken
//! from the shard's request memory).
//!
//! Invariants: a pooled buffer is unshared and its capacity is at most
//! [`POOLED_BUFFER_MAX_BYTES`]; a shard's pool holds at most [`POOLED_BUFFERS`] buffers
//! and [`POOLED_BYTES_MAX`] bytes of capacity in all, so what it keeps is bounded whatever
//! the traffic; `take` answers a buffer of exactly the length asked; the pool is the shard
//! thread's own (no locks, no sharing).

use bytes::{Bytes, BytesMut};
use std::cell::RefCell;

/// Buffers one shard keeps.
pub const POOLED_BUFFERS: usize = 16;
/// The largest buffer kept: bigger bodies are rare, and are allocated for themselves.
pub const POOLED_BUFFER_MAX_BYTES: usize = 4 << 20;
/// All the capacity one shard keeps.
pub const POOLED_BYTES_MAX: usize = 16 << 20;

/// A shard's recycled buffers.
#[derive(Debug, Default)]
pub struct BufferPool {
    buffers: Vec<BytesMut>,
    bytes: usize,
}

impl BufferPool {
    /// A buffer of `size` bytes to read a body into: the smallest kept one whose capacity
    /// holds it, with the last body's bytes in it (zeroed only where it grows past them),
    /// else a new zeroed one.
    pub fn take(&mut self, size: usize) -> BytesMut {
        let fits = self
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= size)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        let mut buf = match fits {
            Some(i) => {
                let b = self.buffers.swap_remove(i);
                self.bytes -= b.capacity();
                b
            }
            None => return BytesMut::zeroed(size),
        };
        if buf.len() >= size {
            buf.truncate(size);
        } else {
            // Within its capacity: no reallocation, only the new part written.
            buf.resize(size, 0);
        }
        debug_assert_eq!(buf.len(), size);
        buf
    }

    /// Keeps `body`'s buffer for a later request if nothing else holds a part of it and
    /// the pool has room; otherwise lets it go. Returns whether it was kept.
    pub fn give_back(&mut self, body: Bytes) -> bool {
        if self.buffers.len() >= POOLED_BUFFERS {
            return false;
        }
        let Ok(buf) = body.try_into_mut() else {
            return false;
        };
        let capacity = buf.capacity();
        if capacity > POOLED_BUFFER_MAX_BYTES || self.bytes + capacity > POOLED_BYTES_MAX {
            return false;
        }
        self.bytes += capacity;
        self.buffers.push(buf);
        debug_assert!(self.bytes <= POOLED_BYTES_MAX && self.buffers.len() <= POOLED_BUFFERS);
        true
    }
}

thread_local! {
    /// The pool of the shard that runs on this thread.
    static POOL: RefCell<BufferPool> = RefCell::new(BufferPool::default());
}

/// A buffer of `size` bytes for a body from this shard's pool (see
/// [`BufferPool::take`]).
pub fn take(size: usize) -> BytesMut {
    POOL.with(|p| p.borrow_mut().take(size))
}

/// Hands a handled request's body back to this shard's pool (see
/// [`BufferPool::give_back`]).
pub fn give_back(body: Bytes) {
    POOL.with(|p| p.borrow_mut().give_back(body));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(len: usize) -> Bytes {
        let mut b = BytesMut::with_capacity(len);
        b.resize(len, 7);
        b.freeze()
    }

    /// The next body is read into the memory of the last one handled.
    #[test]
    fn a_handled_body_is_read_into_again() {
        let mut pool = BufferPool::default();
        let first = body(100_000);
        let at = first.as_ptr();
        assert!(pool.give_back(first));
        let again = pool.take(90_000);
        assert_eq!(again.as_ptr(), at, "the same memory");
        assert_eq!(again.len(), 90_000);
        assert!(again.capacity() >= 100_000);
        assert!(
            again.iter().all(|b| *b == 7),
            "the last body's bytes, not zeroed again"
        );
    }

    /// A body something still holds a part of is not reused under it.
    #[test]
    fn a_body_still_held_is_not_kept() {
        let mut pool = BufferPool::default();
        let b = body(1000);
        let records = b.slice(10..20);
        assert!(!pool.give_back(b));
        assert_eq!(&records[..], &[7u8; 10][..], "what is held is untouched");
        let fresh = pool.take(10);
        assert_eq!(fresh.len(), 10, "a new buffer, sized for the body");
        assert!(fresh.iter().all(|b| *b == 0), "zeroed by the allocator");
    }

    /// The smallest buffer that holds the body is taken; with none, a new one (a kept
    /// one is never grown: that would copy it).
    #[test]
    fn the_smallest_that_fits_else_a_new_one() {
        let mut pool = BufferPool::default();
        for len in [1000, 50_000, 10_000] {
            assert!(pool.give_back(body(len)));
        }
        assert_eq!(pool.take(9_000).capacity(), 10_000);
        let new = pool.take(60_000);
        assert_eq!((new.len(), new.capacity()), (60_000, 60_000));
        assert_eq!(pool.take(40_000).capacity(), 50_000);
        assert_eq!(pool.take(1000).capacity(), 1000);
    }

    /// A kept buffer shorter than the next body but big enough for it is lengthened in
    /// place: only its new part is zeroed.
    #[test]
    fn a_kept_buffer_grows_within_its_capacity() {
        let mut pool = BufferPool::default();
        let mut b = BytesMut::with_capacity(4096);
        b.resize(100, 7);
        let at = b.as_ptr();
        assert!(pool.give_back(b.freeze()));
        let again = pool.take(300);
        assert_eq!(again.as_ptr(), at, "the same memory");
        assert_eq!(&again[..100], &[7u8; 100][..]);
        assert!(again[100..].iter().all(|b| *b == 0));
    }

    /// What a pool keeps is bounded in count, in one buffer's size and in all.
    #[test]
    fn what_is_kept_is_bounded() {
        let mut pool = BufferPool::default();
        assert!(!pool.give_back(body(POOLED_BUFFER_MAX_BYTES + 1)));
        let each = POOLED_BYTES_MAX / 4;
        for _ in 0..4 {
            assert!(pool.give_back(body(each)));
        }
        assert!(!pool.give_back(body(1)), "no room left in bytes");
        let mut pool = BufferPool::default();
        for _ in 0..POOLED_BUFFERS {
            assert!(pool.give_back(body(10)));
        }
        assert!(!pool.give_back(body(10)), "no room left in count");
    }
}
