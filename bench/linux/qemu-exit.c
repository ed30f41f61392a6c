/*
 * qemu-exit STATUS: ends the QEMU run by writing STATUS to the `isa-debug-exit` device at
 * I/O port 0xf4, as Baton's kernel does. QEMU then exits with status (STATUS << 1) | 1:
 * 0x10 gives 33, the clean-shutdown status `cargo xtask bench` expects from Baton, and
 * 0x11 gives 35 (a failure).
 *
 * The guest's `/init` runs it as root (it needs `ioperm`). If the device is missing the
 * write does nothing and the program returns 1, and `/init` falls back to `reboot -f`
 * (which, with QEMU's `-no-reboot`, also ends the run, with status 0).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/io.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: qemu-exit STATUS (0x10: success, 0x11: failure)\n");
		return 2;
	}
	unsigned long status = strtoul(argv[1], NULL, 0);
	if (ioperm(0xf4, 4, 1) != 0) {
		perror("qemu-exit: ioperm");
		return 1;
	}
	outl((unsigned int)status, 0xf4);
	/* Still here: there is no isa-debug-exit device. */
	return 1;
}
