//! User-space drivers' kernel objects, as data: interrupt lines bound to ports, and
//! I/O-port ranges.
//!
//! The kernel (`kernel/src/device.rs`) keeps one [`Devices`] and does the machine's part
//! (routing and masking a line at the I/O APIC, the `in`/`out` instructions); this module
//! decides what each event means, so that the rules are tested on the host:
//!
//! - **At most one notification outstanding per line.** An interrupt on a line whose last
//!   notification has not been acknowledged sends nothing: a level-triggered line stays
//!   masked until the acknowledgement, and an edge-triggered one (which is never masked, so
//!   no edge is lost) is remembered as *pending* and notified again at the
//!   acknowledgement. So an interrupt flood costs one queued message per line, never a
//!   queue or the kernel heap.
//! - **I/O ports.** An access of 1, 2 or 4 bytes is allowed when every byte it touches is in
//!   the object's range.
//!
//! # Invariants
//! - A line is bound at most once; `outstanding` is set exactly while a notification of the
//!   line is queued or being handled and not yet acknowledged; `pending` only while
//!   `outstanding` and only for an edge-triggered line.
//! - Every I/O-ports object has a non-empty range inside `0..=0xffff`; there are at most
//!   [`IO_OBJECTS_MAX`] of them.

use alloc::vec::Vec;
use baton_abi::{Error, IO_OBJECTS_MAX};

/// Legacy ISA interrupt lines.
pub const IRQ_LINES: usize = 16;

/// Message-signalled interrupt lines (`arch::msi`), numbered after the ISA lines: line
/// [`MSI_FIRST`] + n for slot n.
pub const MSI_LINES: usize = 8;
/// The first MSI line's number.
pub const MSI_FIRST: u64 = IRQ_LINES as u64;
/// Every line: the ISA ones, then the MSI ones.
pub const LINES: usize = IRQ_LINES + MSI_LINES;

/// Whether an interrupt line may be bound by a user driver: 1 to 15 except 2 (the cascade
/// of the two legacy PICs, never raised). Line 0, the PIT, is the kernel's (it calibrates
/// the clocks on it).
pub const fn irq_bindable(irq: u64) -> bool {
    irq >= 1 && irq < IRQ_LINES as u64 && irq != 2
}

/// One bound line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line<P> {
    /// Where its notifications go (the kernel holds a send right).
    pub notify: P,
    /// Its interrupt object's port (the kernel keeps the receive right).
    pub object: P,
    /// The task that bound it (the binding ends with it).
    pub owner: u64,
    /// Level-triggered (masked while a notification is outstanding) or edge-triggered.
    pub level: bool,
    /// A notification is out, not yet acknowledged.
    pub outstanding: bool,
    /// (Edge-triggered) the line fired again while a notification was out.
    pub pending: bool,
}

/// What the kernel does about one interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnInterrupt<P> {
    /// Send the notification to this port (and, for a level-triggered line, keep it
    /// masked until the acknowledgement).
    Notify(P),
    /// Nothing more (a notification is out already, or nobody is bound: mask the line).
    Hold {
        /// Whether the line should be masked (level-triggered, or unbound).
        mask: bool,
    },
}

/// What the kernel does at an acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnAck<P> {
    /// Unmask the line (level-triggered).
    Unmask,
    /// Nothing to do (edge-triggered, nothing came meanwhile).
    Nothing,
    /// Send the next notification now (edge-triggered, it fired meanwhile).
    Notify(P),
}

/// An I/O-ports object: the ports `base .. base + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRange<P> {
    /// First port.
    pub base: u16,
    /// Number of ports (at least 1).
    pub count: u32,
    /// Its object's port.
    pub object: P,
    /// The task that made it.
    pub owner: u64,
}

impl<P> IoRange<P> {
    /// Checks an access of `width` bytes at `port`; the port as a `u16`.
    pub fn check(&self, port: u64, width: u64) -> Result<u16, Error> {
        if !matches!(width, 1 | 2 | 4) {
            return Err(Error::InvalidArgument);
        }
        let start = u64::from(self.base);
        let end = start + u64::from(self.count);
        if port < start || port.saturating_add(width) > end {
            return Err(Error::InvalidArgument);
        }
        u16::try_from(port).map_err(|_| Error::InvalidArgument)
    }
}

/// Checks an I/O-ports range: non-empty, inside `0..=0xffff`.
pub fn io_range_valid(base: u64, count: u64) -> Result<(u16, u32), Error> {
    if count == 0 || base > 0xffff || count > 0x1_0000 || base + count > 0x1_0000 {
        return Err(Error::InvalidArgument);
    }
    Ok((base as u16, count as u32))
}

/// Whether `base .. base + count` overlaps `other`.
pub fn overlaps(base: u64, count: u64, other: core::ops::Range<u64>) -> bool {
    base < other.end && other.start < base.saturating_add(count)
}

/// Every bound line and every I/O-ports object.
#[derive(Debug)]
pub struct Devices<P> {
    lines: [Option<Line<P>>; LINES],
    /// The I/O-ports objects (at most [`IO_OBJECTS_MAX`]; room made before each insert).
    pub io: Vec<IoRange<P>>,
}

impl<P: Copy + PartialEq> Default for Devices<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Copy + PartialEq> Devices<P> {
    /// Nothing bound.
    pub const fn new() -> Devices<P> {
        Devices {
            lines: [None; LINES],
            io: Vec::new(),
        }
    }

    /// The binding of line `irq`.
    pub fn line(&self, irq: u64) -> Option<&Line<P>> {
        self.lines.get(irq as usize)?.as_ref()
    }

    /// Checks that line `irq` may be bound now: [`Error::InvalidArgument`] for a line that
    /// is not bindable, [`Error::Busy`] for one bound already.
    pub fn check_attach(&self, irq: u64) -> Result<(), Error> {
        if !irq_bindable(irq) {
            return Err(Error::InvalidArgument);
        }
        if self.line(irq).is_some() {
            return Err(Error::Busy);
        }
        Ok(())
    }

    /// Binds line `irq` (after [`Devices::check_attach`]).
    pub fn attach(
        &mut self,
        irq: u64,
        notify: P,
        object: P,
        owner: u64,
        level: bool,
    ) -> Result<(), Error> {
        self.check_attach(irq)?;
        let slot = self
            .lines
            .get_mut(irq as usize)
            .ok_or(Error::InvalidArgument)?;
        *slot = Some(Line {
            notify,
            object,
            owner,
            level,
            outstanding: false,
            pending: false,
        });
        Ok(())
    }

    /// Binds a free MSI line (edge-triggered) to `notify`; its number.
    /// [`Error::NoSpace`] when all [`MSI_LINES`] are bound.
    pub fn attach_msi(&mut self, notify: P, object: P, owner: u64) -> Result<u64, Error> {
        let (i, slot) = self
            .lines
            .iter_mut()
            .enumerate()
            .skip(IRQ_LINES)
            .find(|(_, l)| l.is_none())
            .ok_or(Error::NoSpace)?;
        *slot = Some(Line {
            notify,
            object,
            owner,
            level: false,
            outstanding: false,
            pending: false,
        });
        Ok(i as u64)
    }

    /// Whether an MSI line is free.
    pub fn msi_free(&self) -> bool {
        self.lines.iter().skip(IRQ_LINES).any(|l| l.is_none())
    }

    /// Unbinds line `irq`; its binding.
    pub fn detach(&mut self, irq: u64) -> Option<Line<P>> {
        self.lines.get_mut(irq as usize)?.take()
    }

    /// The lines bound by task `owner`.
    pub fn lines_of(&self, owner: u64) -> impl Iterator<Item = u64> + '_ {
        self.lines
            .iter()
            .enumerate()
            .filter(move |(_, l)| l.is_some_and(|l| l.owner == owner))
            .map(|(i, _)| i as u64)
    }

    /// The line whose interrupt object is `object`.
    pub fn line_of_object(&self, object: P) -> Option<u64> {
        self.lines
            .iter()
            .position(|l| l.is_some_and(|l| l.object == object))
            .map(|i| i as u64)
    }

    /// Line `irq` fired.
    pub fn interrupt(&mut self, irq: u64) -> OnInterrupt<P> {
        let Some(Some(l)) = self.lines.get_mut(irq as usize) else {
            return OnInterrupt::Hold { mask: true };
        };
        if l.outstanding {
            if !l.level {
                l.pending = true;
            }
            return OnInterrupt::Hold { mask: l.level };
        }
        l.outstanding = true;
        OnInterrupt::Notify(l.notify)
    }

    /// The driver acknowledged line `irq`'s notification. [`Error::InvalidArgument`] when
    /// none is outstanding, [`Error::NotFound`] for a line not bound.
    pub fn ack(&mut self, irq: u64) -> Result<OnAck<P>, Error> {
        let Some(Some(l)) = self.lines.get_mut(irq as usize) else {
            return Err(Error::NotFound);
        };
        if !l.outstanding {
            return Err(Error::InvalidArgument);
        }
        if l.level {
            l.outstanding = false;
            return Ok(OnAck::Unmask);
        }
        if core::mem::take(&mut l.pending) {
            return Ok(OnAck::Notify(l.notify));
        }
        l.outstanding = false;
        Ok(OnAck::Nothing)
    }

    /// Makes room for one more I/O-ports object: [`Error::NoSpace`] at
    /// [`IO_OBJECTS_MAX`], [`Error::NoMemory`] when the heap has none.
    pub fn reserve_io(&mut self) -> Result<(), Error> {
        if self.io.len() >= IO_OBJECTS_MAX {
            return Err(Error::NoSpace);
        }
        self.io.try_reserve(1).map_err(|_| Error::NoMemory)
    }

    /// The I/O-ports object whose port is `object`.
    pub fn io_of_object(&self, object: P) -> Option<&IoRange<P>> {
        self.io.iter().find(|r| r.object == object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msi_lines_are_edge_lines_after_the_isa_ones() {
        let mut d: Devices<u32> = Devices::new();
        // irq_attach's check never admits an MSI line.
        assert_eq!(d.check_attach(MSI_FIRST), Err(Error::InvalidArgument));
        let mut got = [0u64; MSI_LINES];
        for (i, g) in got.iter_mut().enumerate() {
            assert!(d.msi_free());
            *g = d.attach_msi(1, 100 + i as u32, 7).unwrap();
        }
        assert_eq!(got[0], MSI_FIRST);
        assert_eq!(got[MSI_LINES - 1], MSI_FIRST + MSI_LINES as u64 - 1);
        assert!(!d.msi_free());
        assert_eq!(d.attach_msi(1, 200, 7), Err(Error::NoSpace));
        assert_eq!(d.lines_of(7).count(), MSI_LINES);
        // Edge-triggered: a second interrupt while one is out is remembered, not masked.
        let l = got[2];
        assert_eq!(d.interrupt(l), OnInterrupt::Notify(1));
        assert_eq!(d.interrupt(l), OnInterrupt::Hold { mask: false });
        assert_eq!(d.ack(l), Ok(OnAck::Notify(1)));
        assert_eq!(d.ack(l), Ok(OnAck::Nothing));
        assert_eq!(d.line_of_object(102), Some(l));
        assert!(d.detach(l).is_some());
        assert!(d.msi_free());
        assert_eq!(d.attach_msi(1, 300, 8), Ok(l));
    }

    #[test]
    fn bindable_lines() {
        assert!(!irq_bindable(0));
        assert!(irq_bindable(1));
        assert!(!irq_bindable(2));
        assert!(irq_bindable(4));
        assert!(irq_bindable(15));
        assert!(!irq_bindable(16));
        assert!(!irq_bindable(u64::MAX));
    }

    #[test]
    fn attach_once() {
        let mut d = Devices::<u32>::new();
        assert_eq!(d.check_attach(0), Err(Error::InvalidArgument));
        assert_eq!(d.attach(16, 1, 2, 7, false), Err(Error::InvalidArgument));
        d.attach(4, 1, 2, 7, false).unwrap();
        assert_eq!(d.attach(4, 3, 4, 8, false), Err(Error::Busy));
        assert_eq!(d.line_of_object(2), Some(4));
        assert_eq!(d.lines_of(7).collect::<Vec<_>>(), [4]);
        assert_eq!(d.lines_of(8).count(), 0);
        assert_eq!(d.detach(4).map(|l| l.owner), Some(7));
        assert!(d.line(4).is_none());
        d.attach(4, 3, 4, 8, false).unwrap();
    }

    #[test]
    fn edge_line_notifies_once_then_again_after_ack() {
        let mut d = Devices::<u32>::new();
        assert_eq!(d.interrupt(4), OnInterrupt::Hold { mask: true });
        d.attach(4, 9, 2, 7, false).unwrap();
        assert_eq!(d.ack(4), Err(Error::InvalidArgument));
        assert_eq!(d.interrupt(4), OnInterrupt::Notify(9));
        // A flood while the notification is out: nothing more, never masked.
        for _ in 0..1000 {
            assert_eq!(d.interrupt(4), OnInterrupt::Hold { mask: false });
        }
        // The acknowledgement sends the one pending notification, the next one nothing.
        assert_eq!(d.ack(4), Ok(OnAck::Notify(9)));
        assert_eq!(d.ack(4), Ok(OnAck::Nothing));
        assert_eq!(d.ack(4), Err(Error::InvalidArgument));
        assert_eq!(d.interrupt(4), OnInterrupt::Notify(9));
        assert_eq!(d.ack(3), Err(Error::NotFound));
    }

    #[test]
    fn level_line_stays_masked_until_ack() {
        let mut d = Devices::<u32>::new();
        d.attach(9, 5, 6, 1, true).unwrap();
        assert_eq!(d.interrupt(9), OnInterrupt::Notify(5));
        assert_eq!(d.interrupt(9), OnInterrupt::Hold { mask: true });
        assert_eq!(d.ack(9), Ok(OnAck::Unmask));
        assert_eq!(d.ack(9), Err(Error::InvalidArgument));
        assert_eq!(d.interrupt(9), OnInterrupt::Notify(5));
    }

    #[test]
    fn io_ranges() {
        assert_eq!(io_range_valid(0x3f8, 0), Err(Error::InvalidArgument));
        assert_eq!(io_range_valid(0x1_0000, 1), Err(Error::InvalidArgument));
        assert_eq!(io_range_valid(0xffff, 2), Err(Error::InvalidArgument));
        assert_eq!(io_range_valid(0xffff, 1), Ok((0xffff, 1)));
        assert_eq!(io_range_valid(0, 0x1_0000), Ok((0, 0x1_0000)));
        let r = IoRange {
            base: 0x3f8,
            count: 8,
            object: 1u32,
            owner: 1,
        };
        assert_eq!(r.check(0x3f8, 1), Ok(0x3f8));
        assert_eq!(r.check(0x3ff, 1), Ok(0x3ff));
        assert_eq!(r.check(0x3fe, 2), Ok(0x3fe));
        assert_eq!(r.check(0x3ff, 2), Err(Error::InvalidArgument));
        assert_eq!(r.check(0x3fc, 4), Ok(0x3fc));
        assert_eq!(r.check(0x3fd, 4), Err(Error::InvalidArgument));
        assert_eq!(r.check(0x3f7, 1), Err(Error::InvalidArgument));
        assert_eq!(r.check(0x400, 1), Err(Error::InvalidArgument));
        assert_eq!(r.check(0x3f8, 3), Err(Error::InvalidArgument));
        assert_eq!(r.check(0x3f8, 8), Err(Error::InvalidArgument));
        assert_eq!(r.check(u64::MAX, 1), Err(Error::InvalidArgument));
        assert!(overlaps(0x20, 2, 0x21..0x22));
        assert!(!overlaps(0x22, 2, 0x20..0x22));
        assert!(!overlaps(0x10, 0x10, 0x20..0x22));
        assert!(overlaps(0, 0x1_0000, 0xf4..0xf8));
    }

    #[test]
    fn io_objects_are_bounded() {
        let mut d = Devices::<u32>::new();
        for i in 0..IO_OBJECTS_MAX {
            d.reserve_io().unwrap();
            d.io.push(IoRange {
                base: 0x100,
                count: 1,
                object: i as u32,
                owner: 1,
            });
        }
        assert_eq!(d.reserve_io(), Err(Error::NoSpace));
        assert_eq!(d.io_of_object(3).map(|r| r.object), Some(3));
        assert!(d.io_of_object(99).is_none());
    }
}
