/* Guest test of the vgpu C API (vgpu.h): devices, memory, copies, memset,
 * events and timing, cross-stream waits, invalid arguments, stale handles
 * (use after free/destroy), error strings. Prints "ok NAME" / "FAIL NAME"
 * and "capi-test: N passed, M failed"; exit status 1 on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "vgpu.h"

static int passed, failed;

static void check(const char *name, int ok)
{
	if (ok) {
		passed++;
		printf("ok %s\n", name);
	} else {
		failed++;
		printf("FAIL %s: %s\n", name, vgpu_last_error());
	}
}

#define OK(name, call) check(name, (call) == VGPU_SUCCESS)
#define IS(name, call, want) check(name, (call) == (want))

int main(void)
{
	uint32_t n = 0;
	OK("device count", vgpu_device_count(&n));
	check("one device", n >= 1);
	vgpu_device_properties p;
	OK("properties", vgpu_device_properties_get(0, &p));
	check("generation 1 or 2", p.generation == 1 || p.generation == 2);
	IS("properties of a missing device", vgpu_device_properties_get(99, &p), VGPU_ERROR_NO_DEVICE);
	IS("null output", vgpu_device_count(NULL), VGPU_ERROR_INVALID_ARGUMENT);

	vgpu_context_t ctx;
	vgpu_stream_t s1, s2;
	OK("context create", vgpu_context_create(0, &ctx));
	OK("stream create", vgpu_stream_create(ctx, &s1));
	OK("stream create 2", vgpu_stream_create(ctx, &s2));

	enum { N = 100000 };
	static unsigned char src[N], back[N];
	for (int i = 0; i < N; i++)
		src[i] = (unsigned char)(i * 7 + 3);
	vgpu_buffer_t a, b, h;
	OK("alloc device-local", vgpu_mem_alloc(ctx, N, VGPU_MEM_DEVICE_LOCAL, &a));
	OK("alloc device-local 2", vgpu_mem_alloc(ctx, N, VGPU_MEM_DEVICE_LOCAL, &b));
	OK("alloc host-visible", vgpu_mem_alloc(ctx, 4096, VGPU_MEM_HOST_VISIBLE, &h));
	IS("alloc 0 bytes", vgpu_mem_alloc(ctx, 0, VGPU_MEM_DEVICE_LOCAL, &a), VGPU_ERROR_INVALID_ARGUMENT);
	IS("alloc bad kind", vgpu_mem_alloc(ctx, 64, 7, &a), VGPU_ERROR_INVALID_ARGUMENT);
	void *hp = NULL;
	IS("host pointer of device-local", vgpu_mem_host_ptr(a, &hp), VGPU_ERROR_INVALID_ARGUMENT);
	OK("host pointer", vgpu_mem_host_ptr(h, &hp));

	OK("htod", vgpu_memcpy_htod(s1, a, 0, src, N));
	OK("dtod", vgpu_memcpy_dtod_async(s1, b, 0, a, 0, N));
	/* Device status: this process's contexts and memory are counted. */
	vgpu_device_stats st0, st1;
	OK("device stats", vgpu_device_stats_get(0, &st0));
	OK("stream synchronize before stats", vgpu_stream_synchronize(s1));
	OK("device stats again", vgpu_device_stats_get(0, &st1));
	check("stats: our two streams' contexts counted", st0.num_contexts >= 2);
	check("stats: our buffers counted", st0.mem_bytes >= 2 * N && st0.mem_objects >= 3);
	check("stats: copy engine busy time grows", st1.engine_busy_ns[0] > 0 &&
	      st1.engine_busy_ns[0] >= st0.engine_busy_ns[0]);
	check("stats: sample time grows", st1.sample_ns > st0.sample_ns && !st1.wedged);
	IS("stats of a missing device", vgpu_device_stats_get(99, &st0), VGPU_ERROR_NO_DEVICE);
	IS("stats null output", vgpu_device_stats_get(0, NULL), VGPU_ERROR_INVALID_ARGUMENT);
	OK("dtoh", vgpu_memcpy_dtoh(s1, back, b, 0, N));
	check("round trip data", memcmp(src, back, N) == 0);
	IS("copy out of range", vgpu_memcpy_dtod_async(s1, b, N - 10, a, 0, 20), VGPU_ERROR_INVALID_ARGUMENT);
	check("error names the call", strstr(vgpu_last_error(), "Stream::copy") != NULL);

	OK("memset", vgpu_memset_async(s1, h, 0, 0xab, 4096));
	OK("stream synchronize", vgpu_stream_synchronize(s1));
	check("memset visible to the CPU", ((unsigned char *)hp)[0] == 0xab && ((unsigned char *)hp)[4095] == 0xab);

	vgpu_event_t e0, e1;
	OK("event create", vgpu_event_create(ctx, &e0));
	OK("event create 2", vgpu_event_create(ctx, &e1));
	IS("query unrecorded event", vgpu_event_query(e0), VGPU_ERROR_INVALID_ARGUMENT);
	OK("record start", vgpu_event_record(e0, s1));
	OK("memset 100 KB", vgpu_memset_async(s1, a, 0, 1, N));
	OK("record end", vgpu_event_record(e1, s1));
	OK("s2 waits on e1", vgpu_stream_wait_event(s2, e1));
	OK("s2 copies after it", vgpu_memcpy_dtod_async(s2, b, 0, a, 0, N));
	OK("event synchronize", vgpu_event_synchronize(e1));
	OK("event query", vgpu_event_query(e1));
	uint64_t ns = 0;
	OK("elapsed", vgpu_event_elapsed_ns(e0, e1, &ns));
	check("elapsed > 0", ns > 0);
	printf("info memset of %d bytes: %llu ns of device time\n", N, (unsigned long long)ns);
	OK("dtoh after cross-stream wait", vgpu_memcpy_dtoh(s2, back, b, 0, N));
	int ones = 1;
	for (int i = 0; i < N; i++)
		ones &= back[i] == 1;
	check("s2 saw s1's memset", ones);

	/* Stale and mistyped handles. */
	OK("free", vgpu_mem_free(b));
	IS("free twice", vgpu_mem_free(b), VGPU_ERROR_INVALID_HANDLE);
	IS("use after free", vgpu_memset_async(s1, b, 0, 0, 16), VGPU_ERROR_INVALID_HANDLE);
	IS("stream handle as buffer", vgpu_mem_free(s1), VGPU_ERROR_INVALID_HANDLE);
	OK("event destroy", vgpu_event_destroy(e0));
	IS("event use after destroy", vgpu_event_query(e0), VGPU_ERROR_INVALID_HANDLE);
	OK("stream destroy", vgpu_stream_destroy(s2));
	IS("stream use after destroy", vgpu_stream_synchronize(s2), VGPU_ERROR_INVALID_HANDLE);

	/* Modules. */
	vgpu_module_t m;
	uint32_t k;
	IS("load garbage module", vgpu_module_load(ctx, "garbage", 7, &m), VGPU_ERROR_INVALID_MODULE);
	OK("assemble", vgpu_module_assemble(ctx, ".kernel k\n.arg n u32\n    exit\n.end\n", &m));
	IS("missing kernel", vgpu_module_kernel(m, "nope", &k), VGPU_ERROR_NOT_FOUND);
	OK("kernel", vgpu_module_kernel(m, "k", &k));
	uint32_t grid[3] = { 1, 1, 1 }, zero[3] = { 0, 1, 1 };
	vgpu_arg arg = { .kind = VGPU_ARG_F32, .v.f32 = 1.0f };
	IS("launch with a wrong argument type", vgpu_launch(s1, m, k, grid, NULL, &arg, 1), VGPU_ERROR_INVALID_ARGUMENT);
	arg.kind = VGPU_ARG_U32;
	IS("launch with a zero grid", vgpu_launch(s1, m, k, zero, NULL, &arg, 1), VGPU_ERROR_INVALID_ARGUMENT);
	IS("launch of a kernel index out of range", vgpu_launch(s1, m, 9, grid, NULL, &arg, 1), VGPU_ERROR_NOT_FOUND);

	vgpu_context_state cs;
	OK("context status", vgpu_context_status(ctx, &cs));
	check("context not lost", cs.reason == VGPU_LOST_NONE);
	OK("context synchronize", vgpu_context_synchronize(ctx));
	OK("context destroy", vgpu_context_destroy(ctx));
	IS("context use after destroy", vgpu_stream_create(ctx, &s2), VGPU_ERROR_INVALID_HANDLE);
	IS("its buffers are gone", vgpu_mem_free(a), VGPU_ERROR_INVALID_HANDLE);
	IS("its streams are gone", vgpu_stream_synchronize(s1), VGPU_ERROR_INVALID_HANDLE);

	printf("capi-test: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
