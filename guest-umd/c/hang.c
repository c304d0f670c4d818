/* Failure mode: a GPU hang and the context reset, as a C application sees it.
 *
 * A kernel loops forever. The KMD's hang check (job_timeout_ms) resets the
 * engine; the synchronize that waits for the work fails with
 * VGPU_ERROR_CONTEXT_LOST, vgpu_last_error() names the call, the KMD context
 * and the reason, vgpu_context_status() says VGPU_LOST_HANG, and the reason
 * is sticky: every later call on the context fails the same way.
 *
 *   c-hang             exit status 0 when the hang reset is reported
 */
#include <stdio.h>
#include "vgpu.h"

static const char spin_s[] =
    "// An infinite loop: only a reset stops it.\n"
    ".kernel spin\n"
    ".workgroup 32\n"
    "    mov     r0, 0\n"
    "forever:\n"
    "    add     r0, r0, 1\n"
    "    bra     forever\n"
    ".end\n";

static int setup_failed(const char *call)
{
	printf("hang: FAIL %s: %s\n", call, vgpu_last_error());
	return 1;
}

int main(void)
{
	vgpu_context_t ctx;
	vgpu_stream_t s, s2;
	vgpu_module_t m;
	uint32_t k;

	if (vgpu_context_create(0, &ctx))
		return setup_failed("vgpu_context_create");
	if (vgpu_stream_create(ctx, &s))
		return setup_failed("vgpu_stream_create");
	if (vgpu_module_assemble(ctx, spin_s, &m) || vgpu_module_kernel(m, "spin", &k))
		return setup_failed("vgpu_module_assemble");
	const uint32_t grid[3] = { 1, 1, 1 };
	if (vgpu_launch(s, m, k, grid, NULL, NULL, 0))
		return setup_failed("vgpu_launch");
	printf("hang: launched a kernel that never ends; waiting for the reset\n");
	vgpu_status st = vgpu_stream_synchronize(s);
	printf("hang: vgpu_stream_synchronize returned %d (%s)\n", st, vgpu_status_string(st));
	printf("hang: the application sees: %s\n", st ? vgpu_last_error() : "success");

	vgpu_context_state cs = { 0 };
	vgpu_status qs = vgpu_context_status(ctx, &cs);
	printf("hang: vgpu_context_status: reason %u, kmd context %u, hangs %u\n",
	       cs.reason, cs.kmd_context, cs.hangs);

	vgpu_status later = vgpu_stream_create(ctx, &s2);
	printf("hang: and every later call: %s\n", later ? vgpu_last_error() : "success");

	int ok = st == VGPU_ERROR_CONTEXT_LOST && qs == VGPU_SUCCESS &&
		 cs.reason == VGPU_LOST_HANG && cs.hangs >= 1 && later == VGPU_ERROR_CONTEXT_LOST;
	vgpu_context_destroy(ctx);
	printf("hang: %s\n", ok ? "ok, hang reset reported" : "FAIL: expected a hang reset");
	return ok ? 0 : 1;
}
