//! Entry from the PVH boot protocol and the boot information it hands over.
//!
//! QEMU's `-kernel` loads Baton's ELF image itself and enters `pvh_start` in 32-bit protected
//! mode with paging off and `ebx` holding the physical address of an `hvm_start_info`
//! (the Xen PVH protocol; the entry point is published in a `XEN_ELFNOTE_PHYS32_ENTRY`
//! note). The assembly below builds throw-away page tables that map the first GiB three
//! times — identity (to keep running), at the direct-map base (so Rust can read the boot
//! information) and at the kernel's link address — enters long mode and calls `kmain` on
//! the boot stack. `paging::init` replaces these tables with the real ones.
//!
//! Why PVH rather than Multiboot: QEMU loads a 64-bit ELF directly (Multiboot 1 in QEMU
//! takes only 32-bit images), the loader hands over a memory map, the command line and the
//! initial ramdisk, and the same image boots on other PVH loaders (Firecracker,
//! cloud-hypervisor).

use super::paging::phys_to_virt;

core::arch::global_asm!(
    r#"
    .section .boot.text, "ax"
    .code32
    .global pvh_start
pvh_start:
    cli
    cld
    movl %ebx, %esi

    movl $boot_pdpt_low, %eax
    orl $3, %eax
    movl %eax, boot_pml4
    movl %eax, boot_pml4 + 256 * 8
    movl $boot_pdpt_high, %eax
    orl $3, %eax
    movl %eax, boot_pml4 + 511 * 8
    movl $boot_pd, %eax
    orl $3, %eax
    movl %eax, boot_pdpt_low
    movl %eax, boot_pdpt_high + 510 * 8

    xorl %ecx, %ecx
1:
    movl %ecx, %eax
    shll $21, %eax
    orl $0x83, %eax
    movl %eax, boot_pd(, %ecx, 8)
    movl $0, boot_pd + 4(, %ecx, 8)
    incl %ecx
    cmpl $512, %ecx
    jne 1b

    movl %cr4, %eax
    orl $(1 << 5), %eax
    movl %eax, %cr4
    movl $boot_pml4, %eax
    movl %eax, %cr3

    movl $0xC0000080, %ecx
    rdmsr
    orl $((1 << 8) | (1 << 11) | 1), %eax
    wrmsr

    movl %cr0, %eax
    orl $((1 << 31) | (1 << 16) | 1), %eax
    movl %eax, %cr0

    lgdt boot_gdt_ptr
    ljmp $0x08, $boot_long

    .code64
boot_long:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    xorw %ax, %ax
    movw %ax, %fs
    movw %ax, %gs
    movabsq $boot_stack_top, %rsp
    movl %esi, %edi
    movabsq $kmain, %rax
    callq *%rax
2:
    hlt
    jmp 2b

    .section .boot.data, "aw"
    .p2align 12
boot_pml4:
    .skip 4096
boot_pdpt_low:
    .skip 4096
boot_pdpt_high:
    .skip 4096
boot_pd:
    .skip 4096
    .p2align 3
boot_gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF
    .quad 0x00CF92000000FFFF
boot_gdt_ptr:
    .word boot_gdt_ptr - boot_gdt - 1
    .long boot_gdt

    .section .bss.boot_stack, "aw", @nobits
    .p2align 12
    .global boot_stack_bottom
boot_stack_bottom:
    .skip 65536
    .global boot_stack_top
boot_stack_top:

    .section .note.Xen, "a"
    .p2align 2
    .long 4
    .long 8
    .long 18
    .asciz "Xen"
    .p2align 2
    .quad pvh_start
    "#,
    options(att_syntax)
);

/// `hvm_start_info.magic`.
const PVH_MAGIC: u32 = 0x336e_c578;

/// The PVH start-of-day structure (`xen/include/public/arch-x86/hvm/start_info.h`).
#[repr(C)]
#[derive(Clone, Copy)]
struct StartInfo {
    magic: u32,
    version: u32,
    flags: u32,
    nr_modules: u32,
    modlist_paddr: u64,
    cmdline_paddr: u64,
    rsdp_paddr: u64,
    memmap_paddr: u64,
    memmap_entries: u32,
    reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ModlistEntry {
    paddr: u64,
    size: u64,
    cmdline_paddr: u64,
    reserved: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct MemmapEntry {
    addr: u64,
    size: u64,
    kind: u32,
    reserved: u32,
}

/// Most memory-map entries kept.
pub const MAX_REGIONS: usize = 32;
/// Longest kernel command line kept.
pub const MAX_CMDLINE: usize = 512;

/// What the boot loader told us, copied out of its structures.
pub struct BootInfo {
    /// Usable RAM as physical byte ranges; `usable_len` of them are valid.
    pub usable: [core::ops::Range<u64>; MAX_REGIONS],
    /// Number of valid entries in `usable`.
    pub usable_len: usize,
    /// The initial ramdisk as a physical byte range (empty if none).
    pub initrd: core::ops::Range<u64>,
    /// The command line bytes; `cmdline_len` are valid.
    pub cmdline: [u8; MAX_CMDLINE],
    /// Length of the command line.
    pub cmdline_len: usize,
    /// Physical page holding the start-info structures (kept reserved).
    pub start_info: u64,
    /// Physical address of the ACPI RSDP as the loader found it (`rsdp_paddr`), or 0.
    pub rsdp: u64,
}

impl BootInfo {
    /// The usable RAM ranges.
    pub fn usable(&self) -> &[core::ops::Range<u64>] {
        self.usable.get(..self.usable_len).unwrap_or(&[])
    }

    /// The command line as text (empty when not UTF-8).
    pub fn cmdline(&self) -> &str {
        let bytes = self.cmdline.get(..self.cmdline_len).unwrap_or(&[]);
        core::str::from_utf8(bytes).unwrap_or("")
    }
}

/// Reads a `T` at physical address `pa` through the boot direct map.
///
/// # Safety
/// `pa..pa + size_of::<T>()` must be RAM mapped by the direct map (the first GiB during
/// boot) and hold a valid `T`.
unsafe fn read_phys<T: Copy>(pa: u64) -> T {
    // SAFETY: the caller guarantees the range is mapped and holds a `T`; unaligned reads
    // are allowed by `read_unaligned`.
    unsafe { core::ptr::read_unaligned(phys_to_virt(pa) as *const T) }
}

/// Parses the PVH start info at physical address `pa`.
///
/// Panics (a boot failure, before any user code exists) if the loader did not give a PVH
/// start info, since nothing can go on without a memory map.
pub fn parse(pa: u64) -> BootInfo {
    // SAFETY: the PVH loader passes the physical address of its `hvm_start_info` in low
    // memory, which the boot page tables map.
    let si: StartInfo = unsafe { read_phys(pa) };
    assert!(
        si.magic == PVH_MAGIC,
        "not booted through PVH (bad start-info magic)"
    );
    assert!(
        si.version >= 1,
        "PVH start info version 0 has no memory map"
    );

    let mut info = BootInfo {
        usable: core::array::from_fn(|_| 0..0),
        usable_len: 0,
        initrd: 0..0,
        cmdline: [0; MAX_CMDLINE],
        cmdline_len: 0,
        start_info: pa,
        rsdp: si.rsdp_paddr,
    };
    for i in 0..u64::from(si.memmap_entries) {
        // SAFETY: the loader's memory map has `memmap_entries` entries at `memmap_paddr`.
        let e: MemmapEntry =
            unsafe { read_phys(si.memmap_paddr + i * core::mem::size_of::<MemmapEntry>() as u64) };
        if e.kind == 1 && info.usable_len < MAX_REGIONS {
            if let Some(slot) = info.usable.get_mut(info.usable_len) {
                *slot = e.addr..e.addr.saturating_add(e.size);
                info.usable_len += 1;
            }
        }
    }
    if si.nr_modules > 0 {
        // SAFETY: `nr_modules > 0`, so the module list holds at least one entry.
        let m: ModlistEntry = unsafe { read_phys(si.modlist_paddr) };
        info.initrd = m.paddr..m.paddr + m.size;
    }
    if si.cmdline_paddr != 0 {
        while info.cmdline_len < MAX_CMDLINE {
            // SAFETY: the command line is a NUL-terminated string in low memory; we stop
            // at the NUL or at our buffer's size.
            let b: u8 = unsafe { read_phys(si.cmdline_paddr + info.cmdline_len as u64) };
            if b == 0 {
                break;
            }
            if let Some(slot) = info.cmdline.get_mut(info.cmdline_len) {
                *slot = b;
            }
            info.cmdline_len += 1;
        }
    }
    info
}
