//! What decoding an HTTP request costs in allocations: a `/pub` from a keep-alive connection
//! allocates for its body (a message outlives the read buffer) and for nothing else; the head
//! is a slice of the read buffer and the query borrows it.
//!
//! Its own test binary, because it installs a counting global allocator.

use bytes::BytesMut;
use http1::{Decoded, Limits, RequestDecoder};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // Per thread: the test harness's own threads allocate while a test runs (its reporting,
    // its timeout watch), and a process-wide count caught them now and then under load.
    // A `const` Cell of a plain integer needs no allocation and no destructor to use.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    ALLOCATIONS.with(|n| n.set(n.get() + 1));
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call is passed on unchanged to the system allocator, which upholds
// GlobalAlloc's contract; the counting touches only this thread's counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's guarantees for this call are the ones System needs.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's guarantees for this call are the ones System needs.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's guarantees for this call are the ones System needs.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_pub_request_allocates_only_its_body() {
    let request = format!(
        "POST /pub?topic=bench HTTP/1.1\r\nHost: 127.0.0.1:4151\r\nUser-Agent: wrk\r\n\
         Content-Length: 200\r\n\r\n{}",
        "x".repeat(200)
    );
    let mut buf = BytesMut::with_capacity(64 * 1024);
    for _ in 0..4 {
        buf.extend_from_slice(request.as_bytes());
    }
    let mut decoder = RequestDecoder::new(Limits::default());
    // The first request turns the buffer into a shared one (one allocation, once per buffer).
    let Ok(Decoded::Request(first)) = decoder.decode(&mut buf) else {
        panic!("first request not decoded");
    };
    drop(first);
    for i in 1..4 {
        let before = allocations();
        let Ok(Decoded::Request(req)) = decoder.decode(&mut buf) else {
            panic!("request {i} not decoded");
        };
        let decoded = allocations() - before;
        let q = req.head.query().expect("query");
        let queried = allocations() - before;
        let checks = (
            req.head.method() == "POST",
            req.head.path() == "/pub",
            q.get("topic") == Some("bench"),
            req.head.keep_alive,
            req.body.len(),
        );
        let checked = allocations() - before;
        // Decoding: the body. The query: its one list of pairs. Reading them: nothing.
        assert_eq!((decoded, queried, checked), (1, 2, 2), "request {i}");
        assert_eq!(checks, (true, true, true, true, 200), "request {i}");
    }
}
