//! Kernel console lines caused by user errors (a system call refused with `BadAddress`):
//! rate-limited, and written after the big kernel lock is released, so that a task
//! making errors in a loop can neither flood the console nor stall the other CPUs behind
//! a console write done under the lock.
//!
//! A line must find a token in its task's bucket ([`TASK_BURST`] lines, then one per
//! [`TASK_PERIOD_NS`]) and in the kernel's ([`GLOBAL_BURST`], then one per
//! [`GLOBAL_PERIOD_NS`]); otherwise it is counted as suppressed, and the count is printed
//! (`[kernel] N messages suppressed`) before the next line that gets through, or when a
//! task ends. A line that passes is formatted into its CPU's bounded buffer
//! ([`BUF_BYTES`]; a line that does not fit is dropped and counted too) and written by
//! [`flush`] once the system call that caused it has released the lock.
//!
//! The reports of a task's end (`killed: ...`, with its registers) are not limited: one
//! per task, which costs a `spawn`, itself reported.
//!
//! # Invariants
//! - Everything but the console write in [`flush`] runs under the big kernel lock; the
//!   buffers are per CPU, so a CPU writes only the lines it formatted.

use crate::arch::serial;
use crate::arch::serial::kprintln;
use crate::kernel::{self, Kernel, TaskId};
use alloc::vec::Vec;
use core::fmt::Write;
use kern::ratelimit::TokenBucket;

/// Lines one task may cause at once.
pub const TASK_BURST: u64 = 8;
/// Then one per this many nanoseconds.
pub const TASK_PERIOD_NS: u64 = 1_000_000_000;
/// Lines all tasks together may cause at once.
pub const GLOBAL_BURST: u64 = 32;
/// Then one per this many nanoseconds.
pub const GLOBAL_PERIOD_NS: u64 = 100_000_000;
/// Bytes of lines one CPU holds until its system call has released the lock.
pub const BUF_BYTES: usize = 512;

/// The limiter's state (in [`Kernel`]).
pub struct Log {
    global: TokenBucket,
    /// Lines suppressed since the last note.
    suppressed: u64,
    /// Per CPU: lines formatted, not yet written.
    bufs: Vec<Buf>,
}

/// One CPU's pending lines.
struct Buf {
    bytes: [u8; BUF_BYTES],
    len: usize,
}

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(core::fmt::Error)?;
        let dst = self.bytes.get_mut(self.len..end).ok_or(core::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl Log {
    /// A limiter whose global bucket is full at `now_ns`.
    pub fn new(now_ns: u64) -> Log {
        Log {
            global: TokenBucket::full(GLOBAL_BURST, now_ns),
            suppressed: 0,
            bufs: Vec::new(),
        }
    }
}

/// A new task's bucket, full.
pub fn task_bucket(now_ns: u64) -> TokenBucket {
    TokenBucket::full(TASK_BURST, now_ns)
}

/// Queues `[kernel] task <id> (<name>) <what>` on this CPU for [`flush`], if task `id`'s
/// bucket and the kernel's allow it; else counts it as suppressed.
pub fn user_error(k: &mut Kernel, id: TaskId, what: core::fmt::Arguments<'_>) {
    let now = crate::arch::apic::now_ns();
    let cpu = crate::arch::gdt::this_cpu();
    let task_ok = match k.tasks.get_mut(&id) {
        Some(t) => t.log_bucket.take(now, TASK_BURST, TASK_PERIOD_NS),
        None => true,
    };
    let log = &mut k.log;
    if !task_ok || !log.global.take(now, GLOBAL_BURST, GLOBAL_PERIOD_NS) {
        log.suppressed += 1;
        return;
    }
    while log.bufs.len() <= cpu {
        log.bufs.push(Buf {
            bytes: [0; BUF_BYTES],
            len: 0,
        });
    }
    let name = k.tasks.get(&id).map(|t| t.name.as_str()).unwrap_or("?");
    let Some(buf) = k.log.bufs.get_mut(cpu) else {
        return;
    };
    let mark = buf.len;
    let mut ok = true;
    if k.log.suppressed > 0 {
        ok = writeln!(buf, "[kernel] {} messages suppressed", k.log.suppressed).is_ok();
    }
    ok = ok && writeln!(buf, "[kernel] task {id} ({name}) {what}").is_ok();
    if ok {
        k.log.suppressed = 0;
    } else {
        // Full: the line is dropped (the note stays owed).
        buf.len = mark;
        k.log.suppressed += 1;
    }
}

/// Task `id` is ending: prints the note of the lines suppressed so far, if any (one line
/// per task end at most).
pub fn task_ending(k: &mut Kernel) {
    if k.log.suppressed > 0 {
        let n = core::mem::take(&mut k.log.suppressed);
        k.close_line();
        kprintln!("[kernel] {n} messages suppressed");
    }
}

/// Whether this CPU has lines to write.
#[inline]
pub fn pending(k: &Kernel, cpu: usize) -> bool {
    k.log.bufs.get(cpu).is_some_and(|b| b.len > 0)
}

/// Writes this CPU's pending lines with the big kernel lock released, and takes it
/// again. The caller holds the lock, and must drop every reference into the kernel state
/// before calling and get it again after (`kernel::kernel`). TLB shootdown requests are
/// answered between lines, as a CPU waiting for the lock does.
pub fn flush(cpu: usize) {
    let mut out = [0u8; BUF_BYTES];
    let len = {
        // SAFETY: the caller holds the lock; the reference ends in this block.
        let k = unsafe { kernel::kernel() };
        k.close_line();
        match k.log.bufs.get_mut(cpu) {
            Some(b) => {
                let n = core::mem::take(&mut b.len);
                match (out.get_mut(..n), b.bytes.get(..n)) {
                    (Some(dst), Some(src)) => {
                        dst.copy_from_slice(src);
                        n
                    }
                    _ => 0,
                }
            }
            None => 0,
        }
    };
    kernel::unlock();
    for line in out
        .get(..len)
        .unwrap_or(&[])
        .split_inclusive(|&c| c == b'\n')
    {
        serial::CONSOLE.lock().write_bytes(line);
        crate::arch::tlb::service();
    }
    kernel::lock();
}
