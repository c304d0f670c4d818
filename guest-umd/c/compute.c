/* The compute samples through the vgpu C API, each verified on the CPU:
 * vecadd, reduce, histogram, scan, matmul (saxpy is c-saxpy).
 *
 *   c-compute          all of them; exit status 0 when every result matches
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vgpu.h"

static const char vecadd_s[] =
    "// Vector add: c[i] = a[i] + b[i] for every i < n (fp32).\n"
    "// Launch: grid = ceil(n / 256) workgroups of 256 threads.\n"
    ".kernel vecadd\n"
    ".arg n u32\n"
    ".arg a ptr\n"
    ".arg b ptr\n"
    ".arg c ptr\n"
    ".workgroup 256\n"
    "    s2r     r0, %gid.x              // i = global thread index\n"
    "    ldarg   r1, [n]\n"
    "    setp.ge.u32 p0, r0, r1\n"
    "    @p0 exit                        // threads past the end do nothing\n"
    "    mov     r1, 4                   // element size\n"
    "    ldarg   d2, [a]\n"
    "    mad.wide.u32 d2, r0, r1, d2     // d2 = &a[i]\n"
    "    ldarg   d4, [b]\n"
    "    mad.wide.u32 d4, r0, r1, d4     // d4 = &b[i]\n"
    "    ldarg   d6, [c]\n"
    "    mad.wide.u32 d6, r0, r1, d6     // d6 = &c[i]\n"
    "    ld.32   r8, [d2]\n"
    "    ld.32   r9, [d4]\n"
    "    fadd    r8, r8, r9\n"
    "    st.32   [d6], r8\n"
    "    exit\n"
    ".end\n";
static const char reduce_s[] =
    "// Sum reduction (u32, wrapping): each workgroup sums its 256 elements of\n"
    "// `input` (elements past n count as 0) with a tree in shared memory and\n"
    "// writes the sum to partial[workgroup id]. The host (or a second launch)\n"
    "// adds the partial sums.\n"
    "// Launch: grid = ceil(n / 256) workgroups of 256 threads (a power of two).\n"
    ".kernel reduce\n"
    ".arg n u32\n"
    ".arg input ptr\n"
    ".arg partial ptr\n"
    ".shared 1024                        // one u32 per thread\n"
    ".workgroup 256\n"
    "    s2r     r0, %tid.x\n"
    "    s2r     r1, %gid.x\n"
    "    ldarg   r2, [n]\n"
    "    mov     r3, 0                   // r3 = my running sum\n"
    "    mov     r10, 4\n"
    "    setp.lt.u32 p0, r1, r2\n"
    "    ldarg   d4, [input]\n"
    "    mad.wide.u32 d4, r1, r10, d4\n"
    "    @p0 ld.32 r3, [d4]\n"
    "    shl     r6, r0, 2               // my slot in shared memory\n"
    "    sts.32  [r6], r3\n"
    "    bar\n"
    "    s2r     r7, %ntid.x\n"
    "    shr.u32 r7, r7, 1               // stride = ntid / 2\n"
    "step:\n"
    "    setp.lt.u32 p1, r0, r7          // the lower half adds the upper half\n"
    "    @p1 shl r8, r7, 2\n"
    "    @p1 add r8, r8, r6\n"
    "    @p1 lds.32 r9, [r8]\n"
    "    @p1 add r3, r3, r9\n"
    "    @p1 sts.32 [r6], r3\n"
    "    bar                             // every thread reaches it: uniform loop\n"
    "    shr.u32 r7, r7, 1\n"
    "    setp.ne.u32 p2, r7, 0\n"
    "    @p2 bra step\n"
    "    setp.eq.u32 p3, r0, 0\n"
    "    @!p3 exit                       // thread 0 holds the total\n"
    "    s2r     r11, %wgid.x\n"
    "    ldarg   d12, [partial]\n"
    "    mad.wide.u32 d12, r11, r10, d12\n"
    "    st.32   [d12], r3\n"
    "    exit\n"
    ".end\n";
static const char histogram_s[] =
    "// 256-bin histogram of the low byte of n u32 values: bins[v & 255] += 1.\n"
    "// Each workgroup counts into a private histogram in shared memory with\n"
    "// shared atomics (grid-stride loop), then adds its non-zero bins to the\n"
    "// global histogram with global atomics. `bins` must be zeroed beforehand.\n"
    "// Launch: any grid, any workgroup size.\n"
    ".kernel histogram\n"
    ".arg n u32\n"
    ".arg data ptr\n"
    ".arg bins ptr\n"
    ".shared 1024\n"
    ".workgroup 256\n"
    "    s2r     r0, %tid.x\n"
    "    s2r     r1, %ntid.x\n"
    "    mov     r3, 0\n"
    "    mov     r4, r0\n"
    "zero:                               // bins t, t + ntid, ... = 0\n"
    "    setp.lt.u32 p0, r4, 256\n"
    "    @!p0 bra zeroed\n"
    "    shl     r5, r4, 2\n"
    "    sts.32  [r5], r3\n"
    "    add     r4, r4, r1\n"
    "    bra     zero\n"
    "zeroed:\n"
    "    bar\n"
    "    s2r     r6, %gid.x\n"
    "    s2r     r7, %nwg.x\n"
    "    mul     r7, r7, r1              // threads in the grid\n"
    "    ldarg   r8, [n]\n"
    "    ldarg   d10, [data]\n"
    "    mov     r9, 4\n"
    "    mov     r12, 1\n"
    "count:                              // lanes leave this loop at different times\n"
    "    setp.lt.u32 p1, r6, r8\n"
    "    @!p1 bra counted\n"
    "    mad.wide.u32 d14, r6, r9, d10\n"
    "    ld.32   r16, [d14]\n"
    "    and     r16, r16, 255\n"
    "    shl     r16, r16, 2\n"
    "    atoms.add r17, [r16], r12\n"
    "    add     r6, r6, r7\n"
    "    bra     count\n"
    "counted:\n"
    "    bar\n"
    "    ldarg   d18, [bins]\n"
    "    mov     r4, r0\n"
    "flush:\n"
    "    setp.lt.u32 p2, r4, 256\n"
    "    @!p2 exit\n"
    "    shl     r5, r4, 2\n"
    "    lds.32  r20, [r5]\n"
    "    mad.wide.u32 d22, r4, r9, d18\n"
    "    setp.ne.u32 p3, r20, 0\n"
    "    @p3 atom.add r21, [d22], r20\n"
    "    add     r4, r4, r1\n"
    "    bra     flush\n"
    ".end\n";
static const char scan_s[] =
    "// Exclusive prefix sum (u32, wrapping) in three launches:\n"
    "//   1. scan_blocks(n, input, output, sums): each workgroup of 256 threads\n"
    "//      scans its 256 elements (Hillis-Steele, double-buffered in shared\n"
    "//      memory), writes the exclusive scan to output and its total to\n"
    "//      sums[workgroup id].\n"
    "//   2. scan_blocks(nblocks, sums, offsets, scratch) with one workgroup:\n"
    "//      the exclusive scan of the block totals (nblocks <= 256).\n"
    "//   3. add_offsets(n, output, offsets): output[i] += offsets[i / 256].\n"
    ".kernel scan_blocks\n"
    ".arg n u32\n"
    ".arg input ptr\n"
    ".arg output ptr\n"
    ".arg sums ptr\n"
    ".shared 2048                        // two buffers of 256 u32\n"
    ".workgroup 256\n"
    "    s2r     r0, %tid.x\n"
    "    s2r     r1, %gid.x\n"
    "    s2r     r2, %ntid.x\n"
    "    ldarg   r3, [n]\n"
    "    mov     r4, 4\n"
    "    mov     r5, 0                   // x = input[i], 0 past the end\n"
    "    setp.lt.u32 p0, r1, r3\n"
    "    ldarg   d6, [input]\n"
    "    mad.wide.u32 d6, r1, r4, d6\n"
    "    @p0 ld.32 r5, [d6]\n"
    "    shl     r8, r0, 2\n"
    "    sts.32  [r8], r5\n"
    "    bar\n"
    "    mov     r9, 1                   // distance\n"
    "    mov     r10, 0                  // source buffer\n"
    "    mov     r11, 1024               // destination buffer\n"
    "    mov     r12, r5                 // inclusive sum so far\n"
    "step:\n"
    "    setp.ge.u32 p1, r0, r9\n"
    "    sub     r13, r0, r9\n"
    "    shl     r13, r13, 2\n"
    "    add     r13, r13, r10\n"
    "    @p1 lds.32 r14, [r13]\n"
    "    @p1 add r12, r12, r14\n"
    "    add     r15, r8, r11\n"
    "    sts.32  [r15], r12\n"
    "    bar\n"
    "    mov     r16, r10                // swap the buffers\n"
    "    mov     r10, r11\n"
    "    mov     r11, r16\n"
    "    shl     r9, r9, 1\n"
    "    setp.lt.u32 p2, r9, r2\n"
    "    @p2 bra step\n"
    "    sub     r17, r12, r5            // exclusive = inclusive - x\n"
    "    ldarg   d18, [output]\n"
    "    mad.wide.u32 d18, r1, r4, d18\n"
    "    @p0 st.32 [d18], r17\n"
    "    sub     r20, r2, 1\n"
    "    setp.eq.u32 p3, r0, r20\n"
    "    @!p3 exit                       // the last thread has the block total\n"
    "    s2r     r21, %wgid.x\n"
    "    ldarg   d22, [sums]\n"
    "    mad.wide.u32 d22, r21, r4, d22\n"
    "    st.32   [d22], r12\n"
    "    exit\n"
    ".end\n"
    "\n"
    ".kernel add_offsets\n"
    ".arg n u32\n"
    ".arg data ptr\n"
    ".arg offsets ptr\n"
    ".workgroup 256\n"
    "    s2r     r0, %gid.x\n"
    "    ldarg   r1, [n]\n"
    "    setp.ge.u32 p0, r0, r1\n"
    "    @p0 exit\n"
    "    s2r     r2, %wgid.x\n"
    "    mov     r3, 4\n"
    "    ldarg   d4, [offsets]\n"
    "    mad.wide.u32 d4, r2, r3, d4\n"
    "    ld.32   r6, [d4]\n"
    "    ldarg   d8, [data]\n"
    "    mad.wide.u32 d8, r0, r3, d8\n"
    "    ld.32   r10, [d8]\n"
    "    add     r10, r10, r6\n"
    "    st.32   [d8], r10\n"
    "    exit\n"
    ".end\n";
static const char matmul_s[] =
    "// Tiled matrix multiply, fp32, row-major: C[m x n] = A[m x k] * B[k x n].\n"
    "// Each 16x16 workgroup computes a 16x16 tile of C, staging 16x16 tiles of A\n"
    "// and B through shared memory. Any m, n, k: out-of-range elements load as 0.\n"
    "// C[i][j] accumulates ffma(A[i][kk], B[kk][j], acc) for kk = 0, 1, ...\n"
    "// Launch: grid = (ceil(n/16), ceil(m/16)), workgroup = (16, 16).\n"
    ".kernel matmul\n"
    ".arg m u32\n"
    ".arg n u32\n"
    ".arg k u32\n"
    ".arg a ptr\n"
    ".arg b ptr\n"
    ".arg c ptr\n"
    ".shared 2048                        // As[16][16] at 0, Bs[16][16] at 1024\n"
    ".workgroup 16 16\n"
    "    s2r     r0, %tid.x              // tx\n"
    "    s2r     r1, %tid.y              // ty\n"
    "    s2r     r2, %gid.x              // col\n"
    "    s2r     r3, %gid.y              // row\n"
    "    ldarg   r4, [m]\n"
    "    ldarg   r5, [n]\n"
    "    ldarg   r6, [k]\n"
    "    ldarg   d8, [a]\n"
    "    ldarg   d10, [b]\n"
    "    mov     r12, 0.0                // acc\n"
    "    mov     r13, 0                  // t: first k index of the current tile\n"
    "    shl     r14, r1, 4\n"
    "    add     r14, r14, r0\n"
    "    shl     r14, r14, 2             // (ty*16 + tx) * 4: my slot in a tile\n"
    "    shl     r15, r1, 6              // ty * 64: row ty of As\n"
    "    shl     r16, r0, 2              // tx * 4: column tx of Bs\n"
    "    setp.lt.u32 p0, r3, r4          // row < m\n"
    "    setp.lt.u32 p1, r2, r5          // col < n\n"
    "    mov     r17, 4\n"
    "tile:\n"
    "    add     r18, r13, r0            // As[ty][tx] = A[row][t + tx]\n"
    "    setp.lt.u32 p2, r18, r6\n"
    "    pand    p2, p2, p0\n"
    "    mov     r19, 0\n"
    "    mad     r20, r3, r6, r18\n"
    "    mad.wide.u32 d22, r20, r17, d8\n"
    "    @p2 ld.32 r19, [d22]\n"
    "    sts.32  [r14], r19\n"
    "    add     r18, r13, r1            // Bs[ty][tx] = B[t + ty][col]\n"
    "    setp.lt.u32 p3, r18, r6\n"
    "    pand    p3, p3, p1\n"
    "    mov     r19, 0\n"
    "    mad     r20, r18, r5, r2\n"
    "    mad.wide.u32 d22, r20, r17, d10\n"
    "    @p3 ld.32 r19, [d22]\n"
    "    sts.32  [r14+1024], r19\n"
    "    bar\n"
    "    mov     r24, 0                  // j * 4\n"
    "    mov     r25, r16                // j * 64 + tx * 4\n"
    "inner:\n"
    "    add     r26, r15, r24\n"
    "    lds.32  r27, [r26]              // As[ty][j]\n"
    "    lds.32  r28, [r25+1024]         // Bs[j][tx]\n"
    "    ffma    r12, r27, r28, r12\n"
    "    add     r24, r24, 4\n"
    "    add     r25, r25, 64\n"
    "    setp.lt.u32 p4, r24, 64\n"
    "    @p4 bra inner\n"
    "    bar                             // before the next tile overwrites As/Bs\n"
    "    add     r13, r13, 16\n"
    "    setp.lt.u32 p5, r13, r6\n"
    "    @p5 bra tile\n"
    "    pand    p6, p0, p1\n"
    "    @!p6 exit\n"
    "    mad     r20, r3, r5, r2\n"
    "    ldarg   d22, [c]\n"
    "    mad.wide.u32 d22, r20, r17, d22\n"
    "    st.32   [d22], r12\n"
    "    exit\n"
    ".end\n";

static vgpu_context_t ctx;
static vgpu_stream_t s;

#define CHECK(call)                                                                   \
	do {                                                                          \
		vgpu_status st_ = (call);                                             \
		if (st_ != VGPU_SUCCESS) {                                            \
			fprintf(stderr, "compute: %s failed: %s: %s\n", #call,         \
				vgpu_status_string(st_), vgpu_last_error());               \
			exit(2);                                                      \
		}                                                                     \
	} while (0)

static vgpu_buffer_t upload(const void *data, uint64_t len, uint64_t *va)
{
	vgpu_buffer_t b;
	CHECK(vgpu_mem_alloc(ctx, len, VGPU_MEM_DEVICE_LOCAL, &b));
	CHECK(vgpu_mem_va(b, va));
	if (data)
		CHECK(vgpu_memcpy_htod_async(s, b, 0, data, len));
	else
		CHECK(vgpu_memset_async(s, b, 0, 0, len));
	return b;
}

static uint32_t kernel(const char *src, const char *name, vgpu_module_t *m)
{
	uint32_t k;
	CHECK(vgpu_module_assemble(ctx, src, m));
	CHECK(vgpu_module_kernel(*m, name, &k));
	return k;
}

static vgpu_arg u32arg(uint32_t v) { vgpu_arg a = { .kind = VGPU_ARG_U32, .v.u32 = v }; return a; }
static vgpu_arg ptrarg(uint64_t v) { vgpu_arg a = { .kind = VGPU_ARG_PTR, .v.ptr = v }; return a; }

static int report(const char *name, uint32_t bad, uint32_t n)
{
	if (bad)
		printf("%s: FAIL: %u of %u wrong\n", name, bad, n);
	else
		printf("%s: ok, %u values verified\n", name, n);
	return bad != 0;
}

static int vecadd(uint32_t n)
{
	float *a = malloc(4 * n), *b = malloc(4 * n), *c = malloc(4 * n);
	for (uint32_t i = 0; i < n; i++) { a[i] = (float)i; b[i] = 0.5f * (float)i + 1.0f; }
	uint64_t va, vb, vc;
	upload(a, 4 * n, &va); upload(b, 4 * n, &vb);
	vgpu_buffer_t bc = upload(NULL, 4 * n, &vc);
	vgpu_module_t m;
	uint32_t k = kernel(vecadd_s, "vecadd", &m);
	vgpu_arg args[] = { u32arg(n), ptrarg(va), ptrarg(vb), ptrarg(vc) };
	uint32_t grid[3] = { (n + 255) / 256, 1, 1 };
	CHECK(vgpu_launch(s, m, k, grid, NULL, args, 4));
	CHECK(vgpu_memcpy_dtoh(s, c, bc, 0, 4 * n));
	uint32_t bad = 0;
	for (uint32_t i = 0; i < n; i++) bad += c[i] != a[i] + b[i];
	return report("vecadd", bad, n);
}

static int reduce(uint32_t n)
{
	uint32_t *v = malloc(4 * n), groups = (n + 255) / 256, *part = malloc(4 * groups), want = 0, got = 0;
	for (uint32_t i = 0; i < n; i++) { v[i] = (i * 2654435761u) >> 8; want += v[i]; }
	uint64_t vi, vp;
	upload(v, 4 * n, &vi);
	vgpu_buffer_t bp = upload(NULL, 4 * groups, &vp);
	vgpu_module_t m;
	uint32_t k = kernel(reduce_s, "reduce", &m);
	vgpu_arg args[] = { u32arg(n), ptrarg(vi), ptrarg(vp) };
	uint32_t grid[3] = { groups, 1, 1 };
	CHECK(vgpu_launch(s, m, k, grid, NULL, args, 3));
	CHECK(vgpu_memcpy_dtoh(s, part, bp, 0, 4 * groups));
	for (uint32_t i = 0; i < groups; i++) got += part[i];
	return report("reduce", got != want, 1);
}

static int histogram(uint32_t n)
{
	uint32_t *v = malloc(4 * n), bins[256], want[256] = { 0 };
	for (uint32_t i = 0; i < n; i++) { v[i] = (i * 2654435761u) >> 3; want[v[i] & 255]++; }
	uint64_t vd, vh;
	upload(v, 4 * n, &vd);
	vgpu_buffer_t bh = upload(NULL, sizeof bins, &vh);
	vgpu_module_t m;
	uint32_t k = kernel(histogram_s, "histogram", &m);
	vgpu_arg args[] = { u32arg(n), ptrarg(vd), ptrarg(vh) };
	uint32_t grid[3] = { 8, 1, 1 };
	CHECK(vgpu_launch(s, m, k, grid, NULL, args, 3));
	CHECK(vgpu_memcpy_dtoh(s, bins, bh, 0, sizeof bins));
	uint32_t bad = 0;
	for (int i = 0; i < 256; i++) bad += bins[i] != want[i];
	return report("histogram", bad, 256);
}

static int scan(uint32_t n)
{
	uint32_t blocks = (n + 255) / 256, *v = malloc(4 * n), *out = malloc(4 * n), acc = 0, bad = 0;
	for (uint32_t i = 0; i < n; i++) v[i] = i % 13 + 1;
	uint64_t vi, vo, vs, voff, vx;
	upload(v, 4 * n, &vi);
	vgpu_buffer_t bo = upload(NULL, 4 * n, &vo);
	upload(NULL, 4 * blocks, &vs); upload(NULL, 4 * blocks, &voff); upload(NULL, 4, &vx);
	vgpu_module_t m;
	uint32_t kb = kernel(scan_s, "scan_blocks", &m), ka;
	CHECK(vgpu_module_kernel(m, "add_offsets", &ka));
	vgpu_arg a1[] = { u32arg(n), ptrarg(vi), ptrarg(vo), ptrarg(vs) };
	vgpu_arg a2[] = { u32arg(blocks), ptrarg(vs), ptrarg(voff), ptrarg(vx) };
	vgpu_arg a3[] = { u32arg(n), ptrarg(vo), ptrarg(voff) };
	uint32_t g[3] = { blocks, 1, 1 }, one[3] = { 1, 1, 1 };
	CHECK(vgpu_launch(s, m, kb, g, NULL, a1, 4));
	CHECK(vgpu_launch(s, m, kb, one, NULL, a2, 4));
	CHECK(vgpu_launch(s, m, ka, g, NULL, a3, 3));
	CHECK(vgpu_memcpy_dtoh(s, out, bo, 0, 4 * n));
	for (uint32_t i = 0; i < n; i++) { bad += out[i] != acc; acc += v[i]; }
	return report("scan", bad, n);
}

static int matmul(uint32_t sz)
{
	uint32_t M = sz, N = sz + 3, K = sz + 1, bad = 0;
	float *a = malloc(4 * M * K), *b = malloc(4 * K * N), *c = malloc(4 * M * N);
	for (uint32_t i = 0; i < M * K; i++) a[i] = (float)(i % 7) - 3.0f;
	for (uint32_t i = 0; i < K * N; i++) b[i] = (float)(i % 5) * 0.5f;
	uint64_t va, vb, vc;
	upload(a, 4 * M * K, &va); upload(b, 4 * K * N, &vb);
	vgpu_buffer_t bc = upload(NULL, 4 * M * N, &vc);
	vgpu_module_t m;
	uint32_t k = kernel(matmul_s, "matmul", &m);
	vgpu_arg args[] = { u32arg(M), u32arg(N), u32arg(K), ptrarg(va), ptrarg(vb), ptrarg(vc) };
	uint32_t grid[3] = { (N + 15) / 16, (M + 15) / 16, 1 };
	CHECK(vgpu_launch(s, m, k, grid, NULL, args, 6));
	CHECK(vgpu_memcpy_dtoh(s, c, bc, 0, 4 * M * N));
	for (uint32_t i = 0; i < M; i++)
		for (uint32_t j = 0; j < N; j++) {
			float acc = 0.0f;
			for (uint32_t kk = 0; kk < K; kk++)
				acc = __builtin_fmaf(a[i * K + kk], b[kk * N + j], acc);
			bad += memcmp(&acc, &c[i * N + j], 4) != 0;
		}
	return report("matmul", bad, M * N);
}

int main(void)
{
	CHECK(vgpu_context_create(0, &ctx));
	CHECK(vgpu_stream_create(ctx, &s));
	int fails = vecadd(10000) + reduce(10000) + histogram(20000) + scan(10000) + matmul(40);
	CHECK(vgpu_context_destroy(ctx));
	return fails ? 1 : 0;
}
