//! `idle`: sleeps for a minute and exits: something to start in the shell's background
//! (`run idle &`), look at with `ps` and end with `kill`.
#![no_std]
#![no_main]

baton_rt::entry!(main);

fn main(task_id: u64) -> i32 {
    baton_rt::println!("task {task_id} sleeps for a minute");
    match baton_rt::sleep_ns(60_000_000_000) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}
