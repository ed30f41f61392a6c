//! `greet_server`: the server of the example in `docs/programs.md`. Started by the boot
//! command line after the name server (`init=names,greet_server,greet_client`), its
//! bootstrap right is a send right to the name service: it registers its port as `"greet"`
//! and serves the `Greet` interface there until no one can call any more.
#![no_std]
#![no_main]

#[path = "../greet_idl.rs"]
mod greet_idl;

use baton_rt::idl_rt::{Dispatched, SendRight};
use baton_rt::ipc::{cap_drop, port_allocate, port_make_send, port_notify, NOTIFY_KIND_NO_SENDERS};
use baton_rt::names::NamesClient;
use baton_rt::rpc::{serve, Notification, Rpc, Service, HANDLED};
use baton_rt::{println, start::bootstrap, Error};
use greet_idl::{greet_dispatch, Greet};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("greet_server: {}", e.name());
            1
        }
    }
}

fn run() -> Result<(), Error> {
    // The port clients call, and a send right to it for the name service.
    let mut rpc = Rpc::new()?;
    let port = port_allocate(0)?;
    let send = port_make_send(port, false)?;
    NamesClient::new(&mut rpc, bootstrap()).register("greet", SendRight(send))?;
    // The name service holds its own copy now; and this server needs the name service no
    // more (holding on to it would keep the name server, and so this server, alive).
    cap_drop(send)?;
    cap_drop(bootstrap())?;
    // Told when the last send right is gone (the name server ended): then stop.
    port_notify(port, NOTIFY_KIND_NO_SENDERS, port)?;
    let mut server = Server {
        reply: [0; 128],
        greetings: 0,
        quit: false,
    };
    serve(rpc.ipc(), port, &mut server)
}

/// The server's state.
struct Server {
    /// The last greeting, which the reply borrows.
    reply: [u8; 128],
    greetings: u64,
    quit: bool,
}

impl Greet for Server {
    fn hello(&mut self, name: &[u8]) -> Result<&[u8], Error> {
        let text = [b"Hello, ".as_slice(), name, b"!"];
        let len: usize = text.iter().map(|t| t.len()).sum();
        let out = self.reply.get_mut(..len).ok_or(Error::TooLarge)?;
        let mut at = 0;
        for t in text {
            out[at..at + t.len()].copy_from_slice(t);
            at += t.len();
        }
        self.greetings += 1;
        Ok(out)
    }

    fn count(&mut self) -> Result<u64, Error> {
        Ok(self.greetings)
    }
}

impl Service for Server {
    fn handle(&mut self, request: &[u8], reply: &mut [u8]) -> Result<Dispatched, Error> {
        match Notification::of(request) {
            Some(Notification::NoSenders(_)) => {
                self.quit = true;
                Ok(HANDLED)
            }
            Some(_) => Ok(HANDLED),
            None => greet_dispatch(self, request, reply),
        }
    }

    fn done(&self) -> bool {
        self.quit
    }
}
