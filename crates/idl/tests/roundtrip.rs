//! The interface macro end to end: generated client stubs call generated dispatch
//! functions in-process through a mock transport that plays the kernel's part (it gives
//! each port right a new name, `n + 1000`, in the receiver's space, as the kernel does),
//! so the tests see rights travel as descriptors and come out renamed.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use baton_idl_rt::transport::set_reply;
use baton_idl_rt::{
    Descriptor, Dispatched, Disposition, Error, FixedBytes, MakeSend, MoveSend, MsgHeader,
    MsgWriter, SendRight, Transport, DESCRIPTOR_SIZE, HEADER_SIZE, IPC_BUFFER_SIZE,
    NOTIFY_SEND_ONCE, REPLY_ID_OFFSET,
};

/// The name service of the task brief.
#[baton_idl::interface(base = 2000)]
pub trait Names {
    /// Registers `port` under `name`.
    fn register(&mut self, name: &[u8], port: SendRight) -> Result<(), Error>;
    /// The port registered under `name`.
    fn lookup(&mut self, name: &[u8]) -> Result<SendRight, Error>;
    /// `a + b`.
    fn add(&mut self, a: u64, b: u64) -> Result<u64, Error>;
}

/// Every kind of argument and result.
#[baton_idl::interface(base = 3000)]
pub trait Kitchen {
    /// Nothing in, nothing out.
    fn ping(&mut self) -> Result<(), Error>;
    /// Keeps `data` and returns it (borrowed from the reply buffer on the client side).
    fn echo(&mut self, data: &[u8]) -> Result<&[u8], Error>;
    /// Fixed-width scalars and arrays.
    #[allow(clippy::too_many_arguments)]
    fn mix(
        &mut self,
        a: i8,
        b: i16,
        c: i32,
        d: i64,
        e: bool,
        f: [u8; 3],
        g: (u8, u16),
    ) -> Result<(i64, bool, [u8; 3]), Error>;
    /// Options, with a right inside.
    fn maybe(
        &mut self,
        x: Option<u32>,
        port: Option<MoveSend>,
    ) -> Result<Option<(u32, MoveSend)>, Error>;
    /// Strings in, owned bytes out.
    fn greet(&mut self, who: &str) -> Result<FixedBytes<32>, Error>;
    /// A send right made from the server's receive right.
    fn new_port(&mut self) -> Result<MakeSend, Error>;
    /// Fails with the error whose code is `code`.
    fn fail(&mut self, code: u64) -> Result<u8, Error>;
}

/// The runtime under another path, as `baton_rt::idl_rt` re-exports it for user programs.
mod reexport {
    pub use baton_idl_rt as runtime;
}

/// An interface whose generated code reaches the runtime through `rt = <path>`.
#[baton_idl::interface(base = 4000, rt = crate::reexport::runtime)]
pub trait Twice {
    /// `2 * x`.
    fn twice(&mut self, x: u32) -> Result<u32, Error>;
}

/// The server of [`Twice`].
struct Doubler;

impl Twice for Doubler {
    fn twice(&mut self, x: u32) -> Result<u32, Error> {
        x.checked_mul(2).ok_or(Error::TooLarge)
    }
}

/// The server's name for its own port (the `dest` of requests as received).
const SERVER_PORT: u64 = 500;
/// The client's name for its send right to the server.
const CLIENT_DEST: u64 = 12;
/// The client's reply port (a receive right).
const REPLY_PORT: u64 = 77;
/// The server's receive right that `new_port` makes send rights from.
const SERVER_RECEIVE: u64 = 40;

/// A name server keeping at most eight names.
#[derive(Default)]
struct NameServer {
    entries: Vec<(FixedBytes<16>, u64)>,
}

impl Names for NameServer {
    fn register(&mut self, name: &[u8], port: SendRight) -> Result<(), Error> {
        if self.entries.len() == 8 {
            return Err(Error::NoSpace);
        }
        self.entries.push((FixedBytes::from_slice(name)?, port.0));
        Ok(())
    }

    fn lookup(&mut self, name: &[u8]) -> Result<SendRight, Error> {
        self.entries
            .iter()
            .find(|(n, _)| n.as_slice() == name)
            .map(|&(_, p)| SendRight(p))
            .ok_or(Error::NotFound)
    }

    fn add(&mut self, a: u64, b: u64) -> Result<u64, Error> {
        a.checked_add(b).ok_or(Error::InvalidArgument)
    }
}

/// The server of [`Kitchen`].
#[derive(Default)]
struct Chef {
    kept: Vec<u8>,
    pings: u32,
}

impl Kitchen for Chef {
    fn ping(&mut self) -> Result<(), Error> {
        self.pings += 1;
        Ok(())
    }

    fn echo(&mut self, data: &[u8]) -> Result<&[u8], Error> {
        self.kept = data.to_vec();
        Ok(&self.kept)
    }

    fn mix(
        &mut self,
        a: i8,
        b: i16,
        c: i32,
        d: i64,
        e: bool,
        f: [u8; 3],
        g: (u8, u16),
    ) -> Result<(i64, bool, [u8; 3]), Error> {
        let sum = i64::from(a) + i64::from(b) + i64::from(c) + d + i64::from(g.0) + i64::from(g.1);
        Ok((sum, !e, [f[2], f[1], f[0]]))
    }

    fn maybe(
        &mut self,
        x: Option<u32>,
        port: Option<MoveSend>,
    ) -> Result<Option<(u32, MoveSend)>, Error> {
        Ok(x.zip(port))
    }

    fn greet(&mut self, who: &str) -> Result<FixedBytes<32>, Error> {
        let mut s = b"hello, ".to_vec();
        s.extend_from_slice(who.as_bytes());
        FixedBytes::from_slice(&s)
    }

    fn new_port(&mut self) -> Result<MakeSend, Error> {
        Ok(MakeSend(SERVER_RECEIVE))
    }

    fn fail(&mut self, code: u64) -> Result<u8, Error> {
        Err(Error::from_code(code as i64).unwrap_or(Error::InvalidArgument))
    }
}

/// A generated dispatch function.
type DispatchFn<S> = fn(&mut S, &[u8], &mut [u8]) -> Result<Dispatched, Error>;

/// One port descriptor or reply right as sent: (name, disposition).
type Sent = (u64, Disposition);

/// The kind a receiver holds after a right is sent with `d`, as the kernel reports it.
fn received(d: Disposition) -> Disposition {
    match d {
        Disposition::MoveReceive => Disposition::MoveReceive,
        Disposition::MakeSendOnce | Disposition::MoveSendOnce => Disposition::MoveSendOnce,
        Disposition::None => Disposition::None,
        _ => Disposition::MoveSend,
    }
}

/// Plays the kernel delivering `msg` on the port the receiver calls `rcv_name`: every
/// right gets the receiver's new name `n + 1000` and the disposition of what it now
/// holds. Returns the descriptors as they were sent.
fn deliver(msg: &mut [u8], rcv_name: u64) -> Vec<Sent> {
    let mut h = MsgHeader::from_bytes(msg).unwrap();
    assert_eq!(h.size as usize, msg.len());
    let reply_disp = Disposition::from_raw(h.reply_disposition()).unwrap();
    h.dest = rcv_name;
    if h.reply != 0 {
        h.reply += 1000;
    }
    h.bits = MsgHeader::make_bits(
        Disposition::None,
        received(reply_disp),
        h.descriptors() as u8,
    );
    msg[..HEADER_SIZE].copy_from_slice(&h.to_bytes());
    let mut sent = Vec::new();
    for i in 0..h.descriptors() {
        let at = HEADER_SIZE + i * DESCRIPTOR_SIZE;
        let d = Descriptor::from_bytes(&msg[at..]).unwrap();
        let disp = Disposition::from_raw(d.disposition as u8).unwrap();
        sent.push((d.value, disp));
        let new = Descriptor::port(d.value + 1000, received(disp));
        msg[at..at + DESCRIPTOR_SIZE].copy_from_slice(&new.to_bytes());
    }
    sent
}

/// A transport that delivers each request to an in-process server and its reply back,
/// as the kernel would, and records what travelled.
struct Loopback<S> {
    server: S,
    dispatch: DispatchFn<S>,
    buf: [u8; IPC_BUFFER_SIZE],
    /// The reply right the transport puts into requests.
    reply_right: Sent,
    /// Calls made.
    calls: usize,
    /// Descriptors of the last request and reply, as sent.
    request_rights: Vec<Sent>,
    reply_rights: Vec<Sent>,
    /// The last reply's header as the server wrote it.
    reply_header: MsgHeader,
    /// What dispatch said last.
    dispatched: Option<Dispatched>,
}

impl<S> Loopback<S> {
    fn new(server: S, dispatch: DispatchFn<S>) -> Loopback<S> {
        Loopback {
            server,
            dispatch,
            buf: [0; IPC_BUFFER_SIZE],
            reply_right: (REPLY_PORT, Disposition::MakeSendOnce),
            calls: 0,
            request_rights: Vec::new(),
            reply_rights: Vec::new(),
            reply_header: MsgHeader::default(),
            dispatched: None,
        }
    }
}

impl<S> Transport for Loopback<S> {
    fn buffer(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    fn call(&mut self, len: usize) -> Result<usize, Error> {
        self.calls += 1;
        // The transport's part: the reply right.
        set_reply(&mut self.buf, self.reply_right.0, self.reply_right.1)?;
        let h = MsgHeader::from_bytes(&self.buf).unwrap();
        assert_eq!(h.dest, CLIENT_DEST, "requests go to the client's dest name");
        assert_eq!(h.dest_disposition(), Disposition::CopySend as u8);
        // The kernel's part: deliver the request to the server.
        let mut request = self.buf[..len].to_vec();
        self.request_rights = deliver(&mut request, SERVER_PORT);
        let mut reply = vec![0u8; IPC_BUFFER_SIZE];
        let d = (self.dispatch)(&mut self.server, &request, &mut reply)?;
        self.dispatched = Some(d);
        if d.reply_len == 0 {
            return Err(Error::TimedOut);
        }
        self.reply_header = MsgHeader::from_bytes(&reply).unwrap();
        // The reply goes back on the client's reply port, the way the server named it.
        assert_eq!(self.reply_header.dest, self.reply_right.0 + 1000);
        let mut reply = reply[..d.reply_len].to_vec();
        self.reply_rights = deliver(&mut reply, REPLY_PORT);
        self.buf[..reply.len()].copy_from_slice(&reply);
        Ok(reply.len())
    }
}

/// A client of `Names` talking to a fresh name server.
fn names_client() -> NamesClient<Loopback<NameServer>> {
    NamesClient::new(
        Loopback::new(NameServer::default(), names_dispatch::<NameServer>),
        CLIENT_DEST,
    )
}

/// A client of `Kitchen` talking to a fresh chef.
fn kitchen_client() -> KitchenClient<Loopback<Chef>> {
    KitchenClient::new(
        Loopback::new(Chef::default(), kitchen_dispatch::<Chef>),
        CLIENT_DEST,
    )
}

#[test]
fn ids_follow_the_base() {
    assert_eq!(NAMES_BASE, 2000);
    assert_eq!(
        (NAMES_REGISTER_ID, NAMES_LOOKUP_ID, NAMES_ADD_ID),
        (2000, 2001, 2002)
    );
    assert_eq!(NAMES_IDS, 2000..2003);
    assert_eq!(KITCHEN_PING_ID, 3000);
    assert_eq!(KITCHEN_FAIL_ID, 3006);
    assert_eq!(KITCHEN_IDS, 3000..3007);
}

#[test]
fn names_register_and_lookup_move_rights() {
    let mut c = names_client();
    c.register(b"fs", SendRight(5)).unwrap();
    let t = c.transport();
    // The right travelled as a descriptor, copied; the server got it under a new name.
    assert_eq!(t.request_rights, [(5, Disposition::CopySend)]);
    assert_eq!(t.server.entries[0].0.as_slice(), b"fs");
    assert_eq!(t.server.entries[0].1, 1005);
    // The reply used up the send-once right the transport made.
    assert_eq!(
        t.reply_header.dest_disposition(),
        Disposition::MoveSendOnce as u8
    );
    assert_eq!(t.reply_header.id, NAMES_REGISTER_ID + REPLY_ID_OFFSET);

    // The server sends a copy of its right back; the client gets its own new name.
    assert_eq!(c.lookup(b"fs"), Ok(SendRight(2005)));
    assert_eq!(c.transport().reply_rights, [(1005, Disposition::CopySend)]);
    assert_eq!(c.lookup(b"nope"), Err(Error::NotFound));
    assert!(c.transport().reply_rights.is_empty());
    assert_eq!(c.add(2, 3), Ok(5));
    assert_eq!(c.add(u64::MAX, 1), Err(Error::InvalidArgument));
    // Too long for the server's FixedBytes<16>: the method's own error.
    assert_eq!(c.register(&[b'x'; 17], SendRight(6)), Err(Error::TooLarge));
    assert_eq!(c.transport().calls, 6);
    assert_eq!(c.dest(), CLIENT_DEST);
}

/// Code generic over the interface runs on a local object and a remote one alike.
fn register_and_sum<N: Names>(n: &mut N) -> Result<u64, Error> {
    n.register(b"a", SendRight(9))?;
    n.lookup(b"a")?;
    n.add(40, 2)
}

#[test]
fn client_implements_the_trait() {
    assert_eq!(register_and_sum(&mut NameServer::default()), Ok(42));
    assert_eq!(register_and_sum(&mut names_client()), Ok(42));
    // A client over a borrowed transport.
    let mut t = Loopback::new(NameServer::default(), names_dispatch::<NameServer>);
    let mut c = NamesClient::new(&mut t, CLIENT_DEST);
    assert_eq!(c.add(1, 1), Ok(2));
    let (_, dest) = c.into_parts();
    assert_eq!(dest, CLIENT_DEST);
    assert_eq!(t.calls, 1);
}

#[test]
fn kitchen_types_round_trip() {
    let mut c = kitchen_client();
    c.ping().unwrap();
    assert_eq!(c.transport().server.pings, 1);
    assert_eq!(c.echo(b"bytes"), Ok(&b"bytes"[..]));
    assert_eq!(c.echo(b""), Ok(&b""[..]));
    assert_eq!(
        c.mix(-1, -300, 70_000, -5_000_000_000, true, [1, 2, 3], (4, 500)),
        Ok((
            -5_000_000_000 + 70_000 - 300 - 1 + 4 + 500,
            false,
            [3, 2, 1]
        ))
    );
    assert_eq!(c.maybe(None, None), Ok(None));
    assert_eq!(c.transport().request_rights, []);
    // The moved right goes to the server (1011) and back (2011).
    assert_eq!(
        c.maybe(Some(7), Some(MoveSend(11))),
        Ok(Some((7, MoveSend(2011))))
    );
    assert_eq!(c.transport().request_rights, [(11, Disposition::MoveSend)]);
    assert_eq!(c.transport().reply_rights, [(1011, Disposition::MoveSend)]);
    assert_eq!(
        c.greet("baton").map(|s| s.as_slice().to_vec()),
        Ok(b"hello, baton".to_vec())
    );
    assert_eq!(c.greet(&"x".repeat(40)), Err(Error::TooLarge));
    // A send right made from the server's receive right arrives as a send right.
    assert_eq!(c.new_port(), Ok(MakeSend(SERVER_RECEIVE + 1000)));
    assert_eq!(
        c.transport().reply_rights,
        [(SERVER_RECEIVE, Disposition::MakeSend)]
    );
    for e in [
        Error::NotFound,
        Error::DeadName,
        Error::NoSpace,
        Error::BadAddress,
    ] {
        assert_eq!(c.fail(e as i64 as u64), Err(e));
    }
}

#[test]
fn a_request_too_large_is_never_sent() {
    let mut c = kitchen_client();
    assert_eq!(c.echo(&[0; IPC_BUFFER_SIZE]), Err(Error::TooLarge));
    assert_eq!(c.transport().calls, 0);
    // The request just fits (header, u32 length, data), but the reply (code, length,
    // data) does not: the server says so.
    let max = IPC_BUFFER_SIZE - HEADER_SIZE - 4;
    assert_eq!(c.echo(&vec![1; max]), Err(Error::TooLarge));
    assert_eq!(c.transport().calls, 1);
    assert_eq!(c.echo(&vec![1; max - 8]).map(<[u8]>::len), Ok(max - 8));
    assert_eq!(c.transport().reply_header.size as usize, IPC_BUFFER_SIZE);
}

#[test]
fn a_send_right_as_reply_right_is_moved_back() {
    let mut c = names_client();
    c.transport().reply_right = (REPLY_PORT, Disposition::MakeSend);
    assert_eq!(c.add(1, 2), Ok(3));
    assert_eq!(
        c.transport().reply_header.dest_disposition(),
        Disposition::MoveSend as u8
    );
}

/// A transport whose calls end as the kernel would end them when something goes wrong.
struct Broken {
    buf: [u8; 256],
    /// What `call` does: an error, or the kernel's send-once notification as the reply.
    outcome: Result<(), Error>,
}

impl Transport for Broken {
    fn buffer(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    fn call(&mut self, _len: usize) -> Result<usize, Error> {
        self.outcome?;
        let mut w = MsgWriter::new(
            &mut self.buf,
            REPLY_PORT,
            Disposition::None,
            0,
            Disposition::None,
            1,
        )
        .unwrap();
        w.bytes(&[]).unwrap();
        let len = w.finish();
        self.buf[24..32].copy_from_slice(&NOTIFY_SEND_ONCE.to_le_bytes());
        Ok(len)
    }
}

#[test]
fn transport_failures_reach_the_caller() {
    let mut c = NamesClient::new(
        Broken {
            buf: [0; 256],
            outcome: Err(Error::InvalidName),
        },
        1,
    );
    assert_eq!(c.add(1, 2), Err(Error::InvalidName));
    c.transport().outcome = Ok(());
    assert_eq!(c.add(1, 2), Err(Error::DeadName));
    // A request that does not fit the transport's buffer.
    assert_eq!(c.register(&[0; 300], SendRight(1)), Err(Error::TooLarge));
}

/// Builds a request as a client would have it delivered: `id`, a send-once reply right
/// (1077), the `rights` as received send rights, then `data`.
fn request(id: u64, rights: &[u64], data: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; IPC_BUFFER_SIZE];
    let mut w = MsgWriter::new(
        &mut buf,
        SERVER_PORT,
        Disposition::None,
        1077,
        Disposition::MoveSendOnce,
        id,
    )
    .unwrap();
    for &r in rights {
        w.port(r, Disposition::MoveSend).unwrap();
    }
    w.bytes(data).unwrap();
    let len = w.finish();
    buf.truncate(len);
    buf
}

/// The result code of a reply.
fn code(reply: &[u8]) -> u64 {
    u64::from_le_bytes(reply[HEADER_SIZE..HEADER_SIZE + 8].try_into().unwrap())
}

#[test]
fn dispatch_survives_bad_requests() {
    let mut server = NameServer::default();
    let mut reply = vec![0u8; IPC_BUFFER_SIZE];
    let notsup = Error::NotSupported as u64;
    let badfmt = Error::BadFormat as u64;

    // Unknown id: NotSupported, and the rights it carried are the loop's to release.
    let req = request(2999, &[8], &[]);
    let d = names_dispatch(&mut server, &req, &mut reply).unwrap();
    assert!(!d.delivered);
    assert_eq!(code(&reply), notsup);
    let h = MsgHeader::from_bytes(&reply).unwrap();
    assert_eq!((h.dest, h.id), (1077, 2999 + REPLY_ID_OFFSET));
    assert_eq!(d.leftover_rights(&req).collect::<Vec<_>>(), [8]);

    // Truncated arguments, a missing right, left-over data: BadFormat.
    let mut args = 2u64.to_le_bytes().to_vec();
    let req = request(NAMES_ADD_ID, &[], &args);
    assert_eq!(
        names_dispatch(&mut server, &req, &mut reply).map(|d| d.delivered),
        Ok(false)
    );
    assert_eq!(code(&reply), badfmt);
    let req = request(NAMES_REGISTER_ID, &[], &[1, 0, 0, 0, b'a']);
    names_dispatch(&mut server, &req, &mut reply).unwrap();
    assert_eq!(code(&reply), badfmt);
    args.extend_from_slice(&3u64.to_le_bytes());
    args.push(0);
    let req = request(NAMES_ADD_ID, &[], &args);
    names_dispatch(&mut server, &req, &mut reply).unwrap();
    assert_eq!(code(&reply), badfmt);
    // A length prefix beyond the end.
    let req = request(NAMES_LOOKUP_ID, &[], &[0xff, 0xff, 0, 0, b'a']);
    names_dispatch(&mut server, &req, &mut reply).unwrap();
    assert_eq!(code(&reply), badfmt);
    // The right data: the method runs.
    args.pop();
    let req = request(NAMES_ADD_ID, &[], &args);
    let d = names_dispatch(&mut server, &req, &mut reply).unwrap();
    assert!(d.delivered);
    assert_eq!(code(&reply), 0);
    assert_eq!(d.leftover_rights(&req).count(), 0);

    // No header: an error, not a reply.
    assert_eq!(
        names_dispatch(&mut server, &req[..10], &mut reply),
        Err(Error::BadFormat)
    );
    // A reply buffer too small for any reply.
    assert_eq!(
        names_dispatch(&mut server, &req, &mut [0u8; 16]),
        Err(Error::TooLarge)
    );

    // A request without a reply right still runs; nothing is sent.
    let mut buf = vec![0u8; 128];
    let mut w = MsgWriter::new(
        &mut buf,
        1,
        Disposition::None,
        0,
        Disposition::None,
        NAMES_REGISTER_ID,
    )
    .unwrap();
    w.port(33, Disposition::MoveSend).unwrap();
    w.bytes(&[2, 0, 0, 0, b'o', b'k']).unwrap();
    let len = w.finish();
    let d = names_dispatch(&mut server, &buf[..len], &mut reply).unwrap();
    assert_eq!(
        d,
        Dispatched {
            reply_len: 0,
            delivered: true
        }
    );
    assert_eq!(server.lookup(b"ok"), Ok(SendRight(33)));
}

/// A tiny xorshift generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn dispatch_never_panics_on_random_requests() {
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut names = NameServer::default();
    let mut chef = Chef::default();
    let mut reply = vec![0u8; 512];
    for _ in 0..20_000 {
        let id = match rng.next() % 3 {
            0 => NAMES_BASE + rng.next() % 4,
            1 => KITCHEN_BASE + rng.next() % 8,
            _ => rng.next(),
        };
        let n = (rng.next() % 3) as usize;
        let rights: Vec<u64> = (0..n).map(|_| 1 + rng.next() % 100).collect();
        let data: Vec<u8> = (0..rng.next() % 40).map(|_| rng.next() as u8).collect();
        let mut req = request(id % baton_idl_rt::KERNEL_ID_BASE, &rights, &data);
        // Sometimes damage the header or a descriptor too.
        if rng.next().is_multiple_of(4) {
            let at = (rng.next() % req.len() as u64) as usize;
            req[at] = rng.next() as u8;
        }
        let cut = req.len() - (rng.next() % 3) as usize;
        for r in [&req[..], &req[..cut]] {
            if let Ok(d) = names_dispatch(&mut names, r, &mut reply) {
                let _ = d.leftover_rights(r).count();
            }
            let _ = kitchen_dispatch(&mut chef, r, &mut reply);
            // Dispatch through a trait object works too.
            let dyn_names: &mut dyn Names = &mut names;
            let _ = names_dispatch(dyn_names, r, &mut reply);
        }
    }
}

/// One server serving two interfaces, choosing by id range.
#[test]
fn one_server_two_interfaces() {
    struct Both {
        names: NameServer,
        chef: Chef,
    }
    let mut both = Both {
        names: NameServer::default(),
        chef: Chef::default(),
    };
    let mut reply = vec![0u8; 256];
    for id in [NAMES_ADD_ID, KITCHEN_PING_ID] {
        let data = if id == NAMES_ADD_ID {
            [0u8; 16].to_vec()
        } else {
            Vec::new()
        };
        let req = request(id, &[], &data);
        let d = if NAMES_IDS.contains(&id) {
            names_dispatch(&mut both.names, &req, &mut reply)
        } else if KITCHEN_IDS.contains(&id) {
            kitchen_dispatch(&mut both.chef, &req, &mut reply)
        } else {
            unreachable!()
        }
        .unwrap();
        assert!(d.delivered);
        assert_eq!(code(&reply), 0);
    }
    assert_eq!(both.chef.pings, 1);
}

#[test]
fn runtime_under_another_path() {
    let mut c = TwiceClient::new(
        Loopback::new(Doubler, twice_dispatch::<Doubler>),
        CLIENT_DEST,
    );
    assert_eq!(TWICE_TWICE_ID, 4000);
    assert_eq!(c.twice(21), Ok(42));
    assert_eq!(c.twice(u32::MAX), Err(Error::TooLarge));
}

/// Methods of every fixed shape, and one that is not, for the fast-path tests.
#[baton_idl::interface(base = 5000)]
pub trait Shapes {
    /// Nothing in, nothing out.
    fn null(&mut self) -> Result<(), Error>;
    /// Scalars in, a scalar out.
    fn add(&mut self, a: u64, b: u64) -> Result<u64, Error>;
    /// A `bool` (only 0 and 1 decode) and a nested tuple.
    fn pick(&mut self, which: bool, pair: (u8, (u16, [u8; 3]))) -> Result<(i64, bool), Error>;
    /// Fails with the error whose code is `code`.
    fn fail(&mut self, code: u64) -> Result<u8, Error>;
    /// Not fixed: a byte string in.
    fn count(&mut self, data: &[u8]) -> Result<u32, Error>;
    /// A right out: not fixed.
    fn port(&mut self) -> Result<MakeSend, Error>;
}

/// The server of [`Shapes`]: logs every call, so two servers can be compared.
#[derive(Default, Debug, PartialEq)]
struct ShapeServer {
    log: Vec<String>,
}

impl Shapes for ShapeServer {
    fn null(&mut self) -> Result<(), Error> {
        self.log.push("null".into());
        Ok(())
    }

    fn add(&mut self, a: u64, b: u64) -> Result<u64, Error> {
        self.log.push(format!("add {a} {b}"));
        a.checked_add(b).ok_or(Error::TooLarge)
    }

    fn pick(&mut self, which: bool, pair: (u8, (u16, [u8; 3]))) -> Result<(i64, bool), Error> {
        self.log.push(format!("pick {which} {pair:?}"));
        Ok((i64::from(pair.0) - i64::from(pair.1 .0), !which))
    }

    fn fail(&mut self, code: u64) -> Result<u8, Error> {
        self.log.push(format!("fail {code}"));
        Err(Error::from_code(code as i64).unwrap_or(Error::InvalidArgument))
    }

    fn count(&mut self, data: &[u8]) -> Result<u32, Error> {
        self.log.push(format!("count {data:?}"));
        Ok(data.len() as u32)
    }

    fn port(&mut self) -> Result<MakeSend, Error> {
        self.log.push("port".into());
        Ok(MakeSend(SERVER_RECEIVE))
    }
}

/// Every call through the stubs (whose result check has a fast path too) round-trips.
#[test]
fn fixed_shapes_round_trip() {
    let mut c = ShapesClient::new(
        Loopback::new(ShapeServer::default(), shapes_dispatch::<ShapeServer>),
        CLIENT_DEST,
    );
    assert_eq!(c.null(), Ok(()));
    assert_eq!(c.add(2, 3), Ok(5));
    assert_eq!(c.add(u64::MAX, 1), Err(Error::TooLarge));
    assert_eq!(c.pick(true, (9, (4, [1, 2, 3]))), Ok((5, false)));
    assert_eq!(c.fail(Error::NotFound as u64), Err(Error::NotFound));
    assert_eq!(c.count(b"abc"), Ok(3));
    assert_eq!(c.port(), Ok(MakeSend(SERVER_RECEIVE + 1000)));
    assert_eq!(c.transport().server.log.len(), 7);
}

/// The client's fast result check refuses what the general one refuses: a reply of the
/// wrong id, size or code, or a notification, whatever fast path it looks like.
#[test]
fn client_fast_check_refuses_what_the_general_path_refuses() {
    /// Replies with a fixed message, whatever the request.
    struct Canned(Vec<u8>, [u8; IPC_BUFFER_SIZE]);
    impl Transport for Canned {
        fn buffer(&mut self) -> &mut [u8] {
            &mut self.1
        }
        fn call(&mut self, _len: usize) -> Result<usize, Error> {
            self.1[..self.0.len()].copy_from_slice(&self.0);
            Ok(self.0.len())
        }
    }
    let reply = |id: u64, code: u64, data: &[u8], size_delta: i32| {
        let mut buf = vec![0u8; 256];
        // A kernel id cannot be written by a writer: patched in afterwards.
        let mut w = MsgWriter::new(
            &mut buf,
            77,
            Disposition::MoveSendOnce,
            0,
            Disposition::None,
            1,
        )
        .unwrap();
        w.bytes(&code.to_le_bytes()).unwrap();
        w.bytes(data).unwrap();
        let len = w.finish();
        buf.truncate(len);
        let size = (len as i32 + size_delta) as u32;
        buf[4..8].copy_from_slice(&size.to_le_bytes());
        buf[24..32].copy_from_slice(&id.to_le_bytes());
        buf
    };
    let add_reply = SHAPES_ADD_ID + REPLY_ID_OFFSET;
    let call = |msg: Vec<u8>| ShapesClient::new(Canned(msg, [0; IPC_BUFFER_SIZE]), 1).add(1, 2);
    assert_eq!(call(reply(add_reply, 0, &7u64.to_le_bytes(), 0)), Ok(7));
    assert_eq!(
        call(reply(add_reply + 1, 0, &7u64.to_le_bytes(), 0)),
        Err(Error::BadFormat)
    );
    assert_eq!(
        call(reply(add_reply, 0, &7u32.to_le_bytes(), 0)),
        Err(Error::BadFormat)
    );
    assert_eq!(call(reply(add_reply, 0, &[7; 9], 0)), Err(Error::BadFormat));
    assert_eq!(
        call(reply(add_reply, 0, &7u64.to_le_bytes(), 1)),
        Err(Error::BadFormat)
    );
    assert_eq!(
        call(reply(add_reply, Error::NoSpace as u64, &[], 0)),
        Err(Error::NoSpace)
    );
    assert_eq!(
        call(reply(NOTIFY_SEND_ONCE, 0, &[], -8)),
        Err(Error::DeadName)
    );
}

/// The dispatch's fast path and its in-place variant against the general path: for
/// random and damaged requests, the same result, the same reply bytes and the same calls
/// made; a request answered in place had no rights and a send-once reply right, and one
/// that was not is left where it was.
#[test]
fn fast_dispatch_agrees_with_the_general_path() {
    let mut rng = XorShift(0x1234_5678_9abc_def1);
    let (mut fast, mut general, mut in_place) = (
        ShapeServer::default(),
        ShapeServer::default(),
        ShapeServer::default(),
    );
    let mut answered_in_place = 0;
    for i in 0..30_000 {
        let id = SHAPES_BASE + rng.next() % 7;
        let rights: Vec<u64> = if rng.next().is_multiple_of(5) {
            vec![4]
        } else {
            vec![]
        };
        let len = [0, 1, 2, 4, 8, 9, 15, 16, 17][(rng.next() % 9) as usize];
        let data: Vec<u8> = (0..len).map(|_| (rng.next() % 3) as u8).collect();
        let mut req = request(id, &rights, &data);
        match rng.next() % 6 {
            // A send right as reply right, or none.
            0 => req[1] = Disposition::MoveSend as u8,
            1 => {
                req[1] = 0;
                req[16..24].fill(0);
            }
            2 => {
                let at = (rng.next() % req.len() as u64) as usize;
                req[at] = rng.next() as u8;
            }
            _ => {}
        }
        let mut reply_f = vec![0u8; IPC_BUFFER_SIZE];
        let mut reply_g = vec![0u8; IPC_BUFFER_SIZE];
        let f = shapes_dispatch(&mut fast, &req, &mut reply_f);
        let g = __shapes_dispatch_general(&mut general, &req, &mut reply_g);
        assert_eq!(f, g, "request {i}: {req:?}");
        if let Ok(d) = g {
            assert_eq!(
                reply_f[..d.reply_len],
                reply_g[..d.reply_len],
                "request {i}"
            );
        }

        let mut buf = vec![0u8; IPC_BUFFER_SIZE];
        buf[..req.len()].copy_from_slice(&req);
        let mut scratch = vec![0u8; IPC_BUFFER_SIZE];
        let a = shapes_dispatch_in_place(&mut in_place, &mut buf, req.len(), &mut scratch);
        assert_eq!(a.map(|a| a.dispatched), g, "request {i} in place");
        if let (Ok(a), Ok(d)) = (a, g) {
            let out = if a.in_place { &buf } else { &scratch };
            assert_eq!(
                out[..d.reply_len],
                reply_g[..d.reply_len],
                "request {i} in place"
            );
            if a.in_place {
                answered_in_place += 1;
                assert!(d.delivered && d.reply_len > 0);
                let h = MsgHeader::from_bytes(&req).unwrap();
                assert_eq!(h.descriptors(), 0);
                assert_eq!(h.reply_disposition(), Disposition::MoveSendOnce as u8);
            } else {
                assert_eq!(buf[..req.len()], req[..], "request {i} left in place");
            }
        }
        assert_eq!(fast, general);
        assert_eq!(in_place, general);
    }
    assert!(answered_in_place > 500, "{answered_in_place}");
    // A request cut short of its header size is the general path's too.
    let req = request(SHAPES_ADD_ID, &[], &[0; 16]);
    let mut buf = vec![0u8; IPC_BUFFER_SIZE];
    buf[..req.len()].copy_from_slice(&req);
    let mut scratch = vec![0u8; IPC_BUFFER_SIZE];
    let a = shapes_dispatch_in_place(&mut in_place, &mut buf, req.len() - 1, &mut scratch);
    assert_eq!(a, Err(Error::BadFormat));
}

/// The migrating dispatch against `migrated_request` and the general path: for random and
/// damaged requests as the kernel delivers them to an activation (no reply right), the
/// same result, the same reply bytes and the same calls made; a request answered in place
/// was of the fast path's shape, and one that was not was given its stand-in reply right
/// and left where it was.
#[test]
fn migrated_dispatch_agrees_with_the_general_path() {
    let mut rng = XorShift(0x0f1e_2d3c_4b5a_6978);
    let (mut migrated, mut general) = (ShapeServer::default(), ShapeServer::default());
    let mut answered_in_place = 0;
    for i in 0..30_000 {
        let id = SHAPES_BASE + rng.next() % 7;
        let len = [0, 1, 2, 4, 8, 9, 15, 16, 17][(rng.next() % 9) as usize];
        let data: Vec<u8> = (0..len).map(|_| (rng.next() % 3) as u8).collect();
        let mut req = request(id, &[], &data);
        // As delivered to an activation: no reply right, nor a destination.
        req[..2].fill(0);
        req[8..24].fill(0);
        match rng.next() % 6 {
            0 => req[1] = Disposition::MoveSendOnce as u8,
            1 => req[16] = 1,
            2 => {
                let at = (rng.next() % req.len() as u64) as usize;
                req[at] = rng.next() as u8;
            }
            _ => {}
        }
        let mut reply_g = vec![0u8; IPC_BUFFER_SIZE];
        let mut prepared = vec![0u8; IPC_BUFFER_SIZE];
        prepared[..req.len()].copy_from_slice(&req);
        let g = baton_idl_rt::migrated_request(&mut prepared)
            .and_then(|n| __shapes_dispatch_general(&mut general, &prepared[..n], &mut reply_g));

        let mut buf = vec![0u8; IPC_BUFFER_SIZE];
        buf[..req.len()].copy_from_slice(&req);
        let mut scratch = vec![0u8; IPC_BUFFER_SIZE];
        let a = shapes_dispatch_migrated(&mut migrated, &mut buf, &mut scratch);
        assert_eq!(a.map(|a| a.dispatched), g, "request {i}");
        if let (Ok(a), Ok(d)) = (a, g) {
            let out = if a.in_place { &buf } else { &scratch };
            assert_eq!(out[..d.reply_len], reply_g[..d.reply_len], "request {i}");
            if a.in_place {
                answered_in_place += 1;
                assert!(d.delivered && d.reply_len > 0);
            } else {
                assert_eq!(buf[..req.len()], prepared[..req.len()], "request {i} left");
            }
        }
        assert_eq!(migrated, general);
    }
    assert!(answered_in_place > 500, "{answered_in_place}");
}
