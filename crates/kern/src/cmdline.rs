//! The kernel command line: which boot modules to start and how to end.
//!
//! Words are separated by ASCII whitespace; unknown words are ignored (and returned by
//! [`BootConfig::parse`] so the kernel can report them), so a newer command line still boots
//! an older kernel.

use alloc::string::String;
use alloc::vec::Vec;

/// What the command line asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BootConfig {
    /// Boot modules to start, in order (`init=a,b,c`; default `init`).
    pub init: Vec<String>,
    /// Boot modules of `init` whose tasks get a send right to the host-privilege port
    /// (`priv=a,b`; default none). Only the tasks the kernel starts at boot: a task
    /// spawned later never gets it from the kernel, whatever its module.
    pub privileged: Vec<String>,
    /// Power off when no task is left (`shutdown`): tests and non-interactive runs.
    pub shutdown_when_idle: bool,
    /// Fault in kernel mode on purpose after boot (`crash=kernel-page-fault`), to test the
    /// fatal-exception report.
    pub crash: bool,
    /// Record a timeline of kernel entries from boot (`trace`, or `trace=N` for `N`
    /// records per CPU; 0 when off), dumped when the kernel shuts down.
    pub trace: usize,
    /// Make one in this many kernel allocations fail once boot is done (`failalloc=N`,
    /// N ≥ 1; honoured only by kernels built with fault injection: `kern::fault`).
    pub fail_every: Option<u64>,
    /// Most frames user memory may hold (`pageable=N`, N ≥ [`PAGEABLE_MIN`]): fewer than
    /// the machine has, so that page replacement runs (the rest stays the kernel's).
    pub pageable: Option<u64>,
    /// Words that were not understood.
    pub unknown: Vec<String>,
}

/// Fewest frames `pageable=N` may leave to user memory.
pub const PAGEABLE_MIN: u64 = 64;

/// Records per CPU of `trace` without a count.
pub const TRACE_DEFAULT: usize = 4096;
/// Most records per CPU `trace=N` may ask for.
pub const TRACE_MAX: usize = 65536;

impl BootConfig {
    /// Parses a command line.
    pub fn parse(cmdline: &str) -> BootConfig {
        let mut config = BootConfig::default();
        for word in cmdline.split_ascii_whitespace() {
            if let Some(list) = word.strip_prefix("init=") {
                config.init = list
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
            } else if let Some(list) = word.strip_prefix("priv=") {
                config.privileged = list
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
            } else if word == "shutdown" {
                config.shutdown_when_idle = true;
            } else if word == "trace" {
                config.trace = TRACE_DEFAULT;
            } else if let Some(n) = word
                .strip_prefix("trace=")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| (1..=TRACE_MAX).contains(&n))
            {
                config.trace = n;
            } else if word == "crash=kernel-page-fault" {
                config.crash = true;
            } else if let Some(n) = word
                .strip_prefix("failalloc=")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|&n| n > 0)
            {
                config.fail_every = Some(n);
            } else if let Some(n) = word
                .strip_prefix("pageable=")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|&n| n >= PAGEABLE_MIN)
            {
                config.pageable = Some(n);
            } else {
                config.unknown.push(String::from(word));
            }
        }
        if config.init.is_empty() {
            config.init.push(String::from("init"));
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = BootConfig::parse("");
        assert_eq!(c.init, ["init"]);
        assert!(!c.shutdown_when_idle && !c.crash && c.unknown.is_empty());
        assert!(c.privileged.is_empty());
    }

    #[test]
    fn words() {
        let c = BootConfig::parse("  init=a,,b shutdown  bogus crash=kernel-page-fault\tx=y ");
        assert_eq!(c.init, ["a", "b"]);
        assert!(c.shutdown_when_idle);
        assert!(c.crash);
        assert_eq!(c.unknown, ["bogus", "x=y"]);
    }

    #[test]
    fn trace() {
        assert_eq!(BootConfig::parse("").trace, 0);
        assert_eq!(BootConfig::parse("trace").trace, TRACE_DEFAULT);
        assert_eq!(BootConfig::parse("trace=100").trace, 100);
        for bad in ["trace=0", "trace=x", "trace=65537"] {
            let c = BootConfig::parse(bad);
            assert_eq!(c.trace, 0, "{bad}");
            assert_eq!(c.unknown, [bad]);
        }
    }

    #[test]
    fn pageable() {
        assert_eq!(BootConfig::parse("pageable=512").pageable, Some(512));
        assert_eq!(BootConfig::parse("").pageable, None);
        for bad in ["pageable=63", "pageable=x", "pageable="] {
            let c = BootConfig::parse(bad);
            assert_eq!(
                (c.pageable, c.unknown),
                (None, alloc::vec![String::from(bad)])
            );
        }
    }

    #[test]
    fn failalloc() {
        assert_eq!(BootConfig::parse("failalloc=7").fail_every, Some(7));
        assert_eq!(BootConfig::parse("").fail_every, None);
        for bad in ["failalloc=0", "failalloc=x", "failalloc="] {
            let c = BootConfig::parse(bad);
            assert_eq!(
                (c.fail_every, c.unknown),
                (None, alloc::vec![String::from(bad)])
            );
        }
    }

    #[test]
    fn privileged_modules() {
        let c = BootConfig::parse("init=a,b priv=b,,c");
        assert_eq!(c.privileged, ["b", "c"]);
        assert!(c.unknown.is_empty());
        assert!(BootConfig::parse("priv=").privileged.is_empty());
    }

    #[test]
    fn empty_init_list_falls_back() {
        assert_eq!(BootConfig::parse("init=").init, ["init"]);
        assert_eq!(BootConfig::parse("init=,").init, ["init"]);
    }
}
