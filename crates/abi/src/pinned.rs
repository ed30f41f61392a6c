//! The ABI's numbers, pinned: the kernel and every user program agree on them only through
//! this crate, so a changed value is an incompatible ABI change and must be made on
//! purpose (here too). Also the small functions whose results user space relies on.

use crate::exception::*;
use crate::floor::*;
use crate::ipc::*;
use crate::kobject::*;
use crate::*;

#[test]
fn call_and_message_numbers() {
    let pinned: &[(u64, u64)] = &[
        (FLOOR_BASE, 0xf100),
        (FLOOR_MINIMAL, 0xf100),
        (FLOOR_FULL, 0xf101),
        (FLOOR_SPACE, 0xf102),
        (FLOOR_FAULT_ARM, 0xf103),
        (FLOOR_XAS_REGISTER, 0xf104),
        (FLOOR_XAS_CALL, 0xf105),
        (FLOOR_XAS_RETURN, 0xf106),
        (FLOOR_END, 0xf107),
        (TASK_TERMINATE, 0x4b0b_0000),
        (TASK_THREAD_CREATE, 0x4b0b_0001),
        (TASK_PORT_ALLOCATE, 0x4b0b_0002),
        (TASK_INFO, 0x4b0b_0003),
        (THREAD_TERMINATE, 0x4b0b_0100),
        (THREAD_INFO, 0x4b0b_0101),
        (THREAD_ALERT, 0x4b0b_0102),
        (THREAD_SUSPEND, 0x4b0b_0103),
        (THREAD_RESUME, 0x4b0b_0104),
        (THREAD_GET_STATE, 0x4b0b_0105),
        (THREAD_SET_STATE, 0x4b0b_0106),
        (ACT_INFO, 0x4b0b_0200),
        (ACT_ALERT, 0x4b0b_0201),
        (ACT_SUSPEND, 0x4b0b_0202),
        (ACT_RESUME, 0x4b0b_0203),
        (ACT_TERMINATE, 0x4b0b_0204),
        (ACT_GET_STATE, 0x4b0b_0205),
        (ACT_SET_STATE, 0x4b0b_0206),
        (NOTIFY_DEAD_NAME, 0xffff_0000_0000_0001),
        (NOTIFY_NO_SENDERS, 0xffff_0000_0000_0002),
        (NOTIFY_SEND_ONCE, 0xffff_0000_0000_0003),
        (NOTIFY_INTERRUPT, 0xffff_0000_0000_0004),
        (EXC_RAISE, 0xffff_0000_0000_0100),
        (Sys::VpCreate as u64, 130),
        (Sys::VpSpares as u64, 131),
        (Sys::VpWait as u64, 132),
        (Sys::VpTake as u64, 133),
        (Sys::VpDestroy as u64, 134),
        (crate::vproc::VP_BLOCK, 1),
        (crate::vproc::VP_UNBLOCK, 2),
        (crate::vproc::VP_EVENT_SIZE as u64, 848),
        (crate::vproc::VP_EVENT_HEAD as u64, 336),
        (crate::vproc::FP_IMAGE_SIZE as u64, 512),
        (crate::vproc::VP_CONFIG_SIZE as u64, 56),
        (Sys::VpPreempt as u64, 160),
        (Sys::VpResume as u64, 161),
        (Sys::StrandCount as u64, 162),
        (Sys::VpInterrupt as u64, 260),
        (crate::vproc::VP_CHECKPOINT, 3),
        (crate::spin::EVENT_STRAND_BLOCK, 0x5354_0001),
        (crate::spin::EVENT_STRAND_UNBLOCK, 0x5354_0002),
        (crate::spin::EVENT_STRAND_CHECKPOINT, 0x5354_0003),
        (crate::spin::EVENT_STRAND_RESUME, 0x5354_0004),
    ];
    for (i, &(value, want)) in pinned.iter().enumerate() {
        assert_eq!(value, want, "entry {i}");
    }
}

#[test]
fn sizes_and_limits() {
    assert_eq!(MSG_OPTIONS, 0xf);
    assert_eq!(MSG_SIZE_MAX, 64 * 1024);
    assert_eq!(MEM_MAP_MAX, 0x4000_0000);
    assert_eq!(layout::USER_STACK_SIZE, 0x1_0000);
    assert_eq!(layout::USER_HEAP_BASE, 0x3000_0000_0000);
    assert_eq!(layout::USER_HEAP_MAX, 0x10_0000_0000);
    assert_eq!(EXCEPTION_INFO_SIZE, 184);
    assert_eq!(EXC_REPLY_SET_SIZE, 152);
    assert_eq!(IO_OBJECTS_MAX, 16);
    assert_eq!(crate::host::RECORDS_MAX, 256);
    assert_eq!(crate::host::TASK_RECORD_WORDS, 10);
    assert_eq!(crate::host::THREAD_RECORD_WORDS, 11);
    assert_eq!(crate::host::NAME_RECORD_WORDS, 5);
}

#[test]
fn every_error_round_trips_and_has_its_own_name() {
    let all = [
        Error::BadAddress,
        Error::InvalidArgument,
        Error::NotFound,
        Error::NoMemory,
        Error::TooLarge,
        Error::BadFormat,
        Error::WouldBlock,
        Error::TimedOut,
        Error::InvalidName,
        Error::InvalidRight,
        Error::DeadName,
        Error::NoSpace,
        Error::NotSupported,
        Error::Interrupted,
        Error::Aborted,
        Error::Denied,
        Error::Busy,
    ];
    for (i, e) in all.iter().enumerate() {
        assert_eq!(*e as i64, i as i64 + 1, "codes are 1.. in order");
        assert_eq!(Error::from_code(*e as i64), Some(*e));
        assert_eq!(decode_result(e.to_raw()), Err(*e));
        assert!(!e.name().is_empty());
        for other in &all[..i] {
            assert_ne!(e.name(), other.name());
        }
    }
    assert_eq!(Error::Denied.name(), "denied");
    assert_eq!(Error::Busy.name(), "busy");
    assert_eq!(Error::from_code(18), None);
}

#[test]
fn process_model_check_values() {
    for (seed, want) in [
        (0, 0x5a5a_0f0f_c3c3_9696),
        (1, 0x5a5a_0f0f_c3c1_9696),
        (0xdead_beef, 0x5a5b_b254_be1d_9696),
        // Rotated into bit 63, which is cleared.
        (1 << 46, 0x5a5a_0f0f_c3c3_9696),
        (u64::MAX, 0x25a5_f0f0_3c3c_6969),
    ] {
        assert_eq!(process_model_check(seed), want, "seed {seed:#x}");
    }
}

#[test]
fn module_info_name() {
    let mut m = ModuleInfo::empty();
    assert_eq!(m.name(), "");
    m.name[..4].copy_from_slice(b"init");
    m.name_len = 4;
    assert_eq!(m.name(), "init");
    m.name_len = 2;
    assert_eq!(m.name(), "in");
    // A length past the array is clamped.
    m.name_len = u64::MAX;
    assert_eq!(m.name().len(), MODULE_NAME_MAX);
    m.name[0] = 0xff;
    assert_eq!(m.name(), "", "invalid UTF-8 reads as empty");
}

#[test]
fn reserved_header_bits() {
    let mut h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 3),
        size: 0,
        dest: 0,
        reply: 0,
        id: 0,
    };
    assert!(h.reserved_clear());
    assert_eq!(h.dest_disposition(), Disposition::CopySend as u8);
    assert_eq!(h.reply_disposition(), Disposition::MakeSendOnce as u8);
    assert_eq!(h.descriptors(), 3);
    h.bits |= 1 << 24;
    assert!(!h.reserved_clear());
}

#[test]
fn extension_numbers() {
    use crate::spin::*;
    let calls = [
        (Sys::SpinImport, 100),
        (Sys::SpinCreate, 101),
        (Sys::SpinResolve, 102),
        (Sys::SpinCombine, 103),
        (Sys::SpinInstall, 104),
        (Sys::SpinRemove, 105),
        (Sys::SpinRelease, 106),
        (Sys::SpinRaise, 107),
    ];
    for (s, n) in calls {
        assert_eq!(s as u64, n);
        assert_eq!(Sys::from_raw(n), Some(s));
    }
    assert_eq!((EVENT_SYSCALL, EVENT_TEST), (1, 2));
    assert_eq!((EXT_SYSCALL_FIRST, EXT_SYSCALL_END), (0x1000, 0x2000));
    assert_eq!(NOTIFY_ABORTED, 0x5350_0001);
    assert_eq!(
        (MODULE_MAX, MEMORY_PAGES_MAX, FUEL, DOMAINS_MAX),
        (65536, 16, 100_000, 32)
    );
    // The extension range is outside the base ABI and the floor calls.
    for n in EXT_SYSCALL_FIRST..EXT_SYSCALL_END {
        assert_eq!(Sys::from_raw(n), None);
    }
    const { assert!(EXT_SYSCALL_END <= FLOOR_BASE) };
}

#[test]
fn pager_numbers() {
    let calls = [
        (Sys::MemobjPager, 140),
        (Sys::PagerSupply, 141),
        (Sys::PagerUnavailable, 142),
        (Sys::PagerError, 143),
        (Sys::PagerFlush, 144),
    ];
    for (s, n) in calls {
        assert_eq!(s as u64, n);
        assert_eq!(Sys::from_raw(n), Some(s));
    }
}

#[test]
fn paging_numbers() {
    let calls = [
        (Sys::DefaultPagerRegister, 180),
        (Sys::DefaultPagerSupply, 181),
        (Sys::PagingStats, 182),
        (Sys::PagingLimit, 183),
    ];
    for (s, n) in calls {
        assert_eq!(s as u64, n);
        assert_eq!(Sys::from_raw(n), Some(s));
    }
    for n in 184..190 {
        assert_eq!(Sys::from_raw(n), None, "{n} is free");
    }
    assert_eq!(crate::paging::PAGE_OUT, crate::ipc::KERNEL_ID_BASE + 0x180);
    assert_eq!(crate::paging::PAGE_IN, crate::ipc::KERNEL_ID_BASE + 0x181);
    assert_eq!(crate::paging::TRANSFER_SIZE, 32);
    assert_eq!(crate::paging::PAGING_STATS_WORDS, 17);
    let t = crate::paging::Transfer {
        object: 1,
        offset: 2,
        slot: 3,
        task: 4,
    };
    assert_eq!(crate::paging::Transfer::from_bytes(&t.to_bytes()), Some(t));
}

#[test]
fn memory_object_numbers() {
    let calls = [
        (Sys::MemobjCreate, 110),
        (Sys::VmMap, 111),
        (Sys::MemobjRestrict, 112),
        (Sys::MemobjPhysical, 113),
        (Sys::MemobjDma, 114),
        (Sys::MemobjInfo, 115),
        (Sys::VmRead, 116),
        (Sys::VmWrite, 117),
        (Sys::WaitShared, 118),
        (Sys::WakeShared, 119),
    ];
    for (s, n) in calls {
        assert_eq!(s as u64, n);
        assert_eq!(Sys::from_raw(n), Some(s));
    }
    assert_eq!(Sys::from_raw(108), None);
    assert_eq!(Sys::from_raw(120).map(|s| s as u64).unwrap_or(120), 120);
    assert_eq!(crate::host::OBJECT_MEMORY, 16);
}

#[test]
fn task_creation_numbers() {
    let calls = [
        (Sys::TaskCreate, 120),
        (Sys::TaskMapProgram, 121),
        (Sys::TaskInitThread, 122),
        (Sys::TaskStart, 123),
        (Sys::TaskFork, 124),
    ];
    for (s, n) in calls {
        assert_eq!(s as u64, n);
        assert_eq!(Sys::from_raw(n), Some(s));
    }
    for n in 125..128 {
        assert_eq!(Sys::from_raw(n), None);
    }
    assert_eq!((task::PROGRAM_MODULE, task::PROGRAM_OBJECT), (0, 1));
}

#[test]
fn spinvm_numbers() {
    let calls = [(Sys::SpinvmQuery, 150), (Sys::SpinvmMark, 151)];
    for (s, n) in calls {
        assert_eq!(s as u64, n);
        assert_eq!(Sys::from_raw(n), Some(s));
    }
    use crate::translation::*;
    assert_eq!(EVENT_PAGE_NOT_PRESENT, 0x10);
    assert_eq!(EVENT_BAD_ADDRESS, 0x11);
    assert_eq!(EVENT_PROTECTION_FAULT, 0x12);
    assert_eq!(NOTIFY_REFUSED, 0x5350_0002);
}

#[test]
fn dma_quarantine_numbers() {
    let calls = [
        (Sys::DmaQuarantineRelease, 170),
        (Sys::DmaQuarantined, 171),
        (Sys::HaltedTicks, 172),
        (Sys::MsiAttach, 173),
        (Sys::MsiMessage, 174),
    ];
    for (s, n) in calls {
        assert_eq!(s as u64, n);
        assert_eq!(Sys::from_raw(n), Some(s));
    }
    assert_eq!(Sys::from_raw(169), None);
    assert_eq!(Sys::from_raw(175), None);
}

#[test]
fn spin_async_numbers() {
    assert_eq!(Sys::SpinAsync as u64, 210);
    assert_eq!(Sys::from_raw(210), Some(Sys::SpinAsync));
    assert_eq!(Sys::PagerLock as u64, 240);
    assert_eq!(Sys::from_raw(240), Some(Sys::PagerLock));
    assert_eq!(Sys::PagingExempt as u64, 230);
    assert_eq!(Sys::from_raw(230), Some(Sys::PagingExempt));
    assert_eq!(crate::paging::EXEMPT_MAX, 8);
    for n in 211..=219 {
        assert_eq!(Sys::from_raw(n), None);
    }
    use crate::spin::*;
    assert_eq!(INSTALL_ASYNC, 0x8000_0000);
    assert_eq!(ASYNC_PENDING_MAX, 16);
    assert_eq!((ASYNC_PENDING, ASYNC_RAN, ASYNC_DROPPED), (0, 1, 2));
}

#[test]
fn spin_reclaim_numbers() {
    assert_eq!(Sys::SpinReclaim as u64, 250);
    assert_eq!(Sys::from_raw(250), Some(Sys::SpinReclaim));
    for n in 251..=259 {
        assert_eq!(Sys::from_raw(n), None);
    }
    use crate::translation::*;
    assert_eq!(EVENT_RECLAIM, 0x5041_0001);
    assert_eq!((RECLAIM_ASKED, RECLAIM_TAKEN, RECLAIM_IGNORED), (0, 1, 2));
    assert_eq!(STATE_CHOSEN, 0x20);
}

#[test]
fn spin_tier_number() {
    assert_eq!(Sys::SpinTier as u64, 290);
    assert_eq!(Sys::from_raw(290), Some(Sys::SpinTier));
    for n in 291..300 {
        assert_eq!(Sys::from_raw(n), None);
    }
}
