//! An ordered map from `u64` keys (addresses, object offsets) whose every allocation can
//! fail: the address maps' entries and the memory objects' resident pages live in it.
//!
//! `alloc::collections::BTreeMap` cannot report an allocation failure (its `insert` calls
//! the allocation-error handler, a panic in the kernel), so this is an AVL tree of boxed
//! nodes made with [`crate::fallible::try_box`]: an insert that cannot get its node fails
//! with nothing changed. Nodes can also be moved whole from one tree to another
//! ([`Tree::drain_nodes`], [`Tree::insert_node`]), which allocates nothing: a shadow
//! chain's collapse moves pages that way, so it cannot fail half done. Emptying a tree
//! ([`Tree::drain`]) visits each node once, without the rebalancing of removing one by one.
//!
//! # Invariants
//! - In-order traversal gives strictly increasing keys; each key appears once.
//! - Every node's `height` is one more than its taller child's, and its children's heights
//!   differ by at most one, so the height is at most 1.44·log2(n + 2): insert, remove and
//!   the ordered queries cost O(log n), and the recursion they use is that deep.
//! - `len` counts the nodes.
//! - The hint ([`Tree::floor_where`], [`Tree::get_hinted`]) is empty or names a node of
//!   this tree: every method that adds a node, takes one out, changes a key or
//!   rebalances empties it first, and [`Tree::get_mut`], the one way to change a value in
//!   place, takes it again from the node it hands out. A node is boxed, so its address
//!   does not change while it is in the tree.

use alloc::boxed::Box;
use baton_abi::Error;
use core::cell::Cell;
use core::cmp::Ordering;
use core::ptr::NonNull;

/// A child link.
type Link<V> = Option<Box<Node<V>>>;

/// One node: a key, its value, and the AVL bookkeeping.
#[derive(Debug)]
pub struct Node<V> {
    key: u64,
    val: V,
    height: u8,
    left: Link<V>,
    right: Link<V>,
}

impl<V> Node<V> {
    /// The node's key.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The node's value.
    pub fn value(&self) -> &V {
        &self.val
    }

    /// Gives the node a new key (only for a node outside any tree, about to be inserted).
    pub fn set_key(&mut self, key: u64) {
        self.key = key;
    }

    /// The value, consuming the node.
    pub fn into_value(self) -> V {
        self.val
    }
}

/// An ordered map from `u64` to `V`. See the module documentation.
#[derive(Debug)]
pub struct Tree<V> {
    root: Link<V>,
    len: usize,
    /// The node the last hinted lookup found: repeated lookups of one entry (a fault's
    /// decode, the handler's protection change and the fault's retry all look up the
    /// same page) compare it before walking from the root.
    hint: Cell<Option<NonNull<Node<V>>>>,
}

// SAFETY: the hint is a cache of a pointer to a node the tree owns (as its boxes do); it
// is only read through `&self` and reset through `&mut self`, so the tree is as safe to
// move to another thread as its boxed nodes are.
unsafe impl<V: Send> Send for Tree<V> {}

impl<V> Default for Tree<V> {
    fn default() -> Self {
        Self::new()
    }
}

fn height<V>(l: &Link<V>) -> i32 {
    l.as_ref().map_or(0, |n| i32::from(n.height))
}

fn update<V>(n: &mut Node<V>) {
    let h = 1 + height(&n.left).max(height(&n.right));
    n.height = h.clamp(0, i32::from(u8::MAX)) as u8;
}

fn rotate_right<V>(mut n: Box<Node<V>>) -> Box<Node<V>> {
    match n.left.take() {
        Some(mut l) => {
            n.left = l.right.take();
            update(&mut n);
            l.right = Some(n);
            update(&mut l);
            l
        }
        None => n,
    }
}

fn rotate_left<V>(mut n: Box<Node<V>>) -> Box<Node<V>> {
    match n.right.take() {
        Some(mut r) => {
            n.right = r.left.take();
            update(&mut n);
            r.left = Some(n);
            update(&mut r);
            r
        }
        None => n,
    }
}

/// Restores the AVL balance of a node whose subtrees are balanced and differ in height
/// by at most two.
fn balance<V>(mut n: Box<Node<V>>) -> Box<Node<V>> {
    update(&mut n);
    let bf = height(&n.left) - height(&n.right);
    if bf > 1 {
        if let Some(l) = n.left.take() {
            n.left = Some(if height(&l.left) < height(&l.right) {
                rotate_left(l)
            } else {
                l
            });
        }
        rotate_right(n)
    } else if bf < -1 {
        if let Some(r) = n.right.take() {
            n.right = Some(if height(&r.right) < height(&r.left) {
                rotate_right(r)
            } else {
                r
            });
        }
        rotate_left(n)
    } else {
        n
    }
}

fn rebalance<V>(link: &mut Link<V>) {
    // A node still in balance only needs its height (no move of the box).
    if let Some(n) = link.as_mut() {
        update(n);
        if (height(&n.left) - height(&n.right)).abs() <= 1 {
            return;
        }
    }
    if let Some(n) = link.take() {
        *link = Some(balance(n));
    }
}

/// Inserts `node`; on an equal key swaps the values and returns the node with the old one.
/// The flag says whether the subtree at `link` grew: once a subtree keeps its height, no
/// node above it changes, and the walk back up stops rebalancing.
fn insert<V>(link: &mut Link<V>, mut node: Box<Node<V>>) -> (Option<Box<Node<V>>>, bool) {
    let (old, grew) = match link {
        None => {
            node.height = 1;
            node.left = None;
            node.right = None;
            *link = Some(node);
            return (None, true);
        }
        // Two plain comparisons, not `Ord::cmp` (whose three-way result costs a few
        // instructions more at every level of the walk).
        Some(n) if node.key == n.key => {
            core::mem::swap(&mut n.val, &mut node.val);
            return (Some(node), false);
        }
        Some(n) if node.key < n.key => insert(&mut n.left, node),
        Some(n) => insert(&mut n.right, node),
    };
    if !grew {
        return (old, false);
    }
    let before = height(link);
    rebalance(link);
    (old, height(link) != before)
}

/// Hands every node of the subtree `link` to `f` in key order, each without its
/// children; the recursion is as deep as the tree is high (logarithmic).
fn drain_link<V>(mut link: Link<V>, f: &mut impl FnMut(Box<Node<V>>)) {
    while let Some(mut n) = link {
        drain_link(n.left.take(), f);
        link = n.right.take();
        n.height = 1;
        f(n);
    }
}

/// Removes the smallest node of the tree rooted at `n`: (that node, what is left).
fn take_min<V>(mut n: Box<Node<V>>) -> (Box<Node<V>>, Link<V>) {
    match n.left.take() {
        None => {
            let rest = n.right.take();
            (n, rest)
        }
        Some(l) => {
            let (min, rest) = take_min(l);
            n.left = rest;
            (min, Some(balance(n)))
        }
    }
}

fn remove<V>(link: &mut Link<V>, key: u64) -> Option<Box<Node<V>>> {
    let ord = key.cmp(&link.as_ref()?.key);
    let out = match ord {
        Ordering::Less => remove(&mut link.as_mut()?.left, key),
        Ordering::Greater => remove(&mut link.as_mut()?.right, key),
        Ordering::Equal => {
            let mut node = link.take()?;
            *link = match (node.left.take(), node.right.take()) {
                (None, r) => r,
                (l, None) => l,
                (l, Some(r)) => {
                    let (mut min, rest) = take_min(r);
                    min.left = l;
                    min.right = rest;
                    Some(balance(min))
                }
            };
            return Some(node);
        }
    };
    rebalance(link);
    out
}

impl<V> Tree<V> {
    /// An empty tree.
    pub const fn new() -> Tree<V> {
        Tree {
            root: None,
            len: 0,
            hint: Cell::new(None),
        }
    }

    /// The hinted node, if any.
    #[inline]
    fn hinted(&self) -> Option<&Node<V>> {
        #[cfg(test)]
        if let Some(p) = self.hint.get() {
            // The invariant itself, checked without following the pointer: it is the
            // address of a node in the tree.
            assert!(
                owns(&self.root, p.as_ptr()),
                "the hint names no node of the tree"
            );
        }
        // SAFETY: the hint names a node of this tree (the invariant in the module
        // documentation: whatever removes a node or changes a key empties it first), at a
        // stable address in its box; `&self` keeps the tree, and so the node, unchanged
        // for the reference's life.
        self.hint.get().map(|p| unsafe { p.as_ref() })
    }

    /// Remembers `n` (a node of this tree) as the hint.
    #[inline]
    fn note(&self, n: &Node<V>) {
        self.hint.set(Some(NonNull::from(n)));
    }

    /// Heap bytes one entry takes (what the callers charge per entry).
    pub const NODE_BYTES: u64 = core::mem::size_of::<Node<V>>() as u64;

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Inserts `key -> val`: the value it replaced, or [`Error::NoMemory`] (nothing
    /// changed, `val` dropped) when no node could be allocated.
    pub fn insert(&mut self, key: u64, val: V) -> Result<Option<V>, Error> {
        let node = crate::fallible::try_box(Node {
            key,
            val,
            height: 1,
            left: None,
            right: None,
        })
        .ok_or(Error::NoMemory)?;
        Ok(self.insert_node(node).map(|n| n.val))
    }

    /// Inserts `val` at `key` in one walk unless the value already there satisfies
    /// `keep`: `Ok(Ok(old))` inserted (`old` the value it replaced, if any),
    /// `Ok(Err(val))` when `keep` held (the tree is as it was, `val` comes back),
    /// [`Error::NoMemory`] when no node can be had (nothing changed).
    #[allow(clippy::type_complexity)]
    pub fn insert_unless(
        &mut self,
        key: u64,
        val: V,
        keep: impl FnOnce(&V) -> bool,
    ) -> Result<Result<Option<V>, V>, Error> {
        let node = crate::fallible::try_box(Node {
            key,
            val,
            height: 1,
            left: None,
            right: None,
        })
        .ok_or(Error::NoMemory)?;
        let Some(mut old) = self.insert_node(node) else {
            return Ok(Ok(None));
        };
        if !keep(&old.val) {
            return Ok(Ok(Some(old.val)));
        }
        // Put the kept value back: only on this (refused) path is the key walked twice.
        if let Some(v) = self.get_mut(key) {
            core::mem::swap(v, &mut old.val);
        }
        Ok(Err(old.val))
    }

    /// Inserts a node taken from a tree (no allocation): on an equal key the values are
    /// swapped and the node comes back holding the old value.
    pub fn insert_node(&mut self, node: Box<Node<V>>) -> Option<Box<Node<V>>> {
        self.hint.set(None);
        let (old, _) = insert(&mut self.root, node);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        self.remove_node(key).map(|n| n.val)
    }

    /// Removes `key`, returning its node (to insert elsewhere without allocating).
    pub fn remove_node(&mut self, key: u64) -> Option<Box<Node<V>>> {
        self.hint.set(None);
        let n = remove(&mut self.root, key)?;
        self.len -= 1;
        Some(n)
    }

    /// Empties the tree, handing `f` each node in key order (without children, to free or
    /// to insert elsewhere without allocating): O(n) in all, where removing the nodes one
    /// by one walks and rebalances the tree for each.
    pub fn drain_nodes(&mut self, mut f: impl FnMut(Box<Node<V>>)) {
        self.hint.set(None);
        let root = self.root.take();
        self.len = 0;
        drain_link(root, &mut f);
    }

    /// Empties the tree, handing `f` each key and value in key order (see
    /// [`Tree::drain_nodes`]).
    pub fn drain(&mut self, mut f: impl FnMut(u64, V)) {
        self.drain_nodes(|n| {
            let key = n.key;
            f(key, n.into_value());
        });
    }

    /// Removes the smallest entry's node.
    pub fn pop_first_node(&mut self) -> Option<Box<Node<V>>> {
        let (key, _) = self.first()?;
        self.remove_node(key)
    }

    /// The value at `key`.
    pub fn get(&self, key: u64) -> Option<&V> {
        self.get_node(key).map(|n| &n.val)
    }

    /// The node at `key`.
    #[inline]
    fn get_node(&self, key: u64) -> Option<&Node<V>> {
        let mut cur = self.root.as_deref();
        while let Some(n) = cur {
            if key == n.key {
                return Some(n);
            }
            cur = if key < n.key {
                n.left.as_deref()
            } else {
                n.right.as_deref()
            };
        }
        None
    }

    /// The value at `key`, mutably.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        let mut cur = self.root.as_deref_mut();
        while let Some(n) = cur {
            if key == n.key {
                // The hint is taken again from the node about to be changed, so that it
                // never outlives a change made past it.
                self.hint.set(Some(NonNull::from(&mut *n)));
                return Some(&mut n.val);
            }
            cur = if key < n.key {
                n.left.as_deref_mut()
            } else {
                n.right.as_deref_mut()
            };
        }
        None
    }

    /// Gives the node at `old` the key `new` in place, when that keeps the order: no
    /// other key lies between them. Allocates nothing and moves no node (an address map
    /// moves the boundary between two neighbouring entries this way). `false`, with
    /// nothing changed, when `old` is absent, `new` is present or another key lies
    /// between the two.
    pub fn rekey(&mut self, old: u64, new: u64) -> bool {
        self.hint.set(None);
        if old == new {
            return self.contains(old);
        }
        // Keys strictly between the bounds the path to `old` sets and the node's own
        // subtrees are exactly the keys adjacent to `old`: `new` must fall inside.
        let (mut lo, mut hi) = (None::<u64>, None::<u64>);
        let mut cur = self.root.as_deref_mut();
        while let Some(n) = cur {
            match old.cmp(&n.key) {
                Ordering::Less => {
                    hi = Some(n.key);
                    cur = n.left.as_deref_mut();
                }
                Ordering::Greater => {
                    lo = Some(n.key);
                    cur = n.right.as_deref_mut();
                }
                Ordering::Equal => {
                    let pred = n.left.as_deref().map(|mut l| {
                        while let Some(r) = l.right.as_deref() {
                            l = r;
                        }
                        l.key
                    });
                    let succ = n.right.as_deref().map(|mut r| {
                        while let Some(l) = r.left.as_deref() {
                            r = l;
                        }
                        r.key
                    });
                    let below = pred.or(lo);
                    let above = succ.or(hi);
                    if below.is_some_and(|b| new <= b) || above.is_some_and(|a| new >= a) {
                        return false;
                    }
                    n.key = new;
                    return true;
                }
            }
        }
        false
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// The entry with the greatest key `<= key`.
    pub fn floor(&self, key: u64) -> Option<(u64, &V)> {
        let mut cur = self.root.as_deref();
        let mut best = None;
        while let Some(n) = cur {
            if n.key <= key {
                best = Some((n.key, &n.val));
                cur = n.right.as_deref();
            } else {
                cur = n.left.as_deref();
            }
        }
        best
    }

    /// [`Tree::floor`] for a tree of disjoint ranges, through the hint: the entry with the
    /// greatest key `<= key` if `fits(its key, its value)` (that it covers `key`), else
    /// `None`. The caller's ranges do not overlap, so an entry at or below `key` that
    /// covers it is the floor: the hinted entry, when it fits, is the answer without a
    /// walk. The entry found becomes the hint.
    #[inline]
    pub fn floor_where(&self, key: u64, fits: impl Fn(u64, &V) -> bool) -> Option<(u64, &V)> {
        if let Some(n) = self.hinted() {
            if n.key <= key && fits(n.key, &n.val) {
                return Some((n.key, &n.val));
            }
        }
        let n = self.floor_node(key)?;
        if !fits(n.key, &n.val) {
            return None;
        }
        self.note(n);
        Some((n.key, &n.val))
    }

    /// [`Tree::get`] through the hint (compared first; the node found becomes it), for
    /// the lookups that repeat one key.
    #[inline]
    pub fn get_hinted(&self, key: u64) -> Option<&V> {
        if let Some(n) = self.hinted().filter(|n| n.key == key) {
            return Some(&n.val);
        }
        let n = self.get_node(key)?;
        self.note(n);
        Some(&n.val)
    }

    /// The node with the greatest key `<= key`.
    fn floor_node(&self, key: u64) -> Option<&Node<V>> {
        let mut cur = self.root.as_deref();
        let mut best = None;
        while let Some(n) = cur {
            if n.key <= key {
                best = Some(n);
                cur = n.right.as_deref();
            } else {
                cur = n.left.as_deref();
            }
        }
        best
    }

    /// The entry with the smallest key `>= key`.
    pub fn ceil(&self, key: u64) -> Option<(u64, &V)> {
        let mut cur = self.root.as_deref();
        let mut best = None;
        while let Some(n) = cur {
            if n.key >= key {
                best = Some((n.key, &n.val));
                cur = n.left.as_deref();
            } else {
                cur = n.right.as_deref();
            }
        }
        best
    }

    /// The entry with the smallest key `> key`.
    pub fn after(&self, key: u64) -> Option<(u64, &V)> {
        key.checked_add(1).and_then(|k| self.ceil(k))
    }

    /// The entry with the smallest key.
    pub fn first(&self) -> Option<(u64, &V)> {
        let mut cur = self.root.as_deref()?;
        while let Some(l) = cur.left.as_deref() {
            cur = l;
        }
        Some((cur.key, &cur.val))
    }

    /// The entry with the greatest key.
    pub fn last(&self) -> Option<(u64, &V)> {
        let mut cur = self.root.as_deref()?;
        while let Some(r) = cur.right.as_deref() {
            cur = r;
        }
        Some((cur.key, &cur.val))
    }

    /// The entries with keys in `[from, to)`, in order; each step is an O(log n) search,
    /// so the tree may not change during the walk (collect the keys first to change it).
    pub fn range(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, &V)> {
        let mut next = self.ceil(from);
        core::iter::from_fn(move || {
            let (k, v) = next.filter(|(k, _)| *k < to)?;
            next = self.after(k);
            Some((k, v))
        })
    }

    /// Calls `f(key, value)` for the entries with keys in `[from, to)`, in order, until it
    /// returns `false`: one walk down to `from`, then O(1) amortized a key (recursing as
    /// deep as the tree is high), where [`Tree::range`] searches from the root for each.
    pub fn each_in(&self, from: u64, to: u64, mut f: impl FnMut(u64, &V) -> bool) {
        each_in(&self.root, from, to, &mut f);
    }

    /// Every entry, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.range(0, u64::MAX)
            .chain(self.get(u64::MAX).map(|v| (u64::MAX, v)))
    }

    /// The tree's height (for tests of the balance).
    pub fn height(&self) -> u32 {
        height(&self.root).unsigned_abs()
    }
}

/// Whether a node below `link` is at `p` (the hint's invariant, for tests).
#[cfg(test)]
fn owns<V>(link: &Link<V>, p: *const Node<V>) -> bool {
    link.as_deref()
        .is_some_and(|n| core::ptr::eq(n, p) || owns(&n.left, p) || owns(&n.right, p))
}

/// [`Tree::each_in`] below `link`; `false` once `f` has asked to stop.
fn each_in<V>(link: &Link<V>, from: u64, to: u64, f: &mut impl FnMut(u64, &V) -> bool) -> bool {
    let Some(n) = link.as_deref() else {
        return true;
    };
    if from < n.key && !each_in(&n.left, from, to, f) {
        return false;
    }
    if n.key >= to {
        return true;
    }
    if n.key >= from && !f(n.key, &n.val) {
        return false;
    }
    each_in(&n.right, from, to, f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::vec::Vec;

    fn check<V>(l: &Link<V>, lo: Option<u64>, hi: Option<u64>) -> (i32, usize) {
        match l {
            None => (0, 0),
            Some(n) => {
                assert!(lo.is_none_or(|lo| n.key > lo) && hi.is_none_or(|hi| n.key < hi));
                let (hl, cl) = check(&n.left, lo, Some(n.key));
                let (hr, cr) = check(&n.right, Some(n.key), hi);
                assert!((hl - hr).abs() <= 1, "unbalanced");
                assert_eq!(i32::from(n.height), 1 + hl.max(hr));
                (1 + hl.max(hr), cl + cr + 1)
            }
        }
    }

    #[test]
    fn matches_a_btreemap() {
        let mut t = Tree::new();
        let mut m = BTreeMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x >> 3) % 512;
            if x.is_multiple_of(3) {
                assert_eq!(t.remove(k), m.remove(&k));
            } else if x.is_multiple_of(5) {
                // A new key for `k` in place: allowed exactly when no key lies between.
                let to = (x >> 40) % 512;
                let (a, b) = (k.min(to), k.max(to));
                let free = m.contains_key(&k)
                    && (to == k || (!m.contains_key(&to) && m.range(a + 1..b).next().is_none()));
                assert_eq!(t.rekey(k, to), free, "{k} -> {to}");
                if free {
                    let v = m.remove(&k).unwrap();
                    m.insert(to, v);
                }
            } else {
                assert_eq!(t.insert(k, step).unwrap(), m.insert(k, step));
            }
            let q = (x >> 20) % 520;
            // A walk of a range, stopped after `stop` entries.
            let (q2, stop) = (q + (x >> 40) % 64, ((x >> 50) % 8) as usize);
            let mut a = Vec::new();
            t.each_in(q, q2, |k, v| {
                a.push((k, *v));
                a.len() < stop
            });
            let b: Vec<_> = m
                .range(q..q2)
                .take(stop.max(1))
                .map(|(k, v)| (*k, *v))
                .collect();
            assert_eq!(a, b, "each_in [{q}, {q2}) stopping after {stop}");
            assert_eq!(t.floor(q), m.range(..=q).next_back().map(|(k, v)| (*k, v)));
            assert_eq!(t.ceil(q), m.range(q..).next().map(|(k, v)| (*k, v)));
            assert_eq!(t.get(q), m.get(&q));
            assert_eq!(t.len(), m.len());
            if step % 1000 == 0 {
                let (_, n) = check(&t.root, None, None);
                assert_eq!(n, t.len());
                let a: Vec<_> = t.iter().map(|(k, v)| (k, *v)).collect();
                let b: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
                assert_eq!(a, b);
            }
        }
        assert_eq!(t.first().map(|(k, _)| k), m.keys().next().copied());
        assert_eq!(t.last().map(|(k, _)| k), m.keys().next_back().copied());
    }

    #[test]
    fn drain_hands_over_every_node_in_order_and_empties() {
        let mut t = Tree::new();
        for k in (0..500u64).rev() {
            t.insert(k * 7 % 503, k).unwrap();
        }
        let mut seen = Vec::new();
        t.drain(|k, v| seen.push((k, v)));
        let mut want: Vec<(u64, u64)> = (0..500u64).map(|k| (k * 7 % 503, k)).collect();
        want.sort_unstable();
        assert_eq!(seen, want);
        assert_eq!(t.len(), 0);
        assert!(t.first().is_none());
        // Drained nodes go into another tree without allocating, and the tree is reusable.
        for k in 0..100 {
            t.insert(k, k).unwrap();
        }
        let mut u = Tree::new();
        t.drain_nodes(|n| assert!(u.insert_node(n).is_none()));
        assert_eq!(u.len(), 100);
        assert_eq!(u.range(0, 100).count(), 100);
        t.insert(1, 1).unwrap();
        assert_eq!(t.get(1), Some(&1));
    }

    #[test]
    fn insert_unless_keeps_what_it_is_told_to() {
        let mut t = Tree::new();
        assert_eq!(t.insert_unless(5, 50, |_| true), Ok(Ok(None)));
        // Replaced when `keep` says no, kept (and the new value returned) when yes.
        assert_eq!(t.insert_unless(5, 51, |v| *v != 50), Ok(Ok(Some(50))));
        assert_eq!(t.insert_unless(5, 52, |v| *v == 51), Ok(Err(52)));
        assert_eq!(t.get(5), Some(&51));
        assert_eq!(t.len(), 1);
        for k in 0..64 {
            t.insert_unless(k * 3, k, |_| false).unwrap().unwrap();
        }
        assert_eq!(t.insert_unless(33, 0, |_| true), Ok(Err(0)));
        assert_eq!(t.get(33), Some(&11));
        assert_eq!(t.len(), 65);
    }

    #[test]
    fn height_is_logarithmic_and_nodes_move_between_trees() {
        let mut a = Tree::new();
        for k in 0..4096u64 {
            a.insert(k, k).unwrap();
        }
        assert!(a.height() <= 18, "height {}", a.height());
        let mut b = Tree::new();
        while let Some(mut n) = a.pop_first_node() {
            let k = n.key();
            n.set_key(k + 10);
            assert!(b.insert_node(n).is_none());
        }
        assert!(a.is_empty());
        assert_eq!(b.len(), 4096);
        assert_eq!(b.first(), Some((10, &0)));
        assert_eq!(b.get(u64::MAX), None);
        b.insert(u64::MAX, 1).unwrap();
        assert_eq!(b.iter().last(), Some((u64::MAX, &1)));
        assert_eq!(
            b.range(20, 23).map(|(k, _)| k).collect::<Vec<_>>(),
            [20, 21, 22]
        );
    }
}

/// The hint ([`Tree::floor_where`], [`Tree::get_hinted`]) against a model of disjoint
/// ranges: whatever the tree did since (inserts, removals, new keys, values changed in
/// place, a drain), a hinted lookup answers what a walk from the root answers.
#[cfg(test)]
mod hint_proptests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::vec::Vec;

    #[derive(Clone, Debug)]
    enum Op {
        /// A range `[start, start + len)` added when it overlaps nothing.
        Insert(u64, u64),
        /// The range starting at the key nearest below this removed.
        Remove(u64),
        /// The range containing the address gets a new end (kept disjoint) in place.
        SetEnd(u64, u64),
        /// The range starting at the key nearest below this moves its start.
        Rekey(u64, u64),
        /// The range containing the address, looked up (twice: the second through the
        /// hint the first left).
        Find(u64),
        /// The value at the key nearest below this, looked up twice by key.
        Get(u64),
        /// Everything taken out.
        Drain,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..400u64, 1..12u64).prop_map(|(s, l)| Op::Insert(s, l)),
            1 => (0..420u64).prop_map(Op::Remove),
            2 => (0..420u64, 1..12u64).prop_map(|(a, l)| Op::SetEnd(a, l)),
            1 => (0..420u64, 0..420u64).prop_map(|(a, b)| Op::Rekey(a, b)),
            6 => (0..420u64).prop_map(Op::Find),
            3 => (0..420u64).prop_map(Op::Get),
            1 => Just(Op::Drain),
        ]
    }

    fn containing(m: &BTreeMap<u64, u64>, a: u64) -> Option<(u64, u64)> {
        m.range(..=a)
            .next_back()
            .filter(|(_, e)| a < **e)
            .map(|(s, e)| (*s, *e))
    }

    fn free(m: &BTreeMap<u64, u64>, s: u64, e: u64, except: Option<u64>) -> bool {
        m.iter()
            .filter(|(k, _)| Some(**k) != except)
            .all(|(k, v)| *v <= s || *k >= e)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn hinted_lookups_answer_what_walks_answer(ops in proptest::collection::vec(op(), 1..200)) {
            let mut t: Tree<u64> = Tree::new();
            let mut m: BTreeMap<u64, u64> = BTreeMap::new();
            // Each change is made with the hint on the entry it changes (the lookup before
            // it), and checked by the same lookups after it.
            let probe = |t: &Tree<u64>, m: &BTreeMap<u64, u64>, a: u64| {
                let got = t.floor_where(a, |_, e| a < *e).map(|(s, e)| (s, *e));
                let want = containing(m, a);
                let key = t.get_hinted(a).copied();
                (got == want && key == m.get(&a).copied(), got, want)
            };
            for op in ops {
                let at = match op.clone() {
                    Op::Insert(a, _) | Op::Remove(a) | Op::SetEnd(a, _) | Op::Rekey(a, _) => {
                        let a = m.range(..=a).next_back().map_or(a, |(k, _)| *k);
                        let _ = probe(&t, &m, a);
                        Some(a)
                    }
                    Op::Drain => m.keys().next().copied(),
                    _ => None,
                };
                match op {
                    Op::Insert(s, l) => {
                        if free(&m, s, s + l, None) {
                            prop_assert_eq!(t.insert(s, s + l).unwrap(), None);
                            m.insert(s, s + l);
                        }
                    }
                    Op::Remove(a) => {
                        if let Some((&k, _)) = m.range(..=a).next_back() {
                            prop_assert_eq!(t.remove(k), m.remove(&k));
                        }
                    }
                    Op::SetEnd(a, l) => {
                        if let Some((s, _)) = containing(&m, a) {
                            let e = a + l;
                            if free(&m, s, e, Some(s)) {
                                *t.get_mut(s).unwrap() = e;
                                m.insert(s, e);
                            }
                        }
                    }
                    Op::Rekey(a, to) => {
                        if let Some((&k, &e)) = m.range(..=a).next_back() {
                            let ok = to < e
                                && !m.contains_key(&to)
                                && m.range(k.min(to) + 1..k.max(to)).next().is_none()
                                && free(&m, to, e, Some(k));
                            if ok || to == k {
                                prop_assert!(t.rekey(k, to));
                                m.remove(&k);
                                m.insert(to, e);
                            }
                        }
                    }
                    Op::Find(a) => {
                        let want = containing(&m, a);
                        for _ in 0..2 {
                            let got = t.floor_where(a, |_, e| a < *e).map(|(s, e)| (s, *e));
                            prop_assert_eq!(got, want);
                        }
                    }
                    Op::Get(a) => {
                        let k = m.range(..=a).next_back().map_or(a, |(k, _)| *k);
                        for _ in 0..2 {
                            prop_assert_eq!(t.get_hinted(k), m.get(&k));
                        }
                    }
                    Op::Drain => {
                        let mut out = Vec::new();
                        t.drain(|k, v| out.push((k, v)));
                        let want: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
                        prop_assert_eq!(out, want);
                        m.clear();
                    }
                }
                if let Some(a) = at {
                    let (ok, got, want) = probe(&t, &m, a);
                    prop_assert!(ok, "after {:?} at {}: {:?}, want {:?}", op, a, got, want);
                }
                prop_assert_eq!(t.len(), m.len());
            }
        }
    }
}
