//! `greet_client`: the client of the example in `docs/programs.md`. Finds the `"greet"`
//! service through the name service (its bootstrap right), greets each of its arguments
//! (or "world"), and prints how many greetings the server has made.
#![no_std]
#![no_main]

#[path = "../greet_idl.rs"]
mod greet_idl;

use baton_rt::names::NamesClient;
use baton_rt::rpc::Rpc;
use baton_rt::{clock_ns, env, println, sleep_ns, start::bootstrap, Error};
use greet_idl::GreetClient;

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("greet_client: {}", e.name());
            1
        }
    }
}

fn run() -> Result<(), Error> {
    let mut rpc = Rpc::new()?;
    // The server registers itself when it starts: wait for it (at most 5 s).
    let deadline = clock_ns() + 5_000_000_000;
    let server = loop {
        match NamesClient::new(&mut rpc, bootstrap()).lookup("greet") {
            Ok(right) => break right.0,
            Err(Error::NotFound) if clock_ns() < deadline => sleep_ns(1_000_000)?,
            Err(e) => return Err(e),
        }
    };
    let mut greet = GreetClient::new(&mut rpc, server);
    let mut names = env::args().skip(1).peekable();
    if names.peek().is_none() {
        println!(
            "{}",
            core::str::from_utf8(greet.hello(b"world")?).unwrap_or("?")
        );
    }
    for name in names {
        println!(
            "{}",
            core::str::from_utf8(greet.hello(name.as_bytes())?).unwrap_or("?")
        );
    }
    println!("the server has made {} greetings", greet.count()?);
    Ok(())
}
