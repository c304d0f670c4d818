/* SAXPY through the vgpu C API: y = alpha * x + y over n floats, verified
 * on the CPU. Exit status 0 when every element matches.
 *
 *   c-saxpy [n]        default n = 10000
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vgpu.h"

/* isa/samples/saxpy.s */
static const char saxpy_s[] =
    "// SAXPY: y[i] = alpha * x[i] + y[i] for every i < n (fp32, fused multiply-add).\n"
    "// Launch: grid = ceil(n / 256) workgroups of 256 threads.\n"
    ".kernel saxpy\n"
    ".arg n u32\n"
    ".arg alpha f32\n"
    ".arg x ptr\n"
    ".arg y ptr\n"
    ".workgroup 256\n"
    "    s2r     r0, %gid.x\n"
    "    ldarg   r1, [n]\n"
    "    setp.ge.u32 p0, r0, r1\n"
    "    @p0 exit\n"
    "    ldarg   r1, [alpha]\n"
    "    mov     r7, 4\n"
    "    ldarg   d2, [x]\n"
    "    mad.wide.u32 d2, r0, r7, d2     // &x[i]\n"
    "    ldarg   d4, [y]\n"
    "    mad.wide.u32 d4, r0, r7, d4     // &y[i]\n"
    "    ld.32   r8, [d2]\n"
    "    ld.32   r9, [d4]\n"
    "    ffma    r9, r1, r8, r9          // alpha * x + y, one rounding\n"
    "    st.32   [d4], r9\n"
    "    exit\n"
    ".end\n";

#define CHECK(call)                                                                   \
	do {                                                                          \
		vgpu_status st_ = (call);                                             \
		if (st_ != VGPU_SUCCESS) {                                            \
			fprintf(stderr, "saxpy: %s failed: %s: %s\n", #call,           \
				vgpu_status_string(st_), vgpu_last_error());               \
			return 2;                                                     \
		}                                                                     \
	} while (0)

int main(int argc, char **argv)
{
	uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 10000;
	float alpha = 2.5f;
	float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
	for (uint32_t i = 0; i < n; i++) {
		x[i] = (float)i * 0.25f;
		y[i] = 1000.0f - (float)i;
	}

	vgpu_device_properties props;
	CHECK(vgpu_device_properties_get(0, &props));
	printf("saxpy: device generation %u, %u compute units\n", props.generation, props.compute_units);

	vgpu_context_t ctx;
	vgpu_stream_t s;
	vgpu_module_t mod;
	uint32_t kernel;
	vgpu_buffer_t bx, by;
	uint64_t vx, vy;
	CHECK(vgpu_context_create(0, &ctx));
	CHECK(vgpu_stream_create(ctx, &s));
	CHECK(vgpu_module_assemble(ctx, saxpy_s, &mod));
	CHECK(vgpu_module_kernel(mod, "saxpy", &kernel));
	CHECK(vgpu_mem_alloc(ctx, n * sizeof(float), VGPU_MEM_DEVICE_LOCAL, &bx));
	CHECK(vgpu_mem_alloc(ctx, n * sizeof(float), VGPU_MEM_DEVICE_LOCAL, &by));
	CHECK(vgpu_mem_va(bx, &vx));
	CHECK(vgpu_mem_va(by, &vy));
	CHECK(vgpu_memcpy_htod_async(s, bx, 0, x, n * sizeof(float)));
	CHECK(vgpu_memcpy_htod_async(s, by, 0, y, n * sizeof(float)));

	vgpu_arg args[4] = {
		{ .kind = VGPU_ARG_U32, .v.u32 = n },
		{ .kind = VGPU_ARG_F32, .v.f32 = alpha },
		{ .kind = VGPU_ARG_PTR, .v.ptr = vx },
		{ .kind = VGPU_ARG_PTR, .v.ptr = vy },
	};
	uint32_t grid[3] = { (n + 255) / 256, 1, 1 };
	CHECK(vgpu_launch(s, mod, kernel, grid, NULL, args, 4));
	CHECK(vgpu_memcpy_dtoh(s, out, by, 0, n * sizeof(float)));

	uint32_t bad = 0;
	for (uint32_t i = 0; i < n; i++) {
		float want = fmaf(alpha, x[i], y[i]);
		if (memcmp(&out[i], &want, sizeof want) != 0 && bad++ < 5)
			printf("saxpy: y[%u] = %g, want %g\n", i, out[i], want);
	}
	CHECK(vgpu_context_destroy(ctx));
	if (bad) {
		printf("saxpy: FAIL: %u of %u elements wrong\n", bad, n);
		return 1;
	}
	printf("saxpy: ok, %u elements verified\n", n);
	return 0;
}
