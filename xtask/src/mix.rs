//! The instruction mix of the migrating-threads paper's Table 2 (Ford & Lepreau, section
//! 8.3): which traced instructions are loads/stores and which are branches, decided by
//! decoding each instruction from the kernel ELF with the `iced-x86` decoder
//! ([`decode`]), which also gives its text in AT&T syntax for the listings.
//!
//! The paper's PA-RISC is a load/store machine: a load/store is an instruction. On x86-64
//! a load/store is an instruction that reads or writes data memory, counted once whatever
//! it does (`add %rax,(%rdx)` reads and writes; `push` writes the stack; `lea`, `nop`,
//! `prefetch` and `invlpg` name an address without touching it; `in`/`out` reach a port,
//! not memory). A branch is a control transfer: every jump, call and return, `syscall`,
//! `sysret`, `iret`.

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction,
    InstructionInfoFactory, OpAccess,
};
use object::{Object, ObjectSection, SectionKind};
use std::collections::BTreeMap;

/// What one instruction is, for Table 2. Both can hold (`call`, `ret`, `iretq`, `jmp
/// *0x8(%rax)`); an instruction can be neither (`add %rax,%rbx`; `syscall` is a branch only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mix {
    /// It reads or writes data memory (a load/store).
    pub memory: bool,
    /// It transfers control (a branch).
    pub branch: bool,
}

/// Classifies a decoded instruction.
pub fn classify(insn: &Instruction, info: &mut InstructionInfoFactory) -> Mix {
    let memory = info
        .info(insn)
        .used_memory()
        .iter()
        .any(|m| m.access() != OpAccess::NoMemAccess);
    let branch = matches!(
        insn.flow_control(),
        FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::ConditionalBranch
            | FlowControl::Call
            | FlowControl::IndirectCall
            | FlowControl::Return
    ) || matches!(insn.mnemonic(), iced_x86::Mnemonic::Syscall);
    Mix { memory, branch }
}

/// The instruction at `ip` of `code` (which starts at `base`): its AT&T text and its mix;
/// `None` when no valid instruction starts there.
pub fn decode_at(code: &[u8], base: u64, ip: u64) -> Option<(String, Mix)> {
    let off = usize::try_from(ip.checked_sub(base)?).ok()?;
    let bytes = code.get(off..)?;
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return None;
    }
    let mut text = String::new();
    GasFormatter::new().format(&insn, &mut text);
    let mix = classify(&insn, &mut InstructionInfoFactory::new());
    Some((text, mix))
}

/// The text and mix of the instruction at each of `pcs` in the ELF file `elf` (its code
/// sections, by address). An error names an address that is not in a code section or
/// does not start an instruction.
pub fn decode(elf: &[u8], pcs: &[u64]) -> Result<BTreeMap<u64, (String, Mix)>, String> {
    let file = object::File::parse(elf).map_err(|e| format!("the kernel ELF: {e}"))?;
    let code: Vec<(u64, &[u8])> = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .collect();
    let mut out = BTreeMap::new();
    for &pc in pcs {
        let (base, bytes) = code
            .iter()
            .find(|(base, bytes)| pc >= *base && pc - base < bytes.len() as u64)
            .ok_or_else(|| format!("0x{pc:x} is in no code section of the kernel"))?;
        let got = decode_at(bytes, *base, pc)
            .ok_or_else(|| format!("no instruction starts at 0x{pc:x}"))?;
        out.insert(pc, got);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text and (memory, branch) of the instruction in `bytes`, decoded at 0x1000.
    fn of(bytes: &[u8]) -> (String, bool, bool) {
        let (text, m) = decode_at(bytes, 0x1000, 0x1000).unwrap();
        (text, m.memory, m.branch)
    }

    #[test]
    fn memory_operands() {
        // mov 0x8(%rdi),%rax; mov %rax,0x8(%rdi); add %rax,(%rdx); lock cmpxchg %rcx,(%rdx)
        assert_eq!(
            of(&[0x48, 0x8b, 0x47, 0x08]),
            ("mov 8(%rdi),%rax".into(), true, false)
        );
        assert!(of(&[0x48, 0x89, 0x47, 0x08]).1);
        assert!(of(&[0x48, 0x01, 0x02]).1);
        assert!(of(&[0xf0, 0x48, 0x0f, 0xb1, 0x0a]).1);
        // cmpq $0,%gs:0x28 (a per-CPU load)
        assert!(of(&[0x65, 0x48, 0x83, 0x3c, 0x25, 0x28, 0, 0, 0, 0]).1);
    }

    #[test]
    fn registers_immediates_and_addresses_that_are_not_accesses() {
        // add %rbx,%rax; mov $1,%eax; lea 8(%rdi),%rax; nopl 0(%rax); invlpg (%rdi); in (%dx),%al
        for bytes in [
            &[0x48, 0x01, 0xd8][..],
            &[0xb8, 1, 0, 0, 0],
            &[0x48, 0x8d, 0x47, 0x08],
            &[0x0f, 0x1f, 0x40, 0x00],
            &[0x0f, 0x01, 0x3f],
            &[0xec],
        ] {
            let (text, memory, branch) = of(bytes);
            assert!(!memory && !branch, "{text}");
        }
    }

    #[test]
    fn stack_and_string_instructions_touch_memory() {
        // push %rax; pop %rbx; rep movsb; leave
        for bytes in [&[0x50][..], &[0x5b], &[0xf3, 0xa4], &[0xc9]] {
            let (text, memory, branch) = of(bytes);
            assert!(memory && !branch, "{text}");
        }
    }

    #[test]
    fn branches() {
        // call rel32 and ret: both; jne rel8, jmp *%rax: branch only; jmp *8(%rax): both;
        // syscall, sysretq, iretq
        assert_eq!(
            of(&[0xe8, 0, 0, 0, 0]).1..=of(&[0xe8, 0, 0, 0, 0]).2,
            true..=true
        );
        assert!(of(&[0xc3]).1 && of(&[0xc3]).2);
        assert_eq!((of(&[0x75, 0x02]).1, of(&[0x75, 0x02]).2), (false, true));
        assert_eq!((of(&[0xff, 0xe0]).1, of(&[0xff, 0xe0]).2), (false, true));
        assert_eq!(
            (of(&[0xff, 0x60, 0x08]).1, of(&[0xff, 0x60, 0x08]).2),
            (true, true)
        );
        assert_eq!((of(&[0x0f, 0x05]).1, of(&[0x0f, 0x05]).2), (false, true));
        assert!(of(&[0x48, 0x0f, 0x07]).2, "sysretq");
        assert!(of(&[0x48, 0xcf]).2, "iretq");
    }

    #[test]
    fn invalid_bytes_and_addresses_decode_to_nothing() {
        assert_eq!(
            decode_at(&[0x0f, 0x0b], 0x1000, 0x1000).map(|(t, _)| t),
            Some("ud2".into())
        );
        assert!(
            decode_at(&[0x06], 0x1000, 0x1000).is_none(),
            "push %es: invalid in 64-bit"
        );
        assert!(decode_at(&[0x90], 0x1000, 0x2000).is_none());
        assert!(decode_at(&[0x90], 0x1000, 0x0fff).is_none());
        assert!(decode(b"not an ELF", &[0x1000]).is_err());
    }
}
