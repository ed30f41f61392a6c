//! Baton's system-call ABI: the one place where numbers, registers, error codes and the
//! layout of structures shared between the kernel and user space are defined.
//!
//! Both the kernel (`kern`, `baton-kernel`) and user space (`baton-rt`) depend on this crate,
//! so the two sides cannot disagree. `docs/abi.md` describes the same ABI in prose.
//!
//! # Calling convention
//!
//! A system call is the `syscall` instruction with
//!
//! | register | role |
//! |---|---|
//! | `rax` | system-call number ([`Sys`]) on entry, result on return |
//! | `rdi`, `rsi`, `rdx`, `r10`, `r8`, `r9` | arguments 0 to 5 |
//! | `rcx`, `r11` | clobbered by the instruction itself (user `rip` and `rflags`) |
//!
//! All other registers are preserved. The result in `rax` is a signed 64-bit value: zero or
//! positive is success (the call's value), negative is `-(code)` of an [`Error`]. Use
//! [`decode_result`] to turn it into a `Result`.
//!
//! A call with an unknown number is not an error return: it is an *exception* of the calling
//! thread (as a fault is), and a thread with nobody to handle its exceptions is terminated
//! with a report on the console.
#![no_std]
#![forbid(unsafe_code)]

/// System-call numbers (the value in `rax` on entry).
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sys {
    /// `debug_write(ptr, len) -> len`: write bytes to the kernel console, prefixed by the
    /// task's name on each line. At most [`DEBUG_WRITE_MAX`] bytes per call.
    DebugWrite = 0,
    /// `yield() -> 0`: give up the processor to the next ready thread, if any.
    Yield = 1,
    /// `exit(code) -> !`: end the calling task with an exit code the kernel reports.
    Exit = 2,
    /// `clock() -> ns`: nanoseconds since the machine was reset (from the calibrated TSC).
    Clock = 3,
    /// `spawn(name_ptr, name_len, bootstrap, heap_limit, frame_limit) -> task id`: start the
    /// boot module of that name as a new task. `bootstrap` (0 for none) names a send or
    /// receive right of the caller: the new task gets a send right to that port, whose name
    /// its first thread finds in `rsi`. The new task may make the kernel hold at most
    /// `heap_limit` bytes of kernel memory and `frame_limit` physical frames (0: the
    /// default, half the kernel's whole budget; each clamped to the caller's own limit);
    /// everything it and its own children hold counts against the caller's limits too
    /// ([`Error::NoMemory`] at a limit). A bootstrap call until tasks become
    /// capability-invoked kernel objects.
    Spawn = 4,
    /// `module_info(index, *mut ModuleInfo) -> flags`: describe boot module `index`;
    /// [`Error::NotFound`] past the last one. The result is [`MODULE_TEST`] for a test
    /// program (one under `tests/` in the boot image, named without it), 0 for a program a
    /// person runs.
    ModuleInfo = 5,
    /// `thread_create(entry, stack_top, arg) -> thread id`: a new thread in the calling
    /// task, starting at `entry` with `rsp = stack_top` and `rdi = arg`, at the caller's
    /// priority. Both addresses must be user addresses (the stack need not be mapped yet:
    /// a bad one faults in the new thread).
    ThreadCreate = 6,
    /// `thread_exit() -> !`: ends the calling thread. A task ends (exit code 0) when its
    /// last thread has ended; `exit` ends all of its threads at once.
    ThreadExit = 7,
    /// `wait(addr, expected, timeout_ns) -> 0`: if the 32-bit word at user address `addr`
    /// (4-byte aligned) still holds `expected`, block until a `wake` on that address or
    /// until `timeout_ns` nanoseconds have passed ([`FOREVER`] = no timeout). Errors:
    /// [`Error::WouldBlock`] when the word differs, [`Error::TimedOut`].
    Wait = 8,
    /// `wake(addr, n) -> woken`: wakes up to `n` threads waiting on `addr`, oldest first.
    Wake = 9,
    /// `sleep(ns) -> 0`: blocks the calling thread for at least `ns` nanoseconds.
    Sleep = 10,
    /// `stats(*mut Stats) -> 0`: the kernel's always-on counters.
    Stats = 11,
    /// `set_priority(thread id or 0 for self, priority) -> 0`: priority 0 (lowest) to
    /// [`PRIORITY_MAX`]; threads start at [`PRIORITY_DEFAULT`]. Only threads of the
    /// calling task.
    SetPriority = 12,
    /// `debug_block_process_model(ns, seed, host_priv) -> f(seed)`: blocks the calling
    /// thread in the *process model* (keeping its kernel stack and kernel-mode registers)
    /// for `ns` nanoseconds, then returns a value the kernel computed from `seed` with live
    /// kernel stack variables before blocking, so a test can check that the stack survived.
    /// The kernel's only process-model wait until page faults on user memory exist. A
    /// debugging call: `host_priv` must name the caller's send right to the host-privilege
    /// port ([`kobject`]), else [`Error::Denied`]: a thread that keeps its kernel stack
    /// while it sleeps pins kernel memory.
    DebugBlockProcessModel = 13,
    /// `null() -> 0`: does nothing; the floor of a system call, for benchmarks.
    Null = 14,
    /// `mem_map(addr, len, flags) -> 0`: maps fresh zero-filled pages at `[addr, addr+len)`
    /// (page aligned, user range, nothing mapped there yet, at most [`MEM_MAP_MAX`] bytes);
    /// flags: [`MAP_WRITABLE`]. Pages are never executable.
    MemMap = 15,
    /// `mem_unmap(addr, len) -> pages`: unmaps and frees the pages mapped in the range
    /// (holes are skipped); every CPU running a thread of the task forgets them before the
    /// call returns (TLB shootdown).
    MemUnmap = 16,
    /// `set_affinity(thread id or 0 for self, cpu) -> 0`: pins a thread of the calling task
    /// to CPU `cpu` (0 to number of CPUs − 1; no other CPU steals it), or lets it move
    /// again with [`CPU_ANY`]. A running thread moves when it next blocks or is preempted.
    SetAffinity = 17,
    /// `ipc_msg(options, rcv_name, timeout_ns, buf, buf_size) -> 0`: the one message call
    /// ([`ipc`]). With [`ipc::MSG_SEND`] it sends the message in the buffer; with
    /// [`ipc::MSG_RECEIVE`] it then receives a message from the port `rcv_name` (a receive
    /// right) into the buffer; both together are an RPC. The buffer is the thread's IPC
    /// buffer, or `buf`/`buf_size` with [`ipc::MSG_BUF`]. `timeout_ns` bounds each
    /// blocking phase (a full queue, an empty one): 0 never blocks ([`Error::WouldBlock`]),
    /// [`FOREVER`] waits as long as it takes.
    IpcMsg = 18,
    /// `ipc_buffer_set(addr) -> 0`: makes the page at `addr` (page aligned, mapped
    /// writable) the calling thread's IPC buffer; 0 unsets it.
    IpcBufferSet = 19,
    /// `port_allocate(queue_limit) -> name`: a new port; the caller gets its receive right.
    /// `queue_limit` 0 means [`ipc::QUEUE_LIMIT_DEFAULT`].
    PortAllocate = 20,
    /// `port_make_send(name, once) -> new name`: a new send right (`once` = 0) or send-once
    /// right (`once` = 1) to the port whose receive right `name` is.
    PortMakeSend = 21,
    /// `cap_drop(name) -> 0`: releases the right `name`. Releasing a receive right
    /// destroys the port (its senders' names become dead names).
    CapDrop = 22,
    /// `cap_info(name) -> kind`: the kind of right `name` is ([`ipc::RightKind`]).
    CapInfo = 23,
    /// `port_notify(name, kind, notify_name) -> 0`: asks for a notification message on the
    /// port whose receive right `notify_name` is (the kernel keeps a send-once right to it
    /// until then) when the port of the send right `name` dies
    /// ([`ipc::NOTIFY_KIND_DEAD_NAME`]) or when the port of the receive right `name` has
    /// no send rights left ([`ipc::NOTIFY_KIND_NO_SENDERS`]; at once if it has none now).
    /// `notify_name` 0 cancels.
    PortNotify = 24,
    /// `port_set_limit(name, limit) -> 0`: sets the queue limit (1 to
    /// [`ipc::QUEUE_LIMIT_MAX`]) of the port whose receive right `name` is.
    PortSetLimit = 25,
    /// `exception_port_set(target, name) -> 0`: makes the port `name` denotes (a send or
    /// receive right of the caller) the exception port of `target`: 0 for the calling
    /// task, else a thread id of the calling task. `name` 0 clears it. The kernel keeps a
    /// send right of its own (see [`exception`]).
    ExceptionPortSet = 26,
    /// `task_self() -> name`: a send right to the calling task's own task port (see
    /// [`kobject`]).
    TaskSelf = 27,
    /// `task_port(task_id) -> name`: a send right to the task port of a task the caller
    /// created; [`Error::NotFound`] for any other task.
    TaskPort = 28,
    /// `thread_port(thread_id) -> name`: a send right to the port of a thread of the
    /// caller's task; [`Error::NotFound`] for any other thread.
    ThreadPort = 29,
    /// `act_create(port_name, entry, stack_top, buffer, cookie, buffer_size) -> activation
    /// id`: attaches an unoccupied activation of the calling task to the port whose receive
    /// right `port_name` is, so that RPCs to it *migrate* (seed 001): the caller's thread
    /// runs `entry` in this task on the user stack ending at `stack_top` (16-byte aligned),
    /// with `rdi` = `buffer` (page-aligned writable memory of the task, where the request
    /// arrives and the reply is written), `rsi` = the request size in bytes (0 for a
    /// sidetrack upcall), `rdx` = the activation id and `r8` = `cookie`; it ends the call
    /// with [`Sys::ActReturn`]. `buffer_size` is the buffer's size in bytes: 0 for one page
    /// (so a five-argument call keeps meaning what it did), else a multiple of the page
    /// size up to [`ipc::MSG_SIZE_MAX`] ([`Error::InvalidArgument`] otherwise), every page
    /// mapped user-writable ([`Error::BadAddress`] otherwise). A request sent through the
    /// caller's IPC buffer uses only the first page; one sent with `MSG_BUF` may fill the
    /// buffer ([`Error::TooLarge`] to the caller past it). At most
    /// [`ACTIVATIONS_PER_TASK_MAX`] per task.
    ActCreate = 40,
    /// `act_return() -> !`: ends the migrating call running in the calling activation: the
    /// reply (header and in-line data, no descriptors) in the activation's buffer goes to
    /// the caller's buffer (the one its request came from: its IPC buffer page, or its
    /// `MSG_BUF` buffer), whose `ipc_msg` returns 0 (or [`Error::BadFormat`] for a malformed
    /// reply, [`Error::TooLarge`] for one larger than the caller's buffer, [`Error::BadAddress`]
    /// when either buffer was unmapped), and the activation goes back to its pool. [`Error::InvalidArgument`] when
    /// the calling thread is not in a migrating call.
    ActReturn = 41,
    /// `port_sidetrack(port_name, on) -> 0`: with `on` = 1, a migrating call that would use
    /// the last free activation of the port's pool first makes a *sidetrack* upcall in it
    /// (`rsi` = 0), where the server may add activations; if it adds none, the call waits
    /// until an activation comes back. 0 turns it off.
    PortSidetrack = 42,
    /// `thread_cpu_ns(thread id or 0 for self) -> ns`: the CPU time a thread of the calling
    /// task has used, in nanoseconds of the calibrated TSC (up to its last switch on
    /// another CPU; the calling thread's includes the current slice). A migrating call's
    /// time in the server is the caller's.
    ThreadCpuNs = 43,
    /// `act_alert(kind, id) -> 0`: alerts an activation of the calling task (kind 0: the
    /// home activation of thread `id` of the task, 0 for the calling thread's running one;
    /// kind 1: the task's pool activation `id`, while a call occupies it) and every
    /// activation above it on its thread. An activation sees an alert only with alerts on
    /// ([`Sys::AlertEnable`]): by polling ([`Sys::AlertTest`]), or as a kernel wait
    /// (`sleep`, `wait`, a receive) returning [`Error::Interrupted`].
    ActAlert = 44,
    /// `alert_test() -> 0/1`: whether the calling activation has a pending alert it sees;
    /// the alert is consumed.
    AlertTest = 45,
    /// `alert_enable(on) -> previous`: turns alerts on (1) or off (0, as in every new
    /// activation) in the calling activation.
    AlertEnable = 46,
    /// `act_suspend(kind, id, on) -> 0`: suspends (`on` = 1; counted) or resumes (0) an
    /// activation named as for [`Sys::ActAlert`]. Its thread stops only when it would run
    /// user code in it (an APC): a thread deep in a server goes on there.
    ActSuspend = 47,
    /// `act_get_state(kind, id, *mut UserRegs) -> 0`: the user registers of a suspended
    /// activation; waits until its thread has stopped in it. [`Error::InvalidArgument`]
    /// unless suspended, or for the calling thread itself.
    ActGetState = 48,
    /// `act_set_state(kind, id, *const UserRegs) -> 0`: sets them (checked as an exception
    /// handler's reply is); same conditions.
    ActSetState = 49,
    /// `act_sched_lock() -> 0`: activations above the calling one on its thread may no
    /// longer change the thread's priority or affinity ([`Error::Denied`]).
    ActSchedLock = 50,
    /// `act_port(activation id) -> name`: a send right to the port of one of the calling
    /// task's pool activations (free or occupied), its control capability: messages to it
    /// alert, suspend, resume or terminate the activation, or ask about it
    /// (`kobject::ACT_*`). [`Error::NotFound`] for an activation of another task or one
    /// that no longer exists. The port dies with the activation or its task.
    ActPort = 51,
    /// `vm_allocate(addr, len, prot) -> addr`: allocates `len` bytes (page multiple) of
    /// zero-filled memory at `addr` (page aligned, nothing there) or, with
    /// [`vm::VM_ANYWHERE`], wherever there is room, with protection `prot` ([`vm`]'s
    /// `PROT_*` bits; the maximum protection is everything). No frame is taken until a page
    /// is first touched; the frames are charged to the task now ([`Error::NoMemory`] at its
    /// limit). [`Error::NoSpace`] when the range is taken or no room is left. See
    /// `docs/vm.md`.
    VmAllocate = 70,
    /// `vm_deallocate(addr, len) -> 0`: removes every mapping in the range (holes are
    /// fine), freeing pages nothing else maps. [`Error::Denied`] if part of it is wired.
    VmDeallocate = 71,
    /// `vm_protect(addr, len, prot, set_max) -> 0`: sets the protection of a range mapped
    /// throughout ([`Error::BadAddress`] otherwise), or with `set_max` = 1 its maximum
    /// protection (which only goes down, taking the protection with it).
    /// [`Error::Denied`] above the maximum.
    VmProtect = 72,
    /// `vm_inherit(addr, len, inheritance) -> 0`: what a fork-style copy gives the child
    /// ([`vm::INHERIT_SHARE`], [`vm::INHERIT_COPY`], [`vm::INHERIT_NONE`]).
    VmInherit = 73,
    /// `vm_query(addr, *mut VmRegion) -> 0`: the region containing `addr`, or the next one
    /// above ([`Error::NotFound`] when none is).
    VmQuery = 74,
    /// `vm_wire(addr, len) -> 0`: makes every page of a mapped range resident and keeps
    /// it so (a wired range cannot be deallocated); counted, at most 1024 wirings a task.
    VmWire = 75,
    /// `vm_unwire(addr, len) -> 0`: undoes one `vm_wire` of exactly that range
    /// ([`Error::InvalidArgument`] when there is none).
    VmUnwire = 76,
    /// `vm_stats(scope, *mut VmStats) -> 0`: fault counts by Accent's Table 3-10 class and
    /// memory counts, of the calling task ([`vm::STATS_TASK`]) or of the system
    /// ([`vm::STATS_SYSTEM`]).
    VmStats = 77,
    /// `vm_copy(src_task, src_addr, len, dst_task, dst_addr, flags) -> addr`: Accent's
    /// MoveWords. Copies the `len` bytes at `src_addr` of `src_task` by value
    /// (copy-on-write, no page copied) into `dst_task`: with [`vm::VM_COPY_CREATE`] into
    /// new memory wherever there is room (`dst_addr` ignored), else over
    /// `[dst_addr, dst_addr + len)`, which must be mapped writable and lie at the same
    /// offset in its page as the source. With [`vm::VM_COPY_DELETE`] the source's whole
    /// pages are removed (a move). A task is 0 for the caller or a send right to a task's
    /// port. Returns the data's address in `dst_task`. See `docs/vm.md`.
    VmCopy = 78,
    /// `irq_attach(irq, port, host_priv) -> name`: routes legacy ISA interrupt line `irq`
    /// (1 to 15, not 2) to a vector of the boot CPU and binds it to the port `port` names
    /// (a receive or send right of the caller): each interrupt becomes one
    /// [`ipc::NOTIFY_INTERRUPT`] notification there, at most one outstanding until
    /// [`Sys::IrqAck`]. Returns a send right to the line's *interrupt object*, a
    /// kernel-object port ([`kobject`]) that [`Sys::IrqAck`] takes. The binding ends with
    /// the caller's task. [`Error::Denied`] without the host-privilege right,
    /// [`Error::InvalidArgument`] for another line or one the machine does not route,
    /// [`Error::Busy`] for a line bound already, [`Error::DeadName`] for a dead port.
    IrqAttach = 80,
    /// `irq_ack(name) -> 0`: acknowledges the last notification of the interrupt object
    /// `name` (a send right to it): the line is unmasked, or, for an edge-triggered line
    /// that fired again meanwhile, the next notification is sent at once.
    IrqAck = 81,
    /// `ioport_create(base, count, host_priv) -> name`: a send right to a new *I/O-ports
    /// object* (a kernel-object port) for the ports `base .. base + count`, which
    /// [`Sys::IoIn`] and [`Sys::IoOut`] take. The object ends with the caller's task.
    /// [`Error::Denied`] without the host-privilege right or for a range that includes a
    /// port the kernel drives itself (the PICs, the PIT, the exit device);
    /// [`Error::InvalidArgument`] for an empty range or one past `0xffff`;
    /// [`Error::NoSpace`] past [`IO_OBJECTS_MAX`] objects.
    IoPortCreate = 82,
    /// `io_in(name, port, width) -> value`: reads I/O port `port` with an `in` of `width`
    /// bytes (1, 2 or 4) through the I/O-ports object `name`; [`Error::InvalidArgument`]
    /// for a port (or its last byte) outside the object's range or another width.
    IoIn = 83,
    /// `io_out(name, port, width, value) -> 0`: writes the low `width` bytes of `value` to
    /// I/O port `port`, as [`Sys::IoIn`] checks.
    IoOut = 84,
    /// `host_tasks(host_priv, buf, max) -> count`: writes a [`host::TaskRecord`] for each
    /// of the first `max` tasks, by id, into `buf`; returns how many tasks there are (more
    /// than `max` when the buffer was too small). [`Error::Denied`] without the
    /// host-privilege right, [`Error::TooLarge`] for `max` above [`host::RECORDS_MAX`].
    HostTasks = 85,
    /// `host_threads(host_priv, task, buf, max) -> count`: [`host::ThreadRecord`]s of the
    /// threads whose home is task `task` ([`Error::NotFound`] for no such task), as
    /// [`Sys::HostTasks`] does.
    HostThreads = 86,
    /// `host_names(host_priv, task, buf, max) -> count`: [`host::NameRecord`]s of task
    /// `task`'s rights, by name, as [`Sys::HostTasks`] does.
    HostNames = 87,
    /// `host_task_port(host_priv, task) -> name`: a send right to any task's task port
    /// (its control capability: `kobject::TASK_*`), not only a child's.
    HostTaskPort = 88,
    /// `host_shutdown(host_priv) -> !`: ends every task (each reported `killed: shutdown`)
    /// and powers the machine off once they are gone (QEMU exit status 33).
    HostShutdown = 89,
    /// `host_trace(host_priv, op, records) -> n`: the kernel's timeline trace of kernel
    /// entries (`docs/testing.md`, "Tracing"). `op` [`host::TRACE_START`] turns it on with
    /// `records` per CPU (0 for 4,096; at most 65,536), its rings charged to the caller's
    /// account (`NoMemory` when they do not fit), and returns `records`; [`Error::Busy`]
    /// when it is on already. [`host::TRACE_STOP`] turns it off, prints the records to the
    /// console as `TRACE` lines (what `cargo xtask trace --log` reads), frees the rings and
    /// returns how many records were printed (0 when it was off). [`Error::Denied`]
    /// without the host-privilege right.
    HostTrace = 90,
    /// `host_vm(host_priv, task, buf, max) -> count`: task `task`'s address map: its
    /// [`vm::VmStats`] (fault and memory counts) at `buf`, then a [`vm::VmRegion`] for
    /// each of its first `max` map entries; returns how many entries it has.
    /// [`Error::TooLarge`] for `max` above [`host::RECORDS_MAX`], [`Error::NotFound`] for
    /// no such task, [`Error::Denied`] without the host-privilege right.
    HostVm = 91,
    /// `spin_import(name_ptr, name_len) -> domain`: a capability for the domain the
    /// in-kernel name server exports under that interface name, if its authoriser lets the
    /// caller have it ([`Error::Denied`]) (`docs/extensions.md`).
    SpinImport = 100,
    /// `spin_create(ptr, len) -> domain`: a domain from a WebAssembly module (at most
    /// [`spin::MODULE_MAX`] bytes), validated and compiled; the caller's task is charged
    /// for it. [`Error::BadFormat`] for an invalid module.
    SpinCreate = 101,
    /// `spin_resolve(source, target) -> count`: binds the target domain's unresolved
    /// imports to the source's exports; both must be the caller's.
    SpinResolve = 102,
    /// `spin_combine(a, b) -> domain`: a domain exporting what both export.
    SpinCombine = 103,
    /// `spin_install(domain, sym_ptr, sym_len, event | rank << 32, claim, notify) ->
    /// handler`: installs the domain's exported procedure as a handler of an event, if the
    /// event's owner allows `claim`; aborts are reported to the port `notify` (0 = none).
    SpinInstall = 104,
    /// `spin_remove(event, handler) -> 0`.
    SpinRemove = 105,
    /// `spin_release(domain) -> 0`: lets go of a domain; a domain no one holds goes, with
    /// its handlers and memory.
    SpinRelease = 106,
    /// `spin_raise(arg) -> result`: raises [`spin::EVENT_TEST`].
    SpinRaise = 107,
    /// `memobj_pager(port, size, cookie) -> name`: a new memory object of `size` bytes
    /// (page multiple) whose pages the task receiving on `port` supplies (an external
    /// pager, [`pager`]): the kernel keeps a send right to `port` (the caller's send or
    /// receive right named `port`) and sends it [`pager::DATA_REQUEST`]s carrying `cookie`.
    /// Returns a memory-object right, as [`Sys::MemobjCreate`] does.
    MemobjPager = 140,
    /// `pager_supply(name, offset, buf, len) -> pages`: the pager's answer: `len` bytes
    /// (page multiple, at most [`pager::SUPPLY_MAX`]) at the caller's `buf` become the pages
    /// of the object from `offset` on; pages the object already holds are left as they
    /// are. Faults waiting for them resume. Returns the pages put in.
    PagerSupply = 141,
    /// `pager_unavailable(name, offset, len) -> pages`: the pager has no data for these
    /// pages: they are zero-filled.
    PagerUnavailable = 142,
    /// `pager_error(name, offset, len) -> pages`: the pager cannot supply these pages:
    /// faults on them (waiting, and later ones until a supply or a flush) are errors,
    /// reported to the faulting task's exception port.
    PagerError = 143,
    /// `pager_flush(name, offset, len, flags) -> pages`: asks for the object's resident
    /// pages in the range back ([`pager::FLUSH_RETURN`]: each in a
    /// [`pager::DATA_RETURN`] message) and drops them ([`pager::FLUSH_DROP`]); at most
    /// [`pager::FLUSH_MAX_PAGES`] pages a call. Returns the bytes of the range done.
    PagerFlush = 144,
    /// `default_pager_register(port, slots, host_priv)`: the caller becomes the default
    /// pager ([`paging`]): the kernel keeps a send right to `port` (the caller's send or
    /// receive right) and sends it [`paging::PAGE_OUT`] and [`paging::PAGE_IN`] messages;
    /// its store holds `slots` pages (1 to [`paging::SLOTS_MAX`]). Needs the host-privilege
    /// right `host_priv`. [`Error::Busy`] while another default pager lives. The caller's
    /// memory is never paged out.
    DefaultPagerRegister = 180,
    /// `default_pager_supply(transfer, buf)`: the default pager's answer to a
    /// [`paging::PAGE_IN`]: `transfer` points to the request's [`paging::Transfer`] as
    /// received and `buf` to the page's bytes. Returns 1 if the page went in, 0 if it was
    /// no longer wanted (its memory went meanwhile). Only the default pager may call it.
    DefaultPagerSupply = 181,
    /// `paging_stats(scope, out)`: writes [`paging::PagingStats`] for the caller's task
    /// ([`paging::SCOPE_TASK`]) or the whole system ([`paging::SCOPE_SYSTEM`]) at `out`.
    PagingStats = 182,
    /// `paging_limit(frames, host_priv) -> previous`: sets the pageable limit (the most
    /// frames user memory may hold, at least [`paging::LIMIT_MIN`], at most what the
    /// machine has; the boot parameter `pageable=` sets it at boot) and returns the one it
    /// replaces. Needs the host-privilege right. Lowering it below what user memory holds
    /// makes the next faults reclaim.
    PagingLimit = 183,
    /// `memobj_create(size) -> name`: a new anonymous memory object of `size` bytes (page
    /// multiple, at most [`memobj::SIZE_MAX`]), zero-filled at first touch, named by a
    /// send right to its kernel-object port ([`memobj`], `docs/vm.md`). Its frames are
    /// charged to the caller now ([`Error::NoMemory`] at its limit).
    MemobjCreate = 110,
    /// `vm_map(name, addr, len, offset, flags) -> addr`: maps the window `[offset, offset +
    /// len)` of the memory object `name` at `addr` (page aligned, nothing there) or, with
    /// [`vm::VM_ANYWHERE`], wherever there is room; `flags` packs protection, maximum
    /// protection, copy-on-write and inheritance ([`memobj::map_flags`]). The right's own
    /// maximum protection bounds both ([`Error::Denied`]).
    VmMap = 111,
    /// `memobj_restrict(name, max_prot) -> name`: a send right to a new port for the same
    /// object whose mappings may never exceed `max_prot` (and the right's own).
    MemobjRestrict = 112,
    /// `memobj_physical(base, size, flags, host_priv) -> name`: an object over the physical
    /// range `[base, base + size)` (device registers; [`memobj::PHYS_UNCACHED`]), never
    /// RAM the kernel owns ([`Error::Denied`]); needs the host-privilege right.
    MemobjPhysical = 113,
    /// `memobj_dma(size, host_priv) -> name`: an object of `size` bytes of physically
    /// contiguous, zeroed frames (a DMA buffer: [`Sys::MemobjInfo`] gives its physical
    /// address); needs the host-privilege right.
    MemobjDma = 114,
    /// `memobj_info(name, *mut MemobjInfo) -> 0`: what the object is ([`memobj::MemobjInfo`]).
    MemobjInfo = 115,
    /// `vm_read(task, addr, buf, len) -> len`: copies `len` bytes (at most
    /// [`memobj::RW_MAX`]) of the memory of the task whose task port `task` names into the
    /// caller's `buf`, resolving faults as the task's own access would.
    VmRead = 116,
    /// `vm_write(task, addr, buf, len) -> len`: the other way: into the task's memory,
    /// which must be writable by the task.
    VmWrite = 117,
    /// `wait_shared(addr, expected, timeout_ns)`: [`Sys::Wait`] keyed by the (memory
    /// object, offset) that `addr` maps, so that tasks mapping one object wait and wake
    /// each other wherever each maps it.
    WaitShared = 118,
    /// `wake_shared(addr, n) -> woken`: wakes up to `n` threads waiting with
    /// [`Sys::WaitShared`] on the same (object, offset).
    WakeShared = 119,
    /// `task_create(heap_limit, frame_limit) -> task port`: a new empty task (no memory,
    /// no thread), limited and charged as [`Sys::Spawn`]'s tasks are; the caller gets a
    /// send right to its task port, through which the next three calls make it run
    /// (Accent's process creation, `docs/vm.md`).
    TaskCreate = 120,
    /// `task_map_program(task, kind, ptr, len, name_ptr, name_len) -> entry`: maps a program
    /// into the new task `task` (a task port), copy-on-write from its source, with its
    /// initial stack; the program's entry point. `kind` [`task::PROGRAM_MODULE`]: the boot
    /// module named by the `len` bytes at `ptr`; [`task::PROGRAM_OBJECT`]: the program file
    /// the caller maps, shared, at `[ptr, ptr + len)` (one memory object, a file of the
    /// file server), the task named by the `name_len` bytes at `name_ptr`.
    TaskMapProgram = 121,
    /// `task_init_thread(task, entry, stack_top) -> thread id`: the new task's first
    /// thread, which runs only once [`Sys::TaskStart`] starts the task (0: the program's
    /// entry, the initial stack's top).
    TaskInitThread = 122,
    /// `task_start(task, bootstrap, start) -> 0`: starts the new task's first thread, with
    /// a bootstrap right and a start message as [`Sys::Spawn`] gives them.
    TaskStart = 123,
    /// `task_fork(heap_limit, frame_limit) -> task port | 0`: a new task whose address
    /// space is a copy-on-write copy of the caller's by inheritance, with one thread
    /// continuing from the call: the caller gets a send right to the child's task port,
    /// the child's thread 0.
    TaskFork = 124,
    /// `vp_create(*const VpConfig) -> vp`: makes the calling thread the carrier of a new
    /// virtual processor of its task, entered through upcalls as [`vproc`] describes.
    /// [`Error::BadAddress`] for an entry, stack or mailbox that is not user memory (the
    /// upcall stack's top page and the mailbox must be mapped writable),
    /// [`Error::InvalidArgument`] for a stack smaller than [`vproc::UPCALL_STACK_MIN`] or
    /// misaligned words, [`Error::Busy`] when the thread carries one already or belongs to
    /// one, [`Error::NoSpace`] past [`vproc::VPS_PER_TASK_MAX`], [`Error::NoMemory`].
    VpCreate = 130,
    /// `vp_spares(vp, n) -> n`: gives the virtual processor `n` (at most
    /// [`vproc::SPARES_MAX`]) spare kernel threads, made or ended as needed (charged as
    /// threads of the task); fewer only when more are in use.
    VpSpares = 131,
    /// `vp_wait(addr, expected, timeout_ns) -> 0`: by the carrier, when its runtime is
    /// idle: as `wait`, but a queued Unblock event is delivered at once as an upcall (the
    /// call's context is then in the event's `stopped`, returning 0), and so is one that
    /// completes while it waits.
    VpWait = 132,
    /// `vp_take(buf, max) -> count`: moves up to `max` (at most [`vproc::TAKE_MAX`]) queued
    /// Unblock events of the calling thread's virtual processor into `buf` as
    /// [`vproc::VpEvent`]s.
    VpTake = 133,
    /// `vp_destroy(vp) -> 0`: ends the virtual processor: its spares end, and threads
    /// blocked with an upcall given end when they would resume. Also when its carrier ends.
    VpDestroy = 134,
    /// `spinvm_query(addr) -> state`: SPIN's `Translation.ExamineMapping` and `Dirty` from
    /// user space: the state of the caller's page at `addr` ([`translation`]`::STATE_*`);
    /// 0 when no range covers it.
    SpinvmQuery = 150,
    /// `spinvm_mark() -> tsc`: the time-stamp counter a `Translation` handler of the
    /// caller's task last recorded with `baton.clock.mark` (0 if none since the last
    /// call), then cleared: how the Appel–Li `trap` row times a handler's start.
    SpinvmMark = 151,
    /// `dma_quarantine_release(host_priv) -> pages`: the caller (with the host-privilege
    /// right) declares that every device a dead task drove has been reset, so that no DMA
    /// of it can land any more: the DMA buffers of ended tasks that the kernel held back
    /// (quarantined: their frames are not reused) are released. The number of pages freed.
    /// `docs/drivers.md`.
    DmaQuarantineRelease = 170,
    /// `dma_quarantined(host_priv) -> pages`: how many pages of DMA buffers of ended tasks
    /// are quarantined now.
    DmaQuarantined = 171,
    /// `halted_ticks(host_priv) -> ticks`: TSC ticks all CPUs together have spent halted
    /// in the idle loop since boot. Under `-icount` a benchmark window's TSC delta minus
    /// this counter's delta is the instructions executed, the time QEMU skipped while
    /// waiting for a device left out (`docs/benchmarks.md`).
    HaltedTicks = 172,
    /// `msi_attach(port, host_priv) -> name`: binds a free message-signalled interrupt
    /// vector to `port` as [`Sys::IrqAttach`] binds an ISA line (one notification
    /// outstanding until [`Sys::IrqAck`], which takes the returned interrupt object's
    /// name); the driver programs [`Sys::MsiMessage`]'s address and data into its device.
    /// [`Error::NoSpace`] when all 8 are bound; needs the host-privilege right.
    MsiAttach = 173,
    /// `msi_message(name) -> address | data << 32`: what the device must write to raise
    /// the MSI line of the interrupt object `name`.
    MsiMessage = 174,
    /// `vp_preempt(vp, quantum_ns) -> 0`: turns on Checkpoint upcalls for the virtual
    /// processor (Sting's preemption of user-level threads): when the kernel preempts its
    /// carrier while a user-level thread runs (a higher-priority wake-up, the end of a
    /// time slice), or the thread has run `quantum_ns` since the last upcall or
    /// [`Sys::VpResume`], the carrier re-enters the runtime with a [`vproc::VP_CHECKPOINT`]
    /// event carrying every register of the preempted thread. 0 turns them off.
    /// [`Error::NotFound`] for no virtual processor of the task with that id,
    /// [`Error::InvalidArgument`] for a quantum under [`vproc::QUANTUM_MIN_NS`].
    VpPreempt = 160,
    /// `vp_resume(*const UserRegs) -> !`: by a carrier: continues at the given user
    /// registers, every one restored (`rcx`, `r11` and the arithmetic flags too), as
    /// Sting's Resume: how a runtime runs again a thread a Checkpoint gave it, with no
    /// kernel thread of its own. [`Error::BadAddress`] for a block that cannot be read or a
    /// `rip`/`rsp` outside user space, [`Error::InvalidArgument`] when the caller carries no
    /// virtual processor, [`Error::Denied`] when a `Strand.Resume` handler vetoed it.
    VpResume = 161,
    /// `strand_count(event) -> count`: how many times handlers installed by the calling
    /// task on `Strand` event `event` ([`spin::EVENT_STRAND_BLOCK`] and the three after
    /// it) have run, and in bits 32.. how many times they vetoed.
    /// [`Error::NotFound`] for another event.
    StrandCount = 162,
    /// `spin_async(which) -> count`: the calling task's asynchronous handlers, as their
    /// installer: how many raises of them are waiting to run
    /// ([`spin::ASYNC_PENDING`]), have run ([`spin::ASYNC_RAN`]), or were dropped because
    /// [`spin::ASYNC_PENDING_MAX`] were already waiting or no memory could be charged
    /// ([`spin::ASYNC_DROPPED`]). [`Error::InvalidArgument`] for another `which`.
    SpinAsync = 210,
    /// `pager_lock(name, offset, len, prot) -> bytes`: the pager of a pager-backed object
    /// (named by a memory-object right) restricts access to the pages of
    /// `[offset, offset + len)` to `prot` ([`vm::PROT_READ`], [`vm::PROT_WRITE`],
    /// [`vm::PROT_EXECUTE`] bits; all three is unlocked). Every translation allowing more is
    /// taken away; an access the lock forbids is sent to the pager as a
    /// [`pager::DATA_UNLOCK`] request, and the access waits until a `pager_lock` allows it
    /// (or the pager fails the page or dies). At most [`pager::FLUSH_MAX_PAGES`] pages a
    /// call; returns the bytes of the range done (Mach's lock request).
    PagerLock = 240,
    /// `spin_reclaim(which) -> count`: what the calling task's `PhysAddr.Reclaim`
    /// handlers did, as their installer: how often page replacement asked them about one
    /// of its pages ([`translation::RECLAIM_ASKED`]), how many of their nominations were
    /// taken instead of the clock's choice ([`translation::RECLAIM_TAKEN`]) and how many
    /// were ignored, the clock's choice standing ([`translation::RECLAIM_IGNORED`]).
    /// [`Error::InvalidArgument`] for another `which`.
    SpinReclaim = 250,
    /// `vp_interrupt(vp) -> 0`: asks for a Checkpoint upcall (as [`Sys::VpPreempt`]'s, but
    /// at once, whatever the quantum, even with Checkpoints off) on the task's virtual
    /// processor `vp` the next time its carrier is stopped in user mode running a
    /// user-level thread: an inter-processor interrupt stops it now when it runs on
    /// another CPU, else it is stopped at its next timer tick. How a runtime interrupts a
    /// thread running on another of its processors (Sting's immediate signal).
    /// [`Error::NotFound`] for no virtual processor of the task with that id.
    VpInterrupt = 260,
    /// `paging_exempt(task, host_priv)`: the task whose task port is `task` is on the path
    /// that frees memory (a file server and its disk driver, which take back the pages
    /// page replacement returns), as the default pager is: its pages are never taken by
    /// page replacement, and it may use the frames kept in reserve below the pageable
    /// limit. Needs the host-privilege right. [`Error::NoSpace`] when
    /// [`paging::EXEMPT_MAX`] live tasks are exempt already.
    PagingExempt = 230,
    /// `spin_tier(which) -> count`: how many WebAssembly handler invocations, since boot,
    /// the register-form tier ran ([`spin::TIER_FAST`]) and how many `wasmi` ran
    /// ([`spin::TIER_WASMI`]) (`docs/extensions.md`, "The register-form tier").
    /// [`Error::InvalidArgument`] for another `which`.
    SpinTier = 290,
}

/// Task creation ([`Sys::TaskCreate`] and the calls after it).
pub mod task {
    /// [`super::Sys::TaskMapProgram`]'s source: a boot module, by name.
    pub const PROGRAM_MODULE: u64 = 0;
    /// [`super::Sys::TaskMapProgram`]'s source: a program file in a memory object, named by
    /// the caller's shared mapping of it.
    pub const PROGRAM_OBJECT: u64 = 1;
}

/// Most I/O-ports objects that exist at once ([`Sys::IoPortCreate`]).
pub const IO_OBJECTS_MAX: usize = 16;

/// [`Sys::ModuleInfo`]'s result for a test program.
pub const MODULE_TEST: u64 = 1;

/// Most activations one task may have ([`Sys::ActCreate`]).
pub const ACTIVATIONS_PER_TASK_MAX: usize = 256;

pub mod exception;
pub mod floor;
pub mod host;
pub mod ipc;
pub mod kobject;
pub mod memobj;
pub mod pager;
pub mod paging;
pub mod spin;
pub mod start;
pub mod translation;
pub mod vm;
pub mod vproc;

/// `set_affinity` value: the thread may run on any CPU (the default).
pub const CPU_ANY: u64 = u64::MAX;

/// `mem_map` flag: the pages are writable.
pub const MAP_WRITABLE: u64 = 1;
/// Largest `mem_map` in one call.
pub const MEM_MAP_MAX: u64 = 1 << 30;

/// Timeout meaning "no timeout".
pub const FOREVER: u64 = u64::MAX;
/// Highest thread priority.
pub const PRIORITY_MAX: u64 = 63;
/// Priority of new threads.
pub const PRIORITY_DEFAULT: u64 = 32;

/// What `debug_block_process_model(ns, seed)` returns: proves the kernel stack frame that
/// computed it survived the block.
/// The value has bit 63 clear, so it can never be mistaken for an error result.
pub const fn process_model_check(seed: u64) -> u64 {
    (seed.rotate_left(17) ^ 0x5a5a_0f0f_c3c3_9696) & (i64::MAX as u64)
}

/// The kernel's always-on counters, as `stats` writes them (all `u64`).
///
/// The block reasons, discards, handoffs and recognitions reproduce Tables 1 and 2 of the
/// continuations paper; the stack and byte counts, Table 5.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Number of CPUs running.
    pub cpus: u64,
    /// Threads that exist now.
    pub threads: u64,
    /// Threads created since boot.
    pub threads_created: u64,
    /// Blocks by reason (all with a continuation except `blocks_process_model`).
    pub blocks_yield: u64,
    /// Preemptions by the timer.
    pub blocks_preempt: u64,
    /// `sleep`.
    pub blocks_sleep: u64,
    /// `wait`.
    pub blocks_wait: u64,
    /// Kernel-internal threads waiting for work.
    pub blocks_internal: u64,
    /// Blocks that kept their kernel stack (the process model).
    pub blocks_process_model: u64,
    /// Kernel stacks given back to the pool when their thread blocked with a continuation.
    pub stack_discards: u64,
    /// Kernel stacks handed directly from the blocking thread to the next one.
    pub stack_handoffs: u64,
    /// Continuations examined and short-circuited by the blocker (recognition).
    pub recognitions: u64,
    /// Full context switches (`switch_context` between two stacks).
    pub context_switches: u64,
    /// Kernel stacks ever allocated (created, not reused from the pool).
    pub stacks_allocated: u64,
    /// Kernel stacks attached to threads now.
    pub stacks_in_use: u64,
    /// Most kernel stacks ever attached at once.
    pub stacks_max: u64,
    /// Time-weighted mean of `stacks_in_use` since boot, times 1000.
    pub stacks_mean_milli: u64,
    /// Size of one kernel stack in bytes.
    pub stack_bytes: u64,
    /// Kernel bytes of one thread object (without a stack).
    pub thread_bytes: u64,
    /// Kernel heap bytes in use now: the sum of the sizes asked for of the live blocks
    /// (not the bytes the heap took from its region: size-class rounding, cached chunks
    /// and the allocator's own overhead are left out, so the figure returns to the same
    /// value when what a task made is gone).
    pub heap_used: u64,
    /// CPUs asked to flush their TLB by `mem_unmap` (shootdown IPIs sent).
    pub tlb_shootdowns: u64,
    /// Blocks in `ipc_msg` (receiving, or sending to a full queue).
    pub blocks_ipc: u64,
    /// Messages delivered by the fast path: straight into a waiting receiver's buffer,
    /// its receive finished by the sender (recognition), no queue.
    pub ipc_fast: u64,
    /// Messages that took the slow path through a port's queue.
    pub ipc_queued: u64,
    /// Ports that exist now.
    pub ports: u64,
    /// Messages queued on all ports now.
    pub messages_queued: u64,
    /// Rights (names) held by all tasks now.
    pub names: u64,
    /// Migrating RPCs made (calls that ran in a server activation, seed 001).
    pub migrations: u64,
    /// Activations that exist (free, occupied, or retired and still occupied).
    pub activations: u64,
    /// Legs of exception RPCs taken by the fast path (seed 000 section 2.5): a raise
    /// handed straight to a waiting handler, or a handler's reply that resumed the faulting
    /// thread at once. Each is also counted in `ipc_fast` (and as a recognition, an IPC
    /// block and a stack handoff).
    pub exc_fast: u64,
    /// Kernel heap bytes charged to tasks now, all accounts together (the root account's
    /// use: see "Kernel memory" in `docs/architecture.md`).
    pub kmem_charged: u64,
    /// The most kernel heap bytes tasks may be charged together (the root account's limit).
    pub kmem_limit: u64,
    /// Frames charged to tasks now (their memory, page tables, and the kernel stacks kept
    /// by their threads blocked in the process model).
    pub frames_charged: u64,
    /// The most frames tasks may be charged together.
    pub frames_limit: u64,
    /// Threads that have a floating-point save area now (those that used a floating-point
    /// or vector register; the others have none).
    pub fpu_states: u64,
    /// Floating-point save areas made since boot (each at a thread's first use of the
    /// registers).
    pub fpu_first_uses: u64,
}

/// Number of `u64` fields in [`Stats`].
pub const STATS_WORDS: usize = core::mem::size_of::<Stats>() / 8;

impl Stats {
    /// The field names, in declaration order (the order of [`Stats::to_words`]).
    pub const FIELD_NAMES: [&'static str; STATS_WORDS] = [
        "cpus",
        "threads",
        "threads_created",
        "blocks_yield",
        "blocks_preempt",
        "blocks_sleep",
        "blocks_wait",
        "blocks_internal",
        "blocks_process_model",
        "stack_discards",
        "stack_handoffs",
        "recognitions",
        "context_switches",
        "stacks_allocated",
        "stacks_in_use",
        "stacks_max",
        "stacks_mean_milli",
        "stack_bytes",
        "thread_bytes",
        "heap_used",
        "tlb_shootdowns",
        "blocks_ipc",
        "ipc_fast",
        "ipc_queued",
        "ports",
        "messages_queued",
        "names",
        "migrations",
        "activations",
        "exc_fast",
        "kmem_charged",
        "kmem_limit",
        "frames_charged",
        "frames_limit",
        "fpu_states",
        "fpu_first_uses",
    ];

    /// The fields as words, in declaration order: the layout `stats` writes.
    pub const fn to_words(&self) -> [u64; STATS_WORDS] {
        [
            self.cpus,
            self.threads,
            self.threads_created,
            self.blocks_yield,
            self.blocks_preempt,
            self.blocks_sleep,
            self.blocks_wait,
            self.blocks_internal,
            self.blocks_process_model,
            self.stack_discards,
            self.stack_handoffs,
            self.recognitions,
            self.context_switches,
            self.stacks_allocated,
            self.stacks_in_use,
            self.stacks_max,
            self.stacks_mean_milli,
            self.stack_bytes,
            self.thread_bytes,
            self.heap_used,
            self.tlb_shootdowns,
            self.blocks_ipc,
            self.ipc_fast,
            self.ipc_queued,
            self.ports,
            self.messages_queued,
            self.names,
            self.migrations,
            self.activations,
            self.exc_fast,
            self.kmem_charged,
            self.kmem_limit,
            self.frames_charged,
            self.frames_limit,
            self.fpu_states,
            self.fpu_first_uses,
        ]
    }
}

impl Sys {
    /// Decodes a raw system-call number.
    pub const fn from_raw(n: u64) -> Option<Sys> {
        Some(match n {
            0 => Sys::DebugWrite,
            1 => Sys::Yield,
            2 => Sys::Exit,
            3 => Sys::Clock,
            4 => Sys::Spawn,
            5 => Sys::ModuleInfo,
            6 => Sys::ThreadCreate,
            7 => Sys::ThreadExit,
            8 => Sys::Wait,
            9 => Sys::Wake,
            10 => Sys::Sleep,
            11 => Sys::Stats,
            12 => Sys::SetPriority,
            13 => Sys::DebugBlockProcessModel,
            14 => Sys::Null,
            15 => Sys::MemMap,
            16 => Sys::MemUnmap,
            17 => Sys::SetAffinity,
            18 => Sys::IpcMsg,
            19 => Sys::IpcBufferSet,
            20 => Sys::PortAllocate,
            21 => Sys::PortMakeSend,
            22 => Sys::CapDrop,
            23 => Sys::CapInfo,
            24 => Sys::PortNotify,
            25 => Sys::PortSetLimit,
            26 => Sys::ExceptionPortSet,
            27 => Sys::TaskSelf,
            28 => Sys::TaskPort,
            29 => Sys::ThreadPort,
            40 => Sys::ActCreate,
            41 => Sys::ActReturn,
            42 => Sys::PortSidetrack,
            43 => Sys::ThreadCpuNs,
            44 => Sys::ActAlert,
            45 => Sys::AlertTest,
            46 => Sys::AlertEnable,
            47 => Sys::ActSuspend,
            48 => Sys::ActGetState,
            49 => Sys::ActSetState,
            50 => Sys::ActSchedLock,
            51 => Sys::ActPort,
            70 => Sys::VmAllocate,
            71 => Sys::VmDeallocate,
            72 => Sys::VmProtect,
            73 => Sys::VmInherit,
            74 => Sys::VmQuery,
            75 => Sys::VmWire,
            76 => Sys::VmUnwire,
            77 => Sys::VmStats,
            78 => Sys::VmCopy,
            80 => Sys::IrqAttach,
            81 => Sys::IrqAck,
            82 => Sys::IoPortCreate,
            83 => Sys::IoIn,
            84 => Sys::IoOut,
            85 => Sys::HostTasks,
            86 => Sys::HostThreads,
            87 => Sys::HostNames,
            88 => Sys::HostTaskPort,
            89 => Sys::HostShutdown,
            90 => Sys::HostTrace,
            91 => Sys::HostVm,
            100 => Sys::SpinImport,
            101 => Sys::SpinCreate,
            102 => Sys::SpinResolve,
            103 => Sys::SpinCombine,
            104 => Sys::SpinInstall,
            105 => Sys::SpinRemove,
            106 => Sys::SpinRelease,
            107 => Sys::SpinRaise,
            140 => Sys::MemobjPager,
            141 => Sys::PagerSupply,
            142 => Sys::PagerUnavailable,
            143 => Sys::PagerError,
            144 => Sys::PagerFlush,
            180 => Sys::DefaultPagerRegister,
            181 => Sys::DefaultPagerSupply,
            182 => Sys::PagingStats,
            183 => Sys::PagingLimit,
            110 => Sys::MemobjCreate,
            111 => Sys::VmMap,
            112 => Sys::MemobjRestrict,
            113 => Sys::MemobjPhysical,
            114 => Sys::MemobjDma,
            115 => Sys::MemobjInfo,
            116 => Sys::VmRead,
            117 => Sys::VmWrite,
            118 => Sys::WaitShared,
            119 => Sys::WakeShared,
            120 => Sys::TaskCreate,
            121 => Sys::TaskMapProgram,
            122 => Sys::TaskInitThread,
            123 => Sys::TaskStart,
            124 => Sys::TaskFork,
            130 => Sys::VpCreate,
            131 => Sys::VpSpares,
            132 => Sys::VpWait,
            133 => Sys::VpTake,
            134 => Sys::VpDestroy,
            150 => Sys::SpinvmQuery,
            151 => Sys::SpinvmMark,
            170 => Sys::DmaQuarantineRelease,
            171 => Sys::DmaQuarantined,
            172 => Sys::HaltedTicks,
            173 => Sys::MsiAttach,
            174 => Sys::MsiMessage,
            160 => Sys::VpPreempt,
            161 => Sys::VpResume,
            162 => Sys::StrandCount,
            260 => Sys::VpInterrupt,
            210 => Sys::SpinAsync,
            240 => Sys::PagerLock,
            250 => Sys::SpinReclaim,
            230 => Sys::PagingExempt,
            290 => Sys::SpinTier,
            _ => return None,
        })
    }
}

/// Error codes returned (negated) in `rax`.
#[repr(i64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// A user address was not mapped with the access the call needs, or was not a user
    /// address at all (kernel half, non-canonical, wrapping).
    BadAddress = 1,
    /// An argument was out of range or malformed.
    InvalidArgument = 2,
    /// The named thing does not exist.
    NotFound = 3,
    /// The kernel ran out of memory or of a bounded resource.
    NoMemory = 4,
    /// A buffer or count was larger than the call allows.
    TooLarge = 5,
    /// The object exists but cannot be used this way (e.g. a boot module that is not a
    /// valid ELF executable).
    BadFormat = 6,
    /// `wait` found a value other than the expected one.
    WouldBlock = 7,
    /// A timeout expired first.
    TimedOut = 8,
    /// The name does not denote a right in the caller's name space (never did, or was
    /// released).
    InvalidName = 9,
    /// The name denotes a right of the wrong kind for the operation (e.g. sending on a
    /// receive right, receiving on a send right).
    InvalidRight = 10,
    /// The name is a dead name: its port was destroyed.
    DeadName = 11,
    /// The name space (or another per-task table) is full.
    NoSpace = 12,
    /// The operation is defined but not implemented yet (e.g. out-of-line memory).
    NotSupported = 13,
    /// The operation was cut short by another kernel entry (a floor cross-address-space
    /// call left by an interrupt, a fault or another system call in the partner).
    Interrupted = 14,
    /// The call was cut short: the server it migrated into ended (or its activation was
    /// destroyed) before it replied.
    Aborted = 15,
    /// The caller lacks the authority the call needs: an activation below the caller's on
    /// its thread forbade changing the thread's scheduling state ([`Sys::ActSchedLock`]),
    /// a debugging or benchmark call was made without the host-privilege right
    /// ([`kobject`]), or a floor cross-address-space call named a partner that did not
    /// authorise the caller ([`floor`]).
    Denied = 16,
    /// The resource is taken: an interrupt line bound already.
    Busy = 17,
}

impl Error {
    /// Decodes a positive error code.
    pub const fn from_code(code: i64) -> Option<Error> {
        Some(match code {
            1 => Error::BadAddress,
            2 => Error::InvalidArgument,
            3 => Error::NotFound,
            4 => Error::NoMemory,
            5 => Error::TooLarge,
            6 => Error::BadFormat,
            7 => Error::WouldBlock,
            8 => Error::TimedOut,
            9 => Error::InvalidName,
            10 => Error::InvalidRight,
            11 => Error::DeadName,
            12 => Error::NoSpace,
            13 => Error::NotSupported,
            14 => Error::Interrupted,
            15 => Error::Aborted,
            16 => Error::Denied,
            17 => Error::Busy,
            _ => return None,
        })
    }

    /// The value the kernel places in `rax` for this error.
    pub const fn to_raw(self) -> u64 {
        (-(self as i64)) as u64
    }

    /// A short lower-case name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            Error::BadAddress => "bad address",
            Error::InvalidArgument => "invalid argument",
            Error::NotFound => "not found",
            Error::NoMemory => "out of memory",
            Error::TooLarge => "too large",
            Error::BadFormat => "bad format",
            Error::WouldBlock => "would block",
            Error::TimedOut => "timed out",
            Error::InvalidName => "invalid name",
            Error::InvalidRight => "invalid right",
            Error::DeadName => "dead name",
            Error::NoSpace => "no space",
            Error::NotSupported => "not supported",
            Error::Interrupted => "interrupted",
            Error::Aborted => "aborted",
            Error::Denied => "denied",
            Error::Busy => "busy",
        }
    }
}

/// Turns a raw `rax` result into a `Result`. An unknown negative code (which the kernel never
/// returns) decodes as [`Error::InvalidArgument`].
pub const fn decode_result(raw: u64) -> Result<u64, Error> {
    let v = raw as i64;
    if v >= 0 {
        Ok(raw)
    } else {
        match Error::from_code(-v) {
            Some(e) => Err(e),
            None => Err(Error::InvalidArgument),
        }
    }
}

/// Largest number of bytes one `debug_write` accepts.
pub const DEBUG_WRITE_MAX: u64 = 4096;

/// Longest boot-module name, in bytes.
pub const MODULE_NAME_MAX: usize = 56;

/// What `module_info` writes to user memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Size of the module in bytes.
    pub size: u64,
    /// Number of valid bytes in `name`.
    pub name_len: u64,
    /// The module's name (UTF-8, not NUL-terminated).
    pub name: [u8; MODULE_NAME_MAX],
}

impl ModuleInfo {
    /// An empty record, for user space to pass in.
    pub const fn empty() -> ModuleInfo {
        ModuleInfo {
            size: 0,
            name_len: 0,
            name: [0; MODULE_NAME_MAX],
        }
    }

    /// The name as a string (empty if the kernel wrote invalid UTF-8, which it does not).
    pub fn name(&self) -> &str {
        let len = (self.name_len as usize).min(MODULE_NAME_MAX);
        match self.name.get(..len) {
            Some(bytes) => core::str::from_utf8(bytes).unwrap_or(""),
            None => "",
        }
    }
}

/// User virtual address space layout.
pub mod layout {
    /// Lowest address a user mapping may use (page 0 stays unmapped so null faults).
    pub const USER_MIN: u64 = 0x1000;
    /// One past the highest user address (the top of the lower canonical half, less a guard
    /// page so that `sysret` never returns to a non-canonical address).
    pub const USER_END: u64 = 0x0000_7fff_ffff_f000;
    /// Top of the initial thread's user stack.
    pub const USER_STACK_TOP: u64 = 0x0000_7fff_fff0_0000;
    /// Size of the initial thread's user stack.
    pub const USER_STACK_SIZE: u64 = 64 * 1024;
    /// Start of the range `baton-rt`'s heap maps its pages in (48 TiB), growing upward
    /// on demand with `mem_map`. The kernel gives it no special meaning: it is a
    /// convention of the runtime, so that programs map their own pages elsewhere.
    pub const USER_HEAP_BASE: u64 = 0x0000_3000_0000_0000;
    /// Size of the heap's range (64 GiB): the most the runtime's heap ever maps.
    pub const USER_HEAP_MAX: u64 = 64 << 30;

    // The heap's range lies in user space, page aligned, below the initial stack.
    const _: () =
        assert!(USER_HEAP_BASE.is_multiple_of(4096) && USER_HEAP_MAX.is_multiple_of(4096));
    const _: () = assert!(USER_HEAP_BASE >= USER_MIN);
    const _: () = assert!(USER_HEAP_BASE + USER_HEAP_MAX <= USER_STACK_TOP - USER_STACK_SIZE);
}

#[cfg(test)]
mod pinned;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip() {
        assert_eq!(decode_result(5), Ok(5));
        for e in [
            Error::BadAddress,
            Error::InvalidArgument,
            Error::NotFound,
            Error::NoMemory,
            Error::TooLarge,
            Error::BadFormat,
            Error::WouldBlock,
            Error::TimedOut,
            Error::InvalidName,
            Error::InvalidRight,
            Error::DeadName,
            Error::NoSpace,
            Error::NotSupported,
            Error::Interrupted,
            Error::Aborted,
            Error::Denied,
            Error::Busy,
        ] {
            assert_eq!(decode_result(e.to_raw()), Err(e));
            assert_eq!(Error::from_code(e as i64), Some(e));
        }
        assert_eq!(decode_result((-999i64) as u64), Err(Error::InvalidArgument));
    }

    #[test]
    fn stats_words_follow_the_layout() {
        // Each field gets a distinct value; `to_words` must match the repr(C) order,
        // which is the order of the fields in memory.
        let s = Stats {
            cpus: 1,
            threads: 2,
            threads_created: 3,
            blocks_yield: 4,
            blocks_preempt: 5,
            blocks_sleep: 6,
            blocks_wait: 7,
            blocks_internal: 8,
            blocks_process_model: 9,
            stack_discards: 10,
            stack_handoffs: 11,
            recognitions: 12,
            context_switches: 13,
            stacks_allocated: 14,
            stacks_in_use: 15,
            stacks_max: 16,
            stacks_mean_milli: 17,
            stack_bytes: 18,
            thread_bytes: 19,
            heap_used: 20,
            tlb_shootdowns: 21,
            blocks_ipc: 22,
            ipc_fast: 23,
            ipc_queued: 24,
            ports: 25,
            messages_queued: 26,
            names: 27,
            migrations: 28,
            activations: 29,
            exc_fast: 30,
            kmem_charged: 31,
            kmem_limit: 32,
            frames_charged: 33,
            frames_limit: 34,
            fpu_states: 35,
            fpu_first_uses: 36,
        };
        let words = s.to_words();
        for (i, w) in words.iter().enumerate() {
            assert_eq!(*w, i as u64 + 1);
        }
        assert_eq!(Stats::FIELD_NAMES.len(), STATS_WORDS);
        assert_eq!(
            core::mem::offset_of!(Stats, fpu_first_uses),
            8 * (STATS_WORDS - 1)
        );
    }

    #[test]
    fn syscall_numbers_decode() {
        for n in 0..30 {
            assert_eq!(Sys::from_raw(n).map(|s| s as u64), Some(n));
        }
        assert_eq!(Sys::from_raw(30), None);
        for n in 40..52 {
            assert_eq!(Sys::from_raw(n).map(|s| s as u64), Some(n));
        }
        assert_eq!(Sys::from_raw(52), None);
        assert_eq!(Sys::from_raw(78), Some(Sys::VmCopy));
        assert_eq!(Sys::VmCopy as u64, 78);
        assert_eq!(Sys::from_raw(79), None);
        for n in 80..92 {
            assert_eq!(Sys::from_raw(n).map(|s| s as u64), Some(n));
        }
        assert_eq!(Sys::from_raw(92), None);
        assert_eq!(Sys::from_raw(69), None);
        for n in 70..79 {
            assert_eq!(Sys::from_raw(n).map(|s| s as u64), Some(n));
        }
        assert_eq!(Sys::from_raw(129), None);
        for n in 130..135 {
            assert_eq!(Sys::from_raw(n).map(|s| s as u64), Some(n));
        }
        assert_eq!(Sys::from_raw(135), None);
        assert_eq!(Sys::from_raw(u64::MAX), None);
    }
}
