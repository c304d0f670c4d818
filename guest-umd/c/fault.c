/* Failure mode: a GPU page fault, as a C application sees it.
 *
 * A kernel stores past the end of a 4 KiB buffer until it leaves the
 * mapped range. The synchronize that waits for it fails with
 * VGPU_ERROR_CONTEXT_LOST; vgpu_last_error() names the call, the KMD context
 * and the device's reason; vgpu_context_status() gives the faulting address;
 * every later call on the context fails the same way (sticky).
 *
 *   c-fault            exit status 0 when a page fault above the buffer is reported
 */
#include <inttypes.h>
#include <stdio.h>
#include "vgpu.h"

static const char oob_store_s[] =
    "// out[i] = i with no bounds check: threads past the mapping fault.\n"
    ".kernel oob_store\n"
    ".arg out ptr\n"
    ".workgroup 64\n"
    "    s2r     r0, %gid.x\n"
    "    mov     r1, 4\n"
    "    ldarg   d2, [out]\n"
    "    mad.wide.u32 d2, r0, r1, d2\n"
    "    st.32   [d2], r0\n"
    "    exit\n"
    ".end\n";

static const char *access_name(uint32_t a)
{
	switch (a) {
	case 1: return "read";
	case 2: return "write";
	case 3: return "execute";
	case 4: return "atomic";
	default: return "?";
	}
}

static int setup_failed(const char *call)
{
	printf("fault: FAIL %s: %s\n", call, vgpu_last_error());
	return 1;
}

int main(void)
{
	vgpu_context_t ctx;
	vgpu_stream_t s;
	vgpu_module_t m;
	vgpu_buffer_t out, later_buf;
	uint32_t k;
	uint64_t va;

	if (vgpu_context_create(0, &ctx))
		return setup_failed("vgpu_context_create");
	if (vgpu_stream_create(ctx, &s))
		return setup_failed("vgpu_stream_create");
	if (vgpu_module_assemble(ctx, oob_store_s, &m) || vgpu_module_kernel(m, "oob_store", &k))
		return setup_failed("vgpu_module_assemble");
	if (vgpu_mem_alloc(ctx, 4096, VGPU_MEM_DEVICE_LOCAL, &out) || vgpu_mem_va(out, &va))
		return setup_failed("vgpu_mem_alloc");

	/* 64 Ki threads write 256 KiB into a 4 KiB buffer. */
	vgpu_arg arg = { .kind = VGPU_ARG_PTR, .v.ptr = va };
	const uint32_t grid[3] = { 1024, 1, 1 };
	if (vgpu_launch(s, m, k, grid, NULL, &arg, 1))
		return setup_failed("vgpu_launch");
	vgpu_status st = vgpu_stream_synchronize(s);
	printf("fault: vgpu_stream_synchronize returned %d (%s)\n", st, vgpu_status_string(st));
	printf("fault: the application sees: %s\n", st ? vgpu_last_error() : "success");

	vgpu_context_state cs = { 0 };
	vgpu_status qs = vgpu_context_status(ctx, &cs);
	printf("fault: vgpu_context_status: reason %u, kmd context %u, %s at 0x%" PRIx64
	       " (buffer at 0x%" PRIx64 ")\n",
	       cs.reason, cs.kmd_context, access_name(cs.fault_access), cs.fault_va, va);

	vgpu_status later = vgpu_mem_alloc(ctx, 64, VGPU_MEM_DEVICE_LOCAL, &later_buf);
	printf("fault: and every later call: %s\n", later ? vgpu_last_error() : "success");

	int ok = st == VGPU_ERROR_CONTEXT_LOST && qs == VGPU_SUCCESS &&
		 cs.reason == VGPU_LOST_PAGE_FAULT && cs.fault_va > va &&
		 later == VGPU_ERROR_CONTEXT_LOST;
	vgpu_context_destroy(ctx);
	printf("fault: %s\n", ok ? "ok, page fault reported" : "FAIL: expected a page fault above the buffer");
	return ok ? 0 : 1;
}
