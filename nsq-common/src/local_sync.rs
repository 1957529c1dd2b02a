//! Single-threaded wake-ups that need no particular executor: a [`oneshot`] for a reply that
//! comes back later (through a shard's mailbox, or from a connection's reader), and a [`Notify`]
//! for "something changed, look again".
//!
//! Everything here is `!Send` on purpose: it lives inside one thread (one shard, one client
//! runtime). State sits in `Cell`s and `RefCell`s borrowed only inside `poll` and the setters,
//! never across an `.await`. Waking the one usual waiter allocates nothing.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Wakes the tasks waiting on it when something they wait for may have happened. Two ways to
/// wait:
///
/// - [`Notify::notified`], for the one task that consumes the notifications (a shard's loop):
///   a notification sent while it did not wait is kept, so its next wait returns at once (no
///   lost wake-ups); [`Notify::reset`] forgets it.
/// - [`Notify::changed`], for any number of tasks that re-check a condition: it resolves at the
///   first [`Notify::notify`] after the call.
///
/// Every waiter is woken by each notification; spurious wake-ups are harmless to both styles.
#[derive(Default)]
pub struct Notify {
    /// Notifications sent so far.
    sent: Cell<u64>,
    /// `sent` as the consumer of [`Notify::notified`] last saw it.
    consumed: Cell<u64>,
    /// The first waiter (usually the only one).
    waker: RefCell<Option<Waker>>,
    /// Further waiters, when several tasks wait at once.
    more: RefCell<Vec<Waker>>,
}

impl Notify {
    pub fn new() -> Notify {
        Notify::default()
    }

    /// Wakes every waiting task; keeps the notification for the next [`Notify::notified`].
    pub fn notify(&self) {
        self.sent.set(self.sent.get().wrapping_add(1));
        let first = self.waker.borrow_mut().take();
        if let Some(w) = first {
            w.wake();
        }
        if !self.more.borrow().is_empty() {
            let more = std::mem::take(&mut *self.more.borrow_mut());
            for w in more {
                w.wake();
            }
        }
    }

    /// Forgets a notification sent while nobody waited in [`Notify::notified`].
    pub fn reset(&self) {
        self.consumed.set(self.sent.get());
    }

    /// Waits for the next notification, or returns at once for one sent since the last
    /// `notified` returned (or [`Notify::reset`]). For the one task that consumes them.
    pub fn notified(&self) -> Notified<'_> {
        Notified { notify: self }
    }

    /// Waits for the first notification after this call.
    pub fn changed(&self) -> Changed<'_> {
        Changed {
            notify: self,
            start: self.sent.get(),
        }
    }

    fn register(&self, waker: &Waker) {
        let mut first = self.waker.borrow_mut();
        match &*first {
            Some(w) if w.will_wake(waker) => {}
            None => *first = Some(waker.clone()),
            Some(_) => {
                let mut more = self.more.borrow_mut();
                if !more.iter().any(|w| w.will_wake(waker)) {
                    more.push(waker.clone());
                }
            }
        }
    }
}

/// The future of [`Notify::notified`].
pub struct Notified<'a> {
    notify: &'a Notify,
}

impl Future for Notified<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let n = self.notify;
        if n.consumed.get() != n.sent.get() {
            n.consumed.set(n.sent.get());
            return Poll::Ready(());
        }
        n.register(cx.waker());
        Poll::Pending
    }
}

/// The future of [`Notify::changed`].
pub struct Changed<'a> {
    notify: &'a Notify,
    start: u64,
}

impl Future for Changed<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.sent.get() != self.start {
            return Poll::Ready(());
        }
        self.notify.register(cx.waker());
        Poll::Pending
    }
}

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    sender_gone: bool,
}

/// Sends one value to the matching [`Receiver`].
pub struct Sender<T>(Rc<RefCell<Slot<T>>>);

/// A future that resolves to the value, or `None` if the sender was dropped without sending.
pub struct Receiver<T>(Rc<RefCell<Slot<T>>>);

/// A slot for one value, sent once and awaited once.
pub fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Rc::new(RefCell::new(Slot {
        value: None,
        waker: None,
        sender_gone: false,
    }));
    (Sender(slot.clone()), Receiver(slot))
}

impl<T> Sender<T> {
    pub fn send(self, value: T) {
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

impl<T> Receiver<T> {
    /// The value, if it was sent already and `wanted` takes it; else it stays to be awaited.
    pub fn take_now_if(&self, wanted: impl FnOnce(&T) -> bool) -> Option<T> {
        let mut slot = self.0.borrow_mut();
        if slot.value.as_ref().is_some_and(wanted) {
            slot.value.take()
        } else {
            None
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::{block_on, poll_once};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn notify_before_wait_is_kept_once_and_reset_forgets_it() {
        let n = Notify::new();
        n.notify();
        block_on(n.notified());
        assert!(block_on(poll_once(n.notified())).is_none());
        n.notify();
        n.reset();
        assert!(block_on(poll_once(n.notified())).is_none());
    }

    #[test]
    fn changed_waits_for_the_next_notification_only() {
        let n = Notify::new();
        n.notify();
        let mut fut = Box::pin(n.changed());
        assert!(block_on(poll_once(&mut fut)).is_none());
        n.notify();
        assert!(block_on(poll_once(&mut fut)).is_some());
    }

    #[test]
    fn every_waiter_is_woken() {
        let n = Notify::new();
        let (a, wa) = counting();
        let (b, wb) = counting();
        let mut fa = Box::pin(n.changed());
        let mut fb = Box::pin(n.notified());
        assert!(fa.as_mut().poll(&mut Context::from_waker(&wa)).is_pending());
        assert!(fb.as_mut().poll(&mut Context::from_waker(&wb)).is_pending());
        // polled again by the same task: registered once
        assert!(fb.as_mut().poll(&mut Context::from_waker(&wb)).is_pending());
        n.notify();
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
        assert!(fa.as_mut().poll(&mut Context::from_waker(&wa)).is_ready());
        assert!(fb.as_mut().poll(&mut Context::from_waker(&wb)).is_ready());
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
