//! Host tests: writer and reader round trips, limits, hostile input, and a random-bytes
//! loop that only asserts nothing panics.

extern crate std;

use crate::client::{begin_request, open_reply};
use crate::transport::{message_len, set_reply};
use crate::*;

/// A buffer as large as the IPC buffer.
fn page() -> [u8; IPC_BUFFER_SIZE] {
    [0; IPC_BUFFER_SIZE]
}

/// Writes `value` (ports, then data) as a message with id 7 and returns its length.
fn write_value<T: Marshal>(buf: &mut [u8], value: &T) -> Result<usize, Error> {
    let mut w = MsgWriter::new(buf, 5, Disposition::CopySend, 0, Disposition::None, 7)?;
    value.marshal_ports(&mut w)?;
    value.marshal_data(&mut w)?;
    Ok(w.finish())
}

/// Rewrites a sent message as the kernel would deliver it: each port descriptor's name
/// becomes `name + 1000` and its disposition the kind received.
fn deliver(msg: &mut [u8]) {
    let n = MsgHeader::from_bytes(msg).unwrap().descriptors();
    for i in 0..n {
        let at = HEADER_SIZE + i * DESCRIPTOR_SIZE;
        let mut d = Descriptor::from_bytes(&msg[at..]).unwrap();
        let sent = Disposition::from_raw(d.disposition as u8).unwrap();
        let received = match sent.received_kind().unwrap() {
            baton_abi::ipc::RightKind::Receive => Disposition::MoveReceive,
            baton_abi::ipc::RightKind::Send => Disposition::MoveSend,
            _ => Disposition::MoveSendOnce,
        };
        d.value += 1000;
        d.disposition = received as u32;
        msg[at..at + DESCRIPTOR_SIZE].copy_from_slice(&d.to_bytes());
    }
}

/// Round-trips `value` through a delivered message, reading it back as `T`.
fn round_trip<'a, T: Marshal + Unmarshal<'a>>(buf: &'a mut [u8], value: &T) -> T {
    let len = write_value(buf, value).unwrap();
    deliver(buf);
    let mut r = MsgReader::new(&buf[..len]).unwrap();
    let v = T::unmarshal(&mut r).unwrap();
    r.finish().unwrap();
    v
}

#[test]
fn writer_lays_out_header_descriptors_data() {
    let mut buf = page();
    let mut w = MsgWriter::new(
        &mut buf,
        9,
        Disposition::CopySend,
        3,
        Disposition::MakeSendOnce,
        42,
    )
    .unwrap();
    assert!(w.is_empty());
    w.port(11, Disposition::MoveSend).unwrap();
    w.port(12, Disposition::MakeSend).unwrap();
    w.bytes(&[1, 2, 3]).unwrap();
    assert_eq!(w.descriptors(), 2);
    let len = w.finish();
    assert_eq!(len, HEADER_SIZE + 2 * DESCRIPTOR_SIZE + 3);

    let h = MsgHeader::from_bytes(&buf).unwrap();
    assert_eq!(h.size as usize, len);
    assert_eq!(h.dest, 9);
    assert_eq!(h.reply, 3);
    assert_eq!(h.id, 42);
    assert_eq!(h.dest_disposition(), Disposition::CopySend as u8);
    assert_eq!(h.reply_disposition(), Disposition::MakeSendOnce as u8);
    assert_eq!(h.descriptors(), 2);

    let mut r = MsgReader::new(&buf).unwrap();
    assert_eq!(r.len(), len);
    assert_eq!(r.next_port().unwrap(), (11, Disposition::MoveSend));
    assert_eq!(r.next_port().unwrap(), (12, Disposition::MakeSend));
    assert_eq!(r.next_port(), Err(Error::BadFormat));
    assert_eq!(r.data(), &[1, 2, 3]);
    assert!(r.finish().is_err());
    assert_eq!(r.bytes(3).unwrap(), &[1, 2, 3]);
    assert_eq!(r.bytes(1), Err(Error::BadFormat));
    r.finish().unwrap();
    assert_eq!(r.port_names().collect::<std::vec::Vec<_>>(), [11, 12]);
}

#[test]
fn writer_errors_and_limits() {
    let mut small = [0u8; HEADER_SIZE - 1];
    assert_eq!(
        MsgWriter::new(
            &mut small,
            1,
            Disposition::CopySend,
            0,
            Disposition::None,
            1
        )
        .err(),
        Some(Error::TooLarge)
    );
    let mut buf = page();
    // Reply name and disposition must agree; kernel ids are refused.
    assert!(MsgWriter::new(&mut buf, 1, Disposition::CopySend, 5, Disposition::None, 1).is_err());
    assert!(MsgWriter::new(
        &mut buf,
        1,
        Disposition::CopySend,
        0,
        Disposition::MoveSend,
        1
    )
    .is_err());
    assert_eq!(
        MsgWriter::new(
            &mut buf,
            1,
            Disposition::CopySend,
            0,
            Disposition::None,
            KERNEL_ID_BASE
        )
        .err(),
        Some(Error::InvalidArgument)
    );

    let mut w = begin_request(&mut buf, 1, 1).unwrap();
    assert_eq!(
        w.port(0, Disposition::CopySend),
        Err(Error::InvalidArgument)
    );
    assert_eq!(w.port(4, Disposition::None), Err(Error::InvalidArgument));
    for i in 0..DESCRIPTORS_MAX {
        w.port(i as u64 + 1, Disposition::CopySend).unwrap();
    }
    assert_eq!(w.port(100, Disposition::CopySend), Err(Error::TooLarge));
    w.bytes(&[0]).unwrap();
    assert_eq!(
        w.port(100, Disposition::CopySend),
        Err(Error::InvalidArgument)
    );
    let before = w.len();
    assert_eq!(w.bytes(&[0; IPC_BUFFER_SIZE]), Err(Error::TooLarge));
    assert_eq!(w.len(), before, "a failed write writes nothing");
    let rest = w.remaining();
    w.bytes(&std::vec![7; rest]).unwrap();
    assert_eq!(w.remaining(), 0);
    assert_eq!(w.bytes(&[1]), Err(Error::TooLarge));
    assert_eq!(w.finish(), IPC_BUFFER_SIZE);

    // A byte string that does not fit writes nothing, not even its length.
    let mut buf = [0u8; HEADER_SIZE + 6];
    let mut w = begin_request(&mut buf, 1, 1).unwrap();
    assert_eq!(
        [1u8, 2, 3].as_slice().marshal_data(&mut w),
        Err(Error::TooLarge)
    );
    assert!(w.is_empty());
    assert_eq!([1u8, 2].as_slice().marshal_data(&mut w), Ok(()));

    // The usable size is capped at the largest message.
    let mut huge = std::vec![0u8; MSG_SIZE_MAX + 100];
    let mut w = begin_request(&mut huge, 1, 1).unwrap();
    assert_eq!(w.remaining(), MSG_SIZE_MAX - HEADER_SIZE);
    assert_eq!(w.bytes(&huge_data()), Err(Error::TooLarge));
}

/// More data than any message may hold.
fn huge_data() -> std::vec::Vec<u8> {
    std::vec![1; MSG_SIZE_MAX]
}

#[test]
fn scalars_round_trip_packed_little_endian() {
    let mut buf = page();
    let v = (0x12u8, 0x3456u16, 0x789a_bcdeu32, 0x0102_0304_0506_0708u64);
    assert_eq!(round_trip(&mut buf, &v), v);
    // Packed: 1 + 2 + 4 + 8 bytes, little-endian, no padding.
    let data = &buf[HEADER_SIZE..HEADER_SIZE + 15];
    assert_eq!(data[..3], [0x12, 0x56, 0x34]);
    assert_eq!(data[7..], [8, 7, 6, 5, 4, 3, 2, 1]);

    let v = (i8::MIN, i16::MIN, i32::MAX, -5i64);
    assert_eq!(round_trip(&mut buf, &v), v);
    assert_eq!(round_trip(&mut buf, &(true, false)), (true, false));
    assert_eq!(round_trip(&mut buf, &[9u8; 5]), [9u8; 5]);
    round_trip(&mut buf, &());
    assert_eq!(round_trip(&mut buf, &(7u64,)), (7u64,));
    assert_eq!(round_trip(&mut buf, &(1u8, 2u8, 3u8)), (1, 2, 3));
}

#[test]
fn bytes_strings_options_round_trip() {
    let mut buf = page();
    let len = write_value(
        &mut buf,
        &(&b"hello"[..], "w\u{f6}rld", Some(3u16), None::<u8>),
    )
    .unwrap();
    let mut r = MsgReader::new(&buf[..len]).unwrap();
    let v: (&[u8], &str, Option<u16>, Option<u8>) = Unmarshal::unmarshal(&mut r).unwrap();
    r.finish().unwrap();
    assert_eq!(v, (&b"hello"[..], "w\u{f6}rld", Some(3), None));
    // Length prefix: u32 little-endian.
    assert_eq!(
        buf[HEADER_SIZE..HEADER_SIZE + 9],
        [5, 0, 0, 0, b'h', b'e', b'l', b'l', b'o']
    );

    let fixed = FixedBytes::<8>::from_slice(b"abc").unwrap();
    assert_eq!(&*round_trip(&mut buf, &fixed), b"abc");
    assert_eq!(FixedBytes::<2>::from_slice(b"abc"), Err(Error::TooLarge));
    assert!(FixedBytes::<2>::new().is_empty());

    // A longer string than the receiver's capacity is TooLarge, not a panic.
    let len = write_value(&mut buf, &&b"too long"[..]).unwrap();
    let mut r = MsgReader::new(&buf[..len]).unwrap();
    assert_eq!(FixedBytes::<4>::unmarshal(&mut r), Err(Error::TooLarge));
}

#[test]
fn rights_travel_as_descriptors() {
    let mut buf = page();
    let v = (
        SendRight(1),
        MoveSend(2),
        MakeSend(3),
        (
            (SendOnceRight(4), MakeSendOnce(5), ReceiveRight(6)),
            Some(SendRight(7)),
            None::<SendRight>,
        ),
    );
    let len = write_value(&mut buf, &v).unwrap();
    let sent: std::vec::Vec<_> = {
        let mut r = MsgReader::new(&buf[..len]).unwrap();
        (0..7).map(|_| r.next_port().unwrap()).collect()
    };
    assert_eq!(
        sent,
        [
            (1, Disposition::CopySend),
            (2, Disposition::MoveSend),
            (3, Disposition::MakeSend),
            (4, Disposition::MoveSendOnce),
            (5, Disposition::MakeSendOnce),
            (6, Disposition::MoveReceive),
            (7, Disposition::CopySend),
        ]
    );
    let back = round_trip(&mut buf, &v);
    assert_eq!(
        back,
        (
            SendRight(1001),
            MoveSend(1002),
            MakeSend(1003),
            (
                (SendOnceRight(1004), MakeSendOnce(1005), ReceiveRight(1006)),
                Some(SendRight(1007)),
                None,
            ),
        )
    );
    let any = Right {
        name: 9,
        disposition: Disposition::MakeSendOnce,
    };
    assert_eq!(
        round_trip(&mut buf, &any),
        Right {
            name: 1009,
            disposition: Disposition::MoveSendOnce
        }
    );

    // A right of the wrong kind is refused.
    let len = write_value(&mut buf, &SendOnceRight(4)).unwrap();
    deliver(&mut buf);
    let mut r = MsgReader::new(&buf[..len]).unwrap();
    assert_eq!(SendRight::unmarshal(&mut r), Err(Error::BadFormat));
}

#[test]
fn hostile_messages_are_errors() {
    let mut buf = page();
    let len = write_value(&mut buf, &(SendRight(1), &b"abc"[..])).unwrap();
    deliver(&mut buf);
    let good = buf;

    // Truncated header.
    assert_eq!(
        MsgReader::new(&good[..HEADER_SIZE - 1]).err(),
        Some(Error::BadFormat)
    );
    assert_eq!(MsgReader::new(&[]).err(), Some(Error::BadFormat));
    // Size larger than the bytes received.
    assert_eq!(
        MsgReader::new(&good[..len - 1]).err(),
        Some(Error::BadFormat)
    );
    let mut m = good;
    m[4..8].copy_from_slice(&(u32::MAX).to_le_bytes());
    assert_eq!(MsgReader::new(&m).err(), Some(Error::BadFormat));
    // Size smaller than a header.
    m[4..8].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(MsgReader::new(&m).err(), Some(Error::BadFormat));
    // Descriptor count beyond the message (and beyond DESCRIPTORS_MAX).
    let mut m = good;
    m[2] = 3;
    assert_eq!(MsgReader::new(&m[..len]).err(), Some(Error::BadFormat));
    m[2] = 0xff;
    assert_eq!(MsgReader::new(&m).err(), Some(Error::BadFormat));
    // Reserved bits.
    let mut m = good;
    m[3] = 1;
    assert_eq!(MsgReader::new(&m).err(), Some(Error::BadFormat));
    // Bad descriptor kind, size, disposition, name.
    for (at, byte) in [
        (HEADER_SIZE, 2u8),
        (HEADER_SIZE + 16, 1),
        (HEADER_SIZE + 4, 9),
    ] {
        let mut m = good;
        m[at] = byte;
        let mut r = MsgReader::new(&m[..len]).unwrap();
        assert_eq!(SendRight::unmarshal(&mut r), Err(Error::BadFormat));
        assert_eq!(r.port_names().count(), 0);
    }
    let mut m = good;
    m[HEADER_SIZE + 8..HEADER_SIZE + 16].fill(0);
    assert_eq!(
        SendRight::unmarshal(&mut MsgReader::new(&m[..len]).unwrap()),
        Err(Error::BadFormat)
    );
    // Length prefix beyond the end.
    let mut m = good;
    let at = HEADER_SIZE + DESCRIPTOR_SIZE;
    m[at..at + 4].copy_from_slice(&4u32.to_le_bytes());
    let mut r = MsgReader::new(&m[..len]).unwrap();
    SendRight::unmarshal(&mut r).unwrap();
    assert_eq!(<&[u8]>::unmarshal(&mut r), Err(Error::BadFormat));
    m[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut r = MsgReader::new(&m[..len]).unwrap();
    SendRight::unmarshal(&mut r).unwrap();
    assert_eq!(<&[u8]>::unmarshal(&mut r), Err(Error::BadFormat));
    // Data past the end of the message, bad bool, option tag and UTF-8.
    let mut w = [0u8; 64];
    let len = write_value(&mut w, &(2u8, 2u8, 0xffu8)).unwrap();
    let mut r = MsgReader::new(&w[..len]).unwrap();
    assert_eq!(bool::unmarshal(&mut r), Err(Error::BadFormat));
    assert_eq!(Option::<u8>::unmarshal(&mut r), Err(Error::BadFormat));
    assert_eq!(u64::unmarshal(&mut r), Err(Error::BadFormat));
    let len = write_value(&mut w, &&[0xffu8, 0xfe][..]).unwrap();
    assert_eq!(
        <&str>::unmarshal(&mut MsgReader::new(&w[..len]).unwrap()),
        Err(Error::BadFormat)
    );
    // Left-over data.
    let len = write_value(&mut w, &(1u8, 2u8)).unwrap();
    let mut r = MsgReader::new(&w[..len]).unwrap();
    u8::unmarshal(&mut r).unwrap();
    assert_eq!(r.finish(), Err(Error::BadFormat));
}

#[test]
fn replies_and_routes() {
    let mut req = page();
    let mut w = begin_request(&mut req, 9, 2001).unwrap();
    5u64.marshal_data(&mut w).unwrap();
    let len = w.finish();
    set_reply(&mut req, 77, Disposition::MakeSendOnce).unwrap();
    assert_eq!(message_len(&req), Ok(len));
    let h = MsgHeader::from_bytes(&req).unwrap();
    assert_eq!(
        (h.reply, h.reply_disposition()),
        (77, Disposition::MakeSendOnce as u8)
    );
    assert_eq!(
        set_reply(&mut req, 0, Disposition::MoveSend),
        Err(Error::InvalidArgument)
    );
    assert_eq!(
        set_reply(&mut [0; 8], 1, Disposition::MoveSend),
        Err(Error::InvalidArgument)
    );

    // As delivered: a send-once reply right under a new name.
    set_reply(&mut req, 1077, Disposition::MoveSendOnce).unwrap();
    let r = MsgReader::new(&req[..len]).unwrap();
    let to = ReplyTo::of(&r).unwrap();
    assert_eq!(
        to,
        ReplyTo {
            name: 1077,
            disposition: Disposition::MoveSendOnce,
            request_id: 2001
        }
    );

    let mut reply = page();
    let d = to.respond(&mut reply, Ok((SendRight(4), 6u32))).unwrap();
    assert!(d.delivered);
    let h = MsgHeader::from_bytes(&reply).unwrap();
    assert_eq!(h.dest, 1077);
    assert_eq!(h.dest_disposition(), Disposition::MoveSendOnce as u8);
    assert_eq!((h.reply, h.reply_disposition()), (0, 0));
    assert_eq!(h.id, 2001 + REPLY_ID_OFFSET);
    deliver(&mut reply);
    let mut r = open_reply(&reply, d.reply_len, 2001).unwrap();
    let v: (SendRight, u32) = Unmarshal::unmarshal(&mut r).unwrap();
    r.finish().unwrap();
    assert_eq!(v, (SendRight(1004), 6));
    assert_eq!(
        open_reply(&reply, d.reply_len, 2002).err(),
        Some(Error::BadFormat)
    );
    assert_eq!(
        open_reply(&reply[..d.reply_len], d.reply_len + 1, 2001).err(),
        Some(Error::BadFormat)
    );
    assert_eq!(
        open_reply(&reply, d.reply_len - 1, 2001).err(),
        Some(Error::BadFormat)
    );

    let d = to.respond::<u8>(&mut reply, Err(Error::NotFound)).unwrap();
    assert_eq!(
        open_reply(&reply, d.reply_len, 2001).err(),
        Some(Error::NotFound)
    );
    let d = to.reject(&mut reply, Error::NotSupported).unwrap();
    assert!(!d.delivered);
    assert_eq!(
        open_reply(&reply, d.reply_len, 2001).err(),
        Some(Error::NotSupported)
    );

    // A result too large for the reply buffer becomes a TooLarge reply.
    let mut small = [0u8; HEADER_SIZE + 16];
    let d = to.respond(&mut small, Ok(&[1u8; 64][..])).unwrap();
    assert_eq!(
        open_reply(&small, d.reply_len, 2001).err(),
        Some(Error::TooLarge)
    );
    assert_eq!(
        to.reject(&mut [0u8; 8], Error::BadFormat),
        Err(Error::TooLarge)
    );

    // A send right as the reply right is moved back; no reply right, no reply.
    set_reply(&mut req, 1078, Disposition::MoveSend).unwrap();
    let to = ReplyTo::of(&MsgReader::new(&req[..len]).unwrap()).unwrap();
    assert_eq!(to.disposition, Disposition::MoveSend);
    set_reply(&mut req, 0, Disposition::None).unwrap();
    let to = ReplyTo::of(&MsgReader::new(&req[..len]).unwrap()).unwrap();
    assert_eq!(to.respond(&mut reply, Ok(1u8)).unwrap().reply_len, 0);
    // A sender's disposition is not what the kernel delivers.
    set_reply(&mut req, 5, Disposition::MakeSendOnce).unwrap();
    assert_eq!(
        ReplyTo::of(&MsgReader::new(&req[..len]).unwrap()),
        Err(Error::BadFormat)
    );

    // The kernel's "reply right released unanswered" notification.
    let mut note = page();
    let len = MsgWriter::new(&mut note, 1, Disposition::None, 0, Disposition::None, 1)
        .unwrap()
        .finish();
    note[24..32].copy_from_slice(&NOTIFY_SEND_ONCE.to_le_bytes());
    assert_eq!(open_reply(&note, len, 2001).err(), Some(Error::DeadName));

    // An error reply carrying more than its code, and an unknown code.
    let mut w =
        MsgWriter::new(&mut note, 1, Disposition::None, 0, Disposition::None, 2101).unwrap();
    w.bytes(&3u64.to_le_bytes()).unwrap();
    w.bytes(&[0]).unwrap();
    let len = w.finish();
    assert_eq!(open_reply(&note, len, 2001).err(), Some(Error::BadFormat));
    let mut w =
        MsgWriter::new(&mut note, 1, Disposition::None, 0, Disposition::None, 2101).unwrap();
    w.bytes(&999u64.to_le_bytes()).unwrap();
    let len = w.finish();
    assert_eq!(open_reply(&note, len, 2001).err(), Some(Error::BadFormat));
    assert_eq!(error_from_code(u64::MAX), Error::BadFormat);
    assert_eq!(error_from_code(result_code(Error::NoSpace)), Error::NoSpace);
}

#[test]
fn leftover_rights_name_what_the_loop_releases() {
    let mut req = page();
    let len = {
        let mut w = begin_request(&mut req, 9, 5).unwrap();
        SendRight(1).marshal_ports(&mut w).unwrap();
        MakeSend(2).marshal_ports(&mut w).unwrap();
        w.finish()
    };
    deliver(&mut req);
    set_reply(&mut req, 50, Disposition::MoveSendOnce).unwrap();
    let names = |d: Dispatched| d.leftover_rights(&req[..len]).collect::<std::vec::Vec<_>>();
    let sent = Dispatched {
        reply_len: 40,
        delivered: true,
    };
    assert!(names(sent).is_empty());
    let rejected = Dispatched {
        reply_len: 40,
        delivered: false,
    };
    assert_eq!(names(rejected), [1001, 1002]);
    let nothing = Dispatched {
        reply_len: 0,
        delivered: false,
    };
    assert_eq!(names(nothing), [50, 1001, 1002]);
    assert_eq!(nothing.leftover_rights(&[1, 2, 3]).count(), 0);
}

/// A request as the kernel delivers it to an activation (migrating call): no rights, the
/// header reduced to its size and id.
fn as_migrated(msg: &mut [u8]) {
    let h = MsgHeader::from_bytes(msg).unwrap();
    let delivered = MsgHeader {
        bits: 0,
        size: h.size,
        dest: 0,
        reply: 0,
        id: h.id,
    };
    msg[..HEADER_SIZE].copy_from_slice(&delivered.to_bytes());
}

#[test]
fn migrated_requests_get_a_stand_in_reply_right() {
    let mut req = page();
    let len = {
        let mut w = begin_request(&mut req, 9, 2001).unwrap();
        5u64.marshal_data(&mut w).unwrap();
        w.finish()
    };
    set_reply(&mut req, 77, Disposition::MakeSendOnce).unwrap();
    as_migrated(&mut req);
    // Without the stand-in a dispatch function would see a one-way message.
    assert!(!ReplyTo::of(&MsgReader::new(&req[..len]).unwrap())
        .unwrap()
        .is_some());
    migrated_request(&mut req[..len]).unwrap();
    let h = MsgHeader::from_bytes(&req).unwrap();
    assert_eq!(h.reply, MIGRATED_REPLY);
    assert_eq!(h.reply_disposition(), Disposition::MoveSendOnce as u8);
    assert_eq!((h.size as usize, h.id, h.descriptors()), (len, 2001, 0));
    let r = MsgReader::new(&req[..len]).unwrap();
    let to = ReplyTo::of(&r).unwrap();
    assert_eq!(to.name, MIGRATED_REPLY);
    let mut reply = page();
    let d = to.respond(&mut reply, Ok(6u32)).unwrap();
    assert!(d.delivered && d.reply_len > 0);
    // The stand-in is never a right to release: the request brought none and the reply
    // uses the stand-in up.
    assert_eq!(d.leftover_rights(&req[..len]).count(), 0);
    let mut r = open_reply(&reply, d.reply_len, 2001).unwrap();
    assert_eq!(u32::unmarshal(&mut r), Ok(6));

    // Only what the kernel delivers to an activation is accepted, and a refused request
    // is left as it was.
    let before = req;
    assert_eq!(migrated_request(&mut req[..len]), Err(Error::BadFormat)); // reply right
    assert_eq!(req, before);
    let mut with_desc = page();
    let n = {
        let mut w = begin_request(&mut with_desc, 9, 2001).unwrap();
        SendRight(1).marshal_ports(&mut w).unwrap();
        w.finish()
    };
    assert_eq!(migrated_request(&mut with_desc[..n]), Err(Error::BadFormat));
    let mut short = page();
    let n = begin_request(&mut short, 9, 1).unwrap().finish();
    as_migrated(&mut short);
    assert_eq!(migrated_request(&mut short[..n - 1]), Err(Error::BadFormat));
    assert_eq!(migrated_request(&mut [0u8; 8]), Err(Error::BadFormat));
    assert_eq!(migrated_request(&mut short[..n]), Ok(n));
}

/// A tiny xorshift generator, for reproducible random bytes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Reads `msg` every way a server or client stub could; only panics matter.
fn read_every_way(msg: &[u8]) {
    let _ = message_len(msg);
    let _ = open_reply(msg, msg.len(), 2000);
    let _ = open_reply(msg, usize::MAX, 2000);
    if let Ok(r) = MsgReader::new(msg) {
        let _ = ReplyTo::of(&r);
        let _ = r.port_names().count();
        for i in 0..300 {
            let _ = r.descriptor(i);
        }
        let d = Dispatched {
            reply_len: 0,
            delivered: false,
        };
        let _ = d.leftover_rights(msg).count();
        let mut a = r.clone();
        let _ = <(SendRight, &[u8], Option<MoveSend>, u64)>::unmarshal(&mut a);
        let _ = a.finish();
        let mut b = r.clone();
        let _ = <(&str, FixedBytes<16>, Option<(bool, i32)>, Right)>::unmarshal(&mut b);
        let mut c = r.clone();
        let _ = <([u8; 3], u16, ReceiveRight, Option<&[u8]>)>::unmarshal(&mut c);
        let mut e = r;
        while e.bytes(3).is_ok() {}
        let _ = e.finish();
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut buf = [0u8; 512];
    for round in 0..20_000 {
        let len = (rng.next() % buf.len() as u64) as usize;
        for b in buf.iter_mut() {
            *b = rng.next() as u8;
        }
        // Half of the time, make the header plausible so the reader gets further.
        if round % 2 == 0 && len >= HEADER_SIZE {
            let n = (rng.next() % 4) as u32;
            buf[0..4].copy_from_slice(&(n << 16 | (rng.next() as u32 & 0xffff)).to_le_bytes());
            let size = (len as u64).saturating_sub(rng.next() % 8) as u32;
            buf[4..8].copy_from_slice(&size.to_le_bytes());
            for i in 0..n as usize {
                let at = HEADER_SIZE + i * DESCRIPTOR_SIZE;
                if at + 8 <= buf.len() {
                    buf[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
                    buf[at + 4..at + 8].copy_from_slice(&((rng.next() % 8) as u32).to_le_bytes());
                }
            }
        }
        read_every_way(&buf[..len]);
    }
}

#[test]
fn mutated_messages_never_panic() {
    let mut rng = XorShift(12345);
    let mut good = page();
    let len = write_value(
        &mut good,
        &(SendRight(1), &b"name"[..], Some(MoveSend(2)), 99u64),
    )
    .unwrap();
    deliver(&mut good);
    for _ in 0..20_000 {
        let mut m = good;
        for _ in 0..1 + rng.next() % 4 {
            let at = (rng.next() % len as u64) as usize;
            m[at] = rng.next() as u8;
        }
        let cut = len - (rng.next() % 4) as usize;
        read_every_way(&m[..cut]);
        read_every_way(&m[..len]);
    }
}

// Tests added for mutants that survived `cargo xtask mutants` (see docs/testing.md).

#[test]
fn references_marshal_as_their_values() {
    let mut direct = page();
    let mut by_ref = page();
    let mut by_mut = page();
    let mut value = (SendRight(4), 9u32);
    let n = write_value(&mut direct, &value).unwrap();
    assert_eq!(write_value(&mut by_ref, &&value).unwrap(), n);
    assert_eq!(write_value(&mut by_mut, &&mut value).unwrap(), n);
    assert_eq!(by_ref, direct);
    assert_eq!(by_mut, direct);
    assert_eq!(MsgHeader::from_bytes(&direct).unwrap().descriptors(), 1);
}

#[test]
fn lengths_and_emptiness() {
    let mut buf = page();
    let mut w = begin_request(&mut buf, 9, 1).unwrap();
    assert_eq!(w.len(), HEADER_SIZE);
    assert!(w.is_empty());
    w.bytes(&[1, 2, 3]).unwrap();
    assert_eq!(w.len(), HEADER_SIZE + 3);
    assert!(!w.is_empty());
    let n = w.finish();
    let r = MsgReader::new(&buf[..n]).unwrap();
    assert_eq!(r.len(), n);
    assert!(!r.is_empty());
    let mut only = page();
    let n = begin_request(&mut only, 9, 1).unwrap().finish();
    assert!(MsgReader::new(&only[..n]).unwrap().is_empty());

    let f = FixedBytes::<8>::from_slice(b"abc").unwrap();
    assert_eq!((f.len(), f.is_empty(), f.capacity()), (3, false, 8));
    let e = FixedBytes::<5>::new();
    assert_eq!((e.len(), e.is_empty(), e.capacity()), (0, true, 5));
    assert_eq!(std::format!("{f:?}"), "FixedBytes([97, 98, 99])");
}

#[test]
fn message_len_needs_both_bounds() {
    let mut buf = page();
    let n = begin_request(&mut buf, 9, 1).unwrap().finish();
    assert_eq!(message_len(&buf[..n]), Ok(n));
    // A size past the buffer, though at least a header.
    assert_eq!(message_len(&buf[..n - 1]), Err(Error::BadFormat));
    // A size below a header, in a buffer large enough.
    let mut h = MsgHeader::from_bytes(&buf).unwrap();
    h.size = HEADER_SIZE as u32 - 1;
    buf[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    assert_eq!(message_len(&buf), Err(Error::BadFormat));
}

#[test]
fn migrated_request_checks_each_reply_field_and_keeps_the_rest() {
    let mut req = page();
    let len = begin_request(&mut req, 9, 3).unwrap().finish();
    as_migrated(&mut req);
    // A reply name without a disposition is not what the kernel delivers either.
    let mut h = MsgHeader::from_bytes(&req).unwrap();
    h.reply = 5;
    let mut bad = req;
    bad[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    assert_eq!(migrated_request(&mut bad[..len]), Err(Error::BadFormat));
    // Only the reply field changes: the destination disposition stays.
    let mut h = MsgHeader::from_bytes(&req).unwrap();
    h.bits = Disposition::CopySend as u32;
    req[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    migrated_request(&mut req[..len]).unwrap();
    let h = MsgHeader::from_bytes(&req).unwrap();
    assert_eq!(h.dest_disposition(), Disposition::CopySend as u8);
    assert_eq!(h.reply_disposition(), Disposition::MoveSendOnce as u8);
}

#[test]
fn leftover_rights_skip_null_names_and_other_descriptors() {
    let mut req = page();
    let len = {
        let mut w = begin_request(&mut req, 9, 5).unwrap();
        SendRight(1).marshal_ports(&mut w).unwrap();
        SendRight(2).marshal_ports(&mut w).unwrap();
        SendRight(3).marshal_ports(&mut w).unwrap();
        w.finish()
    };
    // The first descriptor names nothing, the second is not a port descriptor.
    let at = |i: usize| HEADER_SIZE + i * DESCRIPTOR_SIZE;
    let mut d = Descriptor::from_bytes(&req[at(0)..]).unwrap();
    d.value = 0;
    req[at(0)..at(1)].copy_from_slice(&d.to_bytes());
    let mut d = Descriptor::from_bytes(&req[at(1)..]).unwrap();
    d.kind = baton_abi::ipc::DESC_OOL;
    req[at(1)..at(2)].copy_from_slice(&d.to_bytes());
    let rejected = Dispatched {
        reply_len: 1,
        delivered: false,
    };
    assert_eq!(
        rejected
            .leftover_rights(&req[..len])
            .collect::<std::vec::Vec<_>>(),
        [3]
    );
}

/// A transport that answers every request with a reply 5 bytes longer.
struct Longer([u8; 64]);

impl Transport for Longer {
    fn buffer(&mut self) -> &mut [u8] {
        &mut self.0
    }

    fn call(&mut self, len: usize) -> Result<usize, Error> {
        Ok(len + 5)
    }
}

#[test]
fn a_transport_reference_is_that_transport() {
    let mut t = Longer([0; 64]);
    let mut by_ref = &mut t;
    assert_eq!(Transport::call(&mut by_ref, 3), Ok(8));
    assert_eq!(Transport::buffer(&mut by_ref).len(), 64);
    // `call_written` is `call` unless the transport says otherwise, by reference too.
    assert_eq!(Transport::call_written(&mut by_ref, 3), Ok(8));
    let mut own = Written(0);
    let mut own_ref = &mut own;
    assert_eq!(Transport::call_written(&mut own_ref, 3), Ok(103));
    assert_eq!(Transport::call(&mut own_ref, 3), Ok(3));
}

/// A transport whose `call_written` is its own.
struct Written(u8);

impl Transport for Written {
    fn buffer(&mut self) -> &mut [u8] {
        core::slice::from_mut(&mut self.0)
    }

    fn call(&mut self, len: usize) -> Result<usize, Error> {
        Ok(len)
    }

    fn call_written(&mut self, len: usize) -> Result<usize, Error> {
        Ok(len + 100)
    }
}

#[test]
fn reader_descriptor_count_limit_and_header_fields() {
    // A header with `n` descriptors and room for them, every field set.
    let message = |n: u32| {
        let mut m = page();
        let size = (HEADER_SIZE + n as usize * DESCRIPTOR_SIZE) as u32;
        m[0..4].copy_from_slice(&(0x0602 | n << 16).to_le_bytes());
        m[4..8].copy_from_slice(&size.to_le_bytes());
        m[8..16].copy_from_slice(&11u64.to_le_bytes());
        m[16..24].copy_from_slice(&22u64.to_le_bytes());
        m[24..32].copy_from_slice(&33u64.to_le_bytes());
        m
    };
    let m = message(DESCRIPTORS_MAX as u32);
    let r = MsgReader::new(&m).unwrap();
    assert_eq!(r.descriptors(), DESCRIPTORS_MAX);
    assert_eq!(r.header(), MsgHeader::from_bytes(&m).unwrap());
    assert_eq!((r.header().dest, r.header().reply, r.id()), (11, 22, 33));
    assert_eq!(r.remaining(), 0);
    let m = message(DESCRIPTORS_MAX as u32 + 1);
    assert_eq!(MsgReader::new(&m).err(), Some(Error::BadFormat));
    // Every reserved bit on its own.
    for bit in 24..32 {
        let mut m = message(0);
        m[0..4].copy_from_slice(&(0x0602u32 | 1 << bit).to_le_bytes());
        assert_eq!(
            MsgReader::new(&m).err(),
            Some(Error::BadFormat),
            "bit {bit}"
        );
    }
}

#[test]
fn set_reply_changes_only_the_reply_fields() {
    let mut buf = page();
    let len = write_value(&mut buf, &(1u8, SendRight(3))).unwrap();
    let before = MsgHeader::from_bytes(&buf).unwrap();
    set_reply(&mut buf, 99, Disposition::MakeSendOnce).unwrap();
    let after = MsgHeader::from_bytes(&buf).unwrap();
    assert_eq!(after.reply, 99);
    assert_eq!(after.reply_disposition(), Disposition::MakeSendOnce as u8);
    assert_eq!(
        (
            after.dest_disposition(),
            after.descriptors(),
            after.size,
            after.dest,
            after.id
        ),
        (
            before.dest_disposition(),
            before.descriptors(),
            before.size,
            before.dest,
            before.id
        )
    );
    assert_eq!(after.size as usize, len);
    set_reply(&mut buf, 0, Disposition::None).unwrap();
    let cleared = MsgHeader::from_bytes(&buf).unwrap();
    assert_eq!((cleared.reply, cleared.bits), (0, before.bits));
}

/// A request as the server receives it: `id`, reply right `reply` with `reply_disp`, the
/// `ports` as received send rights, then `data`.
fn received_request(
    id: u64,
    reply: u64,
    reply_disp: Disposition,
    ports: &[u64],
    data: &[u8],
) -> std::vec::Vec<u8> {
    let mut buf = std::vec![0u8; IPC_BUFFER_SIZE];
    let mut w = MsgWriter::new(&mut buf, 1, Disposition::None, reply, reply_disp, id).unwrap();
    for &p in ports {
        w.port(p, Disposition::MoveSend).unwrap();
    }
    w.bytes(data).unwrap();
    let len = w.finish();
    buf.truncate(len);
    buf
}

#[test]
fn fixed_request_takes_exactly_one_shape() {
    let data = [7u8; 12];
    let ok = received_request(40, 9, Disposition::MoveSendOnce, &[], &data);
    let (mut r, name) = fixed::request(&ok, 12).unwrap();
    assert_eq!(name, 9);
    assert_eq!(r.remaining(), 12);
    assert_eq!(r.header(), MsgReader::new(&ok).unwrap().header());
    assert_eq!(r.array::<12>(), Ok(data));
    assert_eq!(r.finish(), Ok(()));
    // A null request is only a header.
    let null = received_request(40, 9, Disposition::MoveSendOnce, &[], &[]);
    assert!(fixed::request(&null, 0).is_some());
    // The destination's disposition is not looked at (no receiver does).
    let mut any_dest = ok.clone();
    any_dest[0] = 0x13;
    assert!(fixed::request(&any_dest, 12).is_some());

    // Every other shape goes to the general path.
    assert!(fixed::request(&ok, 11).is_none(), "size");
    assert!(fixed::request(&ok, 13).is_none(), "size");
    assert!(fixed::request(&ok[..40], 12).is_none(), "truncated");
    assert!(fixed::request(&ok[..20], 0).is_none(), "no header");
    let send = received_request(40, 9, Disposition::MoveSend, &[], &data);
    assert!(
        fixed::request(&send, 12).is_none(),
        "a send right as reply right"
    );
    let none = received_request(40, 0, Disposition::None, &[], &data);
    assert!(fixed::request(&none, 12).is_none(), "no reply right");
    let mut zero_name = ok.clone();
    zero_name[16..24].fill(0);
    assert!(fixed::request(&zero_name, 12).is_none(), "reply name 0");
    let with_port = received_request(40, 9, Disposition::MoveSendOnce, &[5], &[]);
    assert!(fixed::request(&with_port, 0).is_none(), "a descriptor");
    assert!(
        fixed::request(&with_port, DESCRIPTOR_SIZE).is_none(),
        "a descriptor counted as data"
    );
    let mut reserved = ok.clone();
    reserved[3] = 1;
    assert!(fixed::request(&reserved, 12).is_none(), "reserved bits");
}

#[test]
fn fixed_reply_takes_exactly_one_shape() {
    let write = |id: u64, code: u64, data: &[u8], ports: &[u64]| {
        let mut buf = std::vec![0u8; IPC_BUFFER_SIZE];
        let mut w = MsgWriter::new(
            &mut buf,
            77,
            Disposition::MoveSendOnce,
            0,
            Disposition::None,
            id,
        )
        .unwrap();
        for &p in ports {
            w.port(p, Disposition::MoveSend).unwrap();
        }
        w.bytes(&code.to_le_bytes()).unwrap();
        w.bytes(data).unwrap();
        let len = w.finish();
        buf.truncate(len);
        buf
    };
    let ok = write(7 + REPLY_ID_OFFSET, RESULT_OK, &5u32.to_le_bytes(), &[]);
    let mut r = fixed::reply(&ok, ok.len(), 7, 4).unwrap();
    assert_eq!(u32::unmarshal(&mut r), Ok(5));
    assert_eq!(r.finish(), Ok(()));
    // The same reply through the general path: the same reader position.
    let g = open_reply(&ok, ok.len(), 7).unwrap();
    assert_eq!(g.remaining(), 4);

    assert!(
        fixed::reply(&ok, ok.len(), 8, 4).is_none(),
        "another request's reply"
    );
    assert!(fixed::reply(&ok, ok.len(), 7, 3).is_none(), "size");
    assert!(fixed::reply(&ok, ok.len() - 1, 7, 4).is_none(), "length");
    assert!(fixed::reply(&ok[..40], 44, 7, 4).is_none(), "truncated");
    let err = write(7 + REPLY_ID_OFFSET, result_code(Error::NotFound), &[], &[]);
    assert!(
        fixed::reply(&err, err.len(), 7, 0).is_none(),
        "an error reply"
    );
    assert_eq!(open_reply(&err, err.len(), 7).err(), Some(Error::NotFound));
    let mut notify = ok.clone();
    notify[24..32].copy_from_slice(&NOTIFY_SEND_ONCE.to_le_bytes());
    assert!(
        fixed::reply(&notify, notify.len(), 7, 4).is_none(),
        "notification"
    );
    let mut reserved = ok.clone();
    reserved[3] = 1;
    assert!(
        fixed::reply(&reserved, ok.len(), 7, 4).is_none(),
        "reserved bits"
    );
    let with_port = write(7 + REPLY_ID_OFFSET, RESULT_OK, &[], &[3]);
    assert!(
        fixed::reply(&with_port, with_port.len(), 7, DESCRIPTOR_SIZE).is_none(),
        "a descriptor"
    );
}

#[test]
fn fixed_sizes_of_the_types() {
    fn fixed<T: for<'a> Unmarshal<'a>>() -> Option<usize> {
        <T as Unmarshal<'static>>::FIXED
    }
    assert_eq!(fixed::<()>(), Some(0));
    assert_eq!(fixed::<u8>(), Some(1));
    assert_eq!(fixed::<i16>(), Some(2));
    assert_eq!(fixed::<u32>(), Some(4));
    assert_eq!(fixed::<i64>(), Some(8));
    assert_eq!(fixed::<bool>(), Some(1));
    assert_eq!(fixed::<[u8; 33]>(), Some(33));
    assert_eq!(fixed::<(u8, (u16, [u8; 3]), u64)>(), Some(14));
    assert_eq!(fixed::<FixedBytes<8>>(), None);
    assert_eq!(fixed::<Option<u8>>(), None);
    assert_eq!(fixed::<SendRight>(), None);
    assert_eq!(fixed::<(u8, SendRight)>(), None);
    assert_eq!(<&[u8] as Unmarshal<'static>>::FIXED, None);
    assert_eq!(marshal::fixed_sum(Some(usize::MAX), Some(1)), None);
}

/// Whatever the fast path accepts, the general path accepts the same way: random and
/// mutated requests and replies, checked both ways.
#[test]
fn fixed_paths_agree_with_the_general_path() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut taken = (0, 0);
    for _ in 0..40_000 {
        let n = (next() % 20) as usize;
        let data: std::vec::Vec<u8> = (0..n).map(|_| next() as u8).collect();
        let disp = match next() % 4 {
            0 => Disposition::MoveSend,
            _ => Disposition::MoveSendOnce,
        };
        let ports: std::vec::Vec<u64> = if next() % 4 == 0 {
            std::vec![3]
        } else {
            std::vec![]
        };
        let mut msg = received_request(40, 1 + next() % 3, disp, &ports, &data);
        if next() % 2 == 0 {
            let at = (next() % msg.len() as u64) as usize;
            msg[at] = next() as u8;
        }
        let want = (next() % 20) as usize;
        if let Some((r, name)) = fixed::request(&msg, want) {
            taken.0 += 1;
            let g = MsgReader::new(&msg).unwrap();
            let to = ReplyTo::of(&g).unwrap();
            assert_eq!((to.name, to.disposition), (name, Disposition::MoveSendOnce));
            assert_eq!((g.descriptors(), g.remaining()), (0, want));
            assert_eq!(
                (r.descriptors(), r.remaining(), r.len()),
                (0, want, g.len())
            );
        }
        // The same bytes as a reply to request 40.
        let mut reply = msg.clone();
        reply[24..32].copy_from_slice(&(40 + REPLY_ID_OFFSET).to_le_bytes());
        if next() % 2 == 0 && reply.len() >= 40 {
            reply[32..40].fill(0);
        }
        let len = reply.len();
        if let Some(r) = fixed::reply(&reply, len, 40, want) {
            taken.1 += 1;
            let g = open_reply(&reply, len, 40).unwrap();
            assert_eq!((g.remaining(), g.descriptors()), (want, 0));
            assert_eq!((r.remaining(), r.descriptors()), (want, 0));
        }
    }
    // Both fast paths were taken often enough for the comparison to mean something.
    assert!(taken.0 > 200 && taken.1 > 200, "{taken:?}");
}

#[test]
fn fixed_migrated_takes_exactly_one_shape() {
    let data = [7u8; 12];
    let mut ok = received_request(40, 9, Disposition::MoveSendOnce, &[], &data);
    as_migrated(&mut ok);
    let (mut r, name) = fixed::migrated(&ok, 12).unwrap();
    assert_eq!(name, MIGRATED_REPLY);
    assert_eq!(r.remaining(), 12);
    assert_eq!(r.array::<12>(), Ok(data));
    // The reader's header is the one `migrated_request` would have written.
    let mut rewritten = ok.clone();
    migrated_request(&mut rewritten).unwrap();
    assert_eq!(r.header(), MsgReader::new(&rewritten).unwrap().header());
    // The destination's disposition (byte 0) is not looked at; anything else is.
    let mut any_dest = ok.clone();
    any_dest[0] = 0x13;
    assert!(fixed::migrated(&any_dest, 12).is_some());
    let mut null = received_request(40, 9, Disposition::MoveSendOnce, &[], &[]);
    as_migrated(&mut null);
    assert!(fixed::migrated(&null, 0).is_some());
    assert!(fixed::migrated(&ok, 11).is_none(), "size");
    assert!(fixed::migrated(&ok, 13).is_none(), "size");
    assert!(fixed::migrated(&ok[..40], 12).is_none(), "truncated");
    assert!(fixed::migrated(&ok[..20], 0).is_none(), "no header");
    // A request with a reply right is not a migrated one, nor one already given its
    // stand-in (that is `fixed::request`'s shape).
    let with_reply = received_request(40, 9, Disposition::MoveSendOnce, &[], &data);
    assert!(fixed::migrated(&with_reply, 12).is_none(), "reply right");
    assert!(fixed::migrated(&rewritten, 12).is_none(), "stand-in");
    let mut disp_only = ok.clone();
    disp_only[1] = Disposition::MoveSendOnce as u8;
    assert!(
        fixed::migrated(&disp_only, 12).is_none(),
        "reply disposition"
    );
    let mut name_only = ok.clone();
    name_only[16] = 1;
    assert!(fixed::migrated(&name_only, 12).is_none(), "reply name");
    let mut with_port = received_request(40, 9, Disposition::MoveSendOnce, &[5], &[]);
    as_migrated(&mut with_port);
    with_port[2] = 1;
    assert!(
        fixed::migrated(&with_port, DESCRIPTOR_SIZE).is_none(),
        "a descriptor"
    );
    let mut reserved = ok.clone();
    reserved[3] = 0x80;
    assert!(fixed::migrated(&reserved, 12).is_none(), "reserved bits");
}

/// Whatever `fixed::migrated` accepts, `migrated_request` followed by the general path
/// accepts the same way (the same reply route, data and length); random and mutated
/// requests as the kernel delivers them to an activation.
#[test]
fn fixed_migrated_agrees_with_the_general_path() {
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut taken = 0;
    for _ in 0..40_000 {
        let n = (rng.next() % 20) as usize;
        let data: std::vec::Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        let ports: std::vec::Vec<u64> = if rng.next().is_multiple_of(4) {
            std::vec![3]
        } else {
            std::vec![]
        };
        let mut msg = received_request(40, 1, Disposition::MoveSendOnce, &ports, &data);
        if !rng.next().is_multiple_of(4) {
            as_migrated(&mut msg);
            if !ports.is_empty() {
                msg[2] = 1;
            }
        }
        if rng.next().is_multiple_of(2) {
            let at = (rng.next() % msg.len() as u64) as usize;
            msg[at] = rng.next() as u8;
        }
        let want = (rng.next() % 20) as usize;
        let mut general = msg.clone();
        let prepared = migrated_request(&mut general);
        match fixed::migrated(&msg, want) {
            Some((r, name)) => {
                taken += 1;
                let len = prepared.unwrap();
                let g = MsgReader::new(&general[..len]).unwrap();
                let to = ReplyTo::of(&g).unwrap();
                assert_eq!((to.name, to.disposition), (name, Disposition::MoveSendOnce));
                assert_eq!((g.descriptors(), g.remaining()), (0, want));
                assert_eq!(
                    (r.header(), r.remaining(), r.len()),
                    (g.header(), want, len)
                );
                // And the switching fast path takes the prepared request the same way.
                let (f, fname) = fixed::request(&general, want).unwrap();
                assert_eq!((f.header(), f.remaining(), fname), (r.header(), want, name));
            }
            None => {
                // Refused: either the general path refuses it too, or it is not of the
                // fast path's shape once prepared either.
                if let Ok(len) = prepared {
                    assert!(fixed::request(&general[..len], want).is_none());
                }
            }
        }
    }
    assert!(taken > 200, "{taken}");
}
