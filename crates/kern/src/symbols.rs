//! Naming a code address of a user program: the function of its ELF symbol table that
//! contains the address, demangled.
//!
//! A user program that faults is reported with its registers; with this, the report also
//! says in which function the faulting instruction is (`main+0x15`), read from the
//! `.symtab` the program's image keeps (user programs are built with their symbols and
//! without debug information, so the boot image stays small). Nothing here trusts the
//! image: a malformed or symbol-less image names nothing, and the search is one pass over
//! the table, with no allocation.

use core::fmt;
use elf::abi::STT_FUNC;
use elf::endian::AnyEndian;
use elf::ElfBytes;

/// A function containing an address: its name (as in the image, mangled) and the
/// address's offset from its start. Displayed demangled, without the hash Rust appends to
/// each symbol: `fault_null::main+0x15`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol<'a> {
    /// The symbol's name in the image.
    pub name: &'a str,
    /// `addr - start`.
    pub offset: u64,
}

impl fmt::Display for Symbol<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:#}+{:#x}",
            rustc_demangle::demangle(self.name),
            self.offset
        )
    }
}

/// The function symbol of the ELF `image` whose range `[value, value + size)` contains
/// `addr` (the first one in the table, if several do); `None` when the image has no symbol
/// table, is not a parseable ELF file, or no function contains the address.
pub fn lookup(image: &[u8], addr: u64) -> Option<Symbol<'_>> {
    let file = ElfBytes::<AnyEndian>::minimal_parse(image).ok()?;
    let (table, strings) = file.symbol_table().ok()??;
    table
        .iter()
        .find(|s| {
            s.st_symtype() == STT_FUNC && addr >= s.st_value && addr - s.st_value < s.st_size.max(1)
        })
        .and_then(|s| {
            Some(Symbol {
                name: strings.get(s.st_name as usize).ok()?,
                offset: addr - s.st_value,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    /// A minimal ELF64 file with a symbol table of `symbols` (name, value, size, type).
    fn image(symbols: &[(&str, u64, u64, u8)]) -> Vec<u8> {
        // Layout: ELF header (64) | strtab | symtab | shstrtab | section headers.
        let mut strtab = alloc::vec![0u8];
        let mut names = Vec::new();
        for (name, ..) in symbols {
            names.push(strtab.len() as u32);
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
        }
        let mut symtab = alloc::vec![0u8; 24]; // the null symbol
        for (&(_, value, size, kind), &name) in symbols.iter().zip(&names) {
            symtab.extend_from_slice(&name.to_le_bytes());
            symtab.push(kind); // st_info: local binding, this type
            symtab.push(0); // st_other
            symtab.extend_from_slice(&1u16.to_le_bytes()); // st_shndx
            symtab.extend_from_slice(&value.to_le_bytes());
            symtab.extend_from_slice(&size.to_le_bytes());
        }
        let shstrtab = b"\0.strtab\0.symtab\0.shstrtab\0".to_vec();
        let str_off = 64u64;
        let sym_off = str_off + strtab.len() as u64;
        let shs_off = sym_off + symtab.len() as u64;
        let sh_off = (shs_off + shstrtab.len() as u64).next_multiple_of(8);
        let mut out = Vec::new();
        out.extend_from_slice(b"\x7fELF");
        out.extend_from_slice(&[2, 1, 1, 0]); // 64-bit, little-endian, version 1
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        out.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes()); // entry
        out.extend_from_slice(&0u64.to_le_bytes()); // phoff
        out.extend_from_slice(&sh_off.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes()); // flags
        out.extend_from_slice(&64u16.to_le_bytes()); // ehsize
        out.extend_from_slice(&56u16.to_le_bytes()); // phentsize
        out.extend_from_slice(&0u16.to_le_bytes()); // phnum
        out.extend_from_slice(&64u16.to_le_bytes()); // shentsize
        out.extend_from_slice(&4u16.to_le_bytes()); // shnum
        out.extend_from_slice(&3u16.to_le_bytes()); // shstrndx
        out.extend_from_slice(&strtab);
        out.extend_from_slice(&symtab);
        out.extend_from_slice(&shstrtab);
        out.resize(sh_off as usize, 0);
        let section = |out: &mut Vec<u8>, name: u32, kind: u32, off: u64, size: u64, link: u32| {
            out.extend_from_slice(&name.to_le_bytes());
            out.extend_from_slice(&kind.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes()); // flags
            out.extend_from_slice(&0u64.to_le_bytes()); // addr
            out.extend_from_slice(&off.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&link.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes()); // info
            out.extend_from_slice(&1u64.to_le_bytes()); // addralign
            let entsize: u64 = if kind == 2 { 24 } else { 0 };
            out.extend_from_slice(&entsize.to_le_bytes());
        };
        section(&mut out, 0, 0, 0, 0, 0);
        section(&mut out, 1, 3, str_off, strtab.len() as u64, 0); // .strtab
        section(&mut out, 9, 2, sym_off, symtab.len() as u64, 1); // .symtab -> .strtab
        section(&mut out, 17, 3, shs_off, shstrtab.len() as u64, 0); // .shstrtab
        out
    }

    const FUNC: u8 = STT_FUNC;
    const OBJECT: u8 = elf::abi::STT_OBJECT;

    #[test]
    fn names_the_function_containing_an_address() {
        let img = image(&[
            (
                "_ZN10fault_null4main17h0123456789abcdefE",
                0x40_0020,
                0x30,
                FUNC,
            ),
            ("helper", 0x40_0050, 0x10, FUNC),
            ("DATA", 0x40_0035, 0x100, OBJECT),
        ]);
        let s = lookup(&img, 0x40_0035).unwrap();
        assert_eq!(s.offset, 0x15);
        assert_eq!(s.to_string(), "fault_null::main+0x15");
        assert_eq!(lookup(&img, 0x40_0050).unwrap().to_string(), "helper+0x0");
        assert_eq!(lookup(&img, 0x40_005f).unwrap().name, "helper");
        assert_eq!(lookup(&img, 0x40_0060), None, "past the last function");
        assert_eq!(lookup(&img, 0x40_0010), None, "before the first");
    }

    #[test]
    fn a_bad_or_symbolless_image_names_nothing() {
        assert_eq!(lookup(&[], 0x1000), None);
        assert_eq!(lookup(b"\x7fELF garbage", 0x1000), None);
        let img = image(&[("f", 0x1000, 0x10, FUNC)]);
        for cut in [10, 64, 100, img.len() - 1] {
            let _ = lookup(&img[..cut], 0x1004);
        }
        let mut bad = img.clone();
        // Point the symbol's name past the string table.
        let sym = 64 + 3 + 24;
        bad[sym..sym + 4].copy_from_slice(&0xffffu32.to_le_bytes());
        assert_eq!(lookup(&bad, 0x1004), None);
        assert_eq!(lookup(&image(&[]), 0x1004), None);
    }
}
