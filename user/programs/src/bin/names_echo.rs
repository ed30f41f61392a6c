//! `names_echo`: the server side of the `names_test` test (spawned by it, never started
//! alone). Its bootstrap right is a send right to the name service; it allocates a port,
//! registers a send right to it as `"echo"`, and serves the `Echo` interface there until
//! asked to quit, or until its port has no senders left (so that a failed test still
//! ends: the test exits, then the name server, which releases the registered right).
#![no_std]
#![no_main]

#[path = "../echo_idl.rs"]
mod echo_idl;

use baton_rt::idl_rt::{Dispatched, SendRight};
use baton_rt::ipc::{cap_drop, port_allocate, port_make_send, port_notify, NOTIFY_KIND_NO_SENDERS};
use baton_rt::names::NamesClient;
use baton_rt::rpc::{serve, Notification, Rpc, Service, HANDLED};
use baton_rt::{println, start::bootstrap, Error};
use echo_idl::{echo_dispatch, Echo};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL names_echo: {}", e.name());
            1
        }
    }
}

fn run() -> Result<(), Error> {
    let names = bootstrap();
    let mut rpc = Rpc::new()?;
    let port = port_allocate(0)?;
    let send = port_make_send(port, false)?;
    NamesClient::new(&mut rpc, names).register("echo", SendRight(send))?;
    // The name server holds its own copy now.
    cap_drop(send)?;
    cap_drop(names)?;
    // When no one can call any more (the test ended, the name server forgot us), quit.
    port_notify(port, NOTIFY_KIND_NO_SENDERS, port)?;
    let mut server = EchoServer {
        kept: [0; 1024],
        quit: false,
    };
    serve(rpc.ipc(), port, &mut server)?;
    println!("names_echo: quitting");
    Ok(())
}

/// The server's state.
struct EchoServer {
    /// The last `echo` argument, which the reply borrows.
    kept: [u8; 1024],
    quit: bool,
}

impl Echo for EchoServer {
    fn echo(&mut self, data: &[u8]) -> Result<&[u8], Error> {
        let kept = self.kept.get_mut(..data.len()).ok_or(Error::TooLarge)?;
        kept.copy_from_slice(data);
        Ok(kept)
    }

    fn add(&mut self, a: u64, b: u64) -> Result<u64, Error> {
        a.checked_add(b).ok_or(Error::TooLarge)
    }

    fn quit(&mut self) -> Result<(), Error> {
        self.quit = true;
        Ok(())
    }
}

impl Service for EchoServer {
    fn handle(&mut self, request: &[u8], reply: &mut [u8]) -> Result<Dispatched, Error> {
        match Notification::of(request) {
            Some(Notification::NoSenders(_)) => {
                self.quit = true;
                Ok(HANDLED)
            }
            Some(_) => Ok(HANDLED),
            None => echo_dispatch(self, request, reply),
        }
    }

    fn done(&self) -> bool {
        self.quit
    }
}
