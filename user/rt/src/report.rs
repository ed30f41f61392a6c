//! Reporting the kernel's counters ([`Stats`]): every field by name ([`fields`]), and the
//! one-line summary test programs print at the end ([`Summary`], [`print_summary`]).

use core::fmt;

use baton_abi::{Stats, STATS_WORDS};

use crate::sys::stats;

/// Every field of `s` with its name, in declaration order.
pub fn fields(s: &Stats) -> [(&'static str, u64); STATS_WORDS] {
    let words = s.to_words();
    core::array::from_fn(|i| {
        (
            Stats::FIELD_NAMES.get(i).copied().unwrap_or("?"),
            words.get(i).copied().unwrap_or(0),
        )
    })
}

/// Formats a [`Stats`] as one line (without the newline), starting `stats: `:
/// blocks by reason, discards, handoffs, recognitions, context switches, kernel stacks
/// (in use, max, time-weighted mean, allocated), thread bytes, threads and heap.
pub struct Summary<'a>(pub &'a Stats);

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        write!(
            f,
            "stats: blocks yield={} preempt={} sleep={} wait={} internal={} pmodel={} \
             | discards={} handoffs={} recognitions={} switches={} \
             | stacks in_use={} max={} mean={}.{:03} allocated={} \
             | thread_bytes={} threads={} created={} heap={}",
            s.blocks_yield,
            s.blocks_preempt,
            s.blocks_sleep,
            s.blocks_wait,
            s.blocks_internal,
            s.blocks_process_model,
            s.stack_discards,
            s.stack_handoffs,
            s.recognitions,
            s.context_switches,
            s.stacks_in_use,
            s.stacks_max,
            s.stacks_mean_milli / 1000,
            s.stacks_mean_milli % 1000,
            s.stacks_allocated,
            s.thread_bytes,
            s.threads,
            s.threads_created,
            s.heap_used,
        )
    }
}

/// Reads [`stats`] and prints its [`Summary`] line, or `stats: unavailable (<error>)`.
pub fn print_summary() {
    match stats() {
        Ok(s) => crate::println!("{}", Summary(&s)),
        Err(e) => crate::println!("stats: unavailable ({})", e.name()),
    }
}
