//! The client side of the file server's protocol (`fs_proto`, `docs/files.md`): starting
//! the server as the boot task does, and its calls. Used by the file tests, the shell and
//! the `file.*` benchmark.
#![allow(dead_code)] // each program uses part of it

use crate::fs_proto::*;
use baton_abi::ipc::{Descriptor, Disposition, MsgHeader, DESC_OOL, DESC_PORT, NOTIFY_SEND_ONCE};
use baton_rt::ipc::{cap_drop, data_word, port_allocate, IpcBuffer, MSG_RECEIVE, MSG_SEND};
use baton_rt::Error;

const SECONDS: u64 = 1_000_000_000;

/// A reply: its words after the result, a right it carried, its text (in-line bytes or an
/// out-of-line region, which [`Reply::text`] reads and [`Reply::release`] frees).
pub struct Reply {
    pub words: [u64; 4],
    pub right: Option<u64>,
    region: Option<(u64, u64)>,
    inline: [u8; INLINE_MAX],
    inline_len: usize,
}

impl Reply {
    /// The reply's text.
    pub fn text(&self) -> &[u8] {
        match self.region {
            // SAFETY: the kernel mapped the region for this reply, `size` bytes, and it
            // stays until `release`.
            Some((va, size)) => unsafe {
                core::slice::from_raw_parts(va as *const u8, size as usize)
            },
            None => &self.inline[..self.inline_len],
        }
    }

    /// Frees the out-of-line text, if any.
    pub fn release(&mut self) {
        if let Some((va, size)) = self.region.take() {
            crate::blk_client::free_region(va, size);
        }
    }
}

/// A client of the file server: the server's port (a right the caller keeps and drops) and
/// a reply port of the client's own, made by [`Fs::new`] and dropped with the client (the
/// IPC buffer is the caller's).
pub struct Fs {
    pub server: u64,
    reply: u64,
}

impl Drop for Fs {
    fn drop(&mut self) {
        let _ = cap_drop(self.reply);
    }
}

impl Fs {
    pub fn new(server: u64) -> Result<Fs, Error> {
        Ok(Fs {
            server,
            reply: port_allocate(0)?,
        })
    }

    /// Sends request `id` with `words` then `path`, and takes its reply.
    pub fn call(
        &self,
        buf: &mut IpcBuffer,
        id: u64,
        words: &[u64],
        path: &str,
    ) -> Result<Reply, Error> {
        let mut data = [0u8; 32 + PATH_MAX + 8];
        let mut n = 0;
        for w in words.iter().take(4) {
            data[n..n + 8].copy_from_slice(&w.to_le_bytes());
            n += 8;
        }
        let p = path.as_bytes();
        data.get_mut(n..n + p.len())
            .ok_or(Error::TooLarge)?
            .copy_from_slice(p);
        n += p.len();
        let h = MsgHeader {
            bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
            dest: self.server,
            reply: self.reply,
            id,
            ..MsgHeader::default()
        };
        buf.set(h, &[], &data[..n])?;
        buf.msg(MSG_SEND | MSG_RECEIVE, self.reply, 60 * SECONDS)?;
        take_reply(buf, id)
    }

    /// Opens `path`: the object's right and the file's size.
    pub fn open(&self, buf: &mut IpcBuffer, path: &str) -> Result<(u64, u64), Error> {
        let r = self.call(buf, FS_OPEN, &[], path)?;
        Ok((r.right.ok_or(Error::BadFormat)?, r.words[0]))
    }

    /// Creates `path` of `size` zero bytes: its object's right and size.
    pub fn create(&self, buf: &mut IpcBuffer, path: &str, size: u64) -> Result<(u64, u64), Error> {
        let r = self.call(buf, FS_CREATE, &[size], path)?;
        Ok((r.right.ok_or(Error::BadFormat)?, r.words[0]))
    }

    pub fn size(&self, buf: &mut IpcBuffer, path: &str) -> Result<u64, Error> {
        Ok(self.call(buf, FS_SIZE, &[], path)?.words[0])
    }

    pub fn delete(&self, buf: &mut IpcBuffer, path: &str) -> Result<(), Error> {
        self.call(buf, FS_DELETE, &[], path).map(|_| ())
    }

    /// Writes back the written pages of `path` (every file for ""); the pages written.
    pub fn sync(&self, buf: &mut IpcBuffer, path: &str) -> Result<u64, Error> {
        Ok(self.call(buf, FS_SYNC, &[], path)?.words[0])
    }

    /// Lists the folder `path`: the reply (its words: entries, text bytes).
    pub fn list(&self, buf: &mut IpcBuffer, path: &str) -> Result<Reply, Error> {
        self.call(buf, FS_LIST, &[], path)
    }

    /// Ends the server (it writes every file back first).
    pub fn stop(&self, buf: &mut IpcBuffer) -> Result<(), Error> {
        self.call(buf, FS_STOP, &[], "").map(|_| ())
    }

    /// Files held, data requests answered, pages written back, disk reads.
    pub fn info(&self, buf: &mut IpcBuffer) -> Result<[u64; 4], Error> {
        Ok(self.call(buf, FS_INFO, &[], "")?.words)
    }
}

/// Decodes the reply to request `id` in `buf`.
pub fn take_reply(buf: &mut IpcBuffer, id: u64) -> Result<Reply, Error> {
    let h = buf.header();
    if h.id == NOTIFY_SEND_ONCE {
        return Err(Error::DeadName);
    }
    let mut r = Reply {
        words: [0; 4],
        right: None,
        region: None,
        inline: [0; INLINE_MAX],
        inline_len: 0,
    };
    for i in 0..h.descriptors() {
        match buf.descriptor(i) {
            Some(d) if d.kind == DESC_PORT && d.value != 0 => r.right = Some(d.value),
            Some(d) if d.kind == DESC_OOL && d.value != 0 => r.region = Some((d.value, d.size)),
            _ => {}
        }
    }
    let data = buf.data();
    let code = data_word(data, 0);
    if h.id != id + 100 || code != 0 {
        r.release();
        if let Some(right) = r.right {
            let _ = cap_drop(right);
        }
        if h.id != id + 100 {
            return Err(Error::BadFormat);
        }
        return Err(Error::from_code(code as i64).unwrap_or(Error::BadFormat));
    }
    for (i, w) in r.words.iter_mut().enumerate() {
        *w = data_word(data, i + 1);
    }
    let text_at = match id {
        FS_LIST => 24,
        _ => data.len(),
    };
    if let Some(t) = data.get(text_at..) {
        let k = t.len().min(INLINE_MAX);
        r.inline[..k].copy_from_slice(&t[..k]);
        r.inline_len = k;
    }
    Ok(r)
}

/// Starts the file server as the boot task does: spawns `fs` with a port of its own as the
/// bootstrap, takes its hello (a send right to its port), and sends it the driver's right
/// `driver` (a copy). The server's task id and send right, or the setup's error
/// (`BadFormat`: the disk was refused, and the server has ended).
/// Exempts the task `id` from page replacement (`paging_exempt`) when this task holds the
/// host-privilege right; otherwise nothing.
pub fn exempt(id: u64) {
    let host = baton_rt::start::host_priv();
    if host == 0 {
        return;
    }
    if let Ok(port) = baton_rt::host::task_port(host, id) {
        let _ = baton_rt::paging::exempt(port, host);
        let _ = cap_drop(port);
    }
}

pub fn start_server(buf: &mut IpcBuffer, driver: u64) -> Result<(u64, u64), Error> {
    start_server_as(buf, driver, true)
}

/// [`start_server`], exempting the server from page replacement only with `exempt` (a
/// test's server that must feel memory pressure as any task does).
pub fn start_server_as(
    buf: &mut IpcBuffer,
    driver: u64,
    exempt_it: bool,
) -> Result<(u64, u64), Error> {
    let boot = port_allocate(0)?;
    let task = match baton_rt::sys::spawn_with("fs", boot) {
        Ok(t) => t,
        Err(e) => {
            let _ = cap_drop(boot);
            return Err(e);
        }
    };
    // The server takes back the pages page replacement returns: with the host-privilege
    // right, it is put on the path that frees memory, as the default pager is, before it
    // makes its first page.
    if exempt_it {
        exempt(task);
    }
    let hello = buf.msg(MSG_RECEIVE, boot, 10 * SECONDS);
    let _ = cap_drop(boot);
    hello?;
    let h = buf.header();
    let server = match buf.descriptor(0) {
        Some(d) if h.id == FS_HELLO && d.kind == DESC_PORT => d.value,
        _ => return Err(Error::BadFormat),
    };
    let reply = port_allocate(0)?;
    let h = MsgHeader {
        bits: MsgHeader::make_bits(Disposition::CopySend, Disposition::MakeSendOnce, 0),
        dest: server,
        reply,
        id: FS_SETUP,
        ..MsgHeader::default()
    };
    let sent = buf
        .set(h, &[Descriptor::port(driver, Disposition::CopySend)], &[])
        .and_then(|_| buf.msg(MSG_SEND | MSG_RECEIVE, reply, 60 * SECONDS));
    let _ = cap_drop(reply);
    sent?;
    match take_reply(buf, FS_SETUP) {
        Ok(_) => Ok((task, server)),
        Err(e) => {
            let _ = cap_drop(server);
            Err(e)
        }
    }
}

/// Runs `end` (which tells task `id` to end: a stop request, dropping its last send right)
/// and waits until the task has ended, through its task port (had with `host`) and a
/// dead-name notification. A task already gone when looked up only runs `end`.
pub fn end_and_wait(
    host: u64,
    id: u64,
    end: impl FnOnce() -> Result<(), Error>,
) -> Result<(), Error> {
    use baton_abi::ipc::{HEADER_SIZE, NOTIFY_DEAD_NAME, NOTIFY_KIND_DEAD_NAME};
    let port = port_allocate(0)?;
    let watched = baton_rt::host::task_port(host, id).and_then(|tp| {
        match baton_rt::ipc::port_notify(tp, NOTIFY_KIND_DEAD_NAME, port) {
            Ok(()) => Ok(Some(tp)),
            // Ended already: nothing to wait for.
            Err(Error::DeadName) => cap_drop(tp).map(|()| None),
            Err(e) => {
                let _ = cap_drop(tp);
                Err(e)
            }
        }
    });
    let ended = end();
    let waited = match (&ended, watched) {
        (Ok(()), Ok(Some(tp))) => {
            let mut m = [0u8; 64];
            let r = loop {
                if let Err(e) = baton_rt::ipc::msg_buf(&mut m, MSG_RECEIVE, port, 60 * SECONDS) {
                    break Err(e);
                }
                let h = MsgHeader::from_bytes(&m).unwrap_or_default();
                if h.id == NOTIFY_DEAD_NAME && data_word(&m[HEADER_SIZE..], 0) == tp {
                    break Ok(());
                }
            };
            let _ = cap_drop(tp);
            r
        }
        (_, Ok(Some(tp))) => cap_drop(tp),
        (_, Ok(None)) => Ok(()),
        // No task port: the task is gone (or was never there).
        (_, Err(_)) => Ok(()),
    };
    let _ = cap_drop(port);
    ended.and(waited)
}

/// What a test must leave as it found it: the kernel's heap in use, its objects, its free
/// frames, its ports and port names, once they stop changing (a task just ended goes at its threads' next
/// kernel entry). The driver's DMA memory, quarantined when its end is carried out (on
/// several CPUs possibly after its end was reported), is released (with `host`) at every
/// look.
pub fn settled_counts(host: u64) -> Result<(u64, u64, u64, u64, u64), Error> {
    let counts = || -> Result<(u64, u64, u64, u64, u64), Error> {
        baton_rt::memobj::dma_quarantine_release(host)?;
        let s = baton_rt::stats()?;
        let v = baton_rt::vm::system_stats()?;
        Ok((s.heap_used, v.objects, v.frames_free, s.ports, s.names))
    };
    let mut last = counts()?;
    for _ in 0..100 {
        baton_rt::sleep_ns(10_000_000)?;
        let now = counts()?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}

/// The most rounds [`two_rounds`] runs.
pub const MOST_ROUNDS: u32 = 4;

/// Runs `body` (a test's whole work, given the round: 1, 2, ...) round after round until
/// two rounds in a row leave the kernel's heap, objects, free frames, ports and names
/// ([`settled_counts`], with `host`) at the same figures, and checks, as test `test`, that
/// this happens within [`MOST_ROUNDS`] rounds. Whatever a round leaks shows as a difference
/// after every round, so a leak fails the check however many rounds run.
///
/// Why not always rounds 1 and 2: some of the kernel's tables keep the room they grew to
/// (its high-water mark) and grow on first use, by design, so that hot paths never
/// allocate: the run queues, the timer heap and the wake lists sized for the most threads
/// that existed at once, the kernel-stack pool for the most stacks in use at once, a
/// wait-queue bucket for the most threads that waited in it at once. How high those marks
/// go depends on timing (whether a thread had ended before the next began, whether a
/// `wait` blocked or found its word changed), so on two CPUs under load a second round
/// can push one of them a little higher than the first did: bounded growth, which the
/// next round no longer shows. A 96-byte difference was one such case: the first wait
/// in a wait-queue bucket no wait had used before grew that bucket's ring to four entries
/// of 24 bytes. The kernel now gives every bucket that ring at boot (`kern::waitq`), but
/// other marks remain, so the comparison takes the last two rounds, once they agree.
pub fn two_rounds(
    test: &str,
    host: u64,
    mut body: impl FnMut(u32) -> Result<(), baton_rt::check::Failed>,
) -> Result<(), baton_rt::check::Failed> {
    let mut figures = [(0, 0, 0, 0, 0); 2];
    let mut agreed = 0;
    for n in 1..=MOST_ROUNDS {
        baton_rt::println!("{test}: round {n}");
        body(n)?;
        let now = baton_rt::check::must(test, "counts", settled_counts(host))?;
        figures = [figures[1], now];
        if n > 1 {
            if figures[0] == figures[1] {
                agreed = n;
                break;
            }
            baton_rt::println!(
                "{test}: round {n} left other figures than round {} ({:?} -> {:?})",
                n - 1,
                figures[0],
                figures[1]
            );
        }
    }
    baton_rt::check!(
        test,
        agreed > 0,
        "a round leaves the kernel's heap, objects, free frames, ports and names as the round before it did (rounds {} and {}: {:?} -> {:?})",
        if agreed > 0 { agreed - 1 } else { MOST_ROUNDS - 1 },
        if agreed > 0 { agreed } else { MOST_ROUNDS },
        figures[0],
        figures[1]
    );
    Ok(())
}
