//! `ipc_diff_server`: the server side of the `ipc_diff` test (spawned by it, never started
//! alone).
//!
//! It allocates its service port `S`, a gate port `G` and a notification port `N`, sends
//! send rights to `S` and `G` to its bootstrap port (the client's) in a [`HELLO`] message,
//! and then serves requests on `S`. Requests with ids from [`CTL_BASE`] are control calls,
//! answered at once through their reply right (with `MSG_SEND | MSG_RECEIVE`, so the
//! server is waiting on `S` again before the client runs on):
//!
//! | id | request | reply |
//! |---|---|---|
//! | [`C_MODE`] | words: action, extra reply options, a timeout (0: none) for the receive that answers it | empty |
//! | [`C_REPORT`] | — | the report words of the last case message (below) |
//! | [`C_HOLD`] | — | empty; the server then waits on `G` (busy), and receives on `S` again only after a message came to `G` |
//! | [`C_SEND`] | — | descriptor 0: a new send right to `S` |
//! | [`C_ONCE`] | — | descriptor 0: a new send-once right to `S` |
//! | [`C_VICTIM`] | word: 1 for a send-once right | descriptor 0: a send (send-once) right to a new port `V` |
//! | [`C_KILL`] | — | empty, after destroying `V` |
//! | [`C_TAKE`] | descriptor 0 or none | empty; keeps the send right of descriptor 0 as "back" (releasing the one kept before) |
//! | [`C_NOP`] | — (no reply right) | none |
//! | [`C_EXIT`] | — | empty, then the task exits |
//! | [`C_MIGRATING`] | — | descriptor 0: a send right to the port `M`, which has an activation (calls to it migrate: the activation answers id + 100 with the request's data) |
//!
//! Any other message is a *case message*: the server records what it received (the
//! report) and answers as the last [`C_MODE`] said (the action), adding the mode's extra
//! options (`MSG_SLOW` or 0) to its reply's `ipc_msg`:
//!
//! | action | answer |
//! |---|---|
//! | [`A_ECHO`] | through the reply right (`MoveSendOnce`, or `MoveSend` for a send right): id + 100, the same data (none if the request had descriptors, whose rights it releases) |
//! | [`A_TWICE`] | the echo with `MSG_SEND` alone, then the same reply again through the used-up name with `MSG_SEND | MSG_RECEIVE` |
//! | [`A_NOTIFY`] | a dead-name request on the reply right (notifications to `N`), then the echo |
//! | [`A_BACK`] | the echo to the "back" send right (`CopySend`, no reply right) |
//! | [`A_SELFQ`] | a message of its own queued on `S` first (its reply's receive then does not block), then the echo |
//!
//! Report words (`R_*`, error codes as their numbers, right kinds as `cap_info`'s numbers,
//! 100 + the code for an error of `cap_info`): the receive's result, the header's bits,
//! size and id, whether `dest` was `S`'s name, the reply right's kind and slot, a hash of
//! the data, whether the buffer past the message was left alone, the descriptors' count
//! and the first one's kind, the answer's result and the reply right's kind after it, the
//! second call's result ([`A_TWICE`], [`A_NOTIFY`]), what `N` holds at the report (0:
//! nothing), and how many case messages came since the last report.
#![no_std]
#![no_main]

use baton_rt::ipc::{
    cap_drop, msg_buf, port_allocate, port_make_send, port_notify, Descriptor, Disposition,
    IpcBuffer, MsgHeader, RightKind, HEADER_SIZE, IPC_BUFFER_SIZE, MSG_RECEIVE, MSG_SEND,
    NOTIFY_KIND_DEAD_NAME,
};
use baton_rt::{println, start::bootstrap, Error, FOREVER};

baton_rt::entry!(main);

#[path = "../ipc_diff_proto.rs"]
mod ipc_diff_proto;

use ipc_diff_proto::*;

fn main(_task_id: u64) -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(e) => {
            println!("TEST FAIL ipc_diff_server: {}", e.name());
            1
        }
    }
}

/// The `i`th word of the request's data.
fn word(buf: &IpcBuffer, i: usize) -> u64 {
    baton_rt::ipc::data_word(buf.data(), i)
}

/// The server's state.
struct Server {
    buf: IpcBuffer,
    /// The service port `S`.
    port: u64,
    /// The gate `G`.
    gate: u64,
    /// The notification port `N`.
    notify: u64,
    /// The mode: action, extra reply options, the next receive's timeout.
    action: u64,
    extra: u64,
    timeout: u64,
    /// The victim port `V` (0: none).
    victim: u64,
    /// The "back" send right (0: none).
    back: u64,
    /// The migrating port `M` (0: not made yet).
    migrating: u64,
    /// The report of the last case message.
    report: [u64; REPORT_WORDS],
    /// Case messages since the last report.
    count: u64,
    /// The buffer as it was before the last call that received.
    before: [u8; IPC_BUFFER_SIZE],
}

impl Server {
    /// `ipc_msg` with `options` receiving on `S` (with the mode's timeout), keeping the
    /// buffer's contents first.
    fn call(&mut self, options: u64) -> Result<(), Error> {
        self.before = *self.buf.view();
        // The mode's timeout is for one receive: the next one (a timer the kernel failed to
        // cancel would end a later receive early, which the report shows as one more case
        // message).
        let timeout = core::mem::replace(&mut self.timeout, FOREVER);
        self.buf.msg(options | MSG_RECEIVE, self.port, timeout)
    }

    /// Sends `reply` (header as given, the buffer's data after it) and receives on `S`
    /// with `extra` options: the answer's result and the next receive's.
    fn answer(&mut self, reply: MsgHeader, extra: u64) -> (Result<(), Error>, Result<(), Error>) {
        self.buf.set_header(reply);
        let r = self.call(MSG_SEND | extra);
        match r {
            // The send failed (nothing was received): receive on its own.
            Err(e) if self.buf.header() == reply => (Err(e), self.call(0)),
            r => (Ok(()), r),
        }
    }

    /// Queues a message without reply right on `S` (through a send right made for it and
    /// released after), with a buffer of its own.
    fn queue_own(&mut self) -> Result<(), Error> {
        let to = port_make_send(self.port, false)?;
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
            size: HEADER_SIZE as u32,
            dest: to,
            id: SELF_ID,
            ..MsgHeader::default()
        };
        let mut bytes = h.to_bytes();
        let sent = msg_buf(&mut bytes, MSG_SEND, 0, 0);
        cap_drop(to)?;
        sent
    }

    /// Replies to a control request with an empty message or `descriptors`, and receives
    /// the next message.
    fn control_reply(
        &mut self,
        h: &MsgHeader,
        descriptors: &[Descriptor],
        data: &[u8],
    ) -> Result<(), Error> {
        let reply = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
            dest: h.reply,
            id: h.id + 100,
            ..MsgHeader::default()
        };
        self.buf.set(reply, descriptors, data)?;
        self.call(MSG_SEND)
    }

    /// Handles the control message `h`; the next message's receive result, or `None` to
    /// exit.
    fn control(&mut self, h: MsgHeader) -> Result<Option<Result<(), Error>>, Error> {
        let r = match h.id {
            C_MODE => {
                self.action = word(&self.buf, 0);
                self.extra = word(&self.buf, 1);
                // The mode's receive timeout applies from the receive of this reply on.
                self.timeout = match word(&self.buf, 2) {
                    0 => FOREVER,
                    ns => ns,
                };
                self.control_reply(&h, &[], &[])
            }
            C_REPORT => {
                // What came to N (a dead-name or send-once notification), if anything.
                self.report[R_NOTIFIED] = probe(self.notify);
                self.report[R_COUNT] = self.count;
                self.count = 0;
                let mut data = [0u8; REPORT_WORDS * 8];
                for (i, w) in self.report.iter().enumerate() {
                    data[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
                }
                self.report = [0; REPORT_WORDS];
                self.control_reply(&h, &[], &data)
            }
            C_HOLD => {
                // Reply and wait on the gate in one call: the server is busy (not waiting
                // on S) from before the client runs on.
                let reply = MsgHeader {
                    bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
                    dest: h.reply,
                    id: h.id + 100,
                    ..MsgHeader::default()
                };
                self.buf.set(reply, &[], &[])?;
                self.buf.msg(MSG_SEND | MSG_RECEIVE, self.gate, FOREVER)?;
                self.call(0)
            }
            C_SEND | C_ONCE => {
                let d = if h.id == C_ONCE {
                    Disposition::MakeSendOnce
                } else {
                    Disposition::MakeSend
                };
                self.control_reply(&h, &[Descriptor::port(self.port, d)], &[])
            }
            C_VICTIM => {
                if self.victim != 0 {
                    cap_drop(self.victim)?;
                }
                self.victim = port_allocate(0)?;
                let d = if word(&self.buf, 0) == 1 {
                    Disposition::MakeSendOnce
                } else {
                    Disposition::MakeSend
                };
                self.control_reply(&h, &[Descriptor::port(self.victim, d)], &[])
            }
            C_KILL => {
                if self.victim != 0 {
                    cap_drop(self.victim)?;
                    self.victim = 0;
                }
                self.control_reply(&h, &[], &[])
            }
            C_TAKE => {
                if self.back != 0 {
                    cap_drop(self.back)?;
                }
                self.back = self.buf.descriptor(0).map_or(0, |d| d.value);
                self.control_reply(&h, &[], &[])
            }
            C_NOP => self.call(0),
            C_MIGRATING => {
                if self.migrating == 0 {
                    self.migrating = port_allocate(0)?;
                    baton_rt::migrate::attach(self.migrating, 1, migrated_echo)?;
                }
                let d = Descriptor::port(self.migrating, Disposition::MakeSend);
                self.control_reply(&h, &[d], &[])
            }
            C_EXIT => {
                let reply = MsgHeader {
                    bits: MsgHeader::make_bits(Disposition::MoveSendOnce, Disposition::None, 0),
                    dest: h.reply,
                    id: h.id + 100,
                    ..MsgHeader::default()
                };
                self.buf.set(reply, &[], &[])?;
                self.buf.msg(MSG_SEND, 0, FOREVER)?;
                return Ok(None);
            }
            _ => self.call(0),
        };
        Ok(Some(r))
    }

    /// Records case message `h` (received with result `got`) and answers it as the mode
    /// says; the next message's receive result.
    fn case(&mut self, h: MsgHeader, got: Result<(), Error>) -> Result<Result<(), Error>, Error> {
        self.count += 1;
        let size = (h.size as usize).clamp(HEADER_SIZE, IPC_BUFFER_SIZE);
        let mut rep = [0u64; REPORT_WORDS];
        rep[R_RECEIVE] = code(got);
        rep[R_BITS] = u64::from(h.bits);
        rep[R_SIZE] = u64::from(h.size);
        rep[R_ID] = h.id;
        rep[R_DEST_IS_S] = u64::from(h.dest == self.port);
        rep[R_REPLY_KIND] = kind(h.reply);
        rep[R_REPLY_SLOT] = h.reply & 0xffff_ffff;
        rep[R_HASH] = hash(self.buf.data());
        rep[R_TAIL] = u64::from(self.buf.view()[size..] == self.before[size..]);
        rep[R_DESCRIPTORS] = h.descriptors() as u64;
        for i in 0..h.descriptors() {
            if let Some(d) = self.buf.descriptor(i) {
                if i == 0 {
                    rep[R_DESC0_KIND] = kind(d.value);
                }
                // Released at once: the server keeps no right a case message brought.
                cap_drop(d.value)?;
            }
        }
        rep[R_ANSWER] = NO_ANSWER;
        // The echo: the same data (none if rights came), the reply right moved.
        let mut reply = MsgHeader {
            bits: MsgHeader::make_bits(
                if rep[R_REPLY_KIND] == RightKind::Send as u64 {
                    Disposition::MoveSend
                } else {
                    Disposition::MoveSendOnce
                },
                Disposition::None,
                0,
            ),
            size: if h.descriptors() > 0 {
                HEADER_SIZE as u32
            } else {
                size as u32
            },
            dest: h.reply,
            reply: 0,
            id: h.id.wrapping_add(100),
        };
        let extra = self.extra;
        let next = match self.action {
            A_ECHO | A_NOTIFY | A_SELFQ if h.reply != 0 && got.is_ok() => {
                if self.action == A_NOTIFY {
                    rep[R_SECOND] = code(port_notify(h.reply, NOTIFY_KIND_DEAD_NAME, self.notify));
                }
                if self.action == A_SELFQ {
                    rep[R_SECOND] = code(self.queue_own());
                    self.buf.set_header(reply);
                }
                let (sent, next) = self.answer(reply, extra);
                rep[R_ANSWER] = code(sent);
                next
            }
            A_TWICE if h.reply != 0 && got.is_ok() => {
                self.buf.set_header(reply);
                rep[R_ANSWER] = code(self.buf.msg(MSG_SEND, 0, FOREVER));
                let (again, next) = self.answer(reply, extra);
                rep[R_SECOND] = code(again);
                next
            }
            A_BACK if self.back != 0 && got.is_ok() => {
                reply.bits = MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0);
                reply.dest = self.back;
                let (sent, next) = self.answer(reply, extra);
                rep[R_ANSWER] = code(sent);
                next
            }
            _ => {
                if h.reply != 0 && got.is_ok() {
                    cap_drop(h.reply)?;
                }
                self.call(0)
            }
        };
        rep[R_REPLY_AFTER] = kind(h.reply);
        self.report = rep;
        Ok(next)
    }
}

/// The activation of `M`: answers id + 100 with the request's data.
fn migrated_echo(req: &mut baton_rt::migrate::Request) {
    let id = req.header().id;
    let len = req.data().len();
    req.reply_in_place(id.wrapping_add(100), len);
}

/// The id (low 32 bits) of the message waiting on `port`, taken without blocking into a
/// buffer of its own; 0 if none.
fn probe(port: u64) -> u64 {
    let mut bytes = [0u8; 64];
    match msg_buf(&mut bytes, MSG_RECEIVE, port, 0) {
        Ok(()) => MsgHeader::from_bytes(&bytes).map_or(1, |h| h.id & 0xffff_ffff),
        Err(Error::WouldBlock) => 0,
        Err(e) => 100 + e as i64 as u64,
    }
}

fn serve() -> Result<(), Error> {
    let boot = bootstrap();
    let mut s = Server {
        buf: IpcBuffer::new()?,
        port: port_allocate(0)?,
        gate: port_allocate(0)?,
        notify: port_allocate(0)?,
        action: A_ECHO,
        extra: 0,
        timeout: FOREVER,
        victim: 0,
        back: 0,
        migrating: 0,
        report: [0; REPORT_WORDS],
        count: 0,
        before: [0; IPC_BUFFER_SIZE],
    };
    let hello = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
        dest: boot,
        id: HELLO,
        ..MsgHeader::default()
    };
    let rights = [
        Descriptor::port(s.port, Disposition::MakeSend),
        Descriptor::port(s.gate, Disposition::MakeSend),
    ];
    s.buf.set(hello, &rights, &[])?;
    s.buf.msg(MSG_SEND, 0, FOREVER)?;
    cap_drop(boot)?;
    let mut got = s.call(0);
    loop {
        let h = s.buf.header();
        got = if got.is_ok() && (CTL_BASE..CTL_BASE + 0x100).contains(&h.id) {
            match s.control(h)? {
                Some(r) => r,
                None => break,
            }
        } else {
            s.case(h, got)?
        };
    }
    for name in [s.victim, s.back, s.migrating] {
        if name != 0 {
            cap_drop(name)?;
        }
    }
    for name in [s.port, s.gate, s.notify] {
        cap_drop(name)?;
    }
    Ok(())
}
