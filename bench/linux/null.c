/*
 * null: the program `linux.spawn.null` starts. It does nothing but exit with status 0.
 *
 * Built with `gcc -O2 -static -nostdlib`: there is no C library start-up code, so what
 * `linux.spawn.null` counts is the kernel's work (creating the process, `execve` of a static
 * ELF, the exit and the parent's wait) plus the C library's `posix_spawn` and `waitpid`,
 * not glibc's static initialisation (several thousand instructions of IRELATIVE
 * relocations, TLS and tunables set-up) in the child.
 */

/* The process entry point: `exit_group(0)`. */
__attribute__((naked, noreturn)) void _start(void)
{
	__asm__ volatile("mov $231, %eax\n\t" /* SYS_exit_group */
			 "xor %edi, %edi\n\t"
			 "syscall\n\t"
			 "ud2");
}
