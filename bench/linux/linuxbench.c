/*
 * linuxbench: the Linux side of `cargo xtask bench`.
 *
 * The same kind of micro-operations as Baton's `bench` program (user/programs/src/bin/
 * bench.rs), measured in a Linux guest under the same QEMU settings: TCG,
 * `-icount shift=0,align=off,sleep=off` and one CPU, where the time-stamp counter advances
 * exactly once per guest instruction. The difference of two `stamp()` readings is then the
 * exact number of instructions executed between them, user and kernel alike, and two boots
 * of the same image give the same figures. xtask/src/linux.rs builds this file with
 * `gcc -O2 -static`, packs it into the guest's initramfs, boots it and parses the output;
 * docs/benchmarks.md defines every benchmark.
 *
 * Method (as Baton's): each benchmark runs WARMUP iterations that are not recorded, then
 * ITER recorded ones, one delta per iteration, and prints
 *
 *   BENCH name=linux.<op> unit=instructions iterations=<n> median=<x> min=<y> max=<z>
 *
 * where median is the lower median (element (n - 1) / 2 of the sorted deltas). The deltas
 * include the timestamps' own cost (`linux.rdtsc.overhead`). After the last benchmark it
 * prints `BENCH done`; on a failure `TEST FAIL linux: <why>`, and it exits with status 1.
 * Lines starting `LINUXINFO ` are remarks (how often a yield did not switch, and so on).
 *
 * Usage: linuxbench [PATH-OF-NULL-PROGRAM [DISK-SCRIPT FILE]]   (default /bench/null; with
 * DISK-SCRIPT, after every other benchmark `/bin/sh DISK-SCRIPT` is run (it loads the disk's
 * modules and mounts it) and then the file rows read FILE, if it is there)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* Iterations run before recording. */
#define WARMUP 100
/* Recorded iterations of every benchmark. */
#define ITER 1000
/* Every iteration, warm-up included. */
#define TOTAL (WARMUP + ITER)
/* Bytes per page. */
#define PAGE 4096
/* Pages of PROT100, UNPROT100 and APPEL2, and of APPEL1's ring of pages. */
#define RANGE 100
/* Bytes of the request and of the reply of the `linux.unix.rpc<N>` rows, in the order run. */
static const size_t RPC_SIZES[] = {1, 32, 64, 1024};
/* The largest of RPC_SIZES. */
#define RPC_MAX 1024

extern char **environ;

/* Per-iteration deltas of the benchmark being run; the first WARMUP are not reported. */
static uint64_t samples[TOTAL];

/*
 * Reads the time-stamp counter in program order: `lfence; rdtsc; lfence`, exactly as
 * Baton's `baton_rt::rdtsc_ordered`. The "memory" clobber makes it a compiler barrier, so
 * the operation being measured stays between two readings.
 */
static inline __attribute__((always_inline)) uint64_t stamp(void)
{
	uint32_t lo, hi;
	__asm__ volatile("lfence\n\trdtsc\n\tlfence" : "=a"(lo), "=d"(hi) : : "memory");
	return ((uint64_t)hi << 32) | lo;
}

/* A system call with no argument, issued inline (no C library wrapper). */
static inline long sys0(long nr)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "0"(nr) : "rcx", "r11", "memory");
	return ret;
}

/* A system call with two arguments, issued inline. */
static inline long sys2(long nr, long a, long b)
{
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"(nr), "D"(a), "S"(b)
			 : "rcx", "r11", "memory");
	return ret;
}

/* A system call with four arguments, issued inline. */
static inline long sys4(long nr, long a, long b, long c, long d)
{
	long ret;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

/* Writes all of `buf` to standard output (no stdio buffer, so nothing is duplicated by
 * fork and nothing is lost at `_exit`). */
static void put(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(1, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(1);
		buf += n;
		len -= (size_t)n;
	}
}

/* printf to standard output, one write per line. */
static void say(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof buf - 1)
		n = (int)sizeof buf - 1;
	if (n > 0)
		put(buf, (size_t)n);
}

/* Prints `TEST FAIL linux: <why>` and exits with status 1. */
static void __attribute__((noreturn, format(printf, 1, 2))) fail(const char *fmt, ...)
{
	char buf[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	say("TEST FAIL linux: %s (errno %d: %s)\n", buf, errno, strerror(errno));
	_exit(1);
}

/* qsort order of u64. */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Prints the BENCH line of `name` from the recorded part of `samples`. */
static void report(const char *name)
{
	static uint64_t sorted[ITER];
	memcpy(sorted, samples + WARMUP, sizeof sorted);
	qsort(sorted, ITER, sizeof sorted[0], cmp_u64);
	say("BENCH name=%s unit=instructions iterations=%d median=%llu min=%llu max=%llu\n",
	    name, ITER, (unsigned long long)sorted[(ITER - 1) / 2],
	    (unsigned long long)sorted[0], (unsigned long long)sorted[ITER - 1]);
}

/* fork(), failing the run if it fails. */
static pid_t fork_or_fail(const char *what)
{
	pid_t pid = fork();
	if (pid < 0)
		fail("%s: fork", what);
	return pid;
}

/* Waits for `pid`, which must exit with status 0. */
static void reap(pid_t pid, const char *what)
{
	int status;
	if (waitpid(pid, &status, 0) != pid)
		fail("%s: waitpid", what);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail("%s: child ended with wait status %#x", what, status);
}

/* Reads exactly `len` bytes. */
static void read_full(int fd, void *buf, size_t len, const char *what)
{
	char *p = buf;
	while (len > 0) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail("%s: read", what);
		p += n;
		len -= (size_t)n;
	}
}

/* Writes exactly `len` bytes. */
static void write_full(int fd, const void *buf, size_t len, const char *what)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail("%s: write", what);
		p += n;
		len -= (size_t)n;
	}
}

/* mmap of `pages` private anonymous read-write pages, with transparent huge pages off
 * (Debian's kernel enables them for every large enough mapping: the fault benchmarks
 * measure 4 KiB pages), each page written once when `touch` is set. */
static char *map_pages(size_t pages, int touch, const char *what)
{
	char *p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (p == MAP_FAILED)
		fail("%s: mmap", what);
	if (madvise(p, pages * PAGE, MADV_NOHUGEPAGE) != 0)
		fail("%s: madvise(MADV_NOHUGEPAGE)", what);
	if (touch)
		for (size_t i = 0; i < pages; i++)
			((volatile char *)p)[i * PAGE] = 1;
	return p;
}

/* mprotect, failing the run if it fails. */
static void protect(void *p, size_t pages, int prot, const char *what)
{
	if (mprotect(p, pages * PAGE, prot) != 0)
		fail("%s: mprotect", what);
}

/* ---- floor ---------------------------------------------------------------------------- */

/* linux.rdtsc.overhead: two timestamps back to back, the cost included in every figure. */
static void bench_rdtsc(void)
{
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		uint64_t b = stamp();
		samples[i] = b - a;
	}
	report("linux.rdtsc.overhead");
}

/* linux.syscall.null: `getppid` issued inline with `syscall`, from user mode and back. */
static void bench_syscall_null(void)
{
	pid_t parent = getppid();
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		long r = sys0(SYS_getppid);
		uint64_t b = stamp();
		if (r != parent)
			fail("syscall.null: getppid returned %ld, not %d", r, (int)parent);
		samples[i] = b - a;
	}
	report("linux.syscall.null");
}

/* linux.clock.gettime: glibc's clock_gettime(CLOCK_MONOTONIC), which uses the vDSO when the
 * kernel's clocksource allows it and makes the system call otherwise. */
static void bench_clock_gettime(void)
{
	struct timespec ts;
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		int r = clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t b = stamp();
		if (r != 0)
			fail("clock.gettime: clock_gettime");
		samples[i] = b - a;
	}
	report("linux.clock.gettime");
}

/* ---- signals, processes ------------------------------------------------------------- */

/* Signals taken by `on_usr1`. */
static volatile unsigned long usr1_count;

/* The SIGUSR1 handler of linux.signal.roundtrip: counts and returns. */
static void on_usr1(int sig)
{
	(void)sig;
	usr1_count++;
}

/* linux.signal.roundtrip: `kill(getpid(), SIGUSR1)` issued inline; the signal is delivered
 * on the way out of the system call, the handler runs and returns through `rt_sigreturn`,
 * and the second timestamp is taken when the `kill` call has returned. */
static void bench_signal(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) != 0)
		fail("signal.roundtrip: sigaction");
	long self = getpid();
	usr1_count = 0;
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		long r = sys2(SYS_kill, self, SIGUSR1);
		uint64_t b = stamp();
		if (r != 0)
			fail("signal.roundtrip: kill returned %ld", r);
		samples[i] = b - a;
	}
	if (usr1_count != TOTAL)
		fail("signal.roundtrip: %lu signals handled, not %d", usr1_count, TOTAL);
	signal(SIGUSR1, SIG_DFL);
	report("linux.signal.roundtrip");
}

/* linux.fork.exit: glibc `fork()`, the child `_exit(0)`s at once, the parent `waitpid`s for
 * it. From before the fork to after the wait returns (in the parent). */
static void bench_fork_exit(void)
{
	for (int i = 0; i < TOTAL; i++) {
		int status;
		uint64_t a = stamp();
		pid_t pid = fork();
		if (pid == 0)
			_exit(0);
		pid_t w = waitpid(pid, &status, 0);
		uint64_t b = stamp();
		if (pid < 0 || w != pid || status != 0)
			fail("fork.exit: fork %d, waitpid %d, status %#x", (int)pid, (int)w, status);
		samples[i] = b - a;
	}
	report("linux.fork.exit");
}

/* linux.fork.1m: `linux.fork.exit` from a process with 1 MiB more resident (256 pages of
 * a private anonymous mapping, each written before the first fork): fork copies the page
 * tables' entries and write-protects them; nothing is copied until written. */
static void bench_fork_1m(void)
{
	const size_t len = 1 << 20;
	volatile char *p = map_pages(len / PAGE, 1, "fork.1m");
	for (int i = 0; i < TOTAL; i++) {
		int status;
		uint64_t a = stamp();
		pid_t pid = fork();
		if (pid == 0)
			_exit(0);
		pid_t w = waitpid(pid, &status, 0);
		uint64_t b = stamp();
		if (pid < 0 || w != pid || status != 0)
			fail("fork.1m: fork %d, waitpid %d, status %#x", (int)pid, (int)w, status);
		samples[i] = b - a;
	}
	munmap((void *)p, len);
	report("linux.fork.1m");
}

/* linux.spawn.null: glibc `posix_spawn` (clone with CLONE_VM | CLONE_VFORK, then execve) of
 * the static null program (bench/linux/null.c: no C library, it only exits), then
 * `waitpid`. From before the spawn to after the wait returns. */
static void bench_spawn(const char *null_path)
{
	char *argv[] = {(char *)"null", NULL};
	for (int i = 0; i < TOTAL; i++) {
		pid_t pid;
		int status = -1;
		uint64_t a = stamp();
		int r = posix_spawn(&pid, null_path, NULL, NULL, argv, environ);
		pid_t w = r == 0 ? waitpid(pid, &status, 0) : -1;
		uint64_t b = stamp();
		if (r != 0) {
			errno = r;
			fail("spawn.null: posix_spawn %s", null_path);
		}
		if (w != pid || status != 0)
			fail("spawn.null: waitpid %d, status %#x", (int)w, status);
		samples[i] = b - a;
	}
	report("linux.spawn.null");
}

/* linux.pipe.pingpong: two processes, two pipes. The parent writes one byte into the first
 * pipe and reads one from the second; the child reads the byte and writes it back. One
 * round trip, from before the parent's write to after its read returns. */
static void bench_pipe(void)
{
	int there[2], back[2];
	if (pipe(there) != 0 || pipe(back) != 0)
		fail("pipe.pingpong: pipe");
	pid_t pid = fork_or_fail("pipe.pingpong");
	if (pid == 0) {
		close(there[1]);
		close(back[0]);
		for (int i = 0; i < TOTAL; i++) {
			char c;
			read_full(there[0], &c, 1, "pipe.pingpong child");
			write_full(back[1], &c, 1, "pipe.pingpong child");
		}
		_exit(0);
	}
	close(there[0]);
	close(back[1]);
	for (int i = 0; i < TOTAL; i++) {
		char out = (char)i, in = 0;
		uint64_t a = stamp();
		ssize_t w = write(there[1], &out, 1);
		ssize_t r = read(back[0], &in, 1);
		uint64_t b = stamp();
		if (w != 1 || r != 1 || in != out)
			fail("pipe.pingpong: write %zd, read %zd", w, r);
		samples[i] = b - a;
	}
	reap(pid, "pipe.pingpong");
	close(there[1]);
	close(back[0]);
	report("linux.pipe.pingpong");
}

/* linux.unix.rpc<N>: a client and a server process on a UNIX stream socket pair. The client
 * writes an N-byte request and reads the N-byte reply; the server reads the request and
 * writes the reply (the request with its first byte incremented). One round trip, from
 * before the client's write to after its read of the whole reply. Measured for N = 1, 32,
 * 64 and 1024 (RPC_SIZES): Baton's `rpc.{null,32b,1k}.*.roundtrip` rows carry 0, 32 and
 * 1,024 bytes each way; a stream socket cannot carry an empty message, so its smallest
 * request is one byte. */
static void bench_unix_rpc(size_t bytes)
{
	char name[32], what[48];
	snprintf(name, sizeof name, "unix.rpc%zu", bytes);
	if (bytes == 0 || bytes > RPC_MAX)
		fail("%s: size out of range", name);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		fail("%s: socketpair", name);
	pid_t pid = fork_or_fail(name);
	if (pid == 0) {
		close(sv[0]);
		static char buf[RPC_MAX];
		snprintf(what, sizeof what, "%s server", name);
		for (int i = 0; i < TOTAL; i++) {
			read_full(sv[1], buf, bytes, what);
			buf[0]++;
			write_full(sv[1], buf, bytes, what);
		}
		_exit(0);
	}
	close(sv[1]);
	static char req[RPC_MAX], rep[RPC_MAX];
	memset(req, 0x5a, sizeof req);
	snprintf(what, sizeof what, "%s client", name);
	for (int i = 0; i < TOTAL; i++) {
		req[0] = (char)i;
		uint64_t a = stamp();
		write_full(sv[0], req, bytes, what);
		read_full(sv[0], rep, bytes, what);
		uint64_t b = stamp();
		if (rep[0] != (char)(i + 1) || memcmp(rep + 1, req + 1, bytes - 1) != 0)
			fail("%s: wrong reply", name);
		samples[i] = b - a;
	}
	reap(pid, name);
	close(sv[0]);
	snprintf(what, sizeof what, "linux.%s", name);
	report(what);
}

/* ---- out-of-line data: the same bytes through a pipe -------------------------------- */

/* Iterations of the linux.ipc.ool.<size> rows: fewer than the others (a megabyte is
 * copied twice per iteration), as Baton's ipc.ool.* rows. */
#define OOL_WARM 10
#define OOL_RUNS 100

/* Prints the BENCH line of `name` from samples[OOL_WARM .. OOL_WARM + OOL_RUNS). */
static void report_ool(const char *name)
{
	static uint64_t sorted[OOL_RUNS];
	memcpy(sorted, samples + OOL_WARM, sizeof sorted);
	qsort(sorted, OOL_RUNS, sizeof sorted[0], cmp_u64);
	say("BENCH name=%s unit=instructions iterations=%d median=%llu min=%llu max=%llu\n",
	    name, OOL_RUNS, (unsigned long long)sorted[(OOL_RUNS - 1) / 2],
	    (unsigned long long)sorted[0], (unsigned long long)sorted[OOL_RUNS - 1]);
}

/* linux.ipc.ool.<size>: what Baton's ipc.ool.<size> rows do, with Linux's pipes: a client
 * writes `bytes` (4 KiB, 64 KiB, 1 MiB, resident) into a pipe to a server process, which
 * reads them into its buffer, reads one word of every page, and answers one byte on a
 * second pipe. The client's whole round trip: the kernel copies the data in from the
 * client and out to the server (a pipe holds 64 KiB: larger requests go in pieces). */
static void bench_pipe_ool(size_t bytes, const char *size)
{
	char name[48], what[64];
	snprintf(name, sizeof name, "linux.ipc.ool.%s", size);
	int there[2], back[2];
	if (pipe(there) != 0 || pipe(back) != 0)
		fail("%s: pipe", name);
	char *src = map_pages(bytes / PAGE, 1, name);
	pid_t pid = fork_or_fail(name);
	if (pid == 0) {
		close(there[1]);
		close(back[0]);
		char *dst = map_pages(bytes / PAGE, 1, name);
		snprintf(what, sizeof what, "%s server", name);
		for (int i = 0; i < OOL_WARM + OOL_RUNS; i++) {
			read_full(there[0], dst, bytes, what);
			uint64_t sum = 0;
			for (size_t p = 0; p < bytes; p += PAGE)
				sum += ((volatile uint64_t *)(dst + p))[0];
			char c = (char)sum;
			write_full(back[1], &c, 1, what);
		}
		_exit(0);
	}
	close(there[0]);
	close(back[1]);
	snprintf(what, sizeof what, "%s client", name);
	for (int i = 0; i < OOL_WARM + OOL_RUNS; i++) {
		char in;
		uint64_t a = stamp();
		write_full(there[1], src, bytes, what);
		read_full(back[0], &in, 1, what);
		uint64_t b = stamp();
		samples[i] = b - a;
	}
	reap(pid, name);
	close(there[1]);
	close(back[0]);
	munmap(src, bytes);
	report_ool(name);
}

/* ---- threads -------------------------------------------------------------------------- */

/* Creates a thread running `fn`, failing the run if that fails. */
static pthread_t start_thread(void *(*fn)(void *), const char *what)
{
	pthread_t t;
	int r = pthread_create(&t, NULL, fn, NULL);
	if (r != 0) {
		errno = r;
		fail("%s: pthread_create", what);
	}
	return t;
}

/* Joins `t`, failing the run if that fails. */
static void join_thread(pthread_t t, const char *what)
{
	int r = pthread_join(t, NULL);
	if (r != 0) {
		errno = r;
		fail("%s: pthread_join", what);
	}
}

/* The timestamp thread A took just before its latest `sched_yield`. */
static volatile uint64_t yield_stamp;
/* How many times A has yielded. */
static volatile unsigned long a_yields;
/* Set by B when it has recorded every iteration. */
static volatile int yield_stop;
/* B's yields that returned without A having run (not recorded, retried). */
static unsigned long b_unswitched;

/* Thread B of linux.sched.yield.switch: yields, and on return records the instructions
 * since A's timestamp, if A ran in between (else it tries again). */
static void *yield_partner(void *arg)
{
	(void)arg;
	for (int i = 0; i < TOTAL;) {
		unsigned long seen = a_yields;
		sys0(SYS_sched_yield);
		uint64_t t = stamp();
		if (a_yields != seen)
			samples[i++] = t - yield_stamp;
		else
			b_unswitched++;
	}
	yield_stop = 1;
	return NULL;
}

/* linux.sched.yield.switch: threads A (main) and B of one process, both runnable on the one
 * CPU, alternate with `sched_yield` (issued inline). A takes a timestamp just before each
 * yield; B takes one when its own yield returns. One switch A -> B, one direction, as
 * Baton's `sched.yield.switch` (and sel4bench) measure it. */
static void bench_yield(void)
{
	yield_stop = 0;
	a_yields = 0;
	b_unswitched = 0;
	pthread_t b = start_thread(yield_partner, "sched.yield.switch");
	while (!yield_stop) {
		a_yields++;
		yield_stamp = stamp();
		sys0(SYS_sched_yield);
	}
	join_thread(b, "sched.yield.switch");
	report("linux.sched.yield.switch");
	say("LINUXINFO name=linux.sched.yield.switch a_yields=%lu b_yields_without_switch=%lu\n",
	    a_yields, b_unswitched);
}

/* The round A has started, and the round B has answered (linux.futex.pingpong). */
static volatile uint32_t futex_ping, futex_pong;

/* FUTEX_WAIT_PRIVATE on `word` while it holds `val`, issued inline. */
static inline void futex_wait(volatile uint32_t *word, uint32_t val)
{
	sys4(SYS_futex, (long)word, FUTEX_WAIT_PRIVATE, val, 0);
}

/* FUTEX_WAKE_PRIVATE of one waiter on `word`, issued inline. */
static inline void futex_wake(volatile uint32_t *word)
{
	sys4(SYS_futex, (long)word, FUTEX_WAKE_PRIVATE, 1, 0);
}

/* Thread B of linux.futex.pingpong: waits for each round in `futex_ping`, answers it in
 * `futex_pong` and wakes A. */
static void *futex_partner(void *arg)
{
	(void)arg;
	for (uint32_t r = 1; r <= TOTAL; r++) {
		uint32_t v;
		while ((v = futex_ping) != r)
			futex_wait(&futex_ping, v);
		futex_pong = r;
		futex_wake(&futex_pong);
	}
	return NULL;
}

/* linux.futex.pingpong: one round trip between two threads of one process, as Baton's
 * `sync.waitwake.pingpong`: A stores the round number in PING and wakes it
 * (FUTEX_WAKE_PRIVATE), then waits (FUTEX_WAIT_PRIVATE) until PONG holds the round; B,
 * waiting on PING, stores the round in PONG, wakes it and waits for the next round. From A's
 * timestamp before its store to A's after its wait returns. */
static void bench_futex(void)
{
	futex_ping = 0;
	futex_pong = 0;
	pthread_t b = start_thread(futex_partner, "futex.pingpong");
	for (uint32_t r = 1; r <= TOTAL; r++) {
		uint64_t a = stamp();
		futex_ping = r;
		futex_wake(&futex_ping);
		uint32_t v;
		while ((v = futex_pong) != r)
			futex_wait(&futex_pong, v);
		uint64_t t = stamp();
		samples[r - 1] = t - a;
	}
	join_thread(b, "futex.pingpong");
	report("linux.futex.pingpong");
}

/* The mutex, the condition variables and the rounds of linux.condvar.pingpong. */
static pthread_mutex_t cv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_ping_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t cv_pong_cond = PTHREAD_COND_INITIALIZER;
static uint32_t cv_ping, cv_pong;

/* Thread B of linux.condvar.pingpong. */
static void *condvar_partner(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&cv_lock);
	for (uint32_t r = 1; r <= TOTAL; r++) {
		while (cv_ping != r)
			pthread_cond_wait(&cv_ping_cond, &cv_lock);
		cv_pong = r;
		pthread_cond_signal(&cv_pong_cond);
	}
	pthread_mutex_unlock(&cv_lock);
	return NULL;
}

/* linux.condvar.pingpong: the same round trip as linux.futex.pingpong with a pthread mutex
 * and two condition variables: A locks, stores the round in PING, signals PING's condition,
 * waits on PONG's until PONG holds the round, unlocks; B, waiting on PING's condition,
 * stores the round in PONG and signals. From A's timestamp before its lock to after its
 * unlock. */
static void bench_condvar(void)
{
	cv_ping = 0;
	cv_pong = 0;
	pthread_t b = start_thread(condvar_partner, "condvar.pingpong");
	for (uint32_t r = 1; r <= TOTAL; r++) {
		uint64_t a = stamp();
		pthread_mutex_lock(&cv_lock);
		cv_ping = r;
		pthread_cond_signal(&cv_ping_cond);
		while (cv_pong != r)
			pthread_cond_wait(&cv_pong_cond, &cv_lock);
		pthread_mutex_unlock(&cv_lock);
		uint64_t t = stamp();
		samples[r - 1] = t - a;
	}
	join_thread(b, "condvar.pingpong");
	report("linux.condvar.pingpong");
}

/* The body of linux.thread.create_join's threads: returns at once. */
static void *nothing(void *arg)
{
	return arg;
}

/* linux.thread.create_join: `pthread_create` (default attributes: glibc reuses the stack of
 * a joined thread from its cache) of a thread that returns at once, and `pthread_join`. */
static void bench_thread_create(void)
{
	for (int i = 0; i < TOTAL; i++) {
		pthread_t t;
		uint64_t a = stamp();
		int c = pthread_create(&t, NULL, nothing, NULL);
		int j = c == 0 ? pthread_join(t, NULL) : 0;
		uint64_t b = stamp();
		if (c != 0 || j != 0) {
			errno = c ? c : j;
			fail("thread.create_join");
		}
		samples[i] = b - a;
	}
	report("linux.thread.create_join");
}

/* ---- user-level threads (the Sting paper's Figure 3) ---------------------------------- */

/*
 * A minimal user-level thread package on the C library's contexts (`makecontext`,
 * `swapcontext`), the user-level threads a Linux program gets without writing assembly:
 * thread objects from the heap, stacks recycled LIFO from a free list, one FIFO ready
 * queue, `yield`, `park`/`unpark` and `fork`/`value`. It runs on one kernel thread, so it
 * needs no lock. The `linux.ult.*` rows measure it as Baton's `sting.*` rows measure the
 * Sting runtime (one virtual processor, FIFO). glibc's `swapcontext` saves and restores the
 * signal mask with an `rt_sigprocmask` system call at every switch; that is part of what
 * this package costs, and why user-level packages on Linux often switch by hand.
 */

/* Bytes of a user-level thread's stack. */
#define ULT_STACK (64 * 1024)
/* Slots of the ready ring (a power of two). */
#define ULT_RING 64

enum ult_state { ULT_DELAYED, ULT_READY, ULT_RUNNING, ULT_BLOCKED, ULT_DETERMINED };

struct ult {
	ucontext_t ctx;
	enum ult_state state;
	void *(*fn)(void *);
	void *arg;
	void *value;
	void *stack;
	struct ult *waiter;
};

/* The thread running now (the main thread's record while it runs). */
static struct ult *ult_current;
/* The main thread's record. */
static struct ult ult_main;
/* The ready ring: FIFO. */
static struct ult *ult_ring[ULT_RING];
static unsigned ult_head, ult_tail;
/* Free stacks, LIFO: the first word of a free stack links to the next. */
static void *ult_free_stacks;

static inline void ult_enqueue(struct ult *t)
{
	if (ult_tail - ult_head == ULT_RING)
		fail("ult: the ready ring is full");
	ult_ring[ult_tail++ % ULT_RING] = t;
}

static inline struct ult *ult_dequeue(void)
{
	if (ult_head == ult_tail)
		return NULL;
	return ult_ring[ult_head++ % ULT_RING];
}

/* Leaves the running thread (whose state the caller set) for `next`. */
static inline void ult_switch(struct ult *next)
{
	struct ult *me = ult_current;
	next->state = ULT_RUNNING;
	ult_current = next;
	if (swapcontext(&me->ctx, &next->ctx) != 0)
		fail("ult: swapcontext");
}

/* The running thread stays ready and the next ready one runs, if there is one. */
static void ult_yield(void)
{
	struct ult *next = ult_dequeue();
	if (next == NULL)
		return;
	ult_current->state = ULT_READY;
	ult_enqueue(ult_current);
	ult_switch(next);
}

/* The running thread blocks until another unparks it. */
static void ult_park(void)
{
	struct ult *next = ult_dequeue();
	if (next == NULL)
		fail("ult: park with nothing ready (deadlock)");
	ult_current->state = ULT_BLOCKED;
	ult_switch(next);
}

/* A blocked thread becomes ready. */
static void ult_unpark(struct ult *t)
{
	if (t->state != ULT_BLOCKED)
		fail("ult: unpark of a thread that is not blocked");
	t->state = ULT_READY;
	ult_enqueue(t);
}

/* A new thread object running fn(arg) once started: no stack yet (a delayed thread). */
static struct ult *ult_create(void *(*fn)(void *), void *arg)
{
	struct ult *t = malloc(sizeof *t);
	if (t == NULL)
		fail("ult: malloc");
	t->state = ULT_DELAYED;
	t->fn = fn;
	t->arg = arg;
	t->value = NULL;
	t->stack = NULL;
	t->waiter = NULL;
	return t;
}

/* Where every started thread begins: runs its function, records its value, wakes its
 * waiter, gives its stack back and leaves for good. */
static void ult_entry(void)
{
	struct ult *me = ult_current;
	me->value = me->fn(me->arg);
	me->state = ULT_DETERMINED;
	if (me->waiter != NULL)
		ult_unpark(me->waiter);
	/* On one kernel thread nothing takes the stack before the switch below leaves it. */
	*(void **)me->stack = ult_free_stacks;
	ult_free_stacks = me->stack;
	struct ult *next = ult_dequeue();
	if (next == NULL)
		fail("ult: a thread ended with nothing ready");
	next->state = ULT_RUNNING;
	ult_current = next;
	setcontext(&next->ctx);
	fail("ult: setcontext");
}

/* Gives a delayed thread a stack (from the free list, else the heap) and a context that
 * starts it in ult_entry, and queues it. */
static void ult_fork(struct ult *t)
{
	t->stack = ult_free_stacks;
	if (t->stack != NULL)
		ult_free_stacks = *(void **)t->stack;
	else if ((t->stack = malloc(ULT_STACK)) == NULL)
		fail("ult: stack");
	if (getcontext(&t->ctx) != 0)
		fail("ult: getcontext");
	t->ctx.uc_stack.ss_sp = t->stack;
	t->ctx.uc_stack.ss_size = ULT_STACK;
	t->ctx.uc_link = NULL;
	makecontext(&t->ctx, ult_entry, 0);
	t->state = ULT_READY;
	ult_enqueue(t);
}

/* The value of a started thread: the caller blocks until it is determined. */
static void *ult_value(struct ult *t)
{
	while (t->state != ULT_DETERMINED) {
		t->waiter = ult_current;
		ult_park();
	}
	return t->value;
}

static void *ult_null(void *arg)
{
	return arg;
}

/* The stamp thread A took before its operation, and the iteration it was for. */
static volatile uint64_t ult_stamp;
static volatile int ult_seq;

/* Thread B of linux.ult.switch: yields back each time, recording A's yield. */
static void *ult_switch_partner(void *arg)
{
	(void)arg;
	for (int i = 0; i < TOTAL; i++) {
		ult_yield();
		uint64_t t = stamp();
		samples[ult_seq] = t - ult_stamp;
	}
	return NULL;
}

/* Thread B of linux.ult.block_resume: parks; once unparked records A's unpark and park,
 * then unparks A. */
static void *ult_block_partner(void *arg)
{
	struct ult *a = arg;
	for (int i = 0; i < TOTAL; i++) {
		ult_park();
		uint64_t t = stamp();
		samples[ult_seq] = t - ult_stamp;
		ult_unpark(a);
	}
	return NULL;
}

static void ult_reset(void)
{
	ult_main.state = ULT_RUNNING;
	ult_current = &ult_main;
	ult_head = ult_tail = 0;
}

/* The linux.ult.* rows. */
static void bench_ult(void)
{
	ult_reset();
	/* linux.ult.create (sting.create): a delayed thread object, no stack, not queued. */
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		struct ult *t = ult_create(ult_null, NULL);
		uint64_t b = stamp();
		__asm__ volatile("" : : "r"(t) : "memory");
		free(t);
		samples[i] = b - a;
	}
	report("linux.ult.create");

	/* linux.ult.fork_value (sting.fork_value): create and fork a null thread (a pooled
	 * stack, a new context, queued), then take its value: the forker blocks, the thread
	 * runs, ends, wakes the forker and leaves; the forker resumes. */
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		struct ult *t = ult_create(ult_null, (void *)(uintptr_t)i);
		ult_fork(t);
		void *v = ult_value(t);
		uint64_t b = stamp();
		if (v != (void *)(uintptr_t)i)
			fail("ult.fork_value: the value of thread %d", i);
		free(t);
		samples[i] = b - a;
	}
	report("linux.ult.fork_value");

	/* linux.ult.enqueue_dequeue (sting.enqueue_dequeue): a thread onto the ready queue and
	 * off again. */
	{
		struct ult *t = ult_create(ult_null, NULL);
		for (int i = 0; i < TOTAL; i++) {
			uint64_t a = stamp();
			t->state = ULT_READY;
			ult_enqueue(t);
			struct ult *back = ult_dequeue();
			uint64_t b = stamp();
			if (back != t)
				fail("ult.enqueue_dequeue: another thread came off");
			samples[i] = b - a;
		}
		free(t);
	}
	report("linux.ult.enqueue_dequeue");

	/* linux.ult.switch (sting.switch): A yields to B, which waits in its own yield; from
	 * A's stamp before its yield to B's after its yield returned. */
	{
		struct ult *b = ult_create(ult_switch_partner, NULL);
		ult_fork(b);
		for (int i = 0; i <= TOTAL; i++) {
			ult_seq = i < TOTAL ? i : 0;
			ult_stamp = stamp();
			ult_yield();
		}
		ult_value(b);
		free(b);
	}
	report("linux.ult.switch");

	/* linux.ult.block_resume (sting.block_resume): A unparks B (blocked) and parks; B
	 * resumes. From A's stamp before the unpark to B's after its park returned. */
	{
		struct ult *b = ult_create(ult_block_partner, &ult_main);
		ult_fork(b);
		ult_yield(); /* B starts and parks. */
		for (int i = 0; i < TOTAL; i++) {
			ult_seq = i;
			ult_stamp = stamp();
			ult_unpark(b);
			ult_park();
		}
		ult_value(b);
		free(b);
	}
	report("linux.ult.block_resume");
	while (ult_free_stacks != NULL) {
		void *s = ult_free_stacks;
		ult_free_stacks = *(void **)s;
		free(s);
	}
}

/* The word B of linux.pthread.block_resume waits on, and A's. */
static volatile uint32_t br_b, br_a;

/* Thread B of linux.pthread.block_resume: waits for its word, records A's wake and wait,
 * then wakes A. */
static void *pthread_block_partner(void *arg)
{
	(void)arg;
	for (uint32_t r = 1; r <= TOTAL; r++) {
		uint32_t v;
		while ((v = br_b) != r)
			futex_wait(&br_b, v);
		uint64_t t = stamp();
		samples[ult_seq] = t - ult_stamp;
		br_a = r;
		futex_wake(&br_a);
	}
	return NULL;
}

/* linux.pthread.block_resume (sting.block_resume with kernel threads): A wakes B, blocked
 * in FUTEX_WAIT, and blocks in its own; from A's stamp before the wake to B's after its
 * wait returned. One direction of linux.futex.pingpong. */
static void bench_pthread_block(void)
{
	br_a = br_b = 0;
	pthread_t b = start_thread(pthread_block_partner, "pthread.block_resume");
	for (uint32_t r = 1; r <= TOTAL; r++) {
		ult_seq = (int)r - 1;
		ult_stamp = stamp();
		br_b = r;
		futex_wake(&br_b);
		uint32_t v;
		while ((v = br_a) != r)
			futex_wait(&br_a, v);
	}
	join_thread(b, "pthread.block_resume");
	report("linux.pthread.block_resume");
}

/* ---- page faults ---------------------------------------------------------------------- */

/* linux.fault.zero: the first write to a page of a fresh private anonymous mapping (4 KiB
 * pages: transparent huge pages off for it): the page fault, a zeroed page allocated and
 * mapped, and the write retried. One page per iteration, each page touched once. */
static void bench_fault_zero(void)
{
	volatile char *p = map_pages(TOTAL, 0, "fault.zero");
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		p[(size_t)i * PAGE] = 1;
		uint64_t b = stamp();
		samples[i] = b - a;
	}
	munmap((void *)p, (size_t)TOTAL * PAGE);
	report("linux.fault.zero");
}

/* linux.fault.cow: the first write, in the parent, to a page it wrote before a fork, while
 * the child still exists (it waits on a pipe and never touches the pages): the
 * copy-on-write fault copies the page. One page per iteration. */
static void bench_fault_cow(void)
{
	volatile char *p = map_pages(TOTAL, 1, "fault.cow");
	int gate[2];
	if (pipe(gate) != 0)
		fail("fault.cow: pipe");
	pid_t pid = fork_or_fail("fault.cow");
	if (pid == 0) {
		char c;
		close(gate[1]);
		read_full(gate[0], &c, 1, "fault.cow child");
		_exit(0);
	}
	close(gate[0]);
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		p[(size_t)i * PAGE] = 2;
		uint64_t b = stamp();
		samples[i] = b - a;
	}
	write_full(gate[1], "x", 1, "fault.cow");
	close(gate[1]);
	reap(pid, "fault.cow");
	munmap((void *)p, (size_t)TOTAL * PAGE);
	report("linux.fault.cow");
}

/* linux.fault.fill: the first read of a page of a shared mapping of a memfd whose pages
 * are all resident (written through another mapping first): the page cache's page is
 * mapped, nothing is copied or zeroed. Linux maps the resident pages around a read fault
 * too (fault-around, 64 KiB), so the reads are 16 pages apart: each one is a fault, which
 * maps its 16 pages. */
#define FILL_STRIDE 16
static void bench_fault_fill(void)
{
	size_t pages = (size_t)TOTAL * FILL_STRIDE;
	int fd = memfd_create("fault.fill", 0);
	if (fd < 0)
		fail("fault.fill: memfd_create");
	if (ftruncate(fd, (off_t)(pages * PAGE)) != 0)
		fail("fault.fill: ftruncate");
	char *w = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (w == MAP_FAILED)
		fail("fault.fill: mmap (writer)");
	for (size_t i = 0; i < pages; i++)
		((volatile char *)w)[i * PAGE] = 1;
	volatile char *r = mmap(NULL, pages * PAGE, PROT_READ, MAP_SHARED, fd, 0);
	if (r == MAP_FAILED)
		fail("fault.fill: mmap (reader)");
	char sink = 0;
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		sink += r[(size_t)i * FILL_STRIDE * PAGE];
		uint64_t b = stamp();
		samples[i] = b - a;
	}
	if (sink != (char)TOTAL)
		fail("fault.fill: read %d, not %d", sink, TOTAL);
	munmap((void *)r, pages * PAGE);
	munmap(w, pages * PAGE);
	close(fd);
	report("linux.fault.fill");
}

/* linux.mprotect.<n>: mprotect of `n` resident, written pages from read-write to
 * read-only; linux.mprotect.rw.<n>: the mprotect that gives write access back; after
 * each pair (not measured) every page is written again, as Baton's vm.protect.<n> and
 * vm.unprotect.<n>. */
static void bench_mprotect(size_t n)
{
	static uint64_t unprotects[TOTAL];
	char name[64];
	snprintf(name, sizeof name, "linux.mprotect.%zu", n);
	char *p = map_pages(n, 1, name);
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		protect(p, n, PROT_READ, name);
		uint64_t b = stamp();
		samples[i] = b - a;
		uint64_t c = stamp();
		protect(p, n, PROT_READ | PROT_WRITE, name);
		uint64_t d = stamp();
		unprotects[i] = d - c;
		for (size_t j = 0; j < n; j++)
			((volatile char *)p)[j * PAGE] = (char)i;
	}
	munmap(p, n * PAGE);
	report(name);
	memcpy(samples, unprotects, sizeof samples);
	snprintf(name, sizeof name, "linux.mprotect.rw.%zu", n);
	report(name);
}

/* linux.mmap.<n> and linux.munmap.<n>: a private anonymous read-write mapping of `n`
 * untouched pages anywhere, and its removal, each timed on its own (Baton's
 * vm.allocate.<n> and vm.deallocate.<n>; Accent's Figure 3-1). */
static void bench_mmap(size_t n)
{
	static uint64_t unmaps[TOTAL];
	char name[64];
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		void *p = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		uint64_t b = stamp();
		if (p == MAP_FAILED)
			fail("mmap.%zu: mmap", n);
		uint64_t c = stamp();
		int r = munmap(p, n * PAGE);
		uint64_t d = stamp();
		if (r != 0)
			fail("mmap.%zu: munmap", n);
		samples[i] = b - a;
		unmaps[i] = d - c;
	}
	snprintf(name, sizeof name, "linux.mmap.%zu", n);
	report(name);
	memcpy(samples, unmaps, sizeof samples);
	snprintf(name, sizeof name, "linux.munmap.%zu", n);
	report(name);
}

/* linux.uffd.fault: the first read of a page of a range registered with userfaultfd
 * (missing pages), answered by a thread of the same process that reads the fault event
 * and supplies a page with UFFDIO_COPY: from the faulting access to its resumption, the
 * user-level pager's round trip (Baton's vm.fault.pager). Skipped, with a LINUXINFO line,
 * when the kernel refuses userfaultfd. */
static int uffd;
static char uffd_page[PAGE] __attribute__((aligned(PAGE)));

static void *uffd_server(void *arg)
{
	(void)arg;
	for (int served = 0; served < TOTAL; served++) {
		struct uffd_msg msg;
		struct pollfd pfd = {.fd = uffd, .events = POLLIN};
		if (poll(&pfd, 1, -1) != 1)
			fail("uffd.fault: poll");
		read_full(uffd, &msg, sizeof msg, "uffd.fault: event");
		if (msg.event != UFFD_EVENT_PAGEFAULT)
			fail("uffd.fault: event %d", msg.event);
		struct uffdio_copy copy = {
			.dst = msg.arg.pagefault.address & ~(uint64_t)(PAGE - 1),
			.src = (uint64_t)(uintptr_t)uffd_page,
			.len = PAGE,
			.mode = 0,
		};
		if (ioctl(uffd, UFFDIO_COPY, &copy) != 0)
			fail("uffd.fault: UFFDIO_COPY");
	}
	return NULL;
}

static void bench_uffd(void)
{
	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (uffd < 0) {
		say("LINUXINFO linux.uffd.fault not measured: userfaultfd refused (errno %d)\n",
		    errno);
		return;
	}
	struct uffdio_api api = {.api = UFFD_API, .features = 0};
	if (ioctl(uffd, UFFDIO_API, &api) != 0)
		fail("uffd.fault: UFFDIO_API");
	volatile char *p = map_pages(TOTAL, 0, "uffd.fault");
	struct uffdio_register reg = {
		.range = {.start = (uint64_t)(uintptr_t)p, .len = (uint64_t)TOTAL * PAGE},
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};
	if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0)
		fail("uffd.fault: UFFDIO_REGISTER");
	memset(uffd_page, 7, sizeof uffd_page);
	pthread_t server = start_thread(uffd_server, "uffd.fault");
	char sink = 0;
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		sink += p[(size_t)i * PAGE];
		uint64_t b = stamp();
		samples[i] = b - a;
	}
	join_thread(server, "uffd.fault");
	if (sink != (char)(7 * TOTAL))
		fail("uffd.fault: read %d, not %d", sink, (char)(7 * TOTAL));
	munmap((void *)p, (size_t)TOTAL * PAGE);
	close(uffd);
	report("linux.uffd.fault");
}

/*
 * ---- Appel and Li's virtual-memory primitives ----------------------------------------
 *
 * Appel and Li, "Virtual Memory Primitives for User Programs" (ASPLOS 1991), as the SPIN
 * paper (Bershad et al., SOSP 1995, section 5.2, Table 4) defines and reports them. On
 * Linux a protection fault is reflected to the program as SIGSEGV (handler installed with
 * SA_SIGINFO) and protections are changed with mprotect. All work on private anonymous
 * pages that have been written (resident, 4 KiB pages). SPIN's "Dirty" (ask the kernel
 * whether a page is dirty) has no Linux interface and is not measured.
 */

/* What the SIGSEGV handler does besides unprotecting the faulting page. */
enum vm_mode { VM_UNPROTECT, VM_APPEL1 };

/* The handler's mode. */
static volatile int vm_mode;
/* The pages the handler may unprotect: [vm_base, vm_base + vm_pages * PAGE). */
static char *vm_base;
/* Pages at vm_base. */
static size_t vm_pages;
/* VM_APPEL1: the page the handler protects. */
static volatile size_t vm_next;
/* Timestamp taken just before the faulting access (linux.appel.trap). */
static volatile uint64_t vm_before;
/* Instructions from `vm_before` to the handler's first timestamp (linux.appel.trap). */
static volatile uint64_t vm_trap;
/* Faults the handler resolved. */
static volatile unsigned long vm_faults;

/* The SIGSEGV handler: takes a timestamp first, then makes the faulting page readable and
 * writable (and in VM_APPEL1 mode protects page `vm_next`, read-only). */
static void on_segv(int sig, siginfo_t *si, void *ctx)
{
	uint64_t now = stamp();
	(void)sig;
	(void)ctx;
	vm_trap = now - vm_before;
	uintptr_t addr = (uintptr_t)si->si_addr;
	uintptr_t base = (uintptr_t)vm_base;
	if (addr < base || addr >= base + vm_pages * PAGE) {
		static const char msg[] = "TEST FAIL linux: SIGSEGV outside the benchmark's pages\n";
		put(msg, sizeof msg - 1);
		_exit(1);
	}
	char *page = (char *)(addr & ~(uintptr_t)(PAGE - 1));
	if (mprotect(page, PAGE, PROT_READ | PROT_WRITE) != 0)
		_exit(1);
	if (vm_mode == VM_APPEL1 && mprotect(vm_base + vm_next * PAGE, PAGE, PROT_READ) != 0)
		_exit(1);
	vm_faults++;
}

/* Maps `pages` written pages for the Appel-Li benchmarks and installs the handler. */
static volatile char *vm_setup(size_t pages, int mode, const char *what)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, NULL) != 0)
		fail("%s: sigaction", what);
	vm_base = map_pages(pages, 1, what);
	vm_pages = pages;
	vm_mode = mode;
	vm_faults = 0;
	return (volatile char *)vm_base;
}

/* Unmaps the pages and restores SIGSEGV's default action. */
static void vm_teardown(const char *what, unsigned long faults)
{
	if (vm_faults != faults)
		fail("%s: %lu faults handled, not %lu", what, vm_faults, faults);
	munmap(vm_base, vm_pages * PAGE);
	vm_base = NULL;
	vm_pages = 0;
	signal(SIGSEGV, SIG_DFL);
}

/* linux.appel.trap (TRAP): the latency from a write to a read-only page until the
 * program's fault handler runs: from the timestamp before the write to the first
 * timestamp in the SIGSEGV handler (the kernel's fault path and signal delivery). The
 * handler then unprotects the page and the write completes (not counted). */
static void bench_appel_trap(void)
{
	volatile char *p = vm_setup(1, VM_UNPROTECT, "appel.trap");
	for (int i = 0; i < TOTAL; i++) {
		protect((void *)p, 1, PROT_READ, "appel.trap");
		vm_before = stamp();
		p[0] = 1;
		samples[i] = vm_trap;
	}
	vm_teardown("appel.trap", TOTAL);
	report("linux.appel.trap");
}

/* linux.appel.fault (FAULT): the latency of a write to a read-only page as the faulting
 * thread sees it: the fault reflected to the program, the handler making the page writable
 * (mprotect), the return from the handler, and the write retried. */
static void bench_appel_fault(void)
{
	volatile char *p = vm_setup(1, VM_UNPROTECT, "appel.fault");
	for (int i = 0; i < TOTAL; i++) {
		protect((void *)p, 1, PROT_READ, "appel.fault");
		uint64_t a = stamp();
		p[0] = 1;
		uint64_t b = stamp();
		samples[i] = b - a;
	}
	vm_teardown("appel.fault", TOTAL);
	report("linux.appel.fault");
}

/* linux.appel.prot1 (PROT1): increasing the protection of one written page:
 * mprotect(PROT_READ) of a page that is readable and writable. (Not counted: making it
 * writable again and writing it, before the next iteration.) */
static void bench_appel_prot1(void)
{
	volatile char *p = vm_setup(1, VM_UNPROTECT, "appel.prot1");
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		int r = mprotect((void *)p, PAGE, PROT_READ);
		uint64_t b = stamp();
		if (r != 0)
			fail("appel.prot1: mprotect");
		samples[i] = b - a;
		protect((void *)p, 1, PROT_READ | PROT_WRITE, "appel.prot1");
		p[0] = 1;
	}
	vm_teardown("appel.prot1", 0);
	report("linux.appel.prot1");
}

/* linux.appel.prot100 (PROT100): increasing the protection of 100 written pages with one
 * mprotect(PROT_READ) of the range. (Not counted: making them writable again and writing
 * each.) */
static void bench_appel_prot100(void)
{
	volatile char *p = vm_setup(RANGE, VM_UNPROTECT, "appel.prot100");
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		int r = mprotect((void *)p, RANGE * PAGE, PROT_READ);
		uint64_t b = stamp();
		if (r != 0)
			fail("appel.prot100: mprotect");
		samples[i] = b - a;
		protect((void *)p, RANGE, PROT_READ | PROT_WRITE, "appel.prot100");
		for (size_t j = 0; j < RANGE; j++)
			p[j * PAGE] = 1;
	}
	vm_teardown("appel.prot100", 0);
	report("linux.appel.prot100");
}

/* linux.appel.unprot100 (UNPROT100): decreasing the protection of 100 read-only (resident)
 * pages with one mprotect(PROT_READ | PROT_WRITE) of the range. (Not counted: protecting
 * them again.) */
static void bench_appel_unprot100(void)
{
	volatile char *p = vm_setup(RANGE, VM_UNPROTECT, "appel.unprot100");
	protect((void *)p, RANGE, PROT_READ, "appel.unprot100");
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		int r = mprotect((void *)p, RANGE * PAGE, PROT_READ | PROT_WRITE);
		uint64_t b = stamp();
		if (r != 0)
			fail("appel.unprot100: mprotect");
		samples[i] = b - a;
		protect((void *)p, RANGE, PROT_READ, "appel.unprot100");
	}
	vm_teardown("appel.unprot100", 0);
	report("linux.appel.unprot100");
}

/* linux.appel.appel1 (APPEL1): a write to a protected page whose handler unprotects it and
 * protects another page: a ring of 100 written pages, exactly one of them read-only; the
 * iteration writes that page, and the handler makes it writable and the next page of the
 * ring read-only. From before the write to after it completes. */
static void bench_appel1(void)
{
	volatile char *p = vm_setup(RANGE, VM_APPEL1, "appel.appel1");
	protect((void *)p, 1, PROT_READ, "appel.appel1");
	for (int i = 0; i < TOTAL; i++) {
		size_t page = (size_t)i % RANGE;
		vm_next = (page + 1) % RANGE;
		uint64_t a = stamp();
		p[page * PAGE] = 1;
		uint64_t b = stamp();
		samples[i] = b - a;
	}
	vm_teardown("appel.appel1", TOTAL);
	report("linux.appel.appel1");
}

/* linux.appel.appel2 (APPEL2): protecting 100 written pages with one mprotect(PROT_READ),
 * then writing each, the handler unprotecting each faulting page. The figure is per page:
 * each iteration's count divided by 100 (rounded down), as the SPIN paper reports it. */
static void bench_appel2(void)
{
	volatile char *p = vm_setup(RANGE, VM_UNPROTECT, "appel.appel2");
	for (int i = 0; i < TOTAL; i++) {
		uint64_t a = stamp();
		int r = mprotect((void *)p, RANGE * PAGE, PROT_READ);
		for (size_t j = 0; j < RANGE; j++)
			p[j * PAGE] = 1;
		uint64_t b = stamp();
		if (r != 0)
			fail("appel.appel2: mprotect");
		samples[i] = (b - a) / RANGE;
	}
	vm_teardown("appel.appel2", (unsigned long)TOTAL * RANGE);
	report("linux.appel.appel2");
}

/* Cold and warm runs of the file rows (as Baton's `file.read.56k`). */
#define FILE_COLD 9
#define FILE_WARM 31

/* The calling process's CPU time in nanoseconds (its user and kernel time, the scheduler's
 * clock: the TSC, which under -icount counts one per instruction, at the 1 GHz the guest
 * measures it to run at). */
static uint64_t cpu_ns(void)
{
	struct timespec t;
	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0)
		fail("clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Maps the open file `fd` of `size` bytes privately (copy-on-write, as Baton's row maps its
 * file), reads a word of each page and unmaps it: the CPU time it took and the words' sum. */
static uint64_t touch_file(int fd, size_t size, uint64_t *sum)
{
	uint64_t t0 = cpu_ns();
	volatile const uint64_t *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		fail("mmap of the file: %s", strerror(errno));
	for (size_t at = 0; at < size; at += PAGE)
		*sum += p[at / 8];
	munmap((void *)p, size);
	return cpu_ns() - t0;
}

/* Drops the page cache (and the dentry and inode caches) so that the next read of the file
 * comes from the disk. */
static void drop_caches(void)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0 || write(fd, "3", 1) != 1)
		fail("writing /proc/sys/vm/drop_caches: %s", strerror(errno));
	close(fd);
}

/* `linux.file.read.56k` and `.warm` (Baton's `file.read.56k` rows; Accent's Table 3-4): the
 * 56 KiB file on the virtio disk's FAT file system, mapped and a word of each of its 14 pages
 * read, then unmapped; the open is outside the window, as on Baton. Cold: after dropping the
 * caches, so each page comes from the disk (Linux reads ahead: its first fault reads the
 * whole file); warm: with the file's pages in the page cache. While the disk works the CPU
 * halts and QEMU's -icount jumps the TSC forward, so the figure is not a TSC window: it is
 * the process's CPU time, which the halted time is not part of (Baton subtracts its halted
 * ticks). Unlike Baton's figure, which counts its file server's and driver's instructions,
 * this leaves out the block layer's completion work when the interrupt comes while the CPU
 * is idle (it runs in the idle task's time). */
static void bench_file(const char *path)
{
	uint64_t cold[FILE_COLD], warm[FILE_WARM], sum = 0;
	struct stat st;
	for (int i = 0; i < FILE_COLD; i++) {
		drop_caches();
		int fd = open(path, O_RDONLY);
		if (fd < 0 || fstat(fd, &st) != 0)
			fail("open %s: %s", path, strerror(errno));
		cold[i] = touch_file(fd, (size_t)st.st_size, &sum);
		close(fd);
	}
	int fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) != 0)
		fail("open %s: %s", path, strerror(errno));
	(void)touch_file(fd, (size_t)st.st_size, &sum);
	for (int i = 0; i < FILE_WARM; i++)
		warm[i] = touch_file(fd, (size_t)st.st_size, &sum);
	close(fd);
	qsort(cold, FILE_COLD, sizeof cold[0], cmp_u64);
	qsort(warm, FILE_WARM, sizeof warm[0], cmp_u64);
	say("BENCH name=linux.file.read.56k unit=instructions iterations=%d median=%llu min=%llu max=%llu\n",
	    FILE_COLD, (unsigned long long)cold[(FILE_COLD - 1) / 2], (unsigned long long)cold[0],
	    (unsigned long long)cold[FILE_COLD - 1]);
	say("BENCH name=linux.file.read.56k.warm unit=instructions iterations=%d median=%llu min=%llu max=%llu\n",
	    FILE_WARM, (unsigned long long)warm[(FILE_WARM - 1) / 2], (unsigned long long)warm[0],
	    (unsigned long long)warm[FILE_WARM - 1]);
	say("LINUXINFO file %s: %lld bytes, word sum %llx\n", path, (long long)st.st_size,
	    (unsigned long long)sum);
}

int main(int argc, char **argv)
{
	const char *null_path = argc > 1 ? argv[1] : "/bench/null";
	/* One CPU: the guest has only CPU 0; on a bigger machine (a host try-out) this keeps
	 * every thread and child on the same CPU. */
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_setaffinity(0, sizeof one, &one) != 0)
		fail("sched_setaffinity(CPU 0)");

	bench_rdtsc();
	bench_syscall_null();
	bench_clock_gettime();
	bench_signal();
	bench_fork_exit();
	bench_fork_1m();
	bench_spawn(null_path);
	bench_pipe();
	bench_pipe_ool(4096, "4k");
	bench_pipe_ool(65536, "64k");
	bench_pipe_ool(1 << 20, "1m");
	for (size_t i = 0; i < sizeof RPC_SIZES / sizeof RPC_SIZES[0]; i++)
		bench_unix_rpc(RPC_SIZES[i]);
	bench_yield();
	bench_futex();
	bench_condvar();
	bench_thread_create();
	bench_ult();
	bench_pthread_block();
	bench_fault_zero();
	bench_fault_cow();
	bench_fault_fill();
	bench_mprotect(1);
	bench_mprotect(100);
	bench_mprotect(1024);
	bench_mmap(1);
	bench_mmap(16);
	bench_mmap(256);
	bench_mmap(1024);
	bench_uffd();
	bench_appel_trap();
	bench_appel_fault();
	bench_appel_prot1();
	bench_appel_prot100();
	bench_appel_unprot100();
	bench_appel1();
	bench_appel2();
	if (argc > 3) {
		/* The disk only now: its interrupts come at host-dependent times. */
		pid_t pid = fork_or_fail("fork for the disk script");
		if (pid == 0) {
			execl("/bin/sh", "sh", argv[2], (char *)NULL);
			_exit(127);
		}
		reap(pid, "the disk script");
		if (access(argv[3], R_OK) == 0)
			bench_file(argv[3]);
		else
			say("LINUXINFO %s is not there: the file rows were not measured\n", argv[3]);
	} else {
		say("LINUXINFO no disk: the file rows were not measured\n");
	}
	say("BENCH done\n");
	return 0;
}
