//! The bookkeeping of the floor cross-address-space call (`floor_xas_*`, see
//! `baton_abi::floor`): which tasks are registered as partners, and which call each CPU is
//! in. The kernel's `floor` module switches address spaces and registers around it.
//!
//! A call borrows the caller's thread: the thread runs the partner's code in the
//! partner's address space until the partner's `floor_xas_return`, or until any other
//! kernel entry on that CPU, which ends the call (the caller gets `Interrupted`). So a
//! call never outlives one stretch in user mode, and is per CPU.
//!
//! # Invariants
//! - At most one call per CPU, and at most one call per partner (`busy`).
//! - A partner's registration is removed when its task starts ending ([`Xas::forget`]);
//!   a call in progress keeps its record until it ends.

use alloc::vec::Vec;
use baton_abi::layout::{USER_END, USER_MIN};
use baton_abi::Error;

/// A registered partner: where calls enter it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partner {
    /// User address of the entry point.
    pub entry: u64,
    /// User stack pointer at entry.
    pub stack: u64,
    /// The one task allowed to call it.
    pub caller: u64,
    /// A call is in it now.
    pub busy: bool,
}

/// A call in progress on one CPU: who called whom, and where the caller resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call<T> {
    /// The borrowed thread (the caller's).
    pub thread: T,
    /// The caller's task.
    pub caller: u64,
    /// The partner's task.
    pub partner: u64,
    /// The caller's user `rip` (after its `syscall`), `rsp` and `rflags`.
    pub rip: u64,
    /// See `rip`.
    pub rsp: u64,
    /// See `rip`.
    pub rflags: u64,
}

/// Partners and calls in progress.
#[derive(Debug)]
pub struct Xas<T> {
    /// The registered partners with their tasks (few: a registration needs the
    /// host-privilege right), grown fallibly.
    partners: Vec<(u64, Partner)>,
    calls: Vec<Option<Call<T>>>,
}

impl<T: Copy> Default for Xas<T> {
    fn default() -> Self {
        Xas {
            partners: Vec::new(),
            calls: Vec::new(),
        }
    }
}

impl<T: Copy> Xas<T> {
    /// `floor_xas_register(entry, stack, caller)` by `task`: both user addresses (the stack
    /// may be [`USER_END`] itself), or both 0 to unregister; `caller` is the one task
    /// allowed to call it. A busy partner cannot change.
    pub fn register(
        &mut self,
        task: u64,
        entry: u64,
        stack: u64,
        caller: u64,
    ) -> Result<(), Error> {
        if self.get(task).is_some_and(|p| p.busy) {
            return Err(Error::WouldBlock);
        }
        if entry == 0 && stack == 0 {
            self.unregister(task);
            return Ok(());
        }
        if !(USER_MIN..USER_END).contains(&entry) || !(USER_MIN..=USER_END).contains(&stack) {
            return Err(Error::BadAddress);
        }
        let partner = Partner {
            entry,
            stack,
            caller,
            busy: false,
        };
        match self.get_mut(task) {
            Some(p) => *p = partner,
            None => {
                // Room first: a registration the heap cannot hold fails, nothing changed.
                self.partners.try_reserve(1).map_err(|_| Error::NoMemory)?;
                self.partners.push((task, partner));
            }
        }
        Ok(())
    }

    /// `task`'s registration.
    fn get(&self, task: u64) -> Option<&Partner> {
        self.partners
            .iter()
            .find(|(t, _)| *t == task)
            .map(|(_, p)| p)
    }

    /// `task`'s registration, mutably.
    fn get_mut(&mut self, task: u64) -> Option<&mut Partner> {
        self.partners
            .iter_mut()
            .find(|(t, _)| *t == task)
            .map(|(_, p)| p)
    }

    /// The partner registered by `task`.
    pub fn partner(&self, task: u64) -> Option<Partner> {
        self.get(task).copied()
    }

    /// Forgets `task`'s registration (it is ending). Returns the CPUs in a call to it
    /// (nothing allocated: a task ending must not need memory).
    pub fn forget(&mut self, task: u64) -> impl Iterator<Item = usize> + '_ {
        self.unregister(task);
        self.cpus_in(task)
    }

    /// Forgets `task`'s registration.
    pub fn unregister(&mut self, task: u64) {
        if let Some(i) = self.partners.iter().position(|(t, _)| *t == task) {
            self.partners.swap_remove(i);
        }
    }

    /// The CPUs whose call is in `task`'s address space.
    pub fn cpus_in(&self, task: u64) -> impl Iterator<Item = usize> + '_ {
        self.calls
            .iter()
            .enumerate()
            .filter(move |(_, c)| c.is_some_and(|c| c.partner == task))
            .map(|(cpu, _)| cpu)
    }

    /// Whether a call to `task` is in progress on `cpu`.
    pub fn in_call_to(&self, cpu: usize, task: u64) -> bool {
        self.call(cpu).is_some_and(|c| c.partner == task)
    }

    /// The call in progress on `cpu`.
    pub fn call(&self, cpu: usize) -> Option<Call<T>> {
        self.calls.get(cpu).copied().flatten()
    }

    /// Starts `call` on `cpu`: the partner must be registered for `call.caller`
    /// ([`Error::Denied`] otherwise) and not busy, and `cpu` in no call. Returns the
    /// partner's entry. Nothing changes on an error.
    pub fn begin(&mut self, cpu: usize, call: Call<T>) -> Result<Partner, Error> {
        if self.call(cpu).is_some() {
            return Err(Error::InvalidArgument);
        }
        let i = self
            .partners
            .iter()
            .position(|(t, _)| *t == call.partner)
            .ok_or(Error::NotFound)?;
        let Some((_, p)) = self.partners.get(i) else {
            return Err(Error::NotFound);
        };
        if p.caller != call.caller {
            return Err(Error::Denied);
        }
        if p.busy {
            return Err(Error::WouldBlock);
        }
        if self.calls.len() <= cpu {
            self.calls
                .try_reserve(cpu + 1 - self.calls.len())
                .map_err(|_| Error::NoMemory)?;
            self.calls.resize(cpu + 1, None);
        }
        let (Some(slot), Some((_, p))) = (self.calls.get_mut(cpu), self.partners.get_mut(i)) else {
            return Err(Error::NoMemory);
        };
        p.busy = true;
        *slot = Some(call);
        Ok(*p)
    }

    /// Ends the call on `cpu` (a return, or an interruption) and gives it back; its
    /// partner, if still registered, is free again.
    pub fn end(&mut self, cpu: usize) -> Option<Call<T>> {
        let call = self.calls.get_mut(cpu)?.take()?;
        if let Some(p) = self.get_mut(call.partner) {
            p.busy = false;
        }
        Some(call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(partner: u64) -> Call<u32> {
        Call {
            thread: 7,
            caller: 1,
            partner,
            rip: 0x40_1000,
            rsp: 0x7000,
            rflags: 0x202,
        }
    }

    #[test]
    fn registrations_are_replaced_and_removed_per_task() {
        let mut x = Xas::<u32>::default();
        x.register(2, 0x1000, 0x8000, 1).unwrap();
        x.register(3, 0x2000, 0x9000, 1).unwrap();
        // A second registration of a task replaces its first, in place.
        x.register(2, 0x3000, 0xa000, 4).unwrap();
        assert_eq!(x.partners.len(), 2);
        assert_eq!(x.partner(2).map(|p| (p.entry, p.caller)), Some((0x3000, 4)));
        assert_eq!(x.partner(3).map(|p| p.entry), Some(0x2000));
        x.register(2, 0, 0, 0).unwrap();
        assert!(x.partner(2).is_none());
        assert_eq!(x.partner(3).map(|p| p.entry), Some(0x2000));
        x.unregister(3);
        assert!(x.partners.is_empty());
    }

    #[test]
    fn register_checks_addresses() {
        let mut x = Xas::<u32>::default();
        assert_eq!(x.register(2, 0, 0x8000, 1), Err(Error::BadAddress));
        assert_eq!(x.register(2, 0x1000, 0, 1), Err(Error::BadAddress));
        assert_eq!(x.register(2, USER_END, 0x8000, 1), Err(Error::BadAddress));
        assert_eq!(
            x.register(2, 0xffff_8000_0000_0000, 0x8000, 1),
            Err(Error::BadAddress)
        );
        assert_eq!(
            x.register(2, 0x1000, USER_END + 1, 1),
            Err(Error::BadAddress)
        );
        assert_eq!(x.partner(2), None);
        assert_eq!(x.register(2, 0x1000, USER_END, 1), Ok(()));
        assert_eq!(x.partner(2).map(|p| p.entry), Some(0x1000));
        assert_eq!(x.register(2, 0, 0, 1), Ok(()));
        assert_eq!(x.partner(2), None);
    }

    #[test]
    fn call_and_return() {
        let mut x = Xas::<u32>::default();
        assert_eq!(x.begin(0, call(2)), Err(Error::NotFound));
        x.register(2, 0x2000, 0x9000, 1).unwrap();
        let p = x.begin(3, call(2)).unwrap();
        assert_eq!((p.entry, p.stack), (0x2000, 0x9000));
        assert!(x.in_call_to(3, 2));
        assert_eq!(x.cpus_in(2).collect::<Vec<_>>(), [3]);
        // The partner is busy: no second call, no re-registration.
        assert_eq!(x.begin(0, call(2)), Err(Error::WouldBlock));
        assert_eq!(x.register(2, 0x3000, 0x9000, 1), Err(Error::WouldBlock));
        // One call per CPU.
        x.register(4, 0x2000, 0x9000, 1).unwrap();
        assert_eq!(x.begin(3, call(4)), Err(Error::InvalidArgument));
        assert_eq!(x.end(3), Some(call(2)));
        assert_eq!(x.end(3), None);
        assert!(!x.in_call_to(3, 2));
        assert_eq!(x.begin(0, call(2)).map(|p| p.busy), Ok(true));
        assert_eq!(x.end(0), Some(call(2)));
        assert_eq!(x.end(99), None);
    }

    #[test]
    fn only_the_named_caller() {
        let mut x = Xas::<u32>::default();
        x.register(2, 0x2000, 0x9000, 5).unwrap();
        // `call` comes from task 1.
        assert_eq!(x.begin(0, call(2)), Err(Error::Denied));
        assert_eq!(x.call(0), None);
        assert_eq!(x.partner(2).map(|p| p.busy), Some(false));
        let mut from5 = call(2);
        from5.caller = 5;
        assert_eq!(x.begin(0, from5).map(|p| p.caller), Ok(5));
        assert_eq!(x.end(0), Some(from5));
        // Re-registering for task 1 lets it in.
        x.register(2, 0x2000, 0x9000, 1).unwrap();
        assert!(x.begin(0, call(2)).is_ok());
    }

    #[test]
    fn forget_during_a_call() {
        let mut x = Xas::<u32>::default();
        x.register(2, 0x2000, 0x9000, 1).unwrap();
        x.begin(1, call(2)).unwrap();
        assert_eq!(x.forget(2).collect::<Vec<_>>(), [1]);
        assert_eq!(x.partner(2), None);
        // The call ends normally; the partner stays unregistered.
        assert_eq!(x.end(1), Some(call(2)));
        assert_eq!(x.begin(1, call(2)), Err(Error::NotFound));
        assert!(x.cpus_in(2).next().is_none());
    }
}
