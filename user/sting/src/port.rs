//! First-class ports (the paper's section 4): a port is a value (cloning a [`Port`] gives
//! another handle on the same port) that holds messages; [`get`](Port::get) takes the
//! oldest, parking the calling thread while the port is empty.
//!
//! Messages are copies. [`put`](Port::put) makes a *shallow* copy ([`Clone`]: the top-level
//! object is copied, substructure behind shared pointers such as `Arc` stays shared with
//! the sender); [`put_deep`](Port::put_deep) makes a *deep* copy ([`DeepCopy`]: the
//! substructure is copied too, so the receiver shares nothing with the sender).
//! [`send`](Port::send) moves a message in without copying. A closure is a message like
//! any other, so a receiver that forks a thread per message implements the paper's active
//! messages.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::rt::{WaitList, Waiter};
use crate::spin::SpinLock;

/// A deep copy: the value and everything it points to, sharing nothing with the original.
pub trait DeepCopy {
    /// The copy.
    fn deep_copy(&self) -> Self;
}

macro_rules! deep_copy_by_clone {
    ($($t:ty),*) => { $(impl DeepCopy for $t { fn deep_copy(&self) -> Self { self.clone() } })* };
}
deep_copy_by_clone!(
    u8,
    u16,
    u32,
    u64,
    usize,
    i8,
    i16,
    i32,
    i64,
    isize,
    bool,
    char,
    String,
    ()
);

impl<T: DeepCopy> DeepCopy for Vec<T> {
    fn deep_copy(&self) -> Self {
        self.iter().map(DeepCopy::deep_copy).collect()
    }
}

impl<T: DeepCopy> DeepCopy for Box<T> {
    fn deep_copy(&self) -> Self {
        Box::new((**self).deep_copy())
    }
}

impl<T: DeepCopy> DeepCopy for Arc<T> {
    /// A new `Arc` around a deep copy of the contents (not another reference).
    fn deep_copy(&self) -> Self {
        Arc::new((**self).deep_copy())
    }
}

impl<T: DeepCopy> DeepCopy for Option<T> {
    fn deep_copy(&self) -> Self {
        self.as_ref().map(DeepCopy::deep_copy)
    }
}

impl<A: DeepCopy, B: DeepCopy> DeepCopy for (A, B) {
    fn deep_copy(&self) -> Self {
        (self.0.deep_copy(), self.1.deep_copy())
    }
}

impl<T: DeepCopy, const N: usize> DeepCopy for [T; N] {
    fn deep_copy(&self) -> Self {
        core::array::from_fn(|i| self[i].deep_copy())
    }
}

/// A port carrying messages of type `T`.
pub struct Port<T> {
    /// Shared by every handle.
    inner: Arc<SpinLock<PortState<T>>>,
}

impl<T> Clone for Port<T> {
    fn clone(&self) -> Port<T> {
        Port {
            inner: self.inner.clone(),
        }
    }
}

/// A port's messages and receivers.
struct PortState<T> {
    /// Oldest first.
    messages: VecDeque<T>,
    /// Threads parked in `get`.
    receivers: WaitList,
}

impl<T: Send> Default for Port<T> {
    fn default() -> Port<T> {
        Port::new()
    }
}

impl<T: Send> Port<T> {
    /// An empty port.
    pub fn new() -> Port<T> {
        Port {
            inner: Arc::new(SpinLock::new(PortState {
                messages: VecDeque::new(),
                receivers: WaitList::new(),
            })),
        }
    }

    /// Puts `msg` in the port without copying it (asynchronous: never blocks).
    pub fn send(&self, msg: T) {
        let w = {
            let mut s = self.inner.lock_disarmed();
            s.messages.push_back(msg);
            s.receivers.pop()
        };
        if let Some(w) = w {
            w.wake();
        }
    }

    /// Puts a shallow copy of `msg` in the port: substructure behind shared pointers stays
    /// shared with the sender.
    pub fn put(&self, msg: &T)
    where
        T: Clone,
    {
        self.send(msg.clone());
    }

    /// Puts a deep copy of `msg` in the port: the receiver shares nothing with the sender.
    pub fn put_deep(&self, msg: &T)
    where
        T: DeepCopy,
    {
        self.send(msg.deep_copy());
    }

    /// Takes the oldest message, parking the calling thread while the port is empty.
    pub fn get(&self) -> T {
        loop {
            let node;
            {
                let mut s = self.inner.lock_disarmed();
                if let Some(m) = s.messages.pop_front() {
                    return m;
                }
                node = Waiter::current();
                s.receivers.push(&node);
            }
            node.wait();
        }
    }

    /// Takes the oldest message if there is one.
    pub fn try_get(&self) -> Option<T> {
        self.inner.lock_disarmed().messages.pop_front()
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.inner.lock_disarmed().messages.len()
    }

    /// Whether no message waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
