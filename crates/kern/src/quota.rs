//! Kernel-memory accounting: who pays for what the kernel keeps on a task's behalf.
//!
//! Every kernel resource a task can make the kernel hold — heap bytes for its threads,
//! ports, names, queued messages and activations; physical frames for its memory, page
//! tables and process-model kernel stacks — is *charged* to an [`Account`] before it is
//! taken, and the charge fails with [`Error::NoMemory`] when any account on the way up is
//! at its limit. Accounts form a tree, as Zircon's jobs do: a task's account is a child of
//! its creator's (of the kernel's root account for the tasks the kernel starts), and a
//! charge counts against the account and every ancestor. So whatever a task and all the
//! tasks it creates make the kernel hold is bounded by its own limit, and all of it
//! together by the root's, which the kernel sizes below its heap and frame pool; a task at
//! its limit gets errors and every task outside its subtree goes on.
//!
//! A [`Charge`] is the receipt: it owns the amount and gives it back when dropped, so the
//! object that holds the resource (a thread, a port, a message) holds its charge, and
//! freeing the object refunds it on every path, teardown included, with nothing to
//! allocate. An account lives as long as its task or any charge against it (it is
//! reference counted), so a message that outlives its sender still refunds the right
//! account, and its ancestors.
//!
//! A limit is either fixed when the account is made, or a *share* of the root's limit
//! ([`Limit::RootShare`]): the root's limit may be raised and lowered later
//! ([`Account::set_limit`]; the kernel adds the default pager's backing store to the frames
//! anonymous memory may commit), and every account that takes a share follows it. A share
//! keeps the value it last read, and reads the root's limit again only when a charge would
//! pass that value, so a charge costs what it did with fixed limits; after the root's
//! limit falls, a share may keep a higher value until it is read again (the root's own
//! limit always holds).
//!
//! # Invariants
//! - `used[r] <= limit[r]` for every account and resource, and an account's `used`
//!   includes everything charged to its descendants; except that a limit lowered below
//!   what is used stays so until enough is given back (no charge succeeds meanwhile).
//! - A [`Charge`] of `n` units on account `a` has added `n` to `a` and every ancestor of
//!   `a`, and removes exactly that when dropped.
//! - The chain is at most [`DEPTH_MAX`] accounts long, so a charge costs O(1).

use alloc::boxed::Box;
use baton_abi::Error;
use core::ptr::NonNull;
use core::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

/// The longest chain of accounts from a task's up to the root (the root counts): a task
/// whose creator's account is this deep cannot create tasks.
pub const DEPTH_MAX: usize = 8;

/// What is charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// Bytes of kernel heap.
    Heap = 0,
    /// Physical frames (user pages, page tables, kernel stacks held in the process model).
    Frames = 1,
}

/// How many [`Resource`]s there are.
const RESOURCES: usize = 2;

/// A child account's limit for one resource ([`Account::child_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// This much, clamped to the parent's limit when the account is made.
    Fixed(u64),
    /// The root's limit divided by this (at least 1), whatever the root's limit is at the
    /// time of a charge: a task given the default share gains when the root's limit grows.
    RootShare(u64),
}

/// Limits and use of one account. See the module documentation.
#[derive(Debug)]
pub struct Account {
    /// The fixed limit, or for a [`Limit::RootShare`] the share's value last read.
    limit: [AtomicU64; RESOURCES],
    /// Per resource: the divisor of the root's limit for a share, 0 for a fixed limit.
    share: [u64; RESOURCES],
    used: [AtomicU64; RESOURCES],
    parent: Option<AccountRef>,
    depth: usize,
}

impl Account {
    /// A root account (no parent) with limits `heap` bytes and `frames` frames.
    pub fn root(heap: u64, frames: u64) -> Result<AccountRef, Error> {
        AccountRef::new(Account {
            limit: [AtomicU64::new(heap), AtomicU64::new(frames)],
            share: [0; RESOURCES],
            used: [AtomicU64::new(0), AtomicU64::new(0)],
            parent: None,
            depth: 1,
        })
    }

    /// A child of `parent` with at most the given limits (each clamped to the parent's
    /// own); [`Error::NoSpace`] when `parent` is already [`DEPTH_MAX`] deep.
    pub fn child(parent: &AccountRef, heap: u64, frames: u64) -> Result<AccountRef, Error> {
        Account::child_with(parent, Limit::Fixed(heap), Limit::Fixed(frames))
    }

    /// A child of `parent` whose limits are fixed or shares of the root's ([`Limit`]); a
    /// share is bounded by the parent's limit too, since every charge is checked against
    /// each ancestor. [`Error::NoSpace`] when `parent` is already [`DEPTH_MAX`] deep.
    pub fn child_with(
        parent: &AccountRef,
        heap: Limit,
        frames: Limit,
    ) -> Result<AccountRef, Error> {
        if parent.depth >= DEPTH_MAX {
            return Err(Error::NoSpace);
        }
        let one = |l: Limit, r: Resource| match l {
            Limit::Fixed(n) => (n.min(parent.limit(r)), 0),
            Limit::RootShare(d) => (
                parent.top().limit[r as usize].load(Ordering::Relaxed) / d.max(1),
                d.max(1),
            ),
        };
        let (h, f) = (one(heap, Resource::Heap), one(frames, Resource::Frames));
        AccountRef::new(Account {
            limit: [AtomicU64::new(h.0), AtomicU64::new(f.0)],
            share: [h.1, f.1],
            used: [AtomicU64::new(0), AtomicU64::new(0)],
            parent: Some(parent.clone()),
            depth: parent.depth + 1,
        })
    }

    /// The limit for `r` now (a share read from the root's limit, and kept).
    pub fn limit(&self, r: Resource) -> u64 {
        let i = r as usize;
        match self.share[i] {
            0 => self.limit[i].load(Ordering::Relaxed),
            _ => self.read_share(i),
        }
    }

    /// The root of this account's tree.
    fn top(&self) -> &Account {
        let mut root = self;
        while let Some(p) = root.parent.as_deref() {
            root = p;
        }
        root
    }

    /// A share's value from the root's limit now, kept as its limit until read again.
    fn read_share(&self, i: usize) -> u64 {
        // A root's limit is never a share.
        let v = self.top().limit[i].load(Ordering::Relaxed) / self.share[i].max(1);
        self.limit[i].store(v, Ordering::Relaxed);
        v
    }

    /// Sets the fixed limit for `r` to `n` (the kernel raises the root's frames when a
    /// default pager offers backing store, and lowers them when it is gone); accounts that
    /// take a share of the root's follow at once. A limit below what is used now makes
    /// every charge fail until enough is given back. [`Error::InvalidArgument`] for an
    /// account whose limit for `r` is a share.
    pub fn set_limit(&self, r: Resource, n: u64) -> Result<(), Error> {
        let i = r as usize;
        if self.share[i] != 0 {
            return Err(Error::InvalidArgument);
        }
        self.limit[i].store(n, Ordering::Relaxed);
        Ok(())
    }

    /// How much of `r` is charged to this account and its descendants now.
    pub fn used(&self, r: Resource) -> u64 {
        self.used[r as usize].load(Ordering::Relaxed)
    }

    /// Charges `n` units of `r` to `this` and its ancestors: a receipt that gives them
    /// back when dropped, or [`Error::NoMemory`] (nothing charged) when any account would
    /// go over its limit.
    pub fn charge(this: &AccountRef, r: Resource, n: u64) -> Result<Charge, Error> {
        this.take(r, n)?;
        Ok(Charge {
            account: this.clone(),
            resource: r,
            amount: n,
        })
    }

    /// Charges `n` units of `r` to `this` and its ancestors even past their limits: for
    /// what was admitted uncharged because it was not to be kept (a message handed
    /// straight to a waiting receiver) and then had to be kept after all. The next
    /// [`Account::charge`] sees the overdraft and refuses until it is given back.
    pub fn charge_over(this: &AccountRef, r: Resource, n: u64) -> Charge {
        let i = r as usize;
        let mut level = Some(&**this);
        while let Some(a) = level {
            a.used[i].fetch_add(n, Ordering::Relaxed);
            level = a.parent.as_deref();
        }
        Charge {
            account: this.clone(),
            resource: r,
            amount: n,
        }
    }

    /// Adds `n` of `r` to this account and its ancestors, or nothing and
    /// [`Error::NoMemory`]. Without a receipt: the caller gives it back with
    /// [`Account::give`] (for counts kept elsewhere, such as a task's mapped pages).
    pub fn take(&self, r: Resource, n: u64) -> Result<(), Error> {
        let i = r as usize;
        // Check the whole chain first, then add: the kernel charges under its one lock,
        // so nothing changes in between; a racing caller without it could only make an
        // account go over by what it charged itself, never corrupt the counts.
        // A share over the value it last read reads the root's limit again (it may have
        // grown) before it refuses.
        let mut level = Some(self);
        while let Some(a) = level {
            let used = a.used[i].load(Ordering::Relaxed);
            if used.checked_add(n).is_none_or(|u| {
                u > a.limit[i].load(Ordering::Relaxed) && (a.share[i] == 0 || u > a.read_share(i))
            }) {
                return Err(Error::NoMemory);
            }
            level = a.parent.as_deref();
        }
        let mut level = Some(self);
        while let Some(a) = level {
            a.used[i].fetch_add(n, Ordering::Relaxed);
            level = a.parent.as_deref();
        }
        Ok(())
    }

    /// Gives back `n` of `r` taken with [`Account::take`].
    pub fn give(&self, r: Resource, n: u64) {
        let i = r as usize;
        let mut level = Some(self);
        while let Some(a) = level {
            // Saturating: a mismatched give must not wrap an account into having room
            // without bound; `debug_assert` catches the mismatch in tests.
            let old = a.used[i].load(Ordering::Relaxed);
            debug_assert!(old >= n, "account refunded more than it was charged");
            a.used[i].store(old.saturating_sub(n), Ordering::Relaxed);
            level = a.parent.as_deref();
        }
    }
}

/// A counted reference to an [`Account`] (what `alloc::sync::Arc` would be, but made
/// with an allocation that can fail: stable Rust has no fallible `Arc::new`). An account
/// lives while its task or any [`Charge`] against it, or any child account, refers to it.
///
/// # Invariants
/// - `ptr` points at a live `Shared` made by [`AccountRef::new`] (a leaked `Box`), whose
///   `refs` counts the `AccountRef`s that point at it; the last one to go frees it.
#[derive(Debug)]
pub struct AccountRef {
    ptr: NonNull<Shared>,
}

/// What an [`AccountRef`] points at.
#[derive(Debug)]
struct Shared {
    refs: AtomicUsize,
    account: Account,
}

// SAFETY: an `AccountRef` only gives out `&Account`, whose counters are atomics, and its
// reference count is atomic: sharing or sending one between CPUs is as sound as an `Arc`'s.
unsafe impl Send for AccountRef {}
// SAFETY: as for `Send`: everything reachable through `&AccountRef` is atomic or immutable.
unsafe impl Sync for AccountRef {}

impl AccountRef {
    /// The first reference to a new account, or [`Error::NoMemory`].
    fn new(account: Account) -> Result<AccountRef, Error> {
        let shared = crate::fallible::try_box(Shared {
            refs: AtomicUsize::new(1),
            account,
        })
        .ok_or(Error::NoMemory)?;
        Ok(AccountRef {
            ptr: NonNull::from(Box::leak(shared)),
        })
    }

    fn shared(&self) -> &Shared {
        // SAFETY: by the type's invariant `ptr` points at a live `Shared`, kept alive at
        // least as long as `self`.
        unsafe { self.ptr.as_ref() }
    }

    /// Whether two references name the same account.
    pub fn ptr_eq(a: &AccountRef, b: &AccountRef) -> bool {
        a.ptr == b.ptr
    }

    /// How many references to this account exist (for tests and statistics).
    pub fn count(&self) -> usize {
        self.shared().refs.load(Ordering::Relaxed)
    }
}

impl Clone for AccountRef {
    fn clone(&self) -> AccountRef {
        // Relaxed, as `Arc` does: a new reference is made from one that exists.
        self.shared().refs.fetch_add(1, Ordering::Relaxed);
        AccountRef { ptr: self.ptr }
    }
}

impl Drop for AccountRef {
    fn drop(&mut self) {
        if self.shared().refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // The last reference: every other user's writes happen before the free.
        fence(Ordering::Acquire);
        // SAFETY: `ptr` came from `Box::leak` in `AccountRef::new`, and this was its last
        // reference (the count reached 0), so nothing else can reach the `Shared` now.
        drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
    }
}

impl core::ops::Deref for AccountRef {
    type Target = Account;
    fn deref(&self) -> &Account {
        &self.shared().account
    }
}

/// A receipt for a charge ([`Account::charge`]): gives it back when dropped.
#[derive(Debug)]
pub struct Charge {
    account: AccountRef,
    resource: Resource,
    amount: u64,
}

/// Two receipts are equal when they hold the same amount of the same resource on the same
/// account (so messages that carry them still compare by content in tests).
impl PartialEq for Charge {
    fn eq(&self, other: &Charge) -> bool {
        AccountRef::ptr_eq(&self.account, &other.account)
            && self.resource == other.resource
            && self.amount == other.amount
    }
}

impl Eq for Charge {}

impl Drop for Charge {
    fn drop(&mut self) {
        self.account.give(self.resource, self.amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn a_charge_over_the_limit_counts_refuses_the_next_and_comes_back() {
        let root = Account::root(1000, 10).unwrap();
        let a = Account::child(&root, 100, 10).unwrap();
        let full = Account::charge(&a, Resource::Heap, 100).unwrap();
        let over = Account::charge_over(&a, Resource::Heap, 50);
        assert_eq!(
            (a.used(Resource::Heap), root.used(Resource::Heap)),
            (150, 150)
        );
        drop(full);
        // Still over by nothing but at the limit: 50 left, the next 51 refused.
        assert_eq!(
            Account::charge(&a, Resource::Heap, 51).err(),
            Some(Error::NoMemory)
        );
        drop(over);
        assert_eq!((a.used(Resource::Heap), root.used(Resource::Heap)), (0, 0));
    }

    #[test]
    fn charges_count_up_the_chain_and_come_back_on_drop() {
        let root = Account::root(1000, 10).unwrap();
        let a = Account::child(&root, 600, 10).unwrap();
        let b = Account::child(&a, 400, 10).unwrap();
        let c1 = Account::charge(&b, Resource::Heap, 300).unwrap();
        assert_eq!((b.used(Resource::Heap), a.used(Resource::Heap)), (300, 300));
        assert_eq!(root.used(Resource::Heap), 300);
        // b has 100 left.
        assert_eq!(
            Account::charge(&b, Resource::Heap, 101).err(),
            Some(Error::NoMemory)
        );
        // A failed charge takes nothing anywhere.
        assert_eq!(root.used(Resource::Heap), 300);
        // a's other child is bounded by what a has left (600 - 300).
        let d = Account::child(&a, 600, 10).unwrap();
        assert!(Account::charge(&d, Resource::Heap, 301).is_err());
        let c2 = Account::charge(&d, Resource::Heap, 300).unwrap();
        assert_eq!(a.used(Resource::Heap), 600);
        drop(c1);
        assert_eq!(
            (
                b.used(Resource::Heap),
                a.used(Resource::Heap),
                root.used(Resource::Heap)
            ),
            (0, 300, 300)
        );
        drop(c2);
        assert_eq!(root.used(Resource::Heap), 0);
        // Resources are separate.
        assert_eq!(root.used(Resource::Frames), 0);
    }

    #[test]
    fn a_child_is_never_given_more_than_its_parent_has_as_limit() {
        let root = Account::root(100, 5).unwrap();
        let a = Account::child(&root, 1 << 40, 1 << 40).unwrap();
        assert_eq!(
            (a.limit(Resource::Heap), a.limit(Resource::Frames)),
            (100, 5)
        );
    }

    #[test]
    fn a_share_of_the_root_follows_its_limit() {
        let root = Account::root(1000, 100).unwrap();
        let fixed = Account::child(&root, 500, 50).unwrap();
        let half = Account::child_with(&root, Limit::RootShare(2), Limit::RootShare(2)).unwrap();
        // A default task of a default task: its share, and its parent's on the way up.
        let grand = Account::child_with(&half, Limit::Fixed(1000), Limit::RootShare(2)).unwrap();
        assert_eq!(half.limit(Resource::Frames), 50);
        assert_eq!(
            grand.limit(Resource::Heap),
            500,
            "clamped to the parent's then"
        );
        let c = Account::charge(&grand, Resource::Frames, 50).unwrap();
        assert_eq!(
            Account::charge(&grand, Resource::Frames, 1).err(),
            Some(Error::NoMemory)
        );
        drop(c);
        // The root grows (a pager's backing store): the shares follow, the fixed one not.
        root.set_limit(Resource::Frames, 300).unwrap();
        assert_eq!(
            (
                half.limit(Resource::Frames),
                grand.limit(Resource::Frames),
                fixed.limit(Resource::Frames)
            ),
            (150, 150, 50)
        );
        let big = Account::charge(&grand, Resource::Frames, 150).unwrap();
        assert_eq!(root.used(Resource::Frames), 150);
        // It shrinks below what is used: nothing more is charged until enough comes back.
        root.set_limit(Resource::Frames, 100).unwrap();
        assert_eq!(
            Account::charge(&fixed, Resource::Frames, 1).err(),
            Some(Error::NoMemory)
        );
        drop(big);
        assert!(Account::charge(&fixed, Resource::Frames, 50).is_ok());
        // A share has no limit of its own to set.
        assert_eq!(
            half.set_limit(Resource::Frames, 7),
            Err(Error::InvalidArgument)
        );
        // The root falls: a share keeps the value it read (150) until it is read again;
        // the root's own limit holds meanwhile.
        root.set_limit(Resource::Frames, 101).unwrap();
        let c = Account::charge(&half, Resource::Frames, 101).unwrap();
        assert_eq!(
            Account::charge(&half, Resource::Frames, 1).err(),
            Some(Error::NoMemory)
        );
        drop(c);
        // Read again (an odd root: rounded down, to the unit), it holds.
        assert_eq!(half.limit(Resource::Frames), 50);
        let c = Account::charge(&half, Resource::Frames, 50).unwrap();
        assert_eq!(
            Account::charge(&half, Resource::Frames, 1).err(),
            Some(Error::NoMemory)
        );
        drop(c);
        root.set_limit(Resource::Frames, 100).unwrap();
        // A divisor of 0 is taken as 1.
        let all = Account::child_with(&root, Limit::RootShare(0), Limit::RootShare(0)).unwrap();
        assert_eq!(all.limit(Resource::Frames), 100);
    }

    #[test]
    fn a_receipt_keeps_its_account_alive_after_the_owner_lets_go() {
        let root = Account::root(100, 5).unwrap();
        let a = Account::child(&root, 50, 5).unwrap();
        let c = Account::charge(&a, Resource::Frames, 3).unwrap();
        // The child refers to its parent, the receipt to the child.
        assert_eq!((root.count(), a.count()), (2, 2));
        drop(a);
        assert_eq!(root.used(Resource::Frames), 3);
        drop(c);
        assert_eq!(root.used(Resource::Frames), 0);
        assert_eq!(
            root.count(),
            1,
            "the child account is gone with its last charge"
        );
    }

    #[test]
    fn references_compare_by_account() {
        let root = Account::root(100, 5).unwrap();
        let other = Account::root(100, 5).unwrap();
        let same = root.clone();
        assert!(AccountRef::ptr_eq(&root, &same));
        assert!(!AccountRef::ptr_eq(&root, &other));
        assert_eq!(root.count(), 2);
        drop(same);
        assert_eq!(root.count(), 1);
    }

    /// Receipts are equal when account, resource and amount all are.
    #[test]
    fn receipts_compare_by_account_resource_and_amount() {
        let a = Account::root(100, 100).unwrap();
        let b = Account::root(100, 100).unwrap();
        let r = Account::charge(&a, Resource::Heap, 5).unwrap();
        assert_eq!(r, Account::charge(&a, Resource::Heap, 5).unwrap());
        assert_ne!(
            r,
            Account::charge(&b, Resource::Heap, 5).unwrap(),
            "account"
        );
        assert_ne!(
            r,
            Account::charge(&a, Resource::Frames, 5).unwrap(),
            "resource"
        );
        assert_ne!(r, Account::charge(&a, Resource::Heap, 6).unwrap(), "amount");
        // Only the resource, or only the amount, the same.
        assert_ne!(r, Account::charge(&b, Resource::Frames, 5).unwrap());
        assert_ne!(r, Account::charge(&b, Resource::Heap, 6).unwrap());
        assert_ne!(r, Account::charge(&a, Resource::Frames, 6).unwrap());
    }

    #[test]
    fn the_chain_is_bounded() {
        let mut chain: Vec<AccountRef> = alloc::vec![Account::root(10, 10).unwrap()];
        while let Ok(next) = Account::child(chain.last().unwrap(), 10, 10) {
            chain.push(next);
        }
        assert_eq!(chain.len(), DEPTH_MAX);
    }

    #[test]
    fn overflowing_amounts_are_refused() {
        let root = Account::root(u64::MAX, 1).unwrap();
        let _c = Account::charge(&root, Resource::Heap, u64::MAX).unwrap();
        assert_eq!(root.take(Resource::Heap, 1), Err(Error::NoMemory));
    }

    /// Random charges and drops against a model that keeps plain numbers per account.
    #[test]
    fn matches_a_model_under_random_use() {
        let root = Account::root(5000, 100).unwrap();
        let kids = [
            Account::child(&root, 3000, 60).unwrap(),
            Account::child(&root, 3000, 60).unwrap(),
        ];
        let grand = Account::child(&kids[0], 1000, 20).unwrap();
        let accounts = [&root, &kids[0], &kids[1], &grand];
        // Ancestors of each account, itself included, by index into `accounts`.
        let chains: [&[usize]; 4] = [&[0], &[1, 0], &[2, 0], &[3, 1, 0]];
        let mut model = [[0u64; 2]; 4];
        let mut held: Vec<(usize, Resource, u64, Charge)> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) && !held.is_empty() {
                let (who, r, n, c) = held.swap_remove((x >> 8) as usize % held.len());
                drop(c);
                for &i in chains[who] {
                    model[i][r as usize] -= n;
                }
            } else {
                let who = (x >> 4) as usize % 4;
                let r = if x & 1 == 0 {
                    Resource::Heap
                } else {
                    Resource::Frames
                };
                let n = (x >> 20) % if r == Resource::Heap { 700 } else { 15 };
                let fits = chains[who]
                    .iter()
                    .all(|&i| model[i][r as usize] + n <= accounts[i].limit(r));
                match Account::charge(accounts[who], r, n) {
                    Ok(c) => {
                        assert!(fits, "charged past a limit");
                        for &i in chains[who] {
                            model[i][r as usize] += n;
                        }
                        held.push((who, r, n, c));
                    }
                    Err(e) => {
                        assert!(!fits, "refused a charge that fits");
                        assert_eq!(e, Error::NoMemory);
                    }
                }
            }
            for (i, a) in accounts.iter().enumerate() {
                assert_eq!(a.used(Resource::Heap), model[i][0]);
                assert_eq!(a.used(Resource::Frames), model[i][1]);
            }
        }
    }
}
