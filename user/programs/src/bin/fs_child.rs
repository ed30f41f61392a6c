//! `fs_child`: the program the file tests start from a file (`docs/files.md`).
//!
//! - `fs_child exit N`: says it runs and exits with code `N` (so the test sees that a
//!   program started from `/bin/fs_child` ran its own code and ended as it said);
//! - `fs_child touch`: maps its bootstrap right — a file's memory object, whose server the
//!   test has killed — and reads its first page. The page's pager is dead, so the read is a
//!   pager fault, which ends this task (it has no exception handler): the kernel stays well.
#![no_std]
#![no_main]

use baton_rt::{env, memobj, println};

baton_rt::entry!(main);

fn main(_task_id: u64) -> i32 {
    let mut args = env::args().skip(1);
    match (args.next(), args.next()) {
        (Some("exit"), Some(n)) => {
            let code = n.parse::<i32>().unwrap_or(1);
            println!("fs_child: started from a file, exiting with {code}");
            code
        }
        (Some("touch"), None) => {
            let object = baton_rt::start::bootstrap();
            let flags = memobj::map_flags(1, 1, true, 0);
            let Ok(va) = memobj::map(object, 4096, 0, flags) else {
                println!("fs_child: cannot map the object");
                return 2;
            };
            println!("fs_child: reading a page whose pager is dead");
            // SAFETY: `va` maps one page of the object, readable.
            let word = unsafe { core::ptr::read_volatile(va as *const u64) };
            println!("fs_child: the read returned {word:#x}: it should have faulted");
            3
        }
        _ => {
            println!("fs_child: usage: fs_child exit N | fs_child touch");
            1
        }
    }
}
