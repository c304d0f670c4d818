/* QEMU TCG TLB race reproducer (tests/qemu/race, docs/testing.md): vCPU 0
 * switches a PCI function's memory decoding on and off (each switch commits
 * a new memory map), vCPU 1 reads another function's MMIO BAR in long
 * straight-line blocks, for SECONDS. Prints how many of each it did. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void pin(int cpu) {
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s)) { perror("affinity"); exit(2); }
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s CONFIG RESOURCE SECONDS\n", argv[0]); return 2; }
    int secs = atoi(argv[3]);
    pid_t child = fork();
    if (child == 0) {
        pin(0);
        int fd = open(argv[1], O_RDWR);
        if (fd < 0) { perror(argv[1]); _exit(2); }
        uint16_t cmd;
        if (pread(fd, &cmd, 2, 4) != 2) { perror("pread"); _exit(2); }
        unsigned long n = 0;
        time_t end = time(NULL) + secs;
        while (time(NULL) < end) {
            uint16_t off = cmd & ~2, on = cmd | 2;
            if (pwrite(fd, &off, 2, 4) != 2 || pwrite(fd, &on, 2, 4) != 2) { perror("pwrite"); _exit(2); }
            n++;
        }
        printf("toggles %lu\n", n);
        _exit(0);
    }
    pin(1);
    int fd = open(argv[2], O_RDWR | O_SYNC);
    if (fd < 0) { perror(argv[2]); return 2; }
    volatile uint32_t *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 2; }
    unsigned long n = 0; uint32_t x = 0;
    time_t end = time(NULL) + secs;
    while (time(NULL) < end) {
#define R4 x += p[0]; x += p[1]; x += p[2]; x += p[3];
#define R16 R4 R4 R4 R4
        R16 R16 R16 R16
        n += 64;
    }
    int st; waitpid(child, &st, 0);
    printf("reads %lu (%u)\n", n, x);
    return 0;
}
