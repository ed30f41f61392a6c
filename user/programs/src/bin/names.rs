//! `names`: the name server (`docs/names.md`). Booted first, as `init=names,<a>,<b>,...`,
//! it gets the receive right of the name service port as its bootstrap right, and every
//! later boot program a send right to it.
//!
//! It serves [`baton_rt::names::Names`] on that port: a table of at most
//! [`ENTRIES_MAX`] names, each with the send right registered under it. It asks for a
//! dead-name notification on every registered right and forgets the entry when its port
//! is destroyed, and for a no-senders notification on its own port: when no task holds a
//! send right to the name service any more, nobody can call it again, and it exits.
//!
//! # Invariants
//! - The server holds exactly one send right (or dead name) per entry, with a dead-name
//!   request to its own port, and no other rights but the service port's receive right.
//! - Nothing a client sends makes it panic: the generated dispatch decodes, the table is
//!   reached only through checked lookups.
#![no_std]
#![no_main]

use baton_rt::idl_rt::{Dispatched, FixedBytes, SendRight};
use baton_rt::ipc::{
    cap_drop, cap_info, port_notify, IpcBuffer, RightKind, NOTIFY_KIND_DEAD_NAME,
    NOTIFY_KIND_NO_SENDERS,
};
use baton_rt::names::{names_dispatch, Names, ALREADY_REGISTERED, ENTRIES_MAX, NAME_MAX};
use baton_rt::rpc::{serve, Notification, Service, HANDLED};
use baton_rt::{println, start::bootstrap, Error};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    let port = bootstrap();
    if port == 0 || cap_info(port) != Ok(RightKind::Receive) {
        println!("names: no service port: boot me first, as init=names,...");
        return 1;
    }
    let run = || -> Result<(), Error> {
        let mut ipc = IpcBuffer::new()?;
        port_notify(port, NOTIFY_KIND_NO_SENDERS, port)?;
        let mut server = NameServer::new(port);
        serve(&mut ipc, port, &mut server)
    };
    match run() {
        Ok(()) => {
            println!("names: no clients left, exiting");
            0
        }
        Err(e) => {
            println!("names: {}", e.name());
            1
        }
    }
}

/// A name.
type Key = FixedBytes<NAME_MAX>;

/// One registered name.
#[derive(Clone, Copy)]
struct Entry {
    name: Key,
    /// The server's send right (a dead name once its port is destroyed).
    right: u64,
}

/// The server's state.
struct NameServer {
    /// The service port's receive right (where notifications arrive).
    port: u64,
    entries: [Option<Entry>; ENTRIES_MAX],
    /// Set by the no-senders notification.
    done: bool,
}

impl NameServer {
    fn new(port: u64) -> NameServer {
        NameServer {
            port,
            entries: [None; ENTRIES_MAX],
            done: false,
        }
    }

    /// The entry slot of `name`, if registered.
    fn find(&mut self, name: &str) -> Result<&mut Option<Entry>, Error> {
        let key = check(name)?;
        self.entries
            .iter_mut()
            .find(|e| e.as_ref().is_some_and(|e| e.name == key))
            .ok_or(Error::NotFound)
    }

    /// Registers `right` under `name`; on error the caller still holds `right`.
    fn insert(&mut self, name: &str, right: u64) -> Result<(), Error> {
        let key = check(name)?;
        match self.find(name) {
            Err(Error::NotFound) => {}
            Ok(_) => return Err(ALREADY_REGISTERED),
            Err(e) => return Err(e),
        }
        let port = self.port;
        let slot = self
            .entries
            .iter_mut()
            .find(|e| e.is_none())
            .ok_or(Error::NoSpace)?;
        // Fails with `DeadName` if the port is already gone.
        port_notify(right, NOTIFY_KIND_DEAD_NAME, port)?;
        *slot = Some(Entry { name: key, right });
        Ok(())
    }

    /// Forgets the entry whose right is the dead name `dead`, and releases the name.
    fn forget_dead(&mut self, dead: u64) {
        for slot in self.entries.iter_mut() {
            if slot.is_some_and(|e| e.right == dead) {
                *slot = None;
                let _ = cap_drop(dead);
            }
        }
    }
}

/// `name` as a table key: [`Error::TooLarge`] beyond [`NAME_MAX`] bytes,
/// [`Error::BadFormat`] if empty.
fn check(name: &str) -> Result<Key, Error> {
    if name.is_empty() {
        return Err(Error::BadFormat);
    }
    Key::from_slice(name.as_bytes())
}

impl Names for NameServer {
    fn register(&mut self, name: &str, port: SendRight) -> Result<(), Error> {
        let r = self.insert(name, port.0);
        if r.is_err() {
            // Delivered to us, so ours to release.
            let _ = cap_drop(port.0);
        }
        r
    }

    fn lookup(&mut self, name: &str) -> Result<SendRight, Error> {
        let slot = self.find(name)?;
        let right = slot.map_or(0, |e| e.right);
        if cap_info(right) != Ok(RightKind::Send) {
            // Its port is gone; the notification may still be on its way.
            *slot = None;
            let _ = cap_drop(right);
            return Err(Error::NotFound);
        }
        Ok(SendRight(right))
    }

    fn unregister(&mut self, name: &str) -> Result<(), Error> {
        let slot = self.find(name)?;
        if let Some(e) = slot.take() {
            // Cancel the dead-name request first: releasing the right does not.
            let _ = port_notify(e.right, NOTIFY_KIND_DEAD_NAME, 0);
            let _ = cap_drop(e.right);
        }
        Ok(())
    }
}

impl Service for NameServer {
    fn handle(&mut self, request: &[u8], reply: &mut [u8]) -> Result<Dispatched, Error> {
        match Notification::of(request) {
            Some(Notification::NoSenders(_)) => {
                self.done = true;
                Ok(HANDLED)
            }
            Some(Notification::DeadName(name)) => {
                self.forget_dead(name);
                Ok(HANDLED)
            }
            Some(Notification::SendOnce | Notification::Interrupt(_)) => Ok(HANDLED),
            // Unknown ids get `NotSupported` from the dispatch.
            None => names_dispatch(self, request, reply),
        }
    }

    fn done(&self) -> bool {
        self.done
    }
}
