/* SPDX-License-Identifier: MIT */
/*
 * vgpu.h: the C API of the vgpu user-mode driver (libvgpu_umd.a).
 *
 * Objects are 64-bit handles (0 is never valid). A handle used after it was
 * destroyed, or of the wrong type, fails with VGPU_ERROR_INVALID_HANDLE.
 * Destroying a context destroys every object created from it.
 *
 * Every function returns a vgpu_status. On failure, vgpu_last_error()
 * returns a message naming the call, the context and the device's reason
 * (valid until the next failing call on the same thread).
 *
 * Contexts are sticky-lost after a GPU fault, hang or device loss: every
 * later call fails with VGPU_ERROR_CONTEXT_LOST or VGPU_ERROR_DEVICE_LOST and
 * vgpu_context_status() tells why.
 *
 * Link: -lvgpu_umd -lpthread -ldl -lm. Tunables: see docs/umd.md.
 */
#ifndef VGPU_H
#define VGPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t vgpu_context_t;
typedef uint64_t vgpu_buffer_t;
typedef uint64_t vgpu_stream_t;
typedef uint64_t vgpu_event_t;
typedef uint64_t vgpu_module_t;
typedef uint64_t vgpu_timeline_t;

typedef enum vgpu_status {
	VGPU_SUCCESS = 0,
	VGPU_ERROR_INVALID_ARGUMENT = 1,
	VGPU_ERROR_INVALID_HANDLE = 2,
	VGPU_ERROR_NO_DEVICE = 3,
	VGPU_ERROR_OUT_OF_MEMORY = 4,
	VGPU_ERROR_NOT_FOUND = 5,       /* no kernel of that name */
	VGPU_ERROR_NOT_READY = 6,       /* vgpu_event_query: not complete yet */
	VGPU_ERROR_INVALID_MODULE = 7,
	VGPU_ERROR_CONTEXT_LOST = 8,    /* sticky; see vgpu_context_status */
	VGPU_ERROR_DEVICE_LOST = 9,     /* sticky: wedged or removed */
	VGPU_ERROR_KMD = 10,            /* the kernel driver refused */
	VGPU_ERROR_CONFIG = 11,         /* a VGPU_* environment variable is malformed */
} vgpu_status;

typedef enum vgpu_mem_kind {
	VGPU_MEM_DEVICE_LOCAL = 0,      /* GPU only; reach it with copies */
	VGPU_MEM_HOST_VISIBLE = 1,      /* also mapped for the CPU */
} vgpu_mem_kind;

typedef enum vgpu_placement {
	VGPU_PLACEMENT_SYSTEM = 0,          /* guest RAM */
	VGPU_PLACEMENT_VRAM = 1,            /* device memory only (fails when full or absent) */
	VGPU_PLACEMENT_VRAM_PREFERRED = 2,  /* device memory, else guest RAM */
} vgpu_placement;

typedef enum vgpu_lost_reason {
	VGPU_LOST_NONE = 0,
	VGPU_LOST_PAGE_FAULT = 1,       /* guilty: fault_va/fault_access */
	VGPU_LOST_HANG = 2,             /* guilty: reset after a hang */
	VGPU_LOST_BANNED = 3,
	VGPU_LOST_INNOCENT = 4,         /* another context's reset */
	VGPU_LOST_ENGINE_ERROR = 5,     /* the engine rejected a command */
	VGPU_LOST_WEDGED = 6,
	VGPU_LOST_REMOVED = 7,
	VGPU_LOST_DEVICE_LOST = 8,      /* the device stopped answering */
} vgpu_lost_reason;

typedef enum vgpu_arg_kind {
	VGPU_ARG_U32 = 1,
	VGPU_ARG_I32 = 2,
	VGPU_ARG_F32 = 3,
	VGPU_ARG_U64 = 4,
	VGPU_ARG_PTR = 5,               /* a GPU address (vgpu_mem_va) */
} vgpu_arg_kind;

/* A typed kernel argument. */
typedef struct vgpu_arg {
	uint32_t kind;                  /* vgpu_arg_kind */
	uint32_t pad;                   /* zero */
	union {
		uint32_t u32;
		int32_t i32;
		float f32;
		uint64_t u64;
		uint64_t ptr;
	} v;
} vgpu_arg;

typedef struct vgpu_device_properties {
	uint32_t generation;
	uint32_t compute_units;
	uint64_t engine_mask;           /* bit 0 copy, bit 1 compute */
	uint64_t page_sizes;
	uint32_t va_bits;
	uint32_t max_contexts;
	uint32_t protocol_version;      /* (major << 16) | minor */
	uint32_t firmware_version;      /* (major << 16) | (minor << 8) | patch */
	uint32_t device_id;
	uint32_t pad;
} vgpu_device_properties;

/* A status sample of the whole device (every process): vgpu_device_stats_get. */
typedef struct vgpu_device_stats {
	uint64_t sample_ns;             /* guest monotonic clock of the sample */
	uint64_t engine_busy_ns[2];     /* busy time per engine (copy, compute), device clock */
	uint64_t mem_bytes;             /* GEM memory of all processes */
	uint64_t mem_objects;
	uint64_t pt_bytes;              /* GPU page tables in use */
	uint64_t engine_resets;
	uint64_t device_resets;
	uint64_t hangs;
	uint64_t faults;
	uint32_t wedged;                /* 1: the device is wedged */
	uint32_t num_contexts;          /* contexts on the device */
} vgpu_device_stats;

typedef struct vgpu_context_state {
	uint32_t reason;                /* vgpu_lost_reason */
	uint32_t kmd_context;           /* KMD context whose work was lost */
	uint64_t fault_va;              /* VGPU_LOST_PAGE_FAULT */
	uint32_t fault_access;          /* 1 read, 2 write, 3 execute, 4 atomic */
	uint32_t hangs;                 /* VGPU_LOST_HANG */
} vgpu_context_state;

const char *vgpu_status_string(vgpu_status status);
const char *vgpu_last_error(void);

/* Devices. */
vgpu_status vgpu_device_count(uint32_t *count);
vgpu_status vgpu_device_properties_get(uint32_t index, vgpu_device_properties *out);
/* Utilisation: growth of engine_busy_ns between two samples / growth of sample_ns. */
vgpu_status vgpu_device_stats_get(uint32_t index, vgpu_device_stats *out);

/* Contexts. */
vgpu_status vgpu_context_create(uint32_t device_index, vgpu_context_t *out);
vgpu_status vgpu_context_destroy(vgpu_context_t ctx);
vgpu_status vgpu_context_synchronize(vgpu_context_t ctx);
vgpu_status vgpu_context_status(vgpu_context_t ctx, vgpu_context_state *out);

/* Memory. */
vgpu_status vgpu_mem_alloc(vgpu_context_t ctx, uint64_t size, vgpu_mem_kind kind, vgpu_buffer_t *out);
vgpu_status vgpu_mem_free(vgpu_buffer_t buf);
vgpu_status vgpu_mem_va(vgpu_buffer_t buf, uint64_t *va);
vgpu_status vgpu_mem_host_ptr(vgpu_buffer_t buf, void **ptr);
/* Sharing: a buffer in a BO of its own, exported as a dma-buf fd (close-on-exec; the caller
 * closes it) that another process imports into its context (the fd stays the caller's). */
vgpu_status vgpu_mem_alloc_shared(vgpu_context_t ctx, uint64_t size, vgpu_mem_kind kind, vgpu_buffer_t *out);
vgpu_status vgpu_mem_export_fd(vgpu_buffer_t buf, int *fd);
/* Placement (devices with VRAM): a buffer in a BO of its own, in device memory or guest RAM.
 * A VRAM_DEVICE_LOCAL buffer has no host pointer; a HOST_VISIBLE one in VRAM is mapped through
 * the CPU-visible aperture. VRAM buffers cannot be exported. */
vgpu_status vgpu_mem_alloc_placed(vgpu_context_t ctx, uint64_t size, vgpu_mem_kind kind,
				  vgpu_placement placement, vgpu_buffer_t *out);
vgpu_status vgpu_mem_import_fd(vgpu_context_t ctx, int fd, vgpu_mem_kind kind, vgpu_buffer_t *out);

/* Streams. */
vgpu_status vgpu_stream_create(vgpu_context_t ctx, vgpu_stream_t *out);
vgpu_status vgpu_stream_destroy(vgpu_stream_t s);
vgpu_status vgpu_stream_synchronize(vgpu_stream_t s);
vgpu_status vgpu_stream_wait_event(vgpu_stream_t s, vgpu_event_t ev);
/* Signal `point` of `tl` when the stream's work so far completed (GPU side), or make its later
 * work wait for `point` (in the KMD; the CPU does not block). */
vgpu_status vgpu_stream_signal_timeline(vgpu_stream_t s, vgpu_timeline_t tl, uint64_t point);
vgpu_status vgpu_stream_wait_timeline(vgpu_stream_t s, vgpu_timeline_t tl, uint64_t point);

/* Copies and memset. Every one is ordered after the stream's earlier work
 * (memset, copies and launches of the same stream run in call order); other
 * streams are not waited for (use events).
 *
 * "_async": returns once the operation is queued, before the GPU ran it.
 *   vgpu_memcpy_htod_async copies `src` into staging memory before it
 *   returns, so `src` may be reused or freed at once; a copy larger than
 *   4 MiB is staged in 4 MiB pieces, and while more than 16 MiB of them are
 *   in flight it blocks until the oldest piece has been copied by the GPU.
 * vgpu_memcpy_htod (synchronous): vgpu_memcpy_htod_async, then
 *   vgpu_stream_synchronize: blocks until the copy AND all earlier work of
 *   the stream have completed on the GPU.
 * vgpu_memcpy_dtoh (synchronous, there is no async form): blocks until `dst`
 *   holds the data, i.e. until all earlier work of the stream has completed
 *   and the bytes were copied out (through the copy engine and staging
 *   memory, or with VGPU_READ=direct straight from the buffer's mapping).
 *   A fault or hang in any earlier work of the stream makes it fail with
 *   VGPU_ERROR_CONTEXT_LOST.
 * Blocking waits spin, poll, then sleep in the kernel (docs/umd.md,
 * VGPU_SPIN_US/VGPU_POLL_US); they do not time out by themselves: a hang
 * ends with the KMD's reset (VGPU_ERROR_CONTEXT_LOST). */
vgpu_status vgpu_memset_async(vgpu_stream_t s, vgpu_buffer_t dst, uint64_t offset, uint8_t value, uint64_t len);
vgpu_status vgpu_memcpy_htod_async(vgpu_stream_t s, vgpu_buffer_t dst, uint64_t offset, const void *src, uint64_t len);
vgpu_status vgpu_memcpy_htod(vgpu_stream_t s, vgpu_buffer_t dst, uint64_t offset, const void *src, uint64_t len);
vgpu_status vgpu_memcpy_dtoh(vgpu_stream_t s, void *dst, vgpu_buffer_t src, uint64_t offset, uint64_t len);
vgpu_status vgpu_memcpy_dtod_async(vgpu_stream_t s, vgpu_buffer_t dst, uint64_t dst_offset,
				   vgpu_buffer_t src, uint64_t src_offset, uint64_t len);

/* Events. */
vgpu_status vgpu_event_create(vgpu_context_t ctx, vgpu_event_t *out);
vgpu_status vgpu_event_destroy(vgpu_event_t ev);
vgpu_status vgpu_event_record(vgpu_event_t ev, vgpu_stream_t s);
vgpu_status vgpu_event_query(vgpu_event_t ev); /* VGPU_SUCCESS or VGPU_ERROR_NOT_READY */
vgpu_status vgpu_event_synchronize(vgpu_event_t ev);
vgpu_status vgpu_event_elapsed_ns(vgpu_event_t start, vgpu_event_t end, uint64_t *ns);
/* Cross-process (and cross-driver) sync: a recorded event as a sync_file fd (close-on-exec; it
 * signals when the work before the record completed, with an error status if it failed), and an
 * event made from a sync_file fd (the fd stays the caller's; it cannot be recorded). */
vgpu_status vgpu_event_export_fd(vgpu_event_t ev, int *fd);
vgpu_status vgpu_event_import_fd(vgpu_context_t ctx, int fd, vgpu_event_t *out);

/* Timelines: DRM timeline sync objects, shared between streams, processes and the host. */
#define VGPU_TIMEOUT_INFINITE UINT64_MAX
vgpu_status vgpu_timeline_create(vgpu_context_t ctx, vgpu_timeline_t *out);
vgpu_status vgpu_timeline_destroy(vgpu_timeline_t tl);
vgpu_status vgpu_timeline_export_fd(vgpu_timeline_t tl, int *fd); /* close-on-exec; caller closes */
vgpu_status vgpu_timeline_import_fd(vgpu_context_t ctx, int fd, vgpu_timeline_t *out);
vgpu_status vgpu_timeline_signal(vgpu_timeline_t tl, uint64_t point); /* from the host */
/* Waits until `point` signalled (VGPU_ERROR_NOT_READY on timeout; VGPU_ERROR_KMD if its work
 * failed). */
vgpu_status vgpu_timeline_wait(vgpu_timeline_t tl, uint64_t point, uint64_t timeout_ns);
vgpu_status vgpu_timeline_value(vgpu_timeline_t tl, uint64_t *point);

/* Modules and launches. */
vgpu_status vgpu_module_load(vgpu_context_t ctx, const void *image, size_t size, vgpu_module_t *out);
vgpu_status vgpu_module_assemble(vgpu_context_t ctx, const char *source, vgpu_module_t *out);
vgpu_status vgpu_module_unload(vgpu_module_t m);
vgpu_status vgpu_module_kernel(vgpu_module_t m, const char *name, uint32_t *kernel);
/* vgpu_launch: queue kernel `kernel` (an index from vgpu_module_kernel) over
 * grid[0..3] workgroups of wg[0..3] threads (wg NULL: the kernel's
 * .workgroup hint, else 64x1x1); asynchronous like the _async copies.
 *
 * Arguments: args[i] is the kernel's i-th .arg, in the order the .arg
 * directives appear in the source (the order `vgpu-as inspect` lists),
 * not by name and not by offset; each is placed at its declared offset.
 *   - num_args must equal the kernel's argument count (else
 *     VGPU_ERROR_INVALID_ARGUMENT, "N arguments given, M expected");
 *   - each kind must match the declaration: u32 VGPU_ARG_U32, i32
 *     VGPU_ARG_I32, f32 VGPU_ARG_F32, u64 VGPU_ARG_U64, ptr VGPU_ARG_PTR
 *     (a vgpu_mem_va address, plus an offset if wanted) or VGPU_ARG_U64;
 *     anything else is VGPU_ERROR_INVALID_ARGUMENT naming the argument;
 *   - pad must be zero.
 * The values are copied before the call returns: `args` may be reused.
 * Example, for ".arg n u32 / .arg alpha f32 / .arg x ptr / .arg y ptr":
 *     vgpu_arg a[4] = {
 *         { .kind = VGPU_ARG_U32, .v.u32 = n },
 *         { .kind = VGPU_ARG_F32, .v.f32 = 2.0f },
 *         { .kind = VGPU_ARG_PTR, .v.ptr = x_va },
 *         { .kind = VGPU_ARG_PTR, .v.ptr = y_va },
 *     };
 *     vgpu_launch(s, m, k, grid, NULL, a, 4); */
vgpu_status vgpu_launch(vgpu_stream_t s, vgpu_module_t m, uint32_t kernel, const uint32_t grid[3],
			const uint32_t wg[3], const vgpu_arg *args, uint32_t num_args);

#ifdef __cplusplus
}
#endif

#endif /* VGPU_H */
