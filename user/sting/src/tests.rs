//! Host tests of the whole runtime: every scenario of [`crate::selftest`] on 1, 2 and 4
//! virtual processors (`std` threads here). One runtime runs at a time, so the tests take
//! a lock.

use std::sync::Mutex as StdMutex;

static ONE_AT_A_TIME: StdMutex<()> = StdMutex::new(());

fn scenario(name: &str, vps: usize) {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_, f) = crate::selftest::ALL
        .iter()
        .find(|(n, _)| *n == name)
        .expect("no such scenario");
    match f(vps) {
        Ok(what) => std::println!("{name} on {vps}: {what}"),
        Err(why) => panic!("{name} on {vps} virtual processors: {why}"),
    }
}

macro_rules! scenarios {
    ($($name:ident),*) => { $(
        #[test]
        fn $name() {
            for vps in [1, 2, 4] {
                scenario(stringify!($name), vps);
            }
        }
    )* };
}

scenarios!(
    states, absorb, pool_reuse, policies, stealing, mutex, condvar, barrier, terminate, groups,
    ports, primes
);

#[test]
fn migrate() {
    for vps in [1, 2, 4] {
        scenario("migrate", vps);
    }
}

#[test]
fn suspend() {
    for vps in [1, 2, 4] {
        scenario("suspend", vps);
    }
}
