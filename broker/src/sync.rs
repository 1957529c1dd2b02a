//! Single-threaded async primitives for one shard: a [`Notify`] that wakes one waiting task and a
//! [`oneshot`] for replies that come back through the mailboxes.
//!
//! Everything here is `!Send` on purpose: it lives inside one shard. Nothing here allocates per
//! wake-up, and an un-notified waiter costs nothing (no polling, no timer).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Wakes one task when something it waits for may have happened. A notification sent while
/// nobody waits is kept, so the next wait returns at once (no lost wake-ups).
#[derive(Default)]
pub struct Notify {
    pending: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Notify {
    pub fn new() -> Notify {
        Notify::default()
    }

    pub fn notify(&self) {
        self.pending.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Forgets a notification sent while nobody waited.
    pub fn reset(&self) {
        self.pending.set(false);
    }

    /// Waits for the next notification (or returns at once for one already sent).
    pub fn notified(&self) -> Notified<'_> {
        Notified { notify: self }
    }
}

pub struct Notified<'a> {
    notify: &'a Notify,
}

impl Future for Notified<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.pending.replace(false) {
            return Poll::Ready(());
        }
        *self.notify.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

struct OneshotState<T> {
    value: Option<T>,
    waker: Option<Waker>,
    sender_gone: bool,
}

/// Sends one value to the matching [`Receiver`].
pub struct Sender<T> {
    state: Rc<RefCell<OneshotState<T>>>,
}

/// Receives the value, or `None` if the sender was dropped without sending.
pub struct Receiver<T> {
    state: Rc<RefCell<OneshotState<T>>>,
}

pub fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    let state = Rc::new(RefCell::new(OneshotState {
        value: None,
        waker: None,
        sender_gone: false,
    }));
    (
        Sender {
            state: state.clone(),
        },
        Receiver { state },
    )
}

impl<T> Sender<T> {
    pub fn send(self, value: T) {
        let waker = {
            let mut s = self.state.borrow_mut();
            s.value = Some(value);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.state.borrow_mut();
            s.sender_gone = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Future for Receiver<T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.state.borrow_mut();
        if let Some(v) = s.value.take() {
            return Poll::Ready(Some(v));
        }
        if s.sender_gone {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    #[test]
    fn notify_before_wait_is_kept() {
        let n = Notify::new();
        n.notify();
        block_on(n.notified());
    }

    #[test]
    fn oneshot_delivers_or_reports_drop() {
        let (tx, rx) = oneshot();
        tx.send(5);
        assert_eq!(block_on(rx), Some(5));
        let (tx, rx) = oneshot::<u8>();
        drop(tx);
        assert_eq!(block_on(rx), None);
    }
}
