//! Host tests of the IPC semantics.

use super::*;
use baton_abi::ipc::{Descriptor, Disposition as D, MsgHeader};
use std::vec;

type I = Ipc<u32>;

fn header(dest: u64, dd: D, reply: u64, rd: D, n: u8, id: u64) -> MsgHeader {
    MsgHeader {
        bits: MsgHeader::make_bits(dd, rd, n),
        size: (HEADER_SIZE + usize::from(n) * DESCRIPTOR_SIZE) as u32,
        dest,
        reply,
        id,
    }
}

/// A server task (space 1) with a port, and a client task (space 2) with a send right to
/// it (made by the server and moved over in a message, as rights travel).
fn setup() -> (I, Space, Space, u64, u64) {
    let mut ipc = I::new();
    let mut server = Space::new();
    let mut client = Space::new();
    let mut fx = Effects::default();
    let port = ipc.allocate(&mut server, 1, 0).unwrap();
    // The client gets a send right by a message on a bootstrap port it receives on.
    let boot = ipc.allocate(&mut client, 2, 0).unwrap();
    let boot_send = ipc.make_send(&mut client, boot, false).unwrap();
    // Hand the client's bootstrap send right to the server space by hand (as spawn would).
    let e = client.lookup(boot_send).unwrap();
    client.remove(boot_send);
    let boot_in_server = server.insert(e).unwrap();
    let h = header(boot_in_server, D::CopySend, 0, D::None, 1, 7);
    let (dest, msg) = ipc
        .copyin(
            &mut server,
            &h,
            &[Descriptor::port(port, D::MakeSend)],
            vec![],
            &mut fx,
        )
        .unwrap();
    ipc.enqueue(dest, msg, &mut fx);
    let msg = ipc.dequeue(dest, &mut fx).unwrap();
    let mut descs = Vec::new();
    let hdr = ipc.copyout(&mut client, 2, boot, &msg, &mut descs).unwrap();
    assert_eq!(hdr.id, 7);
    assert_eq!(hdr.dest, boot);
    let send = descs[0].value;
    assert_eq!(descs[0].disposition, D::MoveSend as u32);
    assert_eq!(ipc.info(&client, send), Ok(RightKind::Send));
    (ipc, server, client, port, send)
}

#[test]
fn send_receive_with_reply_right() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let mut fx = Effects::default();
    let reply_port = ipc.allocate(&mut client, 2, 0).unwrap();
    let h = header(send, D::CopySend, reply_port, D::MakeSendOnce, 0, 99);
    let (dest, msg) = ipc
        .copyin(&mut client, &h, &[], b"hello".to_vec(), &mut fx)
        .unwrap();
    assert_eq!(ipc.port(dest).unwrap().receiver, 1);
    ipc.enqueue(dest, msg, &mut fx);
    assert_eq!(ipc.queued(), 1);
    let msg = ipc.dequeue(dest, &mut fx).unwrap();
    let mut d = Vec::new();
    let hdr = ipc.copyout(&mut server, 1, port, &msg, &mut d).unwrap();
    assert_eq!(msg.data, b"hello");
    assert_eq!(hdr.size as usize, HEADER_SIZE + 5);
    assert_eq!(hdr.reply_disposition(), D::MoveSendOnce as u8);
    assert_eq!(ipc.info(&server, hdr.reply), Ok(RightKind::SendOnce));
    // The reply uses the send-once right up.
    let rh = header(hdr.reply, D::MoveSendOnce, 0, D::None, 0, 100);
    let (rdest, rmsg) = ipc.copyin(&mut server, &rh, &[], vec![], &mut fx).unwrap();
    assert_eq!(rdest, client.lookup(reply_port).unwrap().port);
    assert_eq!(server.lookup(hdr.reply), Err(Error::InvalidName));
    ipc.enqueue(rdest, rmsg, &mut fx);
    assert_eq!(ipc.port(rdest).unwrap().send_onces, 0);
    // Send-once works once.
    assert_eq!(
        ipc.copyin(&mut server, &rh, &[], vec![], &mut fx)
            .unwrap_err(),
        Error::InvalidName
    );
}

#[test]
fn names_are_per_task_and_forged_names_fail() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let mut fx = Effects::default();
    // The server's receive-right name means nothing (or something else) in the client.
    let h = header(port, D::CopySend, 0, D::None, 0, 1);
    assert!(ipc.copyin(&mut client, &h, &[], vec![], &mut fx).is_err());
    // Made-up names.
    for forged in [0, 1, 0xffff_ffff_0000_0000, u64::MAX, send + (1 << 32)] {
        let h = header(forged, D::CopySend, 0, D::None, 0, 1);
        assert_eq!(
            ipc.copyin(&mut client, &h, &[], vec![], &mut fx)
                .unwrap_err(),
            Error::InvalidName,
            "{forged:#x}"
        );
    }
    // A right not held cannot be used: the client cannot make send rights or receive.
    assert_eq!(
        ipc.make_send(&mut client, send, false),
        Err(Error::InvalidRight)
    );
    assert_eq!(ipc.receive_port(&client, send), Err(Error::InvalidRight));
    // Wrong disposition for the right held.
    let h = header(send, D::MoveSendOnce, 0, D::None, 0, 1);
    assert_eq!(
        ipc.copyin(&mut client, &h, &[], vec![], &mut fx)
            .unwrap_err(),
        Error::InvalidRight
    );
    let _ = &mut server;
}

#[test]
fn failed_copyin_changes_nothing() {
    let (mut ipc, _server, mut client, _port, send) = setup();
    let mut fx = Effects::default();
    let mine = ipc.allocate(&mut client, 2, 0).unwrap();
    let before: Vec<_> = client.iter().collect();
    let sends = ipc.port(client.lookup(send).unwrap().port).unwrap().sends;
    // Good first descriptor, bad second: nothing may move.
    let h = header(send, D::CopySend, 0, D::None, 2, 1);
    let bad = [
        Descriptor::port(mine, D::MoveReceive),
        Descriptor::port(12345, D::MoveSend),
    ];
    assert_eq!(
        ipc.copyin(&mut client, &h, &bad, vec![], &mut fx)
            .unwrap_err(),
        Error::InvalidName
    );
    // The same name moved twice.
    let twice = [
        Descriptor::port(mine, D::MoveReceive),
        Descriptor::port(mine, D::MakeSend),
    ];
    assert_eq!(
        ipc.copyin(&mut client, &h, &twice, vec![], &mut fx)
            .unwrap_err(),
        Error::InvalidArgument
    );
    // Out-of-line memory is not there yet; unknown kinds are malformed.
    let h1 = header(send, D::CopySend, 0, D::None, 1, 1);
    let ool = Descriptor {
        kind: DESC_OOL,
        disposition: 0,
        value: 0x1000,
        size: 4096,
    };
    assert_eq!(
        ipc.copyin(&mut client, &h1, &[ool], vec![], &mut fx)
            .unwrap_err(),
        Error::NotSupported
    );
    let junk = Descriptor {
        kind: 77,
        ..Descriptor::default()
    };
    assert_eq!(
        ipc.copyin(&mut client, &h1, &[junk], vec![], &mut fx)
            .unwrap_err(),
        Error::InvalidArgument
    );
    assert_eq!(client.iter().collect::<Vec<_>>(), before);
    assert_eq!(
        ipc.port(client.lookup(send).unwrap().port).unwrap().sends,
        sends
    );
    assert!(fx.wake.is_empty());
}

#[test]
fn receive_right_moves_and_waiters_give_up() {
    let (mut ipc, mut server, mut client, _port, send) = setup();
    let mut fx = Effects::default();
    let moving = ipc.allocate(&mut client, 2, 0).unwrap();
    let pid = client.lookup(moving).unwrap().port;
    ipc.port_mut(pid).unwrap().receivers.push_back(41);
    let h = header(send, D::CopySend, 0, D::None, 1, 5);
    let (dest, msg) = ipc
        .copyin(
            &mut client,
            &h,
            &[Descriptor::port(moving, D::MoveReceive)],
            vec![],
            &mut fx,
        )
        .unwrap();
    assert_eq!(fx.wake, vec![(41, Wake::Fail(Error::InvalidName))]);
    assert_eq!(client.lookup(moving), Err(Error::InvalidName));
    assert_eq!(ipc.port(pid).unwrap().receiver, 0);
    ipc.enqueue(dest, msg, &mut fx);
    let msg = ipc.dequeue(dest, &mut fx).unwrap();
    let mut d = Vec::new();
    let server_port = server
        .iter()
        .find(|(_, e)| e.kind == Held::Receive)
        .unwrap()
        .0;
    ipc.copyout(&mut server, 1, server_port, &msg, &mut d)
        .unwrap();
    assert_eq!(ipc.info(&server, d[0].value), Ok(RightKind::Receive));
    assert_eq!(ipc.port(pid).unwrap().receiver, 1);
}

#[test]
fn destroying_a_port_makes_dead_names_and_notifies() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let mut fx = Effects::default();
    let notify = ipc.allocate(&mut client, 2, 0).unwrap();
    let notify_port = client.lookup(notify).unwrap().port;
    ipc.request_notify(&client, send, NOTIFY_KIND_DEAD_NAME, notify, &mut fx)
        .unwrap();
    let pid = server.lookup(port).unwrap().port;
    // A queued message carrying a send right to the notify port, and blocked threads.
    ipc.port_mut(pid).unwrap().receivers.push_back(1);
    ipc.port_mut(pid).unwrap().senders.push_back(2);
    ipc.release(&mut server, port, &mut fx).unwrap();
    assert_eq!(ipc.info(&client, send), Ok(RightKind::DeadName));
    let h = header(send, D::CopySend, 0, D::None, 0, 1);
    assert_eq!(
        ipc.copyin(&mut client, &h, &[], vec![], &mut fx)
            .unwrap_err(),
        Error::DeadName
    );
    assert!(fx.wake.contains(&(1, Wake::Fail(Error::InvalidName))));
    assert!(fx.wake.contains(&(2, Wake::Fail(Error::DeadName))));
    let n = ipc.dequeue(notify_port, &mut fx).unwrap();
    assert_eq!(n.id, NOTIFY_DEAD_NAME);
    assert_eq!((n.word, n.data.len(), n.data_len()), (Some(send), 0, 8));
    assert_eq!(ipc.port(notify_port).unwrap().send_onces, 0);
    // Dropping the dead name removes it.
    ipc.release(&mut client, send, &mut fx).unwrap();
    assert_eq!(client.lookup(send), Err(Error::InvalidName));
}

#[test]
fn no_senders_and_send_once_notifications() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let mut fx = Effects::default();
    let pid = server.lookup(port).unwrap().port;
    ipc.request_notify(&server, port, NOTIFY_KIND_NO_SENDERS, port, &mut fx)
        .unwrap();
    assert_eq!(ipc.queued(), 0, "one sender left: nothing yet");
    // An unused send-once right, dropped: the port hears about it.
    let once = ipc.make_send(&mut server, port, true).unwrap();
    ipc.release(&mut server, once, &mut fx).unwrap();
    assert_eq!(ipc.dequeue(pid, &mut fx).unwrap().id, NOTIFY_SEND_ONCE);
    // The last send right goes: no more senders.
    ipc.release(&mut client, send, &mut fx).unwrap();
    let n = ipc.dequeue(pid, &mut fx).unwrap();
    assert_eq!(n.id, NOTIFY_NO_SENDERS);
    assert_eq!(n.word, Some(port));
    let p = ipc.port(pid).unwrap();
    assert_eq!((p.sends, p.send_onces), (0, 0));
    // Asking when there are none fires at once.
    ipc.request_notify(&server, port, NOTIFY_KIND_NO_SENDERS, port, &mut fx)
        .unwrap();
    assert_eq!(ipc.dequeue(pid, &mut fx).unwrap().id, NOTIFY_NO_SENDERS);
}

#[test]
fn queued_rights_are_released_with_their_port() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let mut fx = Effects::default();
    // The client sends its own new port's receive right to the server and the server never
    // receives it; then the server's port dies. The inner port must die too.
    let inner = ipc.allocate(&mut client, 2, 0).unwrap();
    let inner_send = ipc.make_send(&mut client, inner, false).unwrap();
    let inner_pid = client.lookup(inner).unwrap().port;
    let h = header(send, D::CopySend, 0, D::None, 1, 3);
    let (dest, msg) = ipc
        .copyin(
            &mut client,
            &h,
            &[Descriptor::port(inner, D::MoveReceive)],
            vec![],
            &mut fx,
        )
        .unwrap();
    ipc.enqueue(dest, msg, &mut fx);
    let ports = ipc.ports();
    ipc.release(&mut server, port, &mut fx).unwrap();
    assert!(ipc.port(inner_pid).is_none());
    assert_eq!(ipc.ports(), ports - 2);
    assert_eq!(ipc.info(&client, inner_send), Ok(RightKind::DeadName));
    assert_eq!(ipc.queued(), 0);
}

#[test]
fn header_checks() {
    let ok = header(1, D::CopySend, 0, D::None, 2, 1);
    assert!(I::check_header(&ok, 4096).is_ok());
    let mut h = ok;
    h.bits |= 1 << 30;
    assert_eq!(I::check_header(&h, 4096), Err(Error::InvalidArgument));
    let mut h = ok;
    h.size = 10;
    assert_eq!(I::check_header(&h, 4096), Err(Error::InvalidArgument));
    let mut h = ok;
    h.size = 5000;
    assert_eq!(I::check_header(&h, 4096), Err(Error::TooLarge));
    let mut h = ok;
    h.id = KERNEL_ID_BASE;
    assert_eq!(I::check_header(&h, 4096), Err(Error::InvalidArgument));
    let h = header(1, D::CopySend, 0, D::None, 65, 1);
    assert_eq!(I::check_header(&h, 1 << 20), Err(Error::TooLarge));
}

#[test]
fn release_space_cleans_everything() {
    let (mut ipc, mut server, mut client, _port, send) = setup();
    let mut fx = Effects::default();
    let reply = ipc.allocate(&mut client, 2, 0).unwrap();
    let h = header(send, D::CopySend, reply, D::MakeSendOnce, 0, 9);
    let (dest, msg) = ipc
        .copyin(&mut client, &h, &[], vec![1, 2], &mut fx)
        .unwrap();
    ipc.enqueue(dest, msg, &mut fx);
    ipc.release_space(&mut server, &mut fx);
    ipc.release_space(&mut client, &mut fx);
    assert_eq!(ipc.ports(), 0);
    assert_eq!(ipc.queued(), 0);
    assert!(server.is_empty() && client.is_empty());
}

#[test]
fn random_operations_keep_counts_consistent() {
    // Random sequences of allocate / make_send / send with rights / receive / release on
    // two spaces; after each step the counts must match the rights that exist.
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut ipc = I::new();
    let mut spaces = [Space::new(), Space::new()];
    let mut fx = Effects::default();
    for _ in 0..5000 {
        let s = (next() % 2) as usize;
        let names: Vec<(u64, Entry)> = spaces[s].iter().collect();
        let pick = |r: u64| names.get(r as usize % names.len().max(1)).copied();
        match next() % 6 {
            0 => {
                let _ = ipc.allocate(&mut spaces[s], s as u64 + 1, 2);
            }
            1 => {
                if let Some((n, _)) = pick(next()) {
                    let _ = ipc.make_send(&mut spaces[s], n, next() % 2 == 0);
                }
            }
            2 => {
                if let (Some((dest, _)), Some((carry, _))) = (pick(next()), pick(next())) {
                    let disp = [D::CopySend, D::MoveSend, D::MoveSendOnce, D::MakeSend]
                        [next() as usize % 4];
                    let cd = [
                        D::MoveReceive,
                        D::MakeSend,
                        D::CopySend,
                        D::MoveSend,
                        D::MakeSendOnce,
                    ][next() as usize % 5];
                    let h = header(dest, disp, 0, D::None, 1, 1);
                    if let Ok(port) = ipc.dest_port(&spaces[s], &h) {
                        if ipc.port(port).is_some_and(|p| !p.is_full()) {
                            if let Ok((d, m)) = ipc.copyin(
                                &mut spaces[s],
                                &h,
                                &[Descriptor::port(carry, cd)],
                                vec![],
                                &mut fx,
                            ) {
                                ipc.enqueue(d, m, &mut fx);
                            }
                        }
                    }
                }
            }
            3 => {
                if let Some((n, _)) = pick(next()) {
                    if let Ok(port) = ipc.receive_port(&spaces[s], n) {
                        if let Some(m) = ipc.dequeue(port, &mut fx) {
                            let mut d = Vec::new();
                            match ipc.copyout(&mut spaces[s], s as u64 + 1, n, &m, &mut d) {
                                Ok(_) => {}
                                Err(_) => ipc.destroy_message(m, &mut fx),
                            }
                        }
                    }
                }
            }
            _ => {
                if let Some((n, _)) = pick(next()) {
                    ipc.release(&mut spaces[s], n, &mut fx).unwrap();
                }
            }
        }
        check_counts(&ipc, &spaces.iter().collect::<Vec<_>>());
    }
    for s in spaces.iter_mut() {
        ipc.release_space(s, &mut fx);
    }
    assert_eq!(ipc.ports(), 0);
    assert_eq!(ipc.queued(), 0);
}

/// Recounts every right and compares with the ports' counters.
fn check_counts(ipc: &I, spaces: &[&Space]) {
    use std::collections::BTreeMap;
    let mut sends: BTreeMap<PortId, u64> = BTreeMap::new();
    let mut onces: BTreeMap<PortId, u64> = BTreeMap::new();
    let mut receives: BTreeMap<PortId, u64> = BTreeMap::new();
    let mut count = |r: Right| match r.kind {
        Held::Send => *sends.entry(r.port).or_default() += 1,
        Held::SendOnce => *onces.entry(r.port).or_default() += 1,
        Held::Receive => *receives.entry(r.port).or_default() += 1,
    };
    for s in spaces {
        for (_, e) in s.iter() {
            count(Right {
                kind: e.kind,
                port: e.port,
            });
        }
    }
    let mut queued = 0;
    for (id, p) in ipc.ports.iter() {
        queued += p.queue.len();
        for m in &p.queue {
            m.rights
                .iter()
                .chain(m.reply.iter())
                .for_each(|&r| count(r));
        }
        let _ = id;
    }
    assert_eq!(queued, ipc.queued());
    for (id, p) in ipc.ports.iter() {
        assert_eq!(
            sends.get(&id).copied().unwrap_or(0),
            p.sends,
            "sends of {id:?}"
        );
        assert_eq!(
            receives.get(&id).copied().unwrap_or(0),
            1,
            "receive right of {id:?}"
        );
    }
    // Send-once counts include notification rights the kernel holds.
    let mut kernel: BTreeMap<PortId, u64> = BTreeMap::new();
    for (_, p) in ipc.ports.iter() {
        let dead = p.dead_names.iter().map(|&(n, _, _)| n);
        for n in p.no_senders.iter().map(|&(n, _)| n).chain(dead) {
            *kernel.entry(n).or_default() += 1;
        }
    }
    for (id, p) in ipc.ports.iter() {
        let want = onces.get(&id).copied().unwrap_or(0) + kernel.get(&id).copied().unwrap_or(0);
        assert_eq!(want, p.send_onces, "send-onces of {id:?}");
    }
}

/// Everything but the two RPC forms declines (the general path decides, and reports
/// errors), and deciding never changes anything.
#[test]
fn fast_path_declines() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let reply_port = ipc.allocate(&mut server, 1, 0).unwrap();
    let rcv = ipc.allocate(&mut client, 2, 0).unwrap();
    let sp = ipc.receive_port(&server, port).unwrap();
    ipc.port_mut(sp).unwrap().receivers.push_back(10);
    let ok = header(send, D::CopySend, rcv, D::MakeSendOnce, 0, 1);
    assert!(fast_transfer(&ipc, &client, &ok, 4096, rcv).is_some());
    let mut cases = vec![
        // A send without a reply right is not an RPC's.
        header(send, D::CopySend, 0, D::None, 0, 1),
        header(send, D::CopySend, rcv, D::MakeSendOnce, 1, 1),
        header(send, D::MoveSend, 0, D::None, 0, 1),
        header(send, D::CopySend, 0, D::None, 0, KERNEL_ID_BASE),
        header(send, D::CopySend, send, D::MakeSendOnce, 0, 1),
        header(send, D::CopySend, send, D::CopySend, 0, 1),
        header(send, D::CopySend, 5, D::None, 0, 1),
        header(send + 1, D::CopySend, 0, D::None, 0, 1),
        header(0, D::CopySend, 0, D::None, 0, 1),
        header(send, D::MoveSendOnce, 0, D::None, 0, 1),
    ];
    let mut reserved = ok;
    reserved.bits |= 1 << 24;
    cases.push(reserved);
    let mut small = ok;
    small.size = 8;
    cases.push(small);
    let mut big = ok;
    big.size = 4097;
    cases.push(big);
    for (i, h) in cases.iter().enumerate() {
        assert_eq!(
            fast_transfer(&ipc, &client, h, 4096, rcv),
            None,
            "case {i}: {h:?}"
        );
    }
    // The server's own receive right used as a destination, and a reply port in another
    // space.
    let own = header(port, D::CopySend, 0, D::None, 0, 1);
    assert_eq!(fast_transfer(&ipc, &server, &own, 4096, reply_port), None);
    let mut theirs = reply_port;
    while client.lookup(theirs).is_ok() {
        theirs = ipc.allocate(&mut server, 1, 0).unwrap();
    }
    let foreign = header(send, D::CopySend, theirs, D::MakeSendOnce, 0, 1);
    assert_eq!(fast_transfer(&ipc, &client, &foreign, 4096, rcv), None);
    // A dead destination.
    let mut fx = Effects::default();
    ipc.release(&mut server, port, &mut fx).unwrap();
    assert_eq!(fast_transfer(&ipc, &client, &ok, 4096, rcv), None);
}

/// An exception exchange through kernel-held rights: the kernel keeps a send right to the
/// handler's port and receives the reply on a port of its own; a dropped reply right comes
/// back as a send-once notification.
#[test]
fn kernel_held_rights_carry_an_exception_rpc() {
    let mut ipc = I::new();
    let mut handler = Space::new();
    let mut fx = Effects::default();
    let exc = ipc.allocate(&mut handler, 1, 0).unwrap();
    let exc_port = ipc.receive_port(&handler, exc).unwrap();
    assert_eq!(ipc.hold_send(&handler, exc), Ok(exc_port));
    assert_eq!(ipc.port(exc_port).unwrap().sends, 1);
    assert_eq!(ipc.hold_send(&handler, 12345), Err(Error::InvalidName));
    let reply = ipc.allocate_kernel().unwrap();
    assert_eq!(ipc.port(reply).unwrap().receiver, KERNEL_SPACE);

    // Raise: the message reaches the handler with a send-once reply right.
    ipc.send_kernel(exc_port, KERNEL_ID_BASE + 1, reply, vec![1, 2, 3], &mut fx)
        .unwrap();
    let msg = ipc.dequeue(exc_port, &mut fx).unwrap();
    let mut out = Vec::new();
    let h = ipc.copyout(&mut handler, 1, exc, &msg, &mut out).unwrap();
    assert_eq!(h.id, KERNEL_ID_BASE + 1);
    assert_eq!(msg.data, vec![1, 2, 3]);
    assert_eq!(ipc.info(&handler, h.reply), Ok(RightKind::SendOnce));

    // Reply: it lands on the kernel's port and uses the right up.
    let r = header(h.reply, D::MoveSendOnce, 0, D::None, 0, 9);
    let (dest, m) = ipc.copyin(&mut handler, &r, &[], vec![7], &mut fx).unwrap();
    assert_eq!(dest, reply);
    ipc.enqueue(dest, m, &mut fx);
    let got = ipc.dequeue(reply, &mut fx).unwrap();
    assert_eq!((got.id, got.data.as_slice()), (9, &[7u8][..]));
    assert_eq!(ipc.port(reply).unwrap().send_onces, 0);

    // A second raise whose reply right is dropped: a send-once notification.
    ipc.send_kernel(exc_port, KERNEL_ID_BASE + 1, reply, vec![], &mut fx)
        .unwrap();
    let msg = ipc.dequeue(exc_port, &mut fx).unwrap();
    let h = ipc.copyout(&mut handler, 1, exc, &msg, &mut out).unwrap();
    ipc.release(&mut handler, h.reply, &mut fx).unwrap();
    let n = ipc.dequeue(reply, &mut fx).unwrap();
    assert_eq!(n.id, NOTIFY_SEND_ONCE);

    // Everything given back: only the handler's own port is left.
    ipc.release_held_send(exc_port, &mut fx);
    ipc.destroy_kernel(reply, &mut fx);
    assert_eq!(ipc.port(exc_port).unwrap().sends, 0);
    assert_eq!(ipc.ports(), 1);
    assert_eq!(ipc.queued(), 0);
    // A dead destination is refused, and a task's port is not the kernel's to destroy.
    ipc.destroy_kernel(exc_port, &mut fx);
    assert_eq!(ipc.ports(), 1);
    let gone = ipc.allocate_kernel().unwrap();
    ipc.destroy_kernel(gone, &mut fx);
    assert_eq!(
        ipc.send_kernel(gone, KERNEL_ID_BASE, exc_port, vec![], &mut fx),
        Err(Error::DeadName)
    );
}

/// A kernel-sent fast-path message (an exception raised while the handler waits) makes the
/// moves of `send_kernel` and `copyout`: the handler gets the same header and a send-once
/// right to the kernel's port, the handler leaves the destination's receivers and the
/// faulting thread joins the kernel port's; the handler's fast reply then uses the right
/// up. Without a waiting receiver, with a queued message, with a pool, or with dead or
/// equal ports, the plan declines.
#[test]
fn fast_plan_kernel_carries_an_exception_rpc() {
    let mut ipc = I::new();
    let mut handler = Space::new();
    let mut fx = Effects::default();
    let exc = ipc.allocate(&mut handler, 1, 0).unwrap();
    let exc_port = ipc.receive_port(&handler, exc).unwrap();
    ipc.hold_send(&handler, exc).unwrap();
    let reply = ipc.allocate_kernel().unwrap();
    let id = KERNEL_ID_BASE + 1;
    assert_eq!(
        ipc.fast_plan_kernel(exc_port, reply, id, 64),
        None,
        "nobody waits"
    );
    ipc.port_mut(exc_port).unwrap().receivers.push_back(10);
    assert_eq!(ipc.fast_plan_kernel(exc_port, exc_port, id, 64), None);
    let dead = ipc.allocate_kernel().unwrap();
    ipc.destroy_kernel(dead, &mut fx);
    assert_eq!(ipc.fast_plan_kernel(exc_port, dead, id, 64), None);
    assert_eq!(ipc.fast_plan_kernel(dead, reply, id, 64), None);
    ipc.port_mut(exc_port).unwrap().pool.attached = 1;
    assert_eq!(ipc.fast_plan_kernel(exc_port, reply, id, 64), None);
    ipc.port_mut(exc_port).unwrap().pool.attached = 0;
    ipc.send_kernel(exc_port, id, reply, vec![], &mut fx)
        .unwrap();
    assert_eq!(
        ipc.fast_plan_kernel(exc_port, reply, id, 64),
        None,
        "queued"
    );
    // What the general path delivers, for comparison.
    let msg = ipc.dequeue(exc_port, &mut fx).unwrap();
    let mut out = Vec::new();
    let general = ipc.copyout(&mut handler, 1, exc, &msg, &mut out).unwrap();
    ipc.release(&mut handler, general.reply, &mut fx).unwrap();
    ipc.dequeue(reply, &mut fx).unwrap();
    ipc.port_mut(exc_port).unwrap().receivers.push_back(10);

    let plan = ipc.fast_plan_kernel(exc_port, reply, id, 64).unwrap();
    assert_eq!(
        (plan.receiver, plan.own, plan.msg.dest),
        (10, reply, exc_port)
    );
    let before = ipc.ports();
    ipc.port_mut(reply).unwrap().receivers.reserve(1).unwrap();
    ipc.port_mut(reply).unwrap().reserve_queue(1).unwrap();
    let got = ipc.fast_commit_call(&mut handler, &plan, exc, 20).unwrap();
    assert_eq!(ipc.ports(), before);
    assert_eq!(
        (got.bits, got.dest, got.id),
        (general.bits, general.dest, general.id)
    );
    assert_eq!(got.size, 64);
    assert_eq!(ipc.info(&handler, got.reply), Ok(RightKind::SendOnce));
    assert_eq!(ipc.port(reply).unwrap().send_onces, 1);
    assert!(ipc.port(exc_port).unwrap().receivers.is_empty());
    assert_eq!(ipc.port(reply).unwrap().receivers.front(), Some(20));

    // The handler's reply through the right, while it receives on its port again.
    let r = header(got.reply, D::MoveSendOnce, 0, D::None, 0, 9);
    let back = match ipc.fast_plan(&handler, &r, 4096, exc) {
        Some(Fast::Transfer(p)) => p,
        other => panic!("the reply should take the fast path: {other:?}"),
    };
    assert_eq!(
        (back.receiver, back.msg.dest, back.own),
        (20, reply, exc_port)
    );
    ipc.fast_commit_reply(&mut handler, &back, 0, 10).unwrap();
    assert_eq!(ipc.port(reply).unwrap().send_onces, 0);
    assert_eq!(ipc.info(&handler, got.reply), Err(Error::InvalidName));
    assert_eq!(ipc.port(exc_port).unwrap().receivers.front(), Some(10));
    assert!(ipc.port(reply).unwrap().receivers.is_empty());
    ipc.release_held_send(exc_port, &mut fx);
    ipc.destroy_kernel(reply, &mut fx);
    assert_eq!((ipc.ports(), ipc.queued()), (1, 0));
}

/// Dead-name requests belong to the space that made them: the same name number in two
/// spaces is two requests, and cancelling one leaves the other.
#[test]
fn dead_name_requests_are_per_space() {
    let mut ipc = I::new();
    let mut fx = Effects::default();
    let mut server = Space::with_id(1);
    let mut a = Space::with_id(2);
    let mut b = Space::with_id(3);
    let name = ipc.allocate(&mut server, 1, 0).unwrap();
    let port = ipc.receive_port(&server, name).unwrap();
    let na = ipc.grant_send(&mut a, port).unwrap();
    let nb = ipc.grant_send(&mut b, port).unwrap();
    assert_eq!(na, nb, "fresh spaces hand out the same first name");
    let notify_a = ipc.allocate(&mut a, 2, 0).unwrap();
    let notify_b = ipc.allocate(&mut b, 3, 0).unwrap();
    ipc.request_notify(&a, na, NOTIFY_KIND_DEAD_NAME, notify_a, &mut fx)
        .unwrap();
    ipc.request_notify(&b, nb, NOTIFY_KIND_DEAD_NAME, notify_b, &mut fx)
        .unwrap();
    // A cancels its request; B's stays.
    ipc.request_notify(&a, na, NOTIFY_KIND_DEAD_NAME, 0, &mut fx)
        .unwrap();
    ipc.release(&mut server, name, &mut fx).unwrap();
    let pa = ipc.receive_port(&a, notify_a).unwrap();
    let pb = ipc.receive_port(&b, notify_b).unwrap();
    assert!(
        ipc.dequeue(pa, &mut fx).is_none(),
        "A cancelled its request"
    );
    let m = ipc
        .dequeue(pb, &mut fx)
        .expect("B's request survives A's cancel");
    assert_eq!(m.id, NOTIFY_DEAD_NAME);
    assert_eq!(m.word, Some(nb));
}

/// A dead-name request goes with its name: releasing or moving the right cancels it, so
/// requests cannot pile up on a port and no notification names a released name.
#[test]
fn dead_name_requests_go_with_their_name() {
    let mut ipc = I::new();
    let mut fx = Effects::default();
    let mut server = Space::with_id(1);
    let mut client = Space::with_id(2);
    let name = ipc.allocate(&mut server, 1, 0).unwrap();
    let port = ipc.receive_port(&server, name).unwrap();
    let notify = ipc.allocate(&mut client, 2, 0).unwrap();
    let np = ipc.receive_port(&client, notify).unwrap();
    for _ in 0..16 {
        let s = ipc.grant_send(&mut client, port).unwrap();
        ipc.request_notify(&client, s, NOTIFY_KIND_DEAD_NAME, notify, &mut fx)
            .unwrap();
        ipc.release(&mut client, s, &mut fx).unwrap();
    }
    assert_eq!(ipc.port(np).unwrap().send_onces, 0, "kernel rights dropped");
    ipc.release(&mut server, name, &mut fx).unwrap();
    assert!(
        ipc.dequeue(np, &mut fx).is_none(),
        "no notification for released names"
    );
}

/// Receive rights cannot be queued in a cycle (each in the other's queue), which nothing
/// could ever receive or reclaim.
#[test]
fn receive_right_cycles_are_refused() {
    let mut ipc = I::new();
    let mut fx = Effects::default();
    let mut t = Space::with_id(1);
    let a = ipc.allocate(&mut t, 1, 0).unwrap();
    let b = ipc.allocate(&mut t, 1, 0).unwrap();
    let c = ipc.allocate(&mut t, 1, 0).unwrap();
    let sa = ipc.make_send(&mut t, a, false).unwrap();
    let sb = ipc.make_send(&mut t, b, false).unwrap();
    let sc = ipc.make_send(&mut t, c, false).unwrap();
    // b into a's queue, then c into b's: a chain, fine.
    let h = header(sa, D::CopySend, 0, D::None, 1, 1);
    let (d, m) = ipc
        .copyin(
            &mut t,
            &h,
            &[Descriptor::port(b, D::MoveReceive)],
            vec![],
            &mut fx,
        )
        .unwrap();
    ipc.enqueue(d, m, &mut fx);
    let h = header(sb, D::CopySend, 0, D::None, 1, 1);
    let (d, m) = ipc
        .copyin(
            &mut t,
            &h,
            &[Descriptor::port(c, D::MoveReceive)],
            vec![],
            &mut fx,
        )
        .unwrap();
    ipc.enqueue(d, m, &mut fx);
    // a into c's queue would close the cycle a -> b -> c -> a.
    let h = header(sc, D::CopySend, 0, D::None, 1, 1);
    assert_eq!(
        ipc.copyin(
            &mut t,
            &h,
            &[Descriptor::port(a, D::MoveReceive)],
            vec![],
            &mut fx
        )
        .map(|_| ()),
        Err(Error::InvalidArgument)
    );
    assert_eq!(ipc.info(&t, a), Ok(RightKind::Receive), "nothing moved");
    // Destroying a reclaims the whole chain.
    ipc.release(&mut t, a, &mut fx).unwrap();
    for n in [sa, sb, sc] {
        ipc.release(&mut t, n, &mut fx).unwrap();
    }
    assert_eq!(ipc.ports(), 0);
    assert_eq!(ipc.queued(), 0);
}

/// `fast_plan` + `fast_commit_call`/`fast_commit_reply` make the moves of the general path for a call and its
/// reply, take the receiver off the destination and queue the caller on its own port, and
/// leave every count consistent.
#[test]
fn fast_plan_and_commit_call_and_reply() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let reply_port = ipc.allocate(&mut client, 2, 0).unwrap();
    let sp = ipc.receive_port(&server, port).unwrap();
    let rp = ipc.receive_port(&client, reply_port).unwrap();
    // No receiver waits yet: the general path must queue.
    let call = header(send, D::CopySend, reply_port, D::MakeSendOnce, 0, 42);
    assert!(fast_transfer(&ipc, &client, &call, 4096, reply_port).is_none());
    ipc.port_mut(sp).unwrap().receivers.push_back(10);
    let plan = fast_transfer(&ipc, &client, &call, 4096, reply_port)
        .expect("a call to a waiting server takes the fast path");
    assert_eq!((plan.receiver, plan.own, plan.msg.dest), (10, rp, sp));
    assert!(plan.msg.call);
    // The caller's port has no room among its receivers yet: the commit declines and
    // changes nothing (the general path grows the ring, or fails the call).
    assert!(ipc.fast_commit_call(&mut server, &plan, port, 20).is_none());
    assert_eq!(ipc.port(sp).unwrap().receivers.front(), Some(10));
    assert_eq!(ipc.port(rp).unwrap().send_onces, 0);
    ipc.port_mut(rp).unwrap().receivers.reserve(1).unwrap();
    ipc.port_mut(rp).unwrap().reserve_queue(1).unwrap();
    let got = ipc.fast_commit_call(&mut server, &plan, port, 20).unwrap();
    assert_eq!((got.dest, got.id), (port, 42));
    assert_eq!(got.reply_disposition(), D::MoveSendOnce as u8);
    assert_eq!(ipc.info(&server, got.reply), Ok(RightKind::SendOnce));
    assert!(ipc.port(sp).unwrap().receivers.is_empty());
    assert_eq!(ipc.port(rp).unwrap().receivers.front(), Some(20));
    assert_eq!(ipc.port(rp).unwrap().send_onces, 1);
    check_counts(&ipc, &[&server, &client]);

    // The reply, through the send-once right, to the client waiting on its reply port.
    let reply = header(got.reply, D::MoveSendOnce, 0, D::None, 0, 142);
    let plan =
        fast_transfer(&ipc, &server, &reply, 4096, port).expect("the reply takes the fast path");
    assert_eq!((plan.receiver, plan.own, plan.msg.dest), (20, sp, rp));
    assert!(!plan.msg.call);
    let back = ipc
        .fast_commit_reply(&mut server, &plan, reply_port, 10)
        .unwrap();
    assert_eq!((back.dest, back.reply, back.id), (reply_port, 0, 142));
    assert_eq!(ipc.info(&server, got.reply), Err(Error::InvalidName));
    assert_eq!(ipc.port(rp).unwrap().send_onces, 0);
    assert_eq!(ipc.port(sp).unwrap().receivers.front(), Some(10));
    assert!(ipc.port(rp).unwrap().receivers.is_empty());
    assert_eq!(
        ipc.port(sp).unwrap().sends,
        1,
        "the copied send right is untouched"
    );
    check_counts(&ipc, &[&server, &client]);
}

/// A reply right made from another receive right than the one the caller receives on, a
/// queued message on either port, the destination being the caller's own port, and a
/// receive name that is not a receive right all decline, with nothing changed; a request
/// whose receiver has no room for the reply right commits nothing.
#[test]
fn fast_plan_declines_and_full_receivers() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let reply_port = ipc.allocate(&mut client, 2, 0).unwrap();
    let other = ipc.allocate(&mut client, 2, 0).unwrap();
    let sp = ipc.receive_port(&server, port).unwrap();
    ipc.port_mut(sp).unwrap().receivers.push_back(10);
    let call = header(send, D::CopySend, reply_port, D::MakeSendOnce, 0, 1);
    // A reply right from another port than the one received on: the general path's.
    let elsewhere = header(send, D::CopySend, other, D::MakeSendOnce, 0, 1);
    assert!(fast_transfer(&ipc, &client, &elsewhere, 4096, reply_port).is_none());
    // Not a receive right to receive on; the destination as the receive port.
    assert!(fast_transfer(&ipc, &client, &call, 4096, send).is_none());
    let own = header(port, D::CopySend, 0, D::None, 0, 1);
    assert!(fast_transfer(&ipc, &server, &own, 4096, port).is_none());
    let before = (ipc.ports(), client.len(), server.len());
    let plan = fast_transfer(&ipc, &client, &call, 4096, reply_port).unwrap();
    assert_eq!(
        (ipc.ports(), client.len(), server.len()),
        before,
        "planning changes nothing"
    );
    // A message queued on the caller's port (its receive would not block): the commit
    // declines and changes nothing.
    let mut fx = Effects::default();
    let ping = header(reply_port, D::MakeSend, 0, D::None, 0, 5);
    let (d, m) = ipc
        .copyin(&mut client, &ping, &[], vec![], &mut fx)
        .unwrap();
    ipc.enqueue(d, m, &mut fx);
    let before = (ipc.ports(), client.len(), server.len());
    assert_eq!(ipc.fast_commit_call(&mut server, &plan, port, 20), None);
    assert_eq!((ipc.ports(), client.len(), server.len()), before);
    assert_eq!(ipc.port(sp).unwrap().receivers.front(), Some(10));
    let m = ipc.dequeue(d, &mut fx).unwrap();
    ipc.destroy_message(m, &mut fx);
    // The receiver's space is full: the commit declines and changes nothing.
    let mut full = Space::new();
    while full.room() > 0 {
        ipc.allocate(&mut full, 1, 0).unwrap();
    }
    let rp = ipc.receive_port(&client, reply_port).unwrap();
    ipc.port_mut(rp).unwrap().receivers.reserve(1).unwrap();
    ipc.port_mut(rp).unwrap().reserve_queue(1).unwrap();
    assert_eq!(ipc.fast_commit_call(&mut full, &plan, port, 20), None);
    assert_eq!(ipc.port(sp).unwrap().receivers.front(), Some(10));
    assert!(ipc.port(rp).unwrap().receivers.is_empty());
    assert_eq!(ipc.port(rp).unwrap().send_onces, 0);
    let got = ipc.fast_commit_call(&mut server, &plan, port, 20).unwrap();
    assert_eq!(ipc.port(rp).unwrap().send_onces, 1);
    assert_eq!(ipc.info(&server, got.reply), Ok(RightKind::SendOnce));
    check_counts(&ipc, &[&server, &client, &full]);
}

/// `fast_plan`'s transfer plan, if it makes one.
fn fast_transfer(
    ipc: &I,
    space: &Space,
    header: &MsgHeader,
    limit: usize,
    rcv_name: u64,
) -> Option<FastPlan<u32>> {
    match ipc.fast_plan(space, header, limit, rcv_name)? {
        Fast::Transfer(p) => Some(p),
        Fast::Migrate(_) => None,
    }
}

/// A call to a port with activations migrates; a reply through a send-once right to such a
/// port does not.
#[test]
fn fast_plan_sends_calls_to_pools_to_migrate() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let reply_port = ipc.allocate(&mut client, 2, 0).unwrap();
    let sp = ipc.receive_port(&server, port).unwrap();
    ipc.port_mut(sp).unwrap().pool.attached = 1;
    let call = header(send, D::CopySend, reply_port, D::MakeSendOnce, 0, 42);
    assert_eq!(
        ipc.fast_plan(&client, &call, 4096, reply_port),
        Some(Fast::Migrate(sp))
    );
    let once = ipc.make_send(&mut server, port, true).unwrap();
    let srv_rcv = ipc.allocate(&mut server, 1, 0).unwrap();
    ipc.port_mut(sp).unwrap().receivers.push_back(3);
    let reply = header(once, D::MoveSendOnce, 0, D::None, 0, 1);
    assert!(matches!(
        ipc.fast_plan(&server, &reply, 4096, srv_rcv),
        Some(Fast::Transfer(_)) | None
    ));
    assert_ne!(
        ipc.fast_plan(&server, &reply, 4096, srv_rcv),
        Some(Fast::Migrate(sp))
    );
}

/// Every send-once right has room waiting in its port's queue, made when the right was
/// made: destroying many of them at once (a task ending) queues their notifications
/// without the queue growing, so teardown never allocates there.
#[test]
fn send_once_notifications_never_grow_a_queue() {
    let mut ipc = I::new();
    let mut owner = Space::new();
    let mut holder = Space::new();
    let mut fx = Effects::default();
    let port = ipc.allocate(&mut owner, 1, 0).unwrap();
    let pid = ipc.receive_port(&owner, port).unwrap();
    for _ in 0..100 {
        let once = ipc.make_send(&mut owner, port, true).unwrap();
        // Moved to another space, as a reply right travels.
        let e = owner.lookup(once).unwrap();
        owner.remove(once);
        holder.insert(e).unwrap();
    }
    let p = ipc.port(pid).unwrap();
    assert_eq!(p.send_onces, 100);
    assert!(
        p.queue.capacity() >= 100,
        "room for every send-once's message"
    );
    let capacity = p.queue.capacity();
    ipc.release_space(&mut holder, &mut fx);
    let p = ipc.port(pid).unwrap();
    assert_eq!((p.queue.len(), p.send_onces), (100, 0));
    assert_eq!(
        p.queue.capacity(),
        capacity,
        "the notifications did not grow the queue"
    );
}

/// Ending a task releases its rights one by one on the kept work list, which has room for
/// every right inside a queued message (made when each message was made): ports whose
/// queues hold messages carrying receive rights of further ports are torn down, chain and
/// all, without the list growing.
#[test]
fn releasing_a_space_never_grows_the_work_list() {
    let mut ipc = I::new();
    let mut owner = Space::with_id(1);
    let mut fx = Effects::default();
    // A chain: port i's queue holds a message carrying port i+1's receive right (and a
    // send right and a reply right, for good measure).
    let first = ipc.allocate(&mut owner, 1, 0).unwrap();
    let mut send = ipc.make_send(&mut owner, first, false).unwrap();
    for i in 0..50 {
        let next = ipc.allocate(&mut owner, 1, 0).unwrap();
        let next_send = ipc.make_send(&mut owner, next, false).unwrap();
        let extra = ipc.allocate(&mut owner, 1, 0).unwrap();
        let h = header(send, D::MoveSend, extra, D::MakeSendOnce, 2, i);
        let descriptors = [
            Descriptor::port(next, D::MoveReceive),
            Descriptor::port(extra, D::MakeSend),
        ];
        let (dest, msg) = ipc
            .copyin(&mut owner, &h, &descriptors, vec![], &mut fx)
            .unwrap();
        ipc.enqueue(dest, msg, &mut fx);
        send = next_send;
    }
    assert_eq!(ipc.rights_queued, 150);
    let capacity = ipc.work.capacity();
    assert!(
        capacity > 150,
        "room for every queued right and a first one"
    );
    ipc.release_space(&mut owner, &mut fx);
    assert_eq!((ipc.ports(), ipc.queued(), ipc.rights_queued), (0, 0, 0));
    assert_eq!(ipc.work.capacity(), capacity, "the work list did not grow");
}

#[test]
fn check_header_accepts_exactly_the_limits() {
    let n = DESCRIPTORS_MAX;
    let size = HEADER_SIZE + n * DESCRIPTOR_SIZE;
    let mut h = MsgHeader {
        bits: MsgHeader::make_bits(D::CopySend, D::None, n as u8),
        size: size as u32,
        dest: 1,
        reply: 0,
        id: 1,
    };
    // As many descriptors as allowed, in a message exactly as large as the limit.
    assert_eq!(I::check_header(&h, size), Ok(()));
    assert_eq!(I::check_header(&h, size - 1), Err(Error::TooLarge));
    h.bits = MsgHeader::make_bits(D::CopySend, D::None, n as u8 + 1);
    h.size += DESCRIPTOR_SIZE as u32;
    assert_eq!(I::check_header(&h, usize::MAX), Err(Error::TooLarge));
    // The size must cover the header and every descriptor.
    h.bits = MsgHeader::make_bits(D::CopySend, D::None, 2);
    h.size = (HEADER_SIZE + 2 * DESCRIPTOR_SIZE) as u32;
    assert_eq!(I::check_header(&h, usize::MAX), Ok(()));
    h.size -= 1;
    assert_eq!(I::check_header(&h, usize::MAX), Err(Error::InvalidArgument));
}

#[test]
fn no_senders_waits_for_a_send_right_made_in_the_same_message() {
    // The last send right is the destination of a message (moved, so given up) that
    // carries a send right to the same port, made from its receive right: the port never
    // has no senders, and must not be told so.
    let mut ipc = I::new();
    let mut s = Space::with_id(1);
    let mut fx = Effects::default();
    let port = ipc.allocate(&mut s, 1, 0).unwrap();
    let notify = ipc.allocate(&mut s, 1, 0).unwrap();
    let send = ipc.make_send(&mut s, port, false).unwrap();
    ipc.request_notify(&s, port, NOTIFY_KIND_NO_SENDERS, notify, &mut fx)
        .unwrap();
    let h = header(send, D::MoveSend, 0, D::None, 1, 6);
    let made = [Descriptor::port(port, D::MakeSend)];
    let (dest, msg) = ipc.copyin(&mut s, &h, &made, vec![], &mut fx).unwrap();
    ipc.enqueue(dest, msg, &mut fx);
    let notify_port = s.lookup(notify).unwrap().port;
    assert_eq!(ipc.port(dest).unwrap().sends, 1);
    assert_eq!(
        ipc.port(notify_port).unwrap().queue.len(),
        0,
        "no notification"
    );
    // Receiving the message and dropping that right is the real end of the senders.
    let msg = ipc.dequeue(dest, &mut fx).unwrap();
    let mut d = Vec::new();
    ipc.copyout(&mut s, 1, port, &msg, &mut d).unwrap();
    ipc.release(&mut s, d[0].value, &mut fx).unwrap();
    let q = &ipc.port(notify_port).unwrap().queue;
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].id, NOTIFY_NO_SENDERS);
}

/// A name the space cannot make (its account is at its limit, or the heap has no room)
/// fails the copyout with nothing done: the names made go again, no right moves (a receive
/// right keeps its receiver), and the same message can be taken later.
#[test]
fn copyout_that_cannot_make_a_name_changes_nothing() {
    let (mut ipc, server, _client, port, _send) = setup();
    let pid = server.lookup(port).unwrap().port;
    let mut s = Space::with_id(3);
    // Room in the account for the space's first name slot and one more.
    let account = crate::quota::Account::root(2 * space::NAME_SLOT_BYTES, 0).unwrap();
    s.set_account(account.clone()).unwrap();
    let me = ipc.allocate(&mut s, 3, 0).unwrap();
    let moving = ipc.allocate(&mut s, 3, 0).unwrap();
    let recv = s.lookup(moving).unwrap().port;
    s.remove(moving);
    let before = s.len();
    let msg = Message {
        reply: Some(Right {
            kind: Held::Send,
            port: pid,
        }),
        rights: vec![Right {
            kind: Held::Receive,
            port: recv,
        }],
        ..Message::default()
    };
    let receiver_before = ipc.port(recv).unwrap().receiver;
    let mut out = Vec::new();
    // The reply's name reuses the freed slot; the receive right needs a new slot, which
    // the account refuses.
    let got = ipc.copyout(&mut s, 3, me, &msg, &mut out);
    assert!(got.is_err(), "{got:?}");
    assert_eq!(s.len(), before, "the reply's name went again");
    assert!(out.is_empty());
    assert_eq!(
        ipc.port(recv).unwrap().receiver,
        receiver_before,
        "nothing moved"
    );
    // With room, the same message is taken.
    s.set_account(crate::quota::Account::root(1 << 20, 0).unwrap())
        .unwrap();
    let h = ipc.copyout(&mut s, 3, me, &msg, &mut out).unwrap();
    assert_eq!((h.descriptors(), out.len()), (1, 1));
    assert_eq!(ipc.port(recv).unwrap().receiver, 3);
}

#[test]
fn copyout_needs_room_for_every_right_and_the_reply() {
    let (mut ipc, server, _client, port, _send) = setup();
    let pid = server.lookup(port).unwrap().port;
    let mut full = Space::with_id(3);
    let me = ipc.allocate(&mut full, 3, 0).unwrap();
    // Fill the space up to one free name.
    while full.room() > 1 {
        full.insert(Entry {
            kind: Held::Send,
            port: pid,
        })
        .unwrap();
    }
    let right = Right {
        kind: Held::Send,
        port: pid,
    };
    let one = Message {
        rights: vec![right],
        ..Message::default()
    };
    let mut out = Vec::new();
    let two = Message {
        reply: Some(right),
        rights: vec![right],
        ..Message::default()
    };
    assert_eq!(
        ipc.copyout(&mut full, 3, me, &two, &mut out),
        Err(Error::NoSpace),
        "a right and a reply need two names"
    );
    assert_eq!(full.room(), 1, "nothing inserted");
    let h = ipc.copyout(&mut full, 3, me, &one, &mut out).unwrap();
    assert_eq!(h.descriptors(), 1);
    assert_eq!(full.room(), 0);
}

#[test]
fn a_name_gone_cancels_only_its_own_dead_name_request() {
    // Two spaces name the same port with the same number, a third name in the first space
    // too; each asks for a dead-name notification. Releasing one name cancels its request
    // only.
    let mut ipc = I::new();
    let mut owner = Space::with_id(1);
    let mut a = Space::with_id(2);
    let mut b = Space::with_id(3);
    let mut fx = Effects::default();
    let port = ipc.allocate(&mut owner, 1, 0).unwrap();
    let pid = owner.lookup(port).unwrap().port;
    let na = ipc.grant_send(&mut a, pid).unwrap();
    let nb = ipc.grant_send(&mut b, pid).unwrap();
    assert_eq!(na, nb, "the same number in two spaces");
    let na2 = ipc.grant_send(&mut a, pid).unwrap();
    let notify_a = ipc.allocate(&mut a, 2, 0).unwrap();
    let notify_b = ipc.allocate(&mut b, 3, 0).unwrap();
    for (space, name, notify) in [(&a, na, notify_a), (&a, na2, notify_a), (&b, nb, notify_b)] {
        ipc.request_notify(space, name, NOTIFY_KIND_DEAD_NAME, notify, &mut fx)
            .unwrap();
    }
    ipc.release(&mut a, na, &mut fx).unwrap();
    ipc.release(&mut owner, port, &mut fx).unwrap();
    let queued = |s: &Space, n| ipc.port(s.lookup(n).unwrap().port).unwrap().queue.len();
    assert_eq!(queued(&a, notify_a), 1, "the other name of the same space");
    assert_eq!(queued(&b, notify_b), 1, "the same number in another space");
}

#[test]
fn a_message_for_a_dead_port_gives_its_rights_back() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let mut fx = Effects::default();
    let mine = ipc.allocate(&mut client, 2, 0).unwrap();
    let mid = client.lookup(mine).unwrap().port;
    let h = header(send, D::CopySend, 0, D::None, 1, 1);
    let (dest, msg) = ipc
        .copyin(
            &mut client,
            &h,
            &[Descriptor::port(mine, D::MakeSend)],
            vec![],
            &mut fx,
        )
        .unwrap();
    assert_eq!(ipc.port(mid).unwrap().sends, 1);
    // The destination dies before the message is queued.
    ipc.release(&mut server, port, &mut fx).unwrap();
    ipc.enqueue(dest, msg, &mut fx);
    assert_eq!(
        ipc.port(mid).unwrap().sends,
        0,
        "the carried send right is released"
    );
    assert_eq!(ipc.queued(), 0);
}

/// A call migrates from a fast path only with a reply right the general path would also
/// take and that it can check without moving anything: none, or a send-once right made
/// from a receive right. A wrong right, a name that is not one, or another valid form
/// leaves the call to the general path.
#[test]
fn migration_takes_only_reply_rights_the_general_path_takes() {
    let mut ipc = I::new();
    let mut space = Space::new();
    let own = ipc.allocate(&mut space, 1, 0).unwrap();
    let send = ipc.make_send(&mut space, own, false).unwrap();
    let ok = |h: &MsgHeader| fast::migration_reply_ok(&space, h);
    assert!(ok(&header(send, D::CopySend, 0, D::None, 0, 7)));
    assert!(ok(&header(send, D::CopySend, own, D::MakeSendOnce, 0, 7)));
    // None with a name, a send-once right made from a send right or from nothing.
    assert!(!ok(&header(send, D::CopySend, own, D::None, 0, 7)));
    assert!(!ok(&header(send, D::CopySend, send, D::MakeSendOnce, 0, 7)));
    assert!(!ok(&header(
        send,
        D::CopySend,
        0x999,
        D::MakeSendOnce,
        0,
        7
    )));
    // Other dispositions, valid or not, go the general way.
    for d in [
        D::MoveReceive,
        D::MakeSend,
        D::CopySend,
        D::MoveSend,
        D::MoveSendOnce,
    ] {
        assert!(!ok(&header(send, D::CopySend, own, d, 0, 7)), "{d:?}");
    }
    let mut unknown = header(send, D::CopySend, own, D::None, 0, 7);
    unknown.bits |= 9 << 8;
    assert!(!ok(&unknown));
}

#[test]
fn a_watched_port_is_reported_once_when_it_dies() {
    let (mut ipc, mut server, client, port, send) = setup();
    let mut fx = Effects::default();
    let held = ipc.hold_send(&client, send).unwrap();
    let other = ipc.allocate(&mut server, 1, 0).unwrap();
    let other_id = server.lookup(other).unwrap().port;
    assert_eq!(ipc.watch(held), Ok(()));
    assert_eq!(ipc.watch(held), Ok(()));
    assert_eq!(ipc.watch(other_id), Ok(()));
    ipc.unwatch(other_id);
    assert_eq!(ipc.take_died(), None);
    // The server's end goes: the watched port dies, the unwatched one is not reported.
    ipc.release_space(&mut server, &mut fx);
    assert_eq!(ipc.take_died(), Some(held));
    assert_eq!(ipc.take_died(), None);
    assert_eq!(ipc.watch(held), Err(Error::DeadName));
    let _ = port;
    ipc.release_held_send(held, &mut fx);
}

#[test]
fn a_reaped_port_is_orphaned_when_its_last_send_right_goes_and_only_then() {
    let mut ipc: Ipc<u32> = Ipc::new();
    let mut fx = Effects::default();
    let (mut a, mut b) = (Space::new(), Space::new());
    let port = ipc.allocate_kernel().unwrap();
    ipc.reap_on_no_senders(port).unwrap();
    // Marked twice, or a port the kernel does not hold: refused.
    assert_eq!(ipc.reap_on_no_senders(port), Err(Error::InvalidRight));
    let user = ipc.allocate(&mut a, 1, 0).unwrap();
    let user_port = a.lookup(user).unwrap().port;
    assert_eq!(ipc.reap_on_no_senders(user_port), Err(Error::InvalidRight));
    let na = ipc.grant_send(&mut a, port).unwrap();
    let nb = ipc.grant_send(&mut b, port).unwrap();
    ipc.release(&mut a, na, &mut fx).unwrap();
    assert!(!ipc.has_orphans(), "one sender left");
    ipc.release(&mut b, nb, &mut fx).unwrap();
    assert!(ipc.has_orphans());
    assert_eq!(ipc.take_orphan(), Some(port));
    assert_eq!(ipc.take_orphan(), None);
    ipc.destroy_kernel(port, &mut fx);
    assert!(ipc.port(port).is_none());
    // A whole space's release orphans too (a task's end).
    let p2 = ipc.allocate_kernel().unwrap();
    ipc.reap_on_no_senders(p2).unwrap();
    ipc.grant_send(&mut a, p2).unwrap();
    ipc.release_space(&mut a, &mut fx);
    assert_eq!(ipc.take_orphan(), Some(p2));
    ipc.destroy_kernel(p2, &mut fx);
    // An unmarked kernel port is never orphaned.
    let p3 = ipc.allocate_kernel().unwrap();
    let n3 = ipc.grant_send(&mut b, p3).unwrap();
    ipc.release(&mut b, n3, &mut fx).unwrap();
    assert!(!ipc.has_orphans());
}

mod reap_model {
    //! Reaping against a model: kernel-held ports, some marked, rights granted to and
    //! released from two spaces (one right at a time, or a whole space at once). A marked
    //! port is orphaned exactly when its last send right goes; the kernel then destroys it.
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Clone, Debug)]
    enum Op {
        Make { reap: bool },
        Grant { space: usize, port: usize },
        Release { space: usize, pick: usize },
        ReleaseSpace { space: usize },
        Reap,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<bool>().prop_map(|reap| Op::Make { reap }),
            (0..2usize, 0..8usize).prop_map(|(space, port)| Op::Grant { space, port }),
            (0..2usize, 0..16usize).prop_map(|(space, pick)| Op::Release { space, pick }),
            (0..2usize).prop_map(|space| Op::ReleaseSpace { space }),
            Just(Op::Reap),
        ]
    }

    proptest! {
        #[test]
        fn orphaned_exactly_when_the_last_send_right_goes(ops in proptest::collection::vec(op(), 1..60)) {
            let mut ipc: Ipc<u32> = Ipc::new();
            let mut fx = Effects::default();
            let mut spaces = [Space::new(), Space::new()];
            // Model: per port (by index), whether marked, alive, and names per space.
            let mut ports: Vec<(PortId, bool, bool)> = Vec::new();
            let mut names: [Vec<(u64, usize)>; 2] = [Vec::new(), Vec::new()];
            let mut orphaned: BTreeSet<usize> = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Make { reap } => {
                        let p = ipc.allocate_kernel().unwrap();
                        if reap {
                            ipc.reap_on_no_senders(p).unwrap();
                        }
                        ports.push((p, reap, true));
                    }
                    Op::Grant { space, port } => {
                        let Some(&(p, _, alive)) = ports.get(port) else { continue };
                        // A marked port without senders is the kernel's to destroy.
                        if !alive || orphaned.contains(&port) {
                            continue;
                        }
                        let n = ipc.grant_send(&mut spaces[space], p).unwrap();
                        if !names[space].iter().any(|&(m, _)| m == n) {
                            names[space].push((n, port));
                        }
                    }
                    Op::Release { space, pick } => {
                        if names[space].is_empty() {
                            continue;
                        }
                        let (n, port) = names[space].remove(pick % names[space].len());
                        ipc.release(&mut spaces[space], n, &mut fx).unwrap();
                        let left = names.iter().flatten().any(|&(_, q)| q == port);
                        if ports[port].1 && !left {
                            orphaned.insert(port);
                        }
                    }
                    Op::ReleaseSpace { space } => {
                        ipc.release_space(&mut spaces[space], &mut fx);
                        spaces[space] = Space::new();
                        let gone: Vec<usize> = names[space].drain(..).map(|(_, q)| q).collect();
                        for port in gone {
                            let left = names.iter().flatten().any(|&(_, q)| q == port);
                            if ports[port].1 && !left {
                                orphaned.insert(port);
                            }
                        }
                    }
                    Op::Reap => {
                        let mut got = BTreeSet::new();
                        while let Some(p) = ipc.take_orphan() {
                            let i = ports.iter().position(|&(q, _, _)| q == p).unwrap();
                            prop_assert!(got.insert(i), "port {} orphaned twice", i);
                            ipc.destroy_kernel(p, &mut fx);
                            ports[i].2 = false;
                        }
                        prop_assert_eq!(&got, &orphaned);
                        orphaned.clear();
                    }
                }
                prop_assert_eq!(ipc.has_orphans(), !orphaned.is_empty());
            }
        }
    }
}

/// An out-of-line descriptor (the kernel's own check of its fields is not this module's).
fn ool_desc(addr: u64, size: u64) -> Descriptor {
    Descriptor {
        kind: DESC_OOL,
        disposition: 0,
        value: addr,
        size,
    }
}

#[test]
fn out_of_line_regions_travel_as_opaque_handles_in_descriptor_order() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let mut fx = Effects::default();
    let extra = ipc.allocate(&mut client, 2, 0).unwrap();
    // Descriptors: region, port right, region.
    let descs = [
        ool_desc(0x1000, 10),
        Descriptor::port(extra, D::MakeSend),
        ool_desc(0x9000, 5000),
    ];
    let h = header(send, D::CopySend, 0, D::None, 3, 5);
    // Without the regions attached the descriptors are refused, and nothing moves.
    assert_eq!(
        ipc.copyin(&mut client, &h, &descs, vec![], &mut fx)
            .unwrap_err(),
        Error::NotSupported
    );
    assert_eq!(
        ipc.port(client.lookup(extra).unwrap().port).unwrap().sends,
        0
    );
    // The check the kernel runs before taking regions agrees with copyin.
    assert!(ipc.check_copyin(&client, &h, &descs, |i| i != 1).is_ok());
    assert_eq!(
        ipc.check_copyin(&client, &h, &descs, |_| false),
        Err(Error::NotSupported)
    );
    // Attachments that do not match the descriptors are refused.
    let one = vec![Attached {
        index: 0,
        handle: 11,
        size: 10,
    }];
    assert_eq!(
        ipc.copyin_ool(&mut client, &h, &descs, vec![], one, &mut fx)
            .unwrap_err(),
        Error::NotSupported
    );
    let attached = vec![
        Attached {
            index: 0,
            handle: 11,
            size: 10,
        },
        Attached {
            index: 2,
            handle: 22,
            size: 5000,
        },
    ];
    let (dest, msg) = ipc
        .copyin_ool(&mut client, &h, &descs, b"x".to_vec(), attached, &mut fx)
        .unwrap();
    assert_eq!(msg.size(), HEADER_SIZE + 3 * DESCRIPTOR_SIZE + 1);
    ipc.enqueue(dest, msg, &mut fx);
    let msg = ipc.dequeue(dest, &mut fx).unwrap();
    let mut out = Vec::new();
    let hdr = ipc.copyout(&mut server, 1, port, &msg, &mut out).unwrap();
    assert_eq!(hdr.descriptors(), 3);
    assert_eq!(hdr.size as usize, msg.size());
    assert_eq!((out[0].kind, out[0].value, out[0].size), (DESC_OOL, 11, 10));
    assert_eq!(out[1].kind, DESC_PORT);
    assert_eq!(ipc.info(&server, out[1].value), Ok(RightKind::Send));
    assert_eq!(
        (out[2].kind, out[2].value, out[2].size),
        (DESC_OOL, 22, 5000)
    );
    // Received: nothing is dropped.
    assert!(fx.dropped.is_empty());
}

#[test]
fn destroyed_messages_hand_back_their_regions() {
    let (mut ipc, mut server, mut client, port, send) = setup();
    let mut fx = Effects::default();
    let h = header(send, D::CopySend, 0, D::None, 1, 5);
    for handle in [7, 8] {
        let attached = vec![Attached {
            index: 0,
            handle,
            size: 1,
        }];
        let (dest, msg) = ipc
            .copyin_ool(
                &mut client,
                &h,
                &[ool_desc(0x1000, 1)],
                vec![],
                attached,
                &mut fx,
            )
            .unwrap();
        ipc.enqueue(dest, msg, &mut fx);
    }
    // A message destroyed by hand, then the port with the other one queued.
    let dest = server.lookup(port).unwrap().port;
    let first = ipc.dequeue(dest, &mut fx).unwrap();
    ipc.destroy_message(first, &mut fx);
    assert_eq!(fx.dropped, vec![7]);
    ipc.release(&mut server, port, &mut fx).unwrap();
    assert_eq!(fx.dropped, vec![7, 8]);
    assert_eq!(ipc.queued(), 0);
    // A message for a port that died meanwhile is destroyed on enqueue.
    let msg = Message {
        ool: vec![Attached {
            index: 0,
            handle: 9,
            size: 1,
        }],
        ..Message::default()
    };
    ipc.enqueue(dest, msg, &mut fx);
    assert_eq!(fx.dropped, vec![7, 8, 9]);
    let _ = client;
}

/// `copyin_to` with the destination `resolve_dest` found gives what `copyin` gives: the
/// same result, the same names left in the sender's space and the same right counts, for
/// valid messages and for each way a message is refused after its destination resolved.
#[test]
fn copyin_to_matches_copyin() {
    let cases = |send: u64, reply: u64, other: u64| {
        [
            (
                header(send, D::CopySend, reply, D::MakeSendOnce, 0, 1),
                vec![],
            ),
            (header(send, D::CopySend, 0, D::None, 0, 2), vec![]),
            (header(send, D::MoveSend, 0, D::None, 0, 3), vec![]),
            (
                header(send, D::CopySend, reply, D::MakeSend, 1, 4),
                vec![Descriptor::port(other, D::MakeSendOnce)],
            ),
            // Refused after the destination resolved: a bad reply disposition, a name
            // moved twice, a descriptor naming nothing, a descriptor count that lies.
            (
                header(send, D::CopySend, reply, D::MoveReceive, 0, 5),
                vec![],
            ),
            (header(send, D::MoveSend, send, D::MoveSend, 0, 6), vec![]),
            (
                header(send, D::CopySend, 0, D::None, 1, 7),
                vec![Descriptor::port(999, D::CopySend)],
            ),
            (header(send, D::CopySend, 0, D::None, 1, 8), vec![]),
        ]
    };
    for i in 0..8 {
        let run = |to: bool| {
            let (mut ipc, _server, mut client, port, send) = setup();
            let reply = ipc.allocate(&mut client, 2, 0).unwrap();
            let other = ipc.allocate(&mut client, 2, 0).unwrap();
            let (h, d) = cases(send, reply, other)[i].clone();
            let mut fx = Effects::default();
            let got = if to {
                let dest = ipc.resolve_dest(&client, &h).unwrap();
                ipc.copyin_to(&mut client, dest, &h, &d, vec![], &mut fx)
            } else {
                ipc.copyin(&mut client, &h, &d, vec![], &mut fx)
            };
            let names: Vec<_> = client.iter().collect();
            let counts: Vec<_> = [port, reply, other]
                .iter()
                .map(|&n| {
                    let p = if n == port {
                        ipc.dest_port(&client, &header(send, D::CopySend, 0, D::None, 0, 0))
                            .ok()
                    } else {
                        client.lookup(n).ok().map(|e| e.port)
                    };
                    p.and_then(|p| ipc.port(p)).map(|p| (p.sends, p.send_onces))
                })
                .collect();
            (got, names, counts, fx.wake)
        };
        assert_eq!(run(true), run(false), "case {i}");
    }
}
