/* A known workload for `agg ... by ustack` (tests/test_agg_live.py): direct 4 KiB reads of a
 * device from two functions, read_a() and read_b(), through raw_pread(), which makes the pread64
 * system call itself (inline assembly, no libc wrapper): the kernel's frame-pointer walk then goes
 * raw_pread, read_a or read_b, main, as the test expects (a libc wrapper built without frame
 * pointers would hide its caller). Built with -O0 -fno-omit-frame-pointer -fno-inline.
 *
 *   ustk DEVICE NA NB   waits for a line on its standard input (the tracer is ready), reads NA
 *                       blocks in read_a, then NB in read_b, prints "done", then waits for its
 *                       standard input to close, so that its mappings are still there when agg
 *                       names the stacks.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static long raw_pread(int fd, void *buf, unsigned long n, long off)
{
	long ret;
	register long r10 __asm__("r10") = off;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"(SYS_pread64), "D"(fd), "S"(buf), "d"(n), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline)) static int read_a(int fd, void *buf, int n)
{
	for (int i = 0; i < n; i++)
		if (raw_pread(fd, buf, 4096, (long)i * 4096) != 4096)
			return -1;
	return 0;
}

__attribute__((noinline)) static int read_b(int fd, void *buf, int n)
{
	for (int i = 0; i < n; i++)
		if (raw_pread(fd, buf, 4096, (long)(i + 65536) * 4096) != 4096)
			return -1;
	return 0;
}

int main(int argc, char **argv)
{
	void *buf;
	int fd;
	char c;

	if (argc != 4) {
		fprintf(stderr, "usage: ustk DEVICE NA NB\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_DIRECT);
	if (fd < 0 || posix_memalign(&buf, 4096, 4096)) {
		perror(argv[1]);
		return 1;
	}
	while (read(0, &c, 1) > 0 && c != '\n')
		;
	if (read_a(fd, buf, atoi(argv[2])) || read_b(fd, buf, atoi(argv[3]))) {
		perror("pread");
		return 1;
	}
	printf("done\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
