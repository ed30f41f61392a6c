//! `cargo xtask new NAME`: a new user program, `user/programs/src/bin/NAME.rs`, from a
//! template that prints its arguments (`docs/programs.md` walks on from there). The next
//! `cargo xtask build` packs it into the boot image, so `cargo xtask run -- init=NAME` boots
//! it and the shell's `run NAME` starts it.

use crate::workspace::{note, root};
use baton_abi::MODULE_NAME_MAX;
use std::fs;
use std::process::ExitCode;

/// Options of `new`.
#[derive(clap::Args, Debug, PartialEq, Eq)]
pub struct NewOpts {
    /// The program's name: a lower-case letter, then lower-case letters, digits and `_`
    /// (it names the boot module, `init=NAME` and the shell's `run NAME`).
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// Why `name` cannot name a program, if it cannot.
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok {
        return Err(format!(
            "`{name}` cannot name a program: use a lower-case letter, then lower-case letters, \
             digits and `_`"
        ));
    }
    if name.len() > MODULE_NAME_MAX {
        return Err(format!(
            "`{name}` is longer than a boot module's name may be ({MODULE_NAME_MAX} bytes)"
        ));
    }
    Ok(())
}

/// The new program's source.
pub fn template(name: &str) -> String {
    format!(
        r#"//! `{name}`: a Baton user program (made by `cargo xtask new {name}`; see
//! `docs/programs.md`). Prints its arguments and exits with code 0.
#![no_std]
#![no_main]

extern crate alloc;

use baton_rt::{{env, println}};

baton_rt::entry!(main);

/// The program: `task_id` is this task's id; the result is the task's exit code.
fn main(task_id: u64) -> i32 {{
    println!("hello from {name}, task {{task_id}}");
    // The first argument is the program's name (boot tasks have none).
    for (i, arg) in env::args().enumerate() {{
        println!("argument {{i}}: {{arg}}");
    }}
    0
}}
"#
    )
}

/// Runs `new`.
pub fn run(opts: &NewOpts) -> Result<ExitCode, String> {
    check_name(&opts.name)?;
    let path = root()
        .join("user/programs/src/bin")
        .join(format!("{}.rs", opts.name));
    if path.exists() {
        return Err(format!("{} exists already", path.display()));
    }
    fs::write(&path, template(&opts.name)).map_err(|e| format!("{}: {e}", path.display()))?;
    note(format!("wrote {}", path.display()));
    // A person's program: listed with the others (`programs` in the shell).
    let tools = root().join(crate::build::TOOLS);
    let mut list = fs::read_to_string(&tools).map_err(|e| format!("{}: {e}", tools.display()))?;
    if !crate::build::parse_tools(&list).contains(&opts.name) {
        if !list.ends_with('\n') {
            list.push('\n');
        }
        list.push_str(&opts.name);
        list.push('\n');
        fs::write(&tools, list).map_err(|e| format!("{}: {e}", tools.display()))?;
        note(format!("added `{}` to {}", opts.name, tools.display()));
    }
    eprintln!(
        "xtask: next: `cargo xtask run -- init={0}` boots it alone; in the shell \
         (`cargo xtask run`), `run {0} some arguments` starts it. docs/programs.md goes on \
         from here.",
        opts.name
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["a", "hello", "my_tool2"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in ["", "Hello", "2x", "_x", "a-b", "a b", "é", &"x".repeat(57)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_template_is_a_program_named_after_its_name() {
        let t = template("tool");
        assert!(t.contains("baton_rt::entry!(main);"));
        assert!(t.contains("hello from tool, task {task_id}"));
        assert!(t.contains("cargo xtask new tool"));
    }
}
