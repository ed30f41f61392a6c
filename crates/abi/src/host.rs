//! What the host-privilege calls that look at the system write (`host_tasks`,
//! `host_threads`, `host_names`): records of little-endian `u64` words, one after the other
//! in the caller's buffer.
//!
//! Each record type has a fixed number of words (`*_RECORD_WORDS`), `to_words` (the kernel
//! side) and `from_words` (the user side), so both agree on the layout through this crate
//! alone. A call writes at most [`RECORDS_MAX`] records and returns how many there are, so a
//! caller whose buffer was too small knows it.

/// Most records one call writes.
pub const RECORDS_MAX: u64 = 256;

/// Bytes of a task's name a [`TaskRecord`] carries (longer names are cut).
pub const TASK_NAME_BYTES: usize = 32;

/// [`TaskRecord::state`]: it runs (has live threads and is not ending).
pub const TASK_LIVE: u64 = 0;
/// [`TaskRecord::state`]: it is ending (its threads are being stopped).
pub const TASK_ENDING: u64 = 1;
/// [`TaskRecord::state`]: its own threads are gone, but threads of other tasks still run
/// in its activations (it *lingers* until they leave).
pub const TASK_LINGERING: u64 = 2;

/// One task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskRecord {
    /// Its id.
    pub id: u64,
    /// The task that spawned it, 0 for a boot task.
    pub creator: u64,
    /// Its live threads.
    pub threads: u64,
    /// [`TASK_LIVE`], [`TASK_ENDING`] or [`TASK_LINGERING`].
    pub state: u64,
    /// CPU time its threads have used, in nanoseconds (the work of a migrating call counts
    /// for the caller's thread, so for the caller's task).
    pub cpu_ns: u64,
    /// Bytes of `name` in use.
    pub name_len: u64,
    /// Its boot module's name (the first [`TASK_NAME_BYTES`] bytes).
    pub name: [u8; TASK_NAME_BYTES],
}

/// Words of a [`TaskRecord`].
pub const TASK_RECORD_WORDS: usize = 6 + TASK_NAME_BYTES / 8;

impl TaskRecord {
    /// Its words, as the kernel writes them.
    pub fn to_words(&self) -> [u64; TASK_RECORD_WORDS] {
        let mut w = [0u64; TASK_RECORD_WORDS];
        let head = [
            self.id,
            self.creator,
            self.threads,
            self.state,
            self.cpu_ns,
            self.name_len,
        ];
        for (slot, v) in w.iter_mut().zip(head) {
            *slot = v;
        }
        for (slot, chunk) in w.iter_mut().skip(6).zip(self.name.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *slot = u64::from_le_bytes(b);
        }
        w
    }

    /// The record of `w`.
    pub fn from_words(w: &[u64; TASK_RECORD_WORDS]) -> TaskRecord {
        let mut name = [0u8; TASK_NAME_BYTES];
        for (chunk, word) in name.chunks_exact_mut(8).zip(w.iter().skip(6)) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        TaskRecord {
            id: w[0],
            creator: w[1],
            threads: w[2],
            state: w[3],
            cpu_ns: w[4],
            name_len: w[5],
            name,
        }
    }

    /// The name as a string (empty if it is not UTF-8).
    pub fn name(&self) -> &str {
        let len = (self.name_len as usize).min(TASK_NAME_BYTES);
        match self.name.get(..len) {
            Some(b) => core::str::from_utf8(b).unwrap_or(""),
            None => "",
        }
    }
}

/// [`ThreadRecord::blocked`]: not blocked (running or ready).
pub const BLOCKED_NONE: u64 = 0;
/// In `sleep`.
pub const BLOCKED_SLEEP: u64 = 1;
/// In `wait` on a word (`on` = its user address).
pub const BLOCKED_WAIT: u64 = 2;
/// Blocked in the process model (keeping its kernel stack).
pub const BLOCKED_PROCESS_MODEL: u64 = 3;
/// Receiving on a port (`on` = the port's kernel id).
pub const BLOCKED_RECEIVE: u64 = 4;
/// Sending to a full port, or waiting for an activation (`on` = the port's kernel id).
pub const BLOCKED_SEND: u64 = 5;
/// Stopped in a suspended activation.
pub const BLOCKED_SUSPENDED: u64 = 6;
/// Waiting for another thread to stop (`act_get_state`; `on` = that thread's id).
pub const BLOCKED_STATE_WAIT: u64 = 7;
/// Waiting for a pager to supply a page (`on` = the page's offset in its object).
pub const BLOCKED_PAGE_IN: u64 = 8;
/// The first thread of a task being made, not started yet (`task_start`).
pub const BLOCKED_UNSTARTED: u64 = 9;

/// A spare kernel thread of a virtual processor, parked.
pub const BLOCKED_VP_SPARE: u64 = 10;
/// The name of a `BLOCKED_*` value.
pub const fn blocked_name(b: u64) -> &'static str {
    match b {
        BLOCKED_NONE => "-",
        BLOCKED_SLEEP => "sleep",
        BLOCKED_WAIT => "wait",
        BLOCKED_PROCESS_MODEL => "process model",
        BLOCKED_RECEIVE => "receive",
        BLOCKED_SEND => "send",
        BLOCKED_SUSPENDED => "suspended",
        BLOCKED_STATE_WAIT => "state wait",
        BLOCKED_PAGE_IN => "page in",
        BLOCKED_UNSTARTED => "unstarted",
        BLOCKED_VP_SPARE => "spare",
        _ => "?",
    }
}

/// One thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadRecord {
    /// Its id.
    pub id: u64,
    /// Its home task (where it was created).
    pub home: u64,
    /// The task it runs in now (another than `home` inside a migrating call).
    pub task: u64,
    /// `kobject::THREAD_RUNNING`, `THREAD_READY` or `THREAD_BLOCKED` (3: ending).
    pub state: u64,
    /// What it is blocked in (`BLOCKED_*`).
    pub blocked: u64,
    /// What it waits on: a port's kernel id, a user address, a thread id (see `BLOCKED_*`).
    pub on: u64,
    /// Its priority.
    pub priority: u64,
    /// The CPU it runs on or last ran on.
    pub cpu: u64,
    /// CPU time used, in nanoseconds.
    pub cpu_ns: u64,
    /// Activations below the running one: how many migrating calls it is inside.
    pub depth: u64,
    /// Pool activations its home task has (free or occupied).
    pub activations: u64,
}

/// Words of a [`ThreadRecord`].
pub const THREAD_RECORD_WORDS: usize = 11;

impl ThreadRecord {
    /// Its words.
    pub fn to_words(&self) -> [u64; THREAD_RECORD_WORDS] {
        [
            self.id,
            self.home,
            self.task,
            self.state,
            self.blocked,
            self.on,
            self.priority,
            self.cpu,
            self.cpu_ns,
            self.depth,
            self.activations,
        ]
    }

    /// The record of `w`.
    pub fn from_words(w: &[u64; THREAD_RECORD_WORDS]) -> ThreadRecord {
        let [id, home, task, state, blocked, on, priority, cpu, cpu_ns, depth, activations] = *w;
        ThreadRecord {
            id,
            home,
            task,
            state,
            blocked,
            on,
            priority,
            cpu,
            cpu_ns,
            depth,
            activations,
        }
    }
}

/// [`NameRecord::object`]: an ordinary port.
pub const OBJECT_NONE: u64 = 0;
/// A task's port.
pub const OBJECT_TASK: u64 = 1;
/// A thread's port.
pub const OBJECT_THREAD: u64 = 2;
/// An activation's port.
pub const OBJECT_ACTIVATION: u64 = 3;
/// The host-privilege port.
pub const OBJECT_HOST_PRIV: u64 = 4;
/// An interrupt object.
pub const OBJECT_INTERRUPT: u64 = 5;
/// An I/O-ports object.
pub const OBJECT_IO_PORTS: u64 = 6;
/// A memory object (`baton_abi::memobj`).
pub const OBJECT_MEMORY: u64 = 16;

/// The name of an `OBJECT_*` value.
pub const fn object_name(o: u64) -> &'static str {
    match o {
        OBJECT_NONE => "-",
        OBJECT_TASK => "task",
        OBJECT_THREAD => "thread",
        OBJECT_ACTIVATION => "activation",
        OBJECT_HOST_PRIV => "host-priv",
        OBJECT_INTERRUPT => "interrupt",
        OBJECT_IO_PORTS => "io-ports",
        OBJECT_MEMORY => "memory",
        _ => "?",
    }
}

/// One right of a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NameRecord {
    /// The task's name for it.
    pub name: u64,
    /// Its kind (`ipc::RightKind` as a number: 1 receive, 2 send, 3 send-once, 4 dead).
    pub kind: u64,
    /// The port's kernel id (the same number in every task's records), 0 for a dead name.
    pub port: u64,
    /// Messages queued on the port.
    pub queued: u64,
    /// What the port stands for (`OBJECT_*`).
    pub object: u64,
}

/// Words of a [`NameRecord`].
pub const NAME_RECORD_WORDS: usize = 5;

impl NameRecord {
    /// Its words.
    pub fn to_words(&self) -> [u64; NAME_RECORD_WORDS] {
        [self.name, self.kind, self.port, self.queued, self.object]
    }

    /// The record of `w`.
    pub fn from_words(w: &[u64; NAME_RECORD_WORDS]) -> NameRecord {
        let [name, kind, port, queued, object] = *w;
        NameRecord {
            name,
            kind,
            port,
            queued,
            object,
        }
    }
}

/// `host_trace`'s operation: turn the timeline trace on.
pub const TRACE_START: u64 = 1;
/// `host_trace`'s operation: turn it off and print it.
pub const TRACE_STOP: u64 = 0;
/// Most records per CPU `host_trace` takes.
pub const TRACE_RECORDS_MAX: u64 = 65536;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut name = [0u8; TASK_NAME_BYTES];
        name[..5].copy_from_slice(b"shell");
        let t = TaskRecord {
            id: 3,
            creator: 2,
            threads: 1,
            state: TASK_ENDING,
            cpu_ns: 12345,
            name_len: 5,
            name,
        };
        let back = TaskRecord::from_words(&t.to_words());
        assert_eq!(back, t);
        assert_eq!(back.name(), "shell");
        let th = ThreadRecord {
            id: 1,
            home: 2,
            task: 3,
            state: 4,
            blocked: 5,
            on: 6,
            priority: 7,
            cpu: 8,
            cpu_ns: 9,
            depth: 10,
            activations: 11,
        };
        assert_eq!(ThreadRecord::from_words(&th.to_words()), th);
        assert_eq!(th.to_words()[10], 11);
        let n = NameRecord {
            name: 1,
            kind: 2,
            port: 3,
            queued: 4,
            object: 5,
        };
        assert_eq!(NameRecord::from_words(&n.to_words()), n);
    }

    #[test]
    fn names_of_values() {
        assert_eq!(blocked_name(BLOCKED_RECEIVE), "receive");
        assert_eq!(blocked_name(99), "?");
        assert_eq!(object_name(OBJECT_INTERRUPT), "interrupt");
        assert_eq!(object_name(99), "?");
        let mut t = TaskRecord {
            name_len: 99,
            ..TaskRecord::default()
        };
        t.name[0] = b'a';
        assert_eq!(t.name().len(), TASK_NAME_BYTES);
        t.name[0] = 0xff;
        assert_eq!(t.name(), "");
    }
}
