//! `idl_server`: the server of the `Table3` interface (`src/table3_idl.rs`) for the
//! `rpc.*.marshal` benchmarks and the `migrate_idl` test (spawned by them, never alone).
//!
//! The same service ([`Table3Server`], a [`Service`] over the generated
//! `table3_dispatch`) is served one of two ways, as the client's `CONFIG` message says:
//! with 0 activations by the message loop [`baton_rt::rpc::serve`] on the server's own
//! thread (Mach's switching RPC: the client's request hands off to this thread and its
//! reply hands back), otherwise by [`baton_rt::migrate::serve`] with that many activations
//! (seed 001's migrating RPC: the client's thread runs the dispatch here). It ends when a
//! client calls `quit`.
#![no_std]
#![no_main]

#[path = "../table3_idl.rs"]
mod table3_idl;

use baton_rt::idl_rt::{Answered, Dispatched, IPC_BUFFER_SIZE};
use baton_rt::ipc::{port_allocate, IpcBuffer};
use baton_rt::migrate::{self, Shared};
use baton_rt::rpc::{self, Service};
use baton_rt::{println, start::bootstrap, Error};
use table3_idl::{table3_dispatch, table3_dispatch_in_place, table3_dispatch_migrated, Table3};

baton_rt::entry!(main);

/// The migrating server's service: shared by its activations and its own thread.
static SERVER: Shared<Table3Server> = Shared::new(Table3Server::new());

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL idl_server: {}", e.name());
            1
        }
    }
}

fn run() -> Result<(), Error> {
    let boot = bootstrap();
    let mut ipc = IpcBuffer::new()?;
    let port = port_allocate(0)?;
    let activations = table3_idl::hello(&mut ipc, boot, port)?;
    if activations == 0 {
        let mut server = Table3Server::new();
        table3_idl::ready(&mut ipc, boot)?;
        rpc::serve(&mut ipc, port, &mut server)?;
    } else {
        // The activations first, so that every call after READY migrates.
        migrate::attach_service(port, activations as usize, &SERVER)?;
        table3_idl::ready(&mut ipc, boot)?;
        migrate::serve(&mut ipc, port, 0, &SERVER)?;
    }
    println!("idl_server: done ({activations} activations)");
    Ok(())
}

/// The service's state.
struct Table3Server {
    /// `null`, `in32` and `in1k` calls.
    calls: u64,
    /// Calls of any method.
    total: u64,
    /// First and last bytes of the last `in32`/`in1k`.
    ends: (u8, u8),
    quit: bool,
}

impl Table3Server {
    const fn new() -> Table3Server {
        Table3Server {
            calls: 0,
            total: 0,
            ends: (0, 0),
            quit: false,
        }
    }

    fn note(&mut self, data: &[u8]) {
        self.calls += 1;
        self.ends = (
            data.first().copied().unwrap_or(0),
            data.last().copied().unwrap_or(0),
        );
    }
}

impl Table3 for Table3Server {
    fn null(&mut self) -> Result<(), Error> {
        self.calls += 1;
        Ok(())
    }

    fn in32(&mut self, data: [u8; 32]) -> Result<(), Error> {
        self.note(&data);
        Ok(())
    }

    fn in1k(&mut self, data: [u8; 1024]) -> Result<(), Error> {
        self.note(&data);
        Ok(())
    }

    fn last(&mut self) -> Result<(u64, u8, u8), Error> {
        Ok((self.calls, self.ends.0, self.ends.1))
    }

    fn sum(&mut self, data: [u8; 1024]) -> Result<u64, Error> {
        Ok(data.iter().map(|&b| u64::from(b)).sum())
    }

    fn add(&mut self, a: u64, b: u64) -> Result<u64, Error> {
        a.checked_add(b).ok_or(Error::TooLarge)
    }

    fn fail(&mut self, code: u64) -> Result<(), Error> {
        Err(Error::from_code(code as i64).unwrap_or(Error::InvalidArgument))
    }

    fn hold(&mut self, ns: u64) -> Result<u64, Error> {
        let before = self.total.saturating_sub(1);
        baton_rt::sleep_ns(ns)?;
        Ok(before)
    }

    fn quit(&mut self) -> Result<(), Error> {
        self.quit = true;
        Ok(())
    }
}

impl Service for Table3Server {
    fn handle(&mut self, request: &[u8], reply: &mut [u8]) -> Result<Dispatched, Error> {
        self.total += 1;
        table3_dispatch(self, request, reply)
    }

    // Inlined into the loop (and the migrating entry): the generated dispatch's fast path
    // then runs without a call of its own.
    #[inline(always)]
    fn handle_in_place(
        &mut self,
        buf: &mut [u8; IPC_BUFFER_SIZE],
        len: usize,
        scratch: &mut [u8; IPC_BUFFER_SIZE],
    ) -> Result<Answered, Error> {
        self.total += 1;
        table3_dispatch_in_place(self, buf, len, scratch)
    }

    // Inlined into the migrating entry, as `handle_in_place` is into the loop.
    #[inline(always)]
    fn handle_migrated(
        &mut self,
        buf: &mut [u8; IPC_BUFFER_SIZE],
        scratch: &mut [u8; IPC_BUFFER_SIZE],
    ) -> Result<Answered, Error> {
        self.total += 1;
        table3_dispatch_migrated(self, buf, scratch)
    }

    fn done(&self) -> bool {
        self.quit
    }
}
