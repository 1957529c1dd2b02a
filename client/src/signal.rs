//! Single-threaded wake-up primitives that need no particular executor: a one-shot slot for a
//! command's reply, and a notifier for "something changed, look again".
//!
//! They hold their state in a `RefCell`, borrowed only inside `poll` and the setters, never
//! across an `.await`.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    sender_gone: bool,
}

/// The sending side of a one-shot slot.
pub(crate) struct Sender<T>(Rc<RefCell<Slot<T>>>);

/// The receiving side: a future that resolves to the value, or `None` if the sender was
/// dropped without sending.
pub(crate) struct Receiver<T>(Rc<RefCell<Slot<T>>>);

pub(crate) fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Rc::new(RefCell::new(Slot {
        value: None,
        waker: None,
        sender_gone: false,
    }));
    (Sender(slot.clone()), Receiver(slot))
}

impl<T> Sender<T> {
    pub(crate) fn send(self, value: T) {
        let waker = {
            let mut slot = self.0.borrow_mut();
            slot.value = Some(value);
            slot.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut slot = self.0.borrow_mut();
            slot.sender_gone = true;
            slot.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Future for Receiver<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut slot = self.0.borrow_mut();
        if let Some(v) = slot.value.take() {
            return Poll::Ready(Some(v));
        }
        if slot.sender_gone {
            return Poll::Ready(None);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Wakes every task waiting in [`Notify::changed`] whenever [`Notify::notify`] is called. A
/// waiter re-checks its condition after each wake-up, so spurious wake-ups are harmless.
#[derive(Default)]
pub(crate) struct Notify {
    state: RefCell<NotifyState>,
}

#[derive(Default)]
struct NotifyState {
    generation: u64,
    wakers: Vec<Waker>,
}

impl Notify {
    pub(crate) fn notify(&self) {
        let wakers = {
            let mut st = self.state.borrow_mut();
            st.generation += 1;
            std::mem::take(&mut st.wakers)
        };
        for w in wakers {
            w.wake();
        }
    }

    /// Resolves at the next [`Notify::notify`] after this call.
    pub(crate) fn changed(&self) -> Changed<'_> {
        let start = self.state.borrow().generation;
        Changed {
            notify: self,
            start,
        }
    }
}

pub(crate) struct Changed<'a> {
    notify: &'a Notify,
    start: u64,
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.notify.state.borrow_mut();
        if st.generation != self.start {
            return Poll::Ready(());
        }
        st.wakers.push(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    #[test]
    fn oneshot_delivers_or_reports_drop() {
        let (tx, rx) = oneshot();
        tx.send(5);
        assert_eq!(block_on(rx), Some(5));
        let (tx, rx) = oneshot::<u8>();
        drop(tx);
        assert_eq!(block_on(rx), None);
    }

    #[test]
    fn notify_wakes_after_call() {
        let n = Notify::default();
        let fut = n.changed();
        n.notify();
        block_on(fut);
    }
}
