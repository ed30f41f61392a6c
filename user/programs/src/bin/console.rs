//! `console`: the serial console server. It owns COM1 through two capabilities the
//! host-privilege right lets it make — an I/O-ports object for the UART's eight ports and
//! an interrupt object for its line (ISA 4) — takes input by interrupt, edits lines
//! (backspace, left and right arrows, up and down through a history, Ctrl-C: while nobody
//! reads, it is reported to the port a client named with `interrupts_to`), and serves
//! the `Console` interface (`console_idl.rs`: write text, read a line) on a port it
//! registers as `"console"` with the name server.
//!
//! Booted as `init=names,console,shell priv=console,shell` (`cargo xtask run`'s default).
//! The kernel keeps writing its own lines to COM1, polled; both share the port.
//!
//! One thread, one port: requests and the interrupt notifications arrive on the same
//! port. A `read_line` that finds no line typed yet is not answered at once: its request
//! (with its reply right) is kept, and answered when the line is finished, by running the
//! generated dispatch on it again. Input typed while nobody reads is kept (up to
//! [`TYPEAHEAD_MAX`] bytes) and edited when the next `read_line` comes.
#![no_std]
#![no_main]

extern crate alloc;

#[path = "../console_idl.rs"]
mod console_idl;

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use baton_abi::ipc::{Disposition, MsgHeader, HEADER_SIZE, IPC_BUFFER_SIZE, MSG_RECEIVE, MSG_SEND};
use baton_abi::FOREVER;
use baton_rt::host::{io_in, io_out, ioport_create, irq_ack, irq_attach};
use baton_rt::idl_rt::{Dispatched, SendRight};
use baton_rt::ipc::{cap_drop, msg_buf, port_allocate, port_make_send};
use baton_rt::names::NamesClient;
use baton_rt::rpc::{Notification, Rpc};
use baton_rt::{println, start, Error};
use console_idl::{
    console_dispatch, Console, CONSOLE_INTERRUPT_ID, CONSOLE_NAME, CONSOLE_READ_LINE_ID, LINE_MAX,
};

baton_rt::entry!(main);

/// COM1's I/O ports.
const COM1: u64 = 0x3f8;
/// Its ISA interrupt line.
const COM1_IRQ: u64 = 4;
/// Registers (offsets from [`COM1`]).
const RBR: u64 = 0;
const THR: u64 = 0;
const IER: u64 = 1;
const FCR: u64 = 2;
const MCR: u64 = 4;
const LSR: u64 = 5;
/// Line status: a byte was received; the transmitter can take one.
const LSR_DATA: u64 = 0x01;
const LSR_THRE: u64 = 0x20;
/// Ctrl-C.
const CTRL_C: u8 = 0x03;
/// Bytes kept while nobody reads.
const TYPEAHEAD_MAX: usize = 1024;
/// Lines kept in the history.
const HISTORY_MAX: usize = 32;

fn main(_task_id: u64) -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("console: cannot start: {}", e.name());
            1
        }
    }
}

fn run() -> Result<(), Error> {
    let host_priv = start::host_priv();
    let io = ioport_create(COM1, 8, host_priv)?;
    let port = port_allocate(0)?;
    // Receive interrupts: FIFO on with a trigger level of one byte, the "data available"
    // interrupt, and OUT2 (which connects the UART's interrupt to the PC's line).
    io_out(io, COM1 + FCR, 1, 0x07)?;
    io_out(io, COM1 + MCR, 1, 0x0b)?;
    let irq = irq_attach(COM1_IRQ, port, host_priv)?;
    io_out(io, COM1 + IER, 1, 0x01)?;
    let mut rpc = Rpc::new()?;
    let send = port_make_send(port, false)?;
    let names = start::bootstrap();
    NamesClient::new(&mut rpc, names).register(CONSOLE_NAME, SendRight(send))?;
    cap_drop(send)?;
    let mut server = Server {
        io,
        irq,
        editor: Editor::default(),
        typeahead: VecDeque::new(),
        waiting: None,
        answer: None,
        interrupt_to: 0,
    };
    // Whatever was typed before we were ready.
    server.drain();
    let ipc = rpc.ipc();
    let mut reply = [0u8; IPC_BUFFER_SIZE];
    loop {
        ipc.msg(MSG_RECEIVE, port, FOREVER)?;
        let Some(h) = MsgHeader::from_bytes(ipc.view()) else {
            continue;
        };
        let len = (h.size as usize).min(IPC_BUFFER_SIZE);
        let request = ipc.view().get(..len).unwrap_or(&[]);
        if let Some(n) = Notification::of(request) {
            if let Notification::Interrupt(_) = n {
                // Acknowledge first, then drain: a byte that arrives meanwhile sends a
                // new notification rather than being missed.
                let _ = irq_ack(server.irq);
                server.drain();
            }
            server.finish_read(&mut reply);
            continue;
        }
        if h.id == CONSOLE_READ_LINE_ID && server.answer.is_none() {
            if server.waiting.is_some() {
                // One reader at a time.
                let d = reject(request, &mut reply, Error::Busy);
                send_reply(request, &mut reply, d);
                continue;
            }
            // Keep the request; writing the prompt is the dispatch's (it answers
            // `WouldBlock`, which is not sent).
            let mut kept = Vec::new();
            kept.extend_from_slice(request);
            let _ = console_dispatch(&mut server, request, &mut reply);
            server.waiting = Some(kept);
            server.editor.start();
            server.feed_typeahead();
            server.finish_read(&mut reply);
            continue;
        }
        let d = console_dispatch(&mut server, request, &mut reply).unwrap_or(Dispatched {
            reply_len: 0,
            delivered: false,
        });
        send_reply(request, &mut reply, d);
    }
}

/// An error reply to `request` (not passed to the service).
fn reject(request: &[u8], reply: &mut [u8], e: Error) -> Dispatched {
    let none = Dispatched {
        reply_len: 0,
        delivered: false,
    };
    let Ok(reader) = baton_rt::idl_rt::MsgReader::new(request) else {
        return none;
    };
    baton_rt::idl_rt::server::ReplyTo::of(&reader)
        .and_then(|to| to.reject(reply, e))
        .unwrap_or(none)
}

/// Sends the reply the dispatch of `request` wrote (if any), and releases what the request
/// left over.
fn send_reply(request: &[u8], reply: &mut [u8; IPC_BUFFER_SIZE], d: Dispatched) {
    if !d.delivered || d.reply_len == 0 {
        for name in d.leftover_rights(request) {
            let _ = cap_drop(name);
        }
    }
    if d.reply_len == 0 {
        return;
    }
    let sent = match reply.get_mut(..d.reply_len) {
        Some(r) => msg_buf(r, MSG_SEND, 0, 0),
        None => Err(Error::TooLarge),
    };
    if sent.is_err() {
        // The client is gone: the reply right is still ours.
        if let Some(h) = MsgHeader::from_bytes(request) {
            let _ = cap_drop(h.reply);
        }
    }
}

/// The server.
struct Server {
    io: u64,
    irq: u64,
    editor: Editor,
    /// Bytes received while nobody reads.
    typeahead: VecDeque<u8>,
    /// The `read_line` request waiting for its line.
    waiting: Option<Vec<u8>>,
    /// The finished line, while the waiting request is answered with it.
    answer: Option<Vec<u8>>,
    /// Where Ctrl-C typed while nobody reads is reported (a send right; 0: nowhere).
    interrupt_to: u64,
}

impl Server {
    /// Writes one byte, waiting (briefly) for the transmitter.
    fn put(&self, b: u8) {
        for _ in 0..100_000 {
            if io_in(self.io, COM1 + LSR, 1).is_ok_and(|s| s & LSR_THRE != 0) {
                break;
            }
        }
        let _ = io_out(self.io, COM1 + THR, 1, u64::from(b));
    }

    /// Writes bytes, `\n` as `\r\n`.
    fn out(&self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.put(b'\r');
            }
            self.put(b);
        }
    }

    /// Takes every byte the UART holds: to the line being edited, or kept for later.
    fn drain(&mut self) {
        while io_in(self.io, COM1 + LSR, 1).is_ok_and(|s| s & LSR_DATA != 0) {
            let Ok(b) = io_in(self.io, COM1 + RBR, 1) else {
                break;
            };
            let b = b as u8;
            if b == CTRL_C && self.waiting.is_none() && self.interrupt_to != 0 {
                // Nobody reads: the client that asked is told (a shell stops its
                // foreground program).
                self.out(b"^C\n");
                self.send_interrupt();
            } else if self.waiting.is_some() && self.editor.done.is_none() {
                let echo = self.editor.key(b);
                self.out(&echo);
            } else if self.typeahead.len() < TYPEAHEAD_MAX {
                self.typeahead.push_back(b);
            }
        }
    }

    /// Sends the one-way [`CONSOLE_INTERRUPT_ID`] message to the port `interrupt_to` names
    /// (never blocking: a full queue means the client has enough of them).
    fn send_interrupt(&mut self) {
        let mut msg = [0u8; HEADER_SIZE];
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::None, 0),
            size: HEADER_SIZE as u32,
            dest: self.interrupt_to,
            reply: 0,
            id: CONSOLE_INTERRUPT_ID,
        };
        msg.copy_from_slice(&h.to_bytes());
        if msg_buf(&mut msg, MSG_SEND, 0, 0) == Err(Error::DeadName) {
            let _ = cap_drop(self.interrupt_to);
            self.interrupt_to = 0;
        }
    }

    /// Edits the bytes typed ahead, up to the end of a line.
    fn feed_typeahead(&mut self) {
        while self.editor.done.is_none() {
            let Some(b) = self.typeahead.pop_front() else {
                break;
            };
            let echo = self.editor.key(b);
            self.out(&echo);
        }
    }

    /// Answers the waiting reader if its line is finished.
    fn finish_read(&mut self, reply: &mut [u8; IPC_BUFFER_SIZE]) {
        if self.waiting.is_none() {
            return;
        }
        let Some(line) = self.editor.done.take() else {
            return;
        };
        let Some(request) = self.waiting.take() else {
            return;
        };
        self.answer = Some(line);
        let d = console_dispatch(self, &request, reply).unwrap_or(Dispatched {
            reply_len: 0,
            delivered: false,
        });
        self.answer = None;
        send_reply(&request, reply, d);
    }
}

impl Console for Server {
    fn write(&mut self, text: &[u8]) -> Result<(), Error> {
        self.out(text);
        Ok(())
    }

    fn interrupts_to(&mut self, port: SendRight) -> Result<(), Error> {
        if self.interrupt_to != 0 {
            let _ = cap_drop(self.interrupt_to);
        }
        self.interrupt_to = port.0;
        Ok(())
    }

    fn read_line(&mut self, prompt: &[u8]) -> Result<&[u8], Error> {
        match &self.answer {
            Some(line) => Ok(line),
            None => {
                self.out(prompt);
                Err(Error::WouldBlock)
            }
        }
    }
}

/// Where an escape sequence is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Esc {
    #[default]
    None,
    /// After ESC.
    Start,
    /// After ESC [ (or ESC O), before the final byte.
    Csi,
}

/// The line editor: the line, the cursor, the history.
#[derive(Default)]
struct Editor {
    line: Vec<u8>,
    cursor: usize,
    history: Vec<Vec<u8>>,
    /// Which history entry is shown (`history.len()` = the line being typed).
    shown: usize,
    esc: Esc,
    /// The last byte was a carriage return (a `\n` right after it ends nothing).
    after_cr: bool,
    /// A finished line, not yet handed out.
    done: Option<Vec<u8>>,
}

impl Editor {
    /// A new line.
    fn start(&mut self) {
        self.line.clear();
        self.cursor = 0;
        self.shown = self.history.len();
        self.esc = Esc::None;
    }

    /// One byte typed; what to echo.
    fn key(&mut self, b: u8) -> Vec<u8> {
        let mut echo = Vec::new();
        let after_cr = core::mem::take(&mut self.after_cr);
        match (self.esc, b) {
            (Esc::Start, b'[' | b'O') => self.esc = Esc::Csi,
            (Esc::Start, _) => self.esc = Esc::None,
            (Esc::Csi, b'0'..=b'9' | b';') => {}
            (Esc::Csi, _) => {
                self.esc = Esc::None;
                self.arrow(b, &mut echo);
            }
            (Esc::None, 0x1b) => self.esc = Esc::Start,
            (Esc::None, b'\r') | (Esc::None, b'\n') if !(b == b'\n' && after_cr) => {
                self.after_cr = b == b'\r';
                echo.extend_from_slice(b"\r\n");
                let line = core::mem::take(&mut self.line);
                if !line.is_empty() && self.history.last() != Some(&line) {
                    if self.history.len() >= HISTORY_MAX {
                        self.history.remove(0);
                    }
                    self.history.push(line.clone());
                }
                self.done = Some(line);
                self.cursor = 0;
            }
            (Esc::None, 0x03) => {
                // Ctrl-C: the line is dropped, an empty one goes back.
                echo.extend_from_slice(b"^C\r\n");
                self.line.clear();
                self.cursor = 0;
                self.done = Some(Vec::new());
            }
            (Esc::None, 0x7f | 0x08) if self.cursor > 0 => {
                self.cursor -= 1;
                self.line.remove(self.cursor);
                echo.push(0x08);
                self.redraw_tail(&mut echo, 1);
            }
            (Esc::None, 0x20..=0x7e) if self.line.len() < LINE_MAX => {
                self.line.insert(self.cursor, b);
                self.cursor += 1;
                echo.push(b);
                self.redraw_tail(&mut echo, 0);
            }
            _ => {}
        }
        echo
    }

    /// Rewrites the line from the cursor on, blanks `extra` cells after it, and puts the
    /// terminal's cursor back.
    fn redraw_tail(&self, echo: &mut Vec<u8>, extra: usize) {
        let tail = self.line.get(self.cursor..).unwrap_or(&[]);
        echo.extend_from_slice(tail);
        echo.extend(core::iter::repeat_n(b' ', extra));
        back(echo, tail.len() + extra);
    }

    /// The final byte of an escape sequence: the arrows.
    fn arrow(&mut self, b: u8, echo: &mut Vec<u8>) {
        match b {
            b'C' if self.cursor < self.line.len() => {
                self.cursor += 1;
                echo.extend_from_slice(b"\x1b[C");
            }
            b'D' if self.cursor > 0 => {
                self.cursor -= 1;
                echo.extend_from_slice(b"\x1b[D");
            }
            b'A' if self.shown > 0 => {
                self.shown -= 1;
                self.show(echo);
            }
            b'B' if self.shown < self.history.len() => {
                self.shown += 1;
                self.show(echo);
            }
            _ => {}
        }
    }

    /// Replaces the line with history entry `shown` (or an empty line past the last).
    fn show(&mut self, echo: &mut Vec<u8>) {
        back(echo, self.cursor);
        echo.extend_from_slice(b"\x1b[K");
        self.line = self.history.get(self.shown).cloned().unwrap_or_default();
        self.cursor = self.line.len();
        echo.extend_from_slice(&self.line);
    }
}

/// Moves the terminal's cursor `n` cells left.
fn back(echo: &mut Vec<u8>, n: usize) {
    if n > 0 {
        echo.extend_from_slice(alloc::format!("\x1b[{n}D").as_bytes());
    }
}
