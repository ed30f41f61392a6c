//! A thread's ready-queue membership: whether it is queued, and the ticket of its latest
//! entry. The ready queues hold (thread, ticket) entries and are never searched: a thread
//! whose entry must no longer run it (it was absorbed, terminated, suspended, or claimed
//! another way) is simply marked not queued, or queued again with a new ticket, under
//! its lock; an entry is *live* only if the thread is queued and the entry's ticket is the
//! latest. Whoever pops an entry claims it under the thread's lock ([`Queued::claim`]):
//! exactly one of the entries ever made for one enqueue can win.
//!
//! Kept apart from the thread controller so that the protocol can be model-checked with
//! `loom` on the host (`tests::loom_tickets`) with the very code the runtime runs.
//!
//! # Invariants
//!
//! - Read and written only under the owning thread's lock.
//! - [`Queued::claim`] succeeds at most once per [`Queued::enqueue`], and only for that
//!   enqueue's ticket.

/// Whether a thread is on a ready queue, and which of its entries is live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queued {
    /// It is on a ready queue, with entry `ticket`, waiting to be claimed.
    queued: bool,
    /// The ticket of its latest ready-queue entry.
    ticket: u32,
}

impl Queued {
    /// Not queued.
    pub const fn new() -> Queued {
        Queued {
            queued: false,
            ticket: 0,
        }
    }

    /// Marks the thread queued and gives the new entry's ticket; any older entry is stale
    /// from now on.
    #[inline]
    pub fn enqueue(&mut self) -> u32 {
        self.queued = true;
        self.ticket = self.ticket.wrapping_add(1);
        self.ticket
    }

    /// Whether the thread has a live entry.
    #[inline]
    pub fn is_queued(&self) -> bool {
        self.queued
    }

    /// Makes every entry of the thread stale (it was taken off its queue another way).
    #[inline]
    pub fn unqueue(&mut self) {
        self.queued = false;
    }

    /// Whether the entry `ticket` is live.
    #[inline]
    pub fn is_live(&self, ticket: u32) -> bool {
        self.queued && self.ticket == ticket
    }

    /// Claims the entry `ticket` that was popped from a queue: true (and the thread is no
    /// longer queued) if it is live; false for a stale entry, which the caller drops.
    #[inline]
    pub fn claim(&mut self, ticket: u32) -> bool {
        if !self.is_live(ticket) {
            return false;
        }
        self.queued = false;
        true
    }
}
