/* A producer process and a consumer process sharing a buffer and a timeline
 * through the vgpu C API.
 *
 * The producer allocates a shared buffer and a timeline, and passes both to
 * the consumer (a forked child): it writes the fd numbers into a pipe and
 * the consumer takes the fds out of the producer with pidfd_getfd(2), then
 * acknowledges (the guest kernel has no Unix sockets; where it has, the same
 * fds go over SCM_RIGHTS, and pidfd_getfd works between unrelated processes
 * too, given ptrace rights over the producer). For
 * each round r the producer's stream waits for point 2r-2 (the consumer is
 * done with the previous round; the KMD holds the work, the CPU does not
 * wait), fills the buffer on the GPU and signals point 2r-1; the consumer
 * waits for point 2r-1 (host wait), checks the data through its own CPU
 * mapping and through a GPU copy on its own stream (which waits for the
 * point in the KMD), and signals point 2r. At the end the producer records
 * an event, exports it as a sync_file and the consumer imports it and waits.
 * Exit status 0 when every round checked out in both processes.
 *
 *   c-share [rounds]     default 4
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "vgpu.h"

#define SIZE (64u << 10)

#define CHECK(who, call)                                                              \
	do {                                                                          \
		vgpu_status st_ = (call);                                             \
		if (st_ != VGPU_SUCCESS) {                                            \
			fprintf(stderr, "share: %s: %s failed: %s: %s\n", who, #call,  \
				vgpu_status_string(st_), vgpu_last_error());               \
			return 2;                                                     \
		}                                                                     \
	} while (0)

/* The two pipes between the processes. */
struct link {
	int in, out;
};

/* Hands `n` of this process's fds to the peer: their numbers, then waits
 * until the peer has taken them (so they stay open until then). */
static int send_fds(const struct link *l, const int *fds, int n)
{
	char ack;
	if (write(l->out, fds, n * sizeof(int)) != (ssize_t)(n * sizeof(int)))
		return -1;
	return read(l->in, &ack, 1) == 1 && ack == 'a' ? 0 : -1;
}

/* Takes `n` fds from the parent process (the producer). */
static int recv_fds(const struct link *l, int *fds, int n)
{
	int nums[4];
	if (n > 4 || read(l->in, nums, n * sizeof(int)) != (ssize_t)(n * sizeof(int)))
		return -1;
	int pidfd = (int)syscall(SYS_pidfd_open, getppid(), 0);
	if (pidfd < 0) {
		perror("share: pidfd_open");
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		fds[i] = (int)syscall(SYS_pidfd_getfd, pidfd, nums[i], 0);
		if (fds[i] < 0) {
			perror("share: pidfd_getfd");
			rc = -1;
		}
	}
	close(pidfd);
	if (write(l->out, "a", 1) != 1)
		rc = -1;
	return rc;
}

static int consumer(const struct link *sock, int rounds)
{
	const char *me = "consumer";
	int fds[2];
	if (recv_fds(sock, fds, 2) != 0) {
		fprintf(stderr, "share: consumer: no fds received\n");
		return 2;
	}
	vgpu_context_t ctx;
	vgpu_stream_t s;
	vgpu_buffer_t shared, dst;
	vgpu_timeline_t tl;
	CHECK(me, vgpu_context_create(0, &ctx));
	CHECK(me, vgpu_mem_import_fd(ctx, fds[0], VGPU_MEM_HOST_VISIBLE, &shared));
	CHECK(me, vgpu_timeline_import_fd(ctx, fds[1], &tl));
	close(fds[0]);
	close(fds[1]);
	CHECK(me, vgpu_stream_create(ctx, &s));
	CHECK(me, vgpu_mem_alloc(ctx, SIZE, VGPU_MEM_DEVICE_LOCAL, &dst));
	unsigned char *host;
	CHECK(me, vgpu_mem_host_ptr(shared, (void **)&host));
	unsigned char *copy = malloc(SIZE);
	int bad = 0;
	for (int r = 1; r <= rounds; r++) {
		uint64_t ready = 2 * (uint64_t)r - 1;
		CHECK(me, vgpu_timeline_wait(tl, ready, 30ull * 1000 * 1000 * 1000));
		unsigned char want = (unsigned char)(0x40 + r);
		int cpu_ok = 1, gpu_ok = 1;
		for (uint32_t i = 0; i < SIZE; i++)
			cpu_ok &= host[i] == want;
		/* The GPU path: this stream waits for the point in the KMD. */
		CHECK(me, vgpu_stream_wait_timeline(s, tl, ready));
		CHECK(me, vgpu_memcpy_dtod_async(s, dst, 0, shared, 0, SIZE));
		CHECK(me, vgpu_memcpy_dtoh(s, copy, dst, 0, SIZE));
		for (uint32_t i = 0; i < SIZE; i++)
			gpu_ok &= copy[i] == want;
		printf("share: consumer round %d: cpu %s gpu %s\n", r, cpu_ok ? "ok" : "BAD",
		       gpu_ok ? "ok" : "BAD");
		bad += !cpu_ok + !gpu_ok;
		CHECK(me, vgpu_timeline_signal(tl, ready + 1));
	}
	/* The producer's last event, as a sync_file. */
	int evfd;
	if (recv_fds(sock, &evfd, 1) != 0) {
		fprintf(stderr, "share: consumer: no event fd\n");
		return 2;
	}
	vgpu_event_t ev;
	CHECK(me, vgpu_event_import_fd(ctx, evfd, &ev));
	close(evfd);
	CHECK(me, vgpu_event_synchronize(ev));
	CHECK(me, vgpu_event_query(ev));
	printf("share: consumer: the producer's event signalled\n");
	free(copy);
	CHECK(me, vgpu_context_destroy(ctx));
	return bad ? 1 : 0;
}

static int producer(const struct link *sock, pid_t child, int rounds)
{
	const char *me = "producer";
	vgpu_context_t ctx;
	vgpu_stream_t s;
	vgpu_buffer_t shared;
	vgpu_timeline_t tl;
	CHECK(me, vgpu_context_create(0, &ctx));
	CHECK(me, vgpu_stream_create(ctx, &s));
	CHECK(me, vgpu_mem_alloc_shared(ctx, SIZE, VGPU_MEM_HOST_VISIBLE, &shared));
	CHECK(me, vgpu_timeline_create(ctx, &tl));
	int fds[2];
	CHECK(me, vgpu_mem_export_fd(shared, &fds[0]));
	CHECK(me, vgpu_timeline_export_fd(tl, &fds[1]));
	if (send_fds(sock, fds, 2) != 0) {
		fprintf(stderr, "share: producer: the consumer did not take the fds\n");
		return 2;
	}
	close(fds[0]);
	close(fds[1]);
	for (int r = 1; r <= rounds; r++) {
		if (r > 1)
			CHECK(me, vgpu_stream_wait_timeline(s, tl, 2 * (uint64_t)r - 2));
		CHECK(me, vgpu_memset_async(s, shared, 0, (uint8_t)(0x40 + r), SIZE));
		CHECK(me, vgpu_stream_signal_timeline(s, tl, 2 * (uint64_t)r - 1));
	}
	vgpu_event_t ev;
	CHECK(me, vgpu_event_create(ctx, &ev));
	CHECK(me, vgpu_event_record(ev, s));
	int evfd;
	CHECK(me, vgpu_event_export_fd(ev, &evfd));
	if (send_fds(sock, &evfd, 1) != 0) {
		fprintf(stderr, "share: producer: the consumer did not take the fds\n");
		return 2;
	}
	close(evfd);
	/* The consumer's last point: it read the last round. */
	CHECK(me, vgpu_timeline_wait(tl, 2 * (uint64_t)rounds, 60ull * 1000 * 1000 * 1000));
	uint64_t v = 0;
	CHECK(me, vgpu_timeline_value(tl, &v));
	printf("share: producer: timeline at %llu\n", (unsigned long long)v);
	int status = 0;
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "share: consumer failed (status %#x)\n", status);
		return 1;
	}
	CHECK(me, vgpu_context_destroy(ctx));
	printf("share: %d rounds ok\n", rounds);
	return v == 2 * (uint64_t)rounds ? 0 : 1;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 4;
	int p2c[2], c2p[2];
	if (pipe(p2c) != 0 || pipe(c2p) != 0) {
		perror("pipe");
		return 2;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		close(p2c[1]);
		close(c2p[0]);
		struct link l = { .in = p2c[0], .out = c2p[1] };
		int rc = consumer(&l, rounds);
		fflush(stdout);
		_exit(rc);
	}
	close(p2c[0]);
	close(c2p[1]);
	struct link l = { .in = c2p[0], .out = p2c[1] };
	return producer(&l, pid, rounds);
}
