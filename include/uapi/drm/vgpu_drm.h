/* SPDX-License-Identifier: MIT */
/*
 * vgpu userspace API: the ioctls of the vgpu render node (/dev/dri/renderD*).
 *
 * This header is the single source of truth for the uAPI. The guest kernel
 * build installs it as include/uapi/drm/vgpu_drm.h and lists it in
 * rust/uapi/uapi_helper.h so the KMD's `declare_drm_ioctls!` sees these
 * structs and numbers through bindgen. The UMD mirrors it in Rust
 * (guest-umd/src/uapi.rs), checked against this file by a test.
 *
 * Rules: every struct is made of fixed-width fields, naturally aligned,
 * with explicit padding that must be zero; ioctl numbers are enum members
 * (bindgen does not evaluate function-like macros).
 *
 * Building a userspace program against it: the header includes "drm.h"
 * (DRM_IOWR, DRM_COMMAND_BASE, the __u32/__u64 types, DRM_IOCTL_GEM_CLOSE
 * to close a handle), the kernel's DRM uAPI
 * header as libdrm installs it in /usr/include/libdrm (Debian: libdrm-dev),
 * so both directories go on the include path:
 *     gcc -I include/uapi/drm -I /usr/include/libdrm prog.c
 * (images/build compiles the C programs of guest-umd/c this way, see
 * docs/guest-image.md).
 */
#ifndef __VGPU_DRM_H__
#define __VGPU_DRM_H__

#include "drm.h"

#if defined(__cplusplus)
extern "C" {
#endif

/* Parameters for DRM_IOCTL_VGPU_GET_PARAM. Values come from the device's
 * IDENTIFY reply, read once at probe time. */
#define VGPU_PARAM_GENERATION        0x01 /* hardware generation: 1 or 2 */
#define VGPU_PARAM_PROTOCOL_VERSION  0x02 /* (major << 16) | minor */
#define VGPU_PARAM_FIRMWARE_VERSION  0x03 /* (major << 16) | (minor << 8) | patch */
#define VGPU_PARAM_ENGINE_MASK       0x04 /* bit i set: engine i present */
#define VGPU_PARAM_VA_BITS           0x05 /* GPU virtual address width */
#define VGPU_PARAM_PAGE_SIZES        0x06 /* bitmask of supported page sizes in bytes */
#define VGPU_PARAM_MAX_CONTEXTS      0x07
#define VGPU_PARAM_MAX_RING_SIZE     0x08 /* bytes, power of two */
#define VGPU_PARAM_MIN_RING_SIZE     0x09 /* bytes, power of two */
#define VGPU_PARAM_COMPUTE_UNITS     0x0a
#define VGPU_PARAM_DEVICE_ID         0x0b /* PCI device id of the function */
#define VGPU_PARAM_EVENTS_RECEIVED   0x0c /* event records the KMD has consumed */
#define VGPU_PARAM_HWIF_FINGERPRINT  0x0d /* layout fingerprint of the KMD's hwif build */
#define VGPU_PARAM_DEVICE_FINGERPRINT 0x0e /* layout fingerprint the device reported */
#define VGPU_PARAM_VA_START          0x0f /* first GPU VA VM_BIND accepts */
#define VGPU_PARAM_VA_END            0x10 /* one past the last GPU VA VM_BIND accepts */
#define VGPU_PARAM_VRAM_SIZE         0x11 /* bytes of device memory (VRAM); 0: none */
#define VGPU_PARAM_VRAM_VISIBLE      0x12 /* bytes of VRAM the CPU reaches through the aperture; 0: none */
/* Power management counters (read without waking the device). */
#define VGPU_PARAM_PM_STATE          0x13 /* 0: active; runtime suspended (autosuspend_ms): 1 in D3hot, 2 in D3cold */
#define VGPU_PARAM_PM_SUSPENDS       0x14 /* runtime suspensions since probe */
#define VGPU_PARAM_PM_RESUMES        0x15 /* runtime resumes since probe */
#define VGPU_PARAM_PM_SUSPENDED_MS   0x16 /* ms spent runtime suspended since probe */
#define VGPU_PARAM_SYSTEM_SLEEPS     0x17 /* system suspend/resume cycles since probe */
#define VGPU_PARAM_PM_D3COLD_SUSPENDS 0x18 /* runtime suspensions to D3cold (VRAM saved, vram_d3cold_threshold_mib) */
#define VGPU_PARAM_VIRTUAL_FUNCTION  0x19 /* 0: the whole device; N: virtual function N of a partitioned GPU (its partition: MAX_CONTEXTS, VRAM_SIZE) */
#define VGPU_PARAM_COUNT             0x1a /* one past the last valid parameter */

/**
 * struct drm_vgpu_get_param - query one device or driver parameter
 * @param: in, one of VGPU_PARAM_*; anything else fails with EINVAL.
 * @pad:   must be zero.
 * @value: out.
 */
struct drm_vgpu_get_param {
	__u32 param;
	__u32 pad;
	__u64 value;
};

/**
 * struct drm_vgpu_ping - round trip through the device's control and event
 * queues: the KMD sends PING(@cookie), the device replies and posts a PING
 * event carrying the cookie; the ioctl returns when that event arrives.
 * @cookie:     in, echoed back by the device.
 * @timeout_ns: in, 0 means the driver default (1 s); ETIMEDOUT on expiry.
 * @event_seq:  out, the device's sequence number of the event record.
 * @latency_ns: out, time from sending PING to receiving its event.
 */
struct drm_vgpu_ping {
	__u64 cookie;
	__u64 timeout_ns;
	__u64 event_seq;
	__u64 latency_ns;
};

/*
 * Buffer objects, GPU address spaces, contexts, submission and fences.
 *
 * Every open render-node file has its own GPU virtual address space (VM):
 * buffer objects (BOs) are mapped into it with VM_BIND, and every context
 * the file creates runs in it. GPU VAs from VGPU_PARAM_VA_START up to
 * VGPU_PARAM_VA_END are the user's; the KMD keeps the range above for the
 * rings and ring status blocks of the file's contexts. BO handles, mappings
 * and contexts belong to the file and go away when it is closed.
 *
 * Errors common to every ioctl below: EINVAL for a non-zero pad or reserved
 * field or an unknown flag; ENOENT for a handle or context id the file does
 * not own (including one already destroyed); EFAULT for a bad user pointer;
 * ENODEV once the device is unbound; EIO once the device is broken or wedged.
 *
 * Fences are (context, engine, seqno) triples waited for with WAIT, and can
 * be exported as sync_file fds with FENCE_EXPORT.
 *
 * The render node also supports the generic DRM sync objects (binary and
 * timeline: DRM_IOCTL_SYNCOBJ_*), which SUBMIT and VM_BIND_OPS take as
 * inputs and outputs, and PRIME (DRM_IOCTL_PRIME_HANDLE_TO_FD and
 * FD_TO_HANDLE): a BO exported as a dma-buf fd and imported by another file
 * of this device is the same BO, mappable in both VMs.
 */

/* DRM_VGPU_GEM_CREATE flags. */
/* Demand paging: no backing pages are mapped at VM_BIND; the first GPU
 * access faults, and the KMD maps the page and lets the job continue
 * (the context must be created with VGPU_CTX_CREATE_REPLAYABLE). */
#define VGPU_GEM_CREATE_LAZY         (1u << 0)
/* Placement (devices with VRAM: VGPU_PARAM_VRAM_SIZE != 0). The BO may be
 * placed in device memory (VRAM) and/or in system memory (guest RAM);
 * neither bit means system memory. VRAM alone: VRAM or fail (ENOSPC when
 * it is full, E2BIG when the BO is larger than the usable VRAM, ENXIO on a
 * device without VRAM). VRAM | SYSTEM: VRAM preferred, system memory when
 * VRAM is full or absent. Not with LAZY (EINVAL). */
#define VGPU_GEM_CREATE_VRAM         (1u << 1)
#define VGPU_GEM_CREATE_SYSTEM       (1u << 2)
/* The CPU maps the BO (GEM_MMAP_OFFSET): a VRAM placement is in the
 * CPU-visible part, mapped through the aperture (E2BIG when the BO is
 * larger than the visible part; with VRAM | SYSTEM, system memory then).
 * Only with VGPU_GEM_CREATE_VRAM (EINVAL otherwise): system memory is always
 * CPU-mappable. */
#define VGPU_GEM_CREATE_CPU_ACCESS   (1u << 3)
#define VGPU_GEM_CREATE_FLAGS        (VGPU_GEM_CREATE_LAZY | VGPU_GEM_CREATE_VRAM | \
				      VGPU_GEM_CREATE_SYSTEM | VGPU_GEM_CREATE_CPU_ACCESS)

/* Largest BO, in bytes. */
#define VGPU_GEM_MAX_SIZE            (1ull << 30)

/**
 * struct drm_vgpu_gem_create - create a buffer object
 * @size:   in, bytes; rounded up to 4 KiB. 0 or more than VGPU_GEM_MAX_SIZE:
 *          EINVAL. ENOMEM when memory runs out.
 * @flags:  in, VGPU_GEM_CREATE_*.
 * @handle: out, a GEM handle of this file (close with DRM_IOCTL_GEM_CLOSE).
 *
 * A system-memory BO is backed by shmem pages, zero-filled, allocated on
 * first use (CPU fault, VM_BIND of a non-lazy BO, or a GPU fault on a lazy
 * one). A VRAM BO gets its device memory at creation (contents undefined
 * until written, as on real hardware) and counts against VRAM, not against
 * the GEM memory limits, until it is evicted to system memory (then it
 * does). A VRAM BO cannot be exported as a dma-buf
 * (DRM_IOCTL_PRIME_HANDLE_TO_FD: EOPNOTSUPP); one without
 * VGPU_GEM_CREATE_CPU_ACCESS cannot be CPU-mapped (GEM_MMAP_OFFSET: ENXIO).
 */
struct drm_vgpu_gem_create {
	__u64 size;
	__u32 flags;
	__u32 handle;
};

/**
 * struct drm_vgpu_gem_mmap_offset - where to mmap() a BO on the render node
 * @handle: in, a GEM handle (ENOENT otherwise).
 * @pad:    must be zero.
 * @offset: out, the fake offset to pass to mmap(2) on this file.
 */
struct drm_vgpu_gem_mmap_offset {
	__u32 handle;
	__u32 pad;
	__u64 offset;
};

/* VM_BIND permission flags (at least one of READ/WRITE/EXEC). */
#define VGPU_VM_BIND_READ            (1u << 0)
#define VGPU_VM_BIND_WRITE           (1u << 1)
#define VGPU_VM_BIND_EXEC            (1u << 2) /* command buffers and kernels: READ|EXEC */
#define VGPU_VM_BIND_FLAGS           (VGPU_VM_BIND_READ | VGPU_VM_BIND_WRITE | VGPU_VM_BIND_EXEC)

/**
 * struct drm_vgpu_vm_bind - map a range of a BO into the file's GPU VM
 * @handle:    in, the BO.
 * @flags:     in, VGPU_VM_BIND_* permissions; none, or unknown bits: EINVAL.
 * @bo_offset: in, offset into the BO, 4 KiB aligned.
 * @va:        in, GPU VA, 4 KiB aligned, in [VA_START, VA_END).
 * @size:      in, bytes, 4 KiB aligned, non-zero; bo_offset + size within the
 *             BO and va + size within [VA_START, VA_END).
 *
 * Misaligned values or ranges outside the BO or the user VA range: EINVAL.
 * A range overlapping an existing mapping: EEXIST. More than 4096 mappings
 * per file: ENOSPC. Where the VA and the BO's pages are both 2 MiB aligned and
 * physically contiguous over 2 MiB, the KMD uses a 2 MiB page. The mapping
 * holds a reference on the BO: closing the handle does not unmap it.
 */
struct drm_vgpu_vm_bind {
	__u32 handle;
	__u32 flags;
	__u64 bo_offset;
	__u64 va;
	__u64 size;
};

/**
 * struct drm_vgpu_vm_unbind - remove a mapping made by VM_BIND
 * @va:   in, the mapping's start, exactly as bound.
 * @size: in, the mapping's size, exactly as bound.
 *
 * No mapping with exactly this start and size: ENOENT. The page-table
 * entries are cleared and the device's TLBs invalidated before the BO's
 * pages are released, so the device never reaches an unmapped page through
 * a stale translation. EIO if the invalidation failed (the pages then stay
 * referenced until the file is closed).
 */
struct drm_vgpu_vm_unbind {
	__u64 va;
	__u64 size;
};

/* VM_BIND_OPS operations. */
#define VGPU_VM_OP_MAP               1
#define VGPU_VM_OP_UNMAP             2

/**
 * struct drm_vgpu_vm_op - one operation of a VM_BIND_OPS
 * @op:        VGPU_VM_OP_MAP or VGPU_VM_OP_UNMAP (EINVAL otherwise).
 * @flags:     MAP: VGPU_VM_BIND_* permissions (at least one); UNMAP: zero.
 * @handle:    MAP: the BO (ENOENT otherwise); UNMAP: zero.
 * @pad:       zero.
 * @bo_offset: MAP: offset into the BO, 4 KiB aligned; UNMAP: zero.
 * @va:        GPU VA, 4 KiB aligned, in [VA_START, VA_END).
 * @size:      bytes, 4 KiB aligned, non-zero, within the user VA range (and
 *             for MAP within the BO).
 *
 * MAP maps the range, replacing whatever was mapped there: mappings that
 * overlap it are split, and their parts outside the range stay mapped.
 * UNMAP unmaps whatever is mapped in the range, splitting the mappings that
 * straddle its ends; parts of the range with no mapping are skipped. A split
 * keeps the pages outside the range exactly where they were (2 MiB pages
 * that straddle the cut become 4 KiB pages).
 */
struct drm_vgpu_vm_op {
	__u32 op;
	__u32 flags;
	__u32 handle;
	__u32 pad;
	__u64 bo_offset;
	__u64 va;
	__u64 size;
};

/* Operations per VM_BIND_OPS, and sync objects (in, and out) per call. */
#define VGPU_VM_BIND_MAX_OPS         256
#define VGPU_VM_BIND_MAX_SYNCS       64

/**
 * struct drm_vgpu_vm_bind_ops - map and unmap several ranges, in order,
 *                               optionally after input fences
 * @ops:           in, user pointer to @num_ops struct drm_vgpu_vm_op.
 * @num_ops:       in, 1..VGPU_VM_BIND_MAX_OPS (EINVAL otherwise).
 * @flags:         in, zero.
 * @in_syncs:      in, user pointer to @num_in_syncs struct drm_vgpu_sync.
 * @out_syncs:     in, user pointer to @num_out_syncs struct drm_vgpu_sync.
 * @num_in_syncs:  in, 0..VGPU_VM_BIND_MAX_SYNCS (EINVAL otherwise).
 * @num_out_syncs: in, 0..VGPU_VM_BIND_MAX_SYNCS (EINVAL otherwise).
 *
 * The operations run in order as one bind job of the file's VM. Every
 * argument is checked and every BO looked up (and its pages pinned) before
 * the call returns: EINVAL, ENOENT, EFAULT, ENOMEM, EIO (a bad BO) come from
 * the call itself. With no in_syncs and no earlier bind job still queued,
 * the job runs in the call: when it returns the page tables are written and
 * the TLBs invalidated, and its errors are the call's (ENOSPC: more than
 * 4096 mappings; ENOMEM: page-table pool exhausted; EIO: a TLB invalidation
 * failed, the unmapped pages then stay referenced until the file closes;
 * the operations before the failing one stay applied). Otherwise the job
 * waits in the VM's bind queue (jobs run in submission order) until its
 * in_syncs signalled, and the call returns at once; such a job's errors are
 * its fence's.
 *
 * The out_syncs get the bind job's fence, which signals once the page
 * tables are written and the TLBs invalidated (so a job waiting on it sees
 * the new mappings and never the old ones), with the errno of a failed
 * operation. An unmap that waits on the out-fence of the last job using the
 * range is thereby ordered after that job by the GPU, with no CPU wait.
 *
 * VM_BIND and VM_UNBIND keep their own rules (EEXIST on overlap, exact
 * matches) and run at once; while a bind job waits in the queue they fail
 * with EBUSY, so that the VM's changes stay in submission order.
 */
struct drm_vgpu_vm_bind_ops {
	__u64 ops;
	__u32 num_ops;
	__u32 flags;
	__u64 in_syncs;
	__u64 out_syncs;
	__u32 num_in_syncs;
	__u32 num_out_syncs;
};

/* Context priorities (VGPU_PARAM-independent; the device schedules higher
 * priorities first). */
#define VGPU_CTX_PRIORITY_LOW        0
#define VGPU_CTX_PRIORITY_NORMAL     1
#define VGPU_CTX_PRIORITY_HIGH       2
#define VGPU_CTX_PRIORITY_REALTIME   3

/* Engines (bit numbers of engine_mask, VGPU_PARAM_ENGINE_MASK). */
#define VGPU_ENGINE_COPY             0
#define VGPU_ENGINE_COMPUTE          1

/* CTX_CREATE flags. */
/* GPU page faults stall the job instead of stopping the ring, so that faults
 * on VGPU_GEM_CREATE_LAZY BOs can be served. Faults elsewhere still abort. */
#define VGPU_CTX_CREATE_REPLAYABLE   (1u << 0)
#define VGPU_CTX_CREATE_FLAGS        VGPU_CTX_CREATE_REPLAYABLE

/**
 * struct drm_vgpu_ctx_create - create a GPU context in the file's VM
 * @priority:    in, VGPU_CTX_PRIORITY_*; larger: EINVAL.
 * @engine_mask: in, engines the context submits to (a ring each); zero, or
 *               engines the device lacks: EINVAL.
 * @flags:       in, VGPU_CTX_CREATE_*.
 * @ctx_id:      out, the context's id (a file-local handle, never 0).
 *
 * ENOSPC when the device has no free context slot or the file has 16
 * contexts; EOPNOTSUPP if the device does not implement contexts.
 */
struct drm_vgpu_ctx_create {
	__u32 priority;
	__u32 engine_mask;
	__u32 flags;
	__u32 ctx_id;
};

/**
 * struct drm_vgpu_ctx_destroy - destroy a context
 * @ctx_id: in.
 * @pad:    must be zero.
 *
 * Work still queued is cancelled (its fences complete with an error). If the
 * device reports the context busy the KMD retries with backoff and finally
 * forces the destruction (resetting the engines running it). A context is
 * destroyed once: a second destroy, or one racing with the first, gets ENOENT.
 */
struct drm_vgpu_ctx_destroy {
	__u32 ctx_id;
	__u32 pad;
};

/* CTX_QUERY reset_status, in the spirit of GL_ARB_robustness. */
#define VGPU_CTX_RESET_NONE          0 /* no reset affected the context */
#define VGPU_CTX_RESET_GUILTY        1 /* the context caused a reset or fault */
#define VGPU_CTX_RESET_INNOCENT      2 /* a reset caused by another context hit it */
#define VGPU_CTX_RESET_VRAM_LOST     3 /* a device reset lost VRAM its file's BOs were in:
					* its jobs were dropped, it takes no more (SUBMIT:
					* EIO), and those BOs are lost (VM_BIND: EIO) */

/* CTX_QUERY state bits. */
#define VGPU_CTX_STATE_ERRORED       (1u << 0) /* stopped by a fault or error: submits fail with EIO */
#define VGPU_CTX_STATE_BANNED        (1u << 1) /* too many hangs: submits fail with EIO */
#define VGPU_CTX_STATE_FAULTED       (1u << 2) /* fault_va/fault_access describe a GPU fault */
#define VGPU_CTX_STATE_DEVICE_LOST   (1u << 3) /* the device stopped answering: every call fails with EIO */
#define VGPU_CTX_STATE_USER_QUEUE    (1u << 4) /* a user-mode queue (UQ_CREATE) */
#define VGPU_CTX_STATE_SUSPENDED     (1u << 5) /* a user-mode queue whose doorbell the device does not watch */

/* CTX_QUERY fault_access (hwif mmu::Access). */
#define VGPU_ACCESS_READ             1
#define VGPU_ACCESS_WRITE            2
#define VGPU_ACCESS_EXECUTE          3
#define VGPU_ACCESS_ATOMIC           4

/* CTX_QUERY fault_reason (hwif mmu::FaultReason; the name after the prefix
 * is the one messages print). */
#define VGPU_FAULT_REASON_NONE          0
#define VGPU_FAULT_REASON_NOT_PRESENT   1 /* the entry's valid bit is clear */
#define VGPU_FAULT_REASON_PERMISSION    2 /* the leaf lacks the access's permission */
#define VGPU_FAULT_REASON_MALFORMED     3 /* reserved bits, a bad huge page, a cycle */
#define VGPU_FAULT_REASON_OUT_OF_RANGE  4 /* VA bits above the device's width */
#define VGPU_FAULT_REASON_BAD_PHYSICAL  5 /* a table or page outside guest RAM */

/* CTX_QUERY engine_error (hwif packet::EngineError, docs/hardware.md section
 * 8; the name after the prefix is the one messages print). */
#define VGPU_ENGINE_ERROR_NONE               0
#define VGPU_ENGINE_ERROR_BAD_HEADER         1 /* marker or flags wrong, or length 0 */
#define VGPU_ENGINE_ERROR_BAD_OPCODE         2 /* unknown opcode */
#define VGPU_ENGINE_ERROR_BAD_LENGTH         3 /* length wrong for the opcode */
#define VGPU_ENGINE_ERROR_MISALIGNED         4 /* packet or operand misaligned */
#define VGPU_ENGINE_ERROR_WRONG_ENGINE       5 /* a copy packet on compute, DISPATCH on copy */
#define VGPU_ENGINE_ERROR_BAD_OPERAND        6 /* an operand out of range */
#define VGPU_ENGINE_ERROR_INDIRECT_DEPTH     7 /* command buffers nested too deep */
#define VGPU_ENGINE_ERROR_RING_OVERFLOW      8 /* doorbell more than a ring ahead */
#define VGPU_ENGINE_ERROR_BAD_POINTER        9 /* doorbell misaligned or backwards */
#define VGPU_ENGINE_ERROR_TRUNCATED          10 /* packet past the write pointer or buffer end */
#define VGPU_ENGINE_ERROR_UNSUPPORTED        11 /* reserved opcode */
#define VGPU_ENGINE_ERROR_TRAP               12 /* a kernel executed trap */
#define VGPU_ENGINE_ERROR_PAGE_FAULT         13 /* a fault stopped the ring */
#define VGPU_ENGINE_ERROR_ECC_UNCORRECTABLE  14 /* a read touched a poisoned page */
#define VGPU_ENGINE_ERROR_INTERNAL           15 /* the device failed internally (a device bug) */
#define VGPU_ENGINE_ERROR_SANITIZER          16 /* the device's sanitizer stopped the ring */
#define VGPU_ENGINE_ERROR_DOORBELL_FAULT     17 /* a user-mode queue's doorbell block is not mapped READ|WRITE */

/* CTX_QUERY error_cmd_index when the packet is the KMD's own (in the ring:
 * a SEM_WAIT for an input fence, an INDIRECT, the job's FENCE). */
#define VGPU_CMD_INDEX_NONE          0xffffffffu

/**
 * struct drm_vgpu_ctx_query - a context's robustness state
 * @ctx_id:        in.
 * @reset_status:  out, VGPU_CTX_RESET_*; the worst status since creation.
 * @state:         out, VGPU_CTX_STATE_* bits.
 * @fault_access:  out, VGPU_ACCESS_* of the first unrecoverable fault (0: none).
 * @fault_va:      out, its GPU VA.
 * @fault_reason:  out, hwif mmu::FaultReason of that fault (0: none).
 * @hangs:         out, hangs this context caused.
 * @faults:        out, GPU page faults (served and unrecoverable).
 * @engine_error:  out, VGPU_ENGINE_ERROR_* of the first engine error that
 *                 stopped the context (0: none); ignored on input.
 *
 * Where the first error (engine error or unrecoverable fault) happened, all
 * out, zero when there was none:
 * @error_packet_va:  GPU VA of the packet the engine was executing.
 * @error_seqno:      the SUBMIT (its fence seqno) whose job held the packet,
 *                    0 if unknown.
 * @error_header:     the packet's header word (0 if none was read).
 * @error_engine:     VGPU_ENGINE_* of the ring.
 * @error_cmd_index:  index in that SUBMIT's command buffers of the one
 *                    holding the packet; VGPU_CMD_INDEX_NONE for a packet
 *                    the KMD wrote in the ring.
 * @error_cmd_offset: byte offset of the packet in that command buffer (for
 *                    a packet in a buffer it called, of the INDIRECT there
 *                    that leads to it).
 * @error_depth:      0: a KMD packet in the ring; 1: a packet of the
 *                    submitted command buffer; 2 and up: nested buffers.
 * @san_reports:      sanitizer reports about this context (vgpu-device
 *                    --sanitize; 0 otherwise).
 * @san_last_seq:     the latest one's number, for SAN_REPORT.
 */
struct drm_vgpu_ctx_query {
	__u32 ctx_id;
	__u32 reset_status;
	__u32 state;
	__u32 fault_access;
	__u64 fault_va;
	__u32 fault_reason;
	__u32 hangs;
	__u32 faults;
	__u32 engine_error;
	__u64 error_packet_va;
	__u64 error_seqno;
	__u32 error_header;
	__u32 error_engine;
	__u32 error_cmd_index;
	__u32 error_cmd_offset;
	__u32 error_depth;
	__u32 san_reports;
	__u64 san_last_seq;
};

/**
 * struct drm_vgpu_fence - a point on a context's engine timeline
 * @ctx_id: the context.
 * @engine: the engine (VGPU_ENGINE_*) of the ring.
 * @seqno:  as returned by SUBMIT; seqnos of one (context, engine) ring count
 *          up from 1 and signal in order.
 */
struct drm_vgpu_fence {
	__u32 ctx_id;
	__u32 engine;
	__u64 seqno;
};

/**
 * struct drm_vgpu_cmd - one command buffer of a SUBMIT
 * @va:   GPU VA of the packets, 8-byte aligned; the whole range must lie in
 *        one mapping of the file's VM with READ and EXEC permission.
 * @size: bytes, a non-zero multiple of 8, at most 1 MiB.
 */
struct drm_vgpu_cmd {
	__u64 va;
	__u64 size;
};

/* Submission limits. */
#define VGPU_SUBMIT_MAX_CMDS         64
#define VGPU_SUBMIT_MAX_IN_FENCES    64
/* Unsignalled jobs per (context, engine): waiting in the KMD's queue or on
 * the ring. */
#define VGPU_CTX_MAX_PENDING         2048
#define VGPU_SUBMIT_MAX_SYNCS        64  /* in_syncs, and out_syncs, per SUBMIT */
#define VGPU_SUBMIT_MAX_BOS          64  /* implicit-sync BOs per SUBMIT */

/* SUBMIT flags. */
/* When the queue holds VGPU_CTX_MAX_PENDING jobs, fail with EBUSY instead of
 * EAGAIN (for callers that treat the two differently; neither blocks). */
#define VGPU_SUBMIT_BUSY_IS_EBUSY    (1u << 0)
#define VGPU_SUBMIT_FLAGS            VGPU_SUBMIT_BUSY_IS_EBUSY

/**
 * struct drm_vgpu_sync - a DRM sync object as an input or an output
 * @handle: a syncobj handle of this file (DRM_IOCTL_SYNCOBJ_CREATE, or
 *          imported with DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE, a sync_file
 *          included); ENOENT otherwise.
 * @flags:  zero.
 * @point:  0 for a binary syncobj; a timeline point otherwise.
 *
 * As an input, the fence at @point (for 0: the syncobj's current fence)
 * must exist when the call is made: EINVAL otherwise (a syncobj with no
 * fence, or a timeline point not yet submitted). Any dma_fence will do:
 * another file's job, another process's, another driver's, a sync_file's.
 * As an output, @point 0 replaces the syncobj's fence with the job's;
 * a timeline point adds the job's fence at @point (points must grow, as
 * DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL requires).
 */
struct drm_vgpu_sync {
	__u32 handle;
	__u32 flags;
	__u64 point;
};

/* drm_vgpu_submit_bo flags: how the job uses the BO. */
#define VGPU_SUBMIT_BO_READ          (1u << 0)
#define VGPU_SUBMIT_BO_WRITE         (1u << 1)
#define VGPU_SUBMIT_BO_FLAGS         (VGPU_SUBMIT_BO_READ | VGPU_SUBMIT_BO_WRITE)

/**
 * struct drm_vgpu_submit_bo - a BO the job accesses, for implicit sync
 * @handle: a GEM handle of this file (ENOENT otherwise).
 * @flags:  VGPU_SUBMIT_BO_READ and/or VGPU_SUBMIT_BO_WRITE (at least one;
 *          EINVAL otherwise).
 *
 * Implicit synchronisation, for BOs shared through dma-buf with someone who
 * relies on it (poll(2) on the dma-buf, DMA_BUF_IOCTL_EXPORT_SYNC_FILE,
 * another driver): the job waits for the fences in the BO's reservation
 * object (the writers' for a read; every fence for a write), and its own
 * fence is added to the reservation (as a writer with WRITE, else as a
 * reader). The BO must still be mapped for the job to reach it: the list
 * only orders.
 */
struct drm_vgpu_submit_bo {
	__u32 handle;
	__u32 flags;
};

/**
 * struct drm_vgpu_submit - queue command buffers on a context's engine
 * @ctx_id:        in.
 * @engine:        in, one of the context's engines (EINVAL otherwise).
 * @cmds:          in, user pointer to @num_cmds struct drm_vgpu_cmd.
 * @num_cmds:      in, 1..VGPU_SUBMIT_MAX_CMDS (EINVAL otherwise).
 * @num_in_fences: in, 0..VGPU_SUBMIT_MAX_IN_FENCES (EINVAL otherwise).
 * @in_fences:     in, user pointer to struct drm_vgpu_fence: the job starts
 *                 only after all of them signalled (the GPU waits, the ioctl
 *                 does not). A fence that completed with an error counts as
 *                 reached. A fence of a context the file does not own:
 *                 ENOENT; a seqno never submitted: EINVAL.
 * @flags:         in, VGPU_SUBMIT_*.
 * @pad:           zero.
 * @seqno:         out, the job's fence on (ctx_id, engine).
 * @in_syncs:      in, user pointer to @num_in_syncs struct drm_vgpu_sync:
 *                 the job waits in the KMD's queue until all of their fences
 *                 signalled (one that signalled with an error counts as
 *                 signalled).
 * @out_syncs:     in, user pointer to @num_out_syncs struct drm_vgpu_sync:
 *                 each gets the job's fence, which signals when the job
 *                 completes, with -EIO when it fails (fault, hang, reset,
 *                 device lost) and -ECANCELED when it is cancelled (context
 *                 destroyed, file closed, device removed).
 * @num_in_syncs:  in, 0..VGPU_SUBMIT_MAX_SYNCS (EINVAL otherwise).
 * @num_out_syncs: in, 0..VGPU_SUBMIT_MAX_SYNCS (EINVAL otherwise).
 * @bos:           in, user pointer to @num_bos struct drm_vgpu_submit_bo
 *                 (implicit synchronisation).
 * @num_bos:       in, 0..VGPU_SUBMIT_MAX_BOS (EINVAL otherwise).
 * @pad2:          zero.
 *
 * The job goes into the KMD's queue of (ctx_id, engine), in submission
 * order: it is written to the ring when its in_syncs and BO fences have
 * signalled, every earlier job of the queue is on the ring, and the ring
 * has room; the ioctl never waits for any of that. Command buffers not
 * inside a READ|EXEC mapping: EINVAL. The context is errored or banned:
 * EIO. VGPU_CTX_MAX_PENDING unsignalled jobs on (ctx_id, engine): EAGAIN
 * (EBUSY with VGPU_SUBMIT_BUSY_IS_EBUSY); retry after waiting on an earlier
 * fence. A full ring is not an error: the job waits in the queue.
 *
 * Userspace built for the first version of this struct (up to @seqno)
 * still works: the fields after it read as zero.
 */
struct drm_vgpu_submit {
	__u32 ctx_id;
	__u32 engine;
	__u64 cmds;
	__u32 num_cmds;
	__u32 num_in_fences;
	__u64 in_fences;
	__u32 flags;
	__u32 pad;
	__u64 seqno;
	__u64 in_syncs;
	__u64 out_syncs;
	__u32 num_in_syncs;
	__u32 num_out_syncs;
	__u64 bos;
	__u32 num_bos;
	__u32 pad2;
};

/* WAIT flags. */
#define VGPU_WAIT_ALL                (1u << 0) /* all fences, not any one */
#define VGPU_WAIT_FLAGS              VGPU_WAIT_ALL

/* Largest fence array of a WAIT. */
#define VGPU_WAIT_MAX_FENCES         256

/**
 * struct drm_vgpu_wait - wait for fences
 * @fences:       in, user pointer to @num_fences struct drm_vgpu_fence.
 * @num_fences:   in, 1..VGPU_WAIT_MAX_FENCES (EINVAL otherwise).
 * @flags:        in, VGPU_WAIT_*.
 * @timeout_ns:   in, relative timeout; 0 only polls.
 * @first_signaled: out, with "any": index of a signalled fence.
 * @pad:          zero.
 *
 * Returns 0 when the fences (all, or any) signalled; ETIME on timeout;
 * EIO when a fence waited for completed with an error (its job was lost to
 * a fault, a reset or context destruction) or the device wedged; ERESTARTSYS
 * on a signal. Interrupt driven: the KMD signals fences from the device's
 * FENCE events.
 *
 * Hangs: a ring with pending jobs that completes none for the job timeout
 * (module parameter job_timeout_ms) is hung; the KMD checks while WAIT
 * sleeps and at SUBMIT and CTX_QUERY. The hung job's context becomes guilty
 * and its pending jobs fail (EIO here); other contexts' queued jobs survive
 * the engine or device reset and still signal (a context whose queued work
 * was carried through a device reset reports VGPU_CTX_RESET_INNOCENT). A
 * context that caused ban_hangs hangs within ban_window_ms is banned. If
 * recovery fails the device is wedged: every ioctl that needs the GPU fails
 * with EIO.
 */
struct drm_vgpu_wait {
	__u64 fences;
	__u32 num_fences;
	__u32 flags;
	__u64 timeout_ns;
	__u32 first_signaled;
	__u32 pad;
};

/**
 * struct drm_vgpu_fence_export - a fence as a sync_file file descriptor
 * @fence: in, a fence of a context of this file (ENOENT otherwise), on one
 *         of its engines, with a seqno already submitted (EINVAL otherwise).
 * @flags: in, zero.
 * @fd:    out, a sync_file fd (close-on-exec). It signals when the job
 *         completes; its status (SYNC_IOC_FILE_INFO) is then 1, or a
 *         negative errno when the job failed (-EIO: fault, hang, reset) or
 *         was cancelled (-ECANCELED: context destroyed, file closed, device
 *         removed). A fence already completed gives a signalled fd.
 *
 * The fd works with poll(2), sync_file merging and every kernel consumer of
 * dma_fences; it stays valid after the render node is closed (the fence is
 * then cancelled if it had not completed). EMFILE when the process has no
 * free fd, ENOMEM.
 */
struct drm_vgpu_fence_export {
	struct drm_vgpu_fence fence;
	__u32 flags;
	__s32 fd;
};

/* Number of engines QUERY_STATS reports (indexed by VGPU_ENGINE_*). */
#define VGPU_STATS_ENGINES           2

/**
 * struct drm_vgpu_counters - device activity counters (hwif StatsReply)
 * @busy_ns:    nanoseconds an engine ran work, on the device clock.
 * @packets:    packets executed.
 * @bytes:      bytes copied or filled.
 * @faults:     GPU page faults.
 * @errors:     engine errors.
 * @resets:     resets.
 * @fences:     fences written.
 * @tlb_hits:   TLB hits.
 * @tlb_misses: TLB misses (page-table walks).
 * @workgroups: kernel workgroups completed.
 * @lane_ops:   kernel lane operations (instructions times the lanes that
 *              executed them).
 * @cycles:     modelled time of the completed workgroups, in compute-unit
 *              cycles: per workgroup, the larger of its longest warp's
 *              issued instructions and all its warps' issued instructions
 *              divided by 4 (docs/isa.md, "Performance model"). Unlike
 *              busy_ns it does not depend on the host: the same kernels
 *              give the same cycles.
 *
 * Device and engine counters count since the device powered on, a
 * context's since the context was created. Utilisation over an interval is
 * the growth of busy_ns divided by the growth of sample_ns.
 */
struct drm_vgpu_counters {
	__u64 busy_ns;
	__u64 packets;
	__u64 bytes;
	__u64 faults;
	__u64 errors;
	__u64 resets;
	__u64 fences;
	__u64 tlb_hits;
	__u64 tlb_misses;
	__u64 workgroups;
	__u64 lane_ops;
	__u64 cycles;
};

/**
 * struct drm_vgpu_ctx_stats - one context, as QUERY_STATS lists it
 * @ctx_id:       the device context id.
 * @pid:          thread-group id of the process that created it.
 * @priority:     VGPU_CTX_PRIORITY_*.
 * @engines:      bit VGPU_ENGINE_* set: the context has a ring on it.
 * @reset_status: VGPU_CTX_RESET_*.
 * @state:        VGPU_CTX_STATE_* bits.
 * @hangs:        hangs it caused.
 * @faults:       GPU page faults it took.
 * @mem_bytes:    bytes of GEM objects held by the file that owns it.
 * @submitted:    last seqno submitted per engine (0: none).
 * @completed:    last seqno signalled per engine.
 * @counters:     the device's counters for this context.
 * @engine_error: VGPU_ENGINE_ERROR_* of the first engine error (0: none).
 * @error_engine: VGPU_ENGINE_* of the first error's ring.
 * @error_header: the header word of the packet the first error (engine
 *                error or unrecoverable fault) stopped at (0: none read).
 * @error_cmd_index:  which command buffer of its SUBMIT held the packet
 *                    (VGPU_CMD_INDEX_NONE: a KMD packet in the ring).
 * @error_packet_va:  GPU VA of that packet (0: no error).
 * @error_seqno:      the SUBMIT (its fence seqno) that held it (0: unknown).
 * @error_cmd_offset: its byte offset in that command buffer.
 * @san_reports:      device sanitizer reports about this context.
 * @vram_bytes:   bytes of VRAM the objects of the file that owns it hold now
 *                (VGPU_GEM_CREATE_VRAM objects not evicted).
 *
 * The error_* fields are those of CTX_QUERY, for tools that see every
 * file's contexts (vgpu-smi).
 */
struct drm_vgpu_ctx_stats {
	__u32 ctx_id;
	__u32 pid;
	__u32 priority;
	__u32 engines;
	__u32 reset_status;
	__u32 state;
	__u32 hangs;
	__u32 faults;
	__u64 mem_bytes;
	__u64 submitted[VGPU_STATS_ENGINES];
	__u64 completed[VGPU_STATS_ENGINES];
	struct drm_vgpu_counters counters;
	__u32 engine_error;
	__u32 error_engine;
	__u32 error_header;
	__u32 error_cmd_index;
	__u64 error_packet_va;
	__u64 error_seqno;
	__u32 error_cmd_offset;
	__u32 san_reports;
	__u64 vram_bytes;
};

/* Largest context array a QUERY_STATS fills. */
#define VGPU_STATS_MAX_CONTEXTS      64

/**
 * struct drm_vgpu_query_stats - device-wide status for tools (vgpu-smi)
 * @sample_ns:     out, the guest's monotonic clock when the sample was taken.
 * @device:        out, the whole device's counters.
 * @engines:       out, each engine's counters.
 * @mem_bytes:     out, bytes of all GEM objects of all files.
 * @mem_objects:   out, number of GEM objects.
 * @pt_bytes:      out, bytes of GPU page tables in use.
 * @engine_resets: out, engine resets the KMD performed.
 * @device_resets: out, device resets the KMD performed.
 * @hangs:         out, hangs detected.
 * @faults:        out, fault events received.
 * @wedged:        out, 1 when the device is wedged.
 * @num_contexts:  in, capacity of @contexts (0..VGPU_STATS_MAX_CONTEXTS,
 *                 EINVAL above); out, number of contexts that exist on the
 *                 device (all files), which may exceed what was filled.
 * @contexts:      in, user pointer to @num_contexts struct
 *                 drm_vgpu_ctx_stats (may be 0 when @num_contexts is 0).
 * @flags:         in, zero.
 * @pad:           zero.
 * @mem_limit:     out, the device-wide GEM limit in bytes (module parameter
 *                 gem_limit_mib; GEM_CREATE past it fails with ENOMEM).
 * @file_mem_limit: out, the per-file GEM limit in bytes (file_gem_limit_mib;
 *                 GEM_CREATE past it fails with ENOSPC).
 * @mem_refused:   out, GEM_CREATE calls refused at one of the limits.
 * @retired_pages: out, guest-physical pages the driver retired after an
 *                 uncorrectable memory (ECC) error: never used again.
 * @lost:          out, 1 when the device stopped answering and the driver
 *                 declared it lost (every call then fails with EIO).
 * @vram_used:     out, bytes of VRAM objects hold now (0 without VRAM).
 * @vram_evictions: out, objects evicted from VRAM to system memory.
 *
 * Contexts of every file are listed, so a status tool sees the whole GPU.
 * Counters come from the device (QUERY_STATS control commands); a device
 * that does not answer makes the call fail with EIO (ENODEV once removed).
 */
struct drm_vgpu_query_stats {
	__u64 sample_ns;
	struct drm_vgpu_counters device;
	struct drm_vgpu_counters engines[VGPU_STATS_ENGINES];
	__u64 mem_bytes;
	__u64 mem_objects;
	__u64 pt_bytes;
	__u64 engine_resets;
	__u64 device_resets;
	__u64 hangs;
	__u64 faults;
	__u32 wedged;
	__u32 num_contexts;
	__u64 contexts;
	__u32 flags;
	__u32 pad;
	__u64 mem_limit;
	__u64 file_mem_limit;
	__u64 mem_refused;
	__u32 retired_pages;
	__u32 lost;
	__u64 vram_used;
	__u64 vram_evictions;
};

/*
 * The device-side driver sanitizer (vgpu-device --sanitize, docs/sanitizer.md):
 * the device checks the driver's side of the hardware contract and reports
 * each mistake; the KMD prints them (dmesg), keeps the last ones (debugfs
 * "sanitizer") and gives a context's reports to its file.
 */

/* Checks: the number in reports; the name is SAN- and the rest with '-' for
 * '_' (VGPU_SAN_RING_UNPUBLISHED is SAN-RING-UNPUBLISHED). */
#define VGPU_SAN_RING_UNPUBLISHED     1 /* ring words changed after their doorbell */
#define VGPU_SAN_RING_INDEX           2 /* a bad write pointer */
#define VGPU_SAN_TLB_STALE            3 /* a TLB hit on a changed entry, no invalidation */
#define VGPU_SAN_TLB_INV_ORDER        4 /* a page reused before its invalidation */
#define VGPU_SAN_CMDBUF_UNMAPPED      5 /* a command buffer unmapped while executing */
#define VGPU_SAN_FENCE_REGRESS        6 /* a fence slot written with a smaller value */
#define VGPU_SAN_FENCE_WRAP           7 /* fence seqnos wrapped or about to */
#define VGPU_SAN_XENGINE_HAZARD       8 /* copy and compute unordered on the same bytes */
#define VGPU_SAN_WAIT_UNSATISFIABLE   9 /* a SEM_WAIT nothing queued can satisfy */
#define VGPU_SAN_DMA_UNOWNED          10 /* an access to memory the KMD did not declare */
#define VGPU_SAN_TEARDOWN             11 /* doorbells on dead rings, busy destroys, starved events */
#define VGPU_SAN_PT_INVALID_TABLE     12 /* a page table linked without its valid bit */
#define VGPU_SAN_PT_LEVEL             13 /* a page-table entry its level cannot hold */
#define VGPU_SAN_PT_ALIGN             14 /* a 2 MiB leaf not 2 MiB aligned */
#define VGPU_SAN_PT_UNOWNED           15 /* a page-table entry naming undeclared memory */
#define VGPU_SAN_FW_POLL              16 /* FW_STATUS polled without a sleep while booting */

/* Report flags (drm_vgpu_san_record.flags; bits 8..15: the check's sub-kind). */
#define VGPU_SAN_FLAG_STOPPED        (1u << 0) /* the ring was stopped (stop mode) */
#define VGPU_SAN_FLAG_PRIOR          (1u << 1) /* the prior_* fields are valid */
#define VGPU_SAN_FLAG_PACKET         (1u << 2) /* the packet words are valid */
#define VGPU_SAN_FLAG_OBJECT         (1u << 3) /* the object* fields name the page's object */
#define VGPU_SAN_FLAG_MOVED          (1u << 4) /* that object moved since (else freed) */
#define VGPU_SAN_PACKET_WORDS        15
#define VGPU_SAN_HISTORY             8

/**
 * struct drm_vgpu_san_record - one sanitizer report (hwif SanReport)
 * @check:           VGPU_SAN_*.
 * @flags:           VGPU_SAN_FLAG_*, and the sub-kind << 8.
 * @seq:             the report's number (device-wide, from 1).
 * @time_ns:         device time of the finding.
 * @ctx_id:          the context's id as this file knows it.
 * @engine:          VGPU_ENGINE_* (0xffffffff: none).
 * @rptr:            ring read pointer of the ring-level packet.
 * @depth:           indirect depth of the packet (0: the ring).
 * @packet_va:       GPU VA of the packet (0: none).
 * @cmd_offset:      the packet's offset in the ring (depth 0) or in the
 *                   command buffer the ring called.
 * @packet_len:      valid words in @packet.
 * @packet:          the packet's words as the engine fetched them.
 * @access:          VGPU_ACCESS_* of the access (0: none).
 * @va, @size, @pa:  what it accessed (GPU VA, bytes, guest-physical).
 * @prior_ctx:       the conflicting earlier access's context, as this file
 *                   knows it (0: another file's, or none).
 * @prior_engine:    its engine.
 * @prior_packet_va: its packet.
 * @prior_header:    its packet's header word.
 * @prior_access:    its VGPU_ACCESS_*.
 * @prior_time_ns:   when (device time).
 * @detail:          check-specific values (docs/sanitizer.md).
 * @history:         the ring's last doorbells (VGPU_SAN_RING_INDEX).
 * @object:          VGPU_SAN_FLAG_OBJECT: the KMD's id of the buffer object
 *                   the accessed page belonged to when it was given back
 *                   (debugfs vram_mm names objects by it).
 * @object_gen:      its placement generation then (moves so far).
 * @object_gen_now:  VGPU_SAN_FLAG_MOVED: its generation now.
 * @object_pa_now:   VGPU_SAN_FLAG_MOVED: the lowest page it has now.
 * @released_ns:     when the page was given back (device time).
 */
struct drm_vgpu_san_record {
	__u32 check;
	__u32 flags;
	__u64 seq;
	__u64 time_ns;
	__u32 ctx_id;
	__u32 engine;
	__u32 rptr;
	__u32 depth;
	__u64 packet_va;
	__u32 cmd_offset;
	__u32 packet_len;
	__u32 packet[VGPU_SAN_PACKET_WORDS];
	__u32 access;
	__u64 va;
	__u64 size;
	__u64 pa;
	__u32 prior_ctx;
	__u32 prior_engine;
	__u64 prior_packet_va;
	__u32 prior_header;
	__u32 prior_access;
	__u64 prior_time_ns;
	__u64 detail[4];
	__u32 history[VGPU_SAN_HISTORY];
	__u64 object;
	__u32 object_gen;
	__u32 object_gen_now;
	__u64 object_pa_now;
	__u64 released_ns;
};

/**
 * struct drm_vgpu_san_report - a sanitizer report about one of the file's
 * contexts
 * @ctx_id:    in, the context (ENOENT if the file has none by that id).
 * @pad:       zero.
 * @after_seq: in, the oldest report numbered above this is returned
 *             (0: the oldest the KMD keeps); ENODATA if there is none.
 * @report:    out.
 *
 * The KMD keeps the last 64 reports of the device; older ones are gone.
 */
struct drm_vgpu_san_report {
	__u32 ctx_id;
	__u32 pad;
	__u64 after_seq;
	struct drm_vgpu_san_record report;
};

/**
 * struct drm_vgpu_doorbell - a user-mode queue's doorbell block (64 bytes),
 * in a BO the process maps and binds READ|WRITE in its VM
 * @wptr:     written by the process: the queue ring's new write pointer
 *            (total bytes ever written, wrapping at 2^32).
 * @sleeping: written by the device: 1 once it stopped polling the block.
 *            After storing @wptr, a full barrier, then reading 1 here, the
 *            process calls DRM_IOCTL_VGPU_UQ_KICK.
 * @seen:     written by the device: the last @wptr it took.
 * @reserved: zero.
 */
struct drm_vgpu_doorbell {
	__u32 wptr;
	__u32 sleeping;
	__u32 seen;
	__u32 reserved[13];
};

/* UQ_CREATE flags. */
#define VGPU_UQ_CREATE_FLAGS         0

/**
 * struct drm_vgpu_uq_create - create a user-mode queue: a context whose ring
 * and doorbell live in the file's own memory
 * @priority:    in, VGPU_CTX_PRIORITY_*.
 * @engine:      in, VGPU_ENGINE_*: the engine the queue's ring feeds.
 * @ring_va:     in, the ring: 4 KiB aligned, @ring_size bytes inside one
 *               mapping of the file's VM with READ and EXEC.
 * @doorbell_va: in, a struct drm_vgpu_doorbell, 64-byte aligned, inside one
 *               mapping with READ and WRITE. Its @wptr must be 0.
 * @ring_size:   in, a power of two from 4 KiB to 1 MiB.
 * @flags:       in, VGPU_UQ_CREATE_* (none yet: zero).
 * @ctx_id:      out, the queue's context id.
 * @pad:         zero.
 *
 * The process writes packets into the ring and publishes them by storing the
 * new write pointer in the doorbell block: no ioctl per submission (see
 * docs/uapi.md, "User-mode queues"). The id is a context id: CTX_QUERY,
 * CTX_DESTROY and WAIT (fences of the queue's engine: a seqno is complete
 * once a FENCE packet with that seqno or a later one executed on the ring)
 * take it; SUBMIT on it is EINVAL. The hang check and the reset ladder cover
 * the queue: a hang, fault or engine error makes it errored (guilty) and the
 * device stops watching its doorbell; work lost to another context's reset
 * runs again.
 *
 * EINVAL (flags, priority, engine, sizes, alignment, a range not mapped as
 * required), ENOSPC (no free context slot, or the file's 16 contexts), EIO
 * (wedged), ENODEV.
 */
struct drm_vgpu_uq_create {
	__u32 priority;
	__u32 engine;
	__u64 ring_va;
	__u64 doorbell_va;
	__u32 ring_size;
	__u32 flags;
	__u32 ctx_id;
	__u32 pad;
};

/**
 * struct drm_vgpu_uq_kick - wake the device's doorbell watcher
 * @ctx_id: in, a user-mode queue of the file (ENOENT otherwise; EINVAL for
 *          a context that is not one).
 * @pad:    zero.
 *
 * Needed only when the doorbell block's @sleeping is 1 after publishing.
 */
struct drm_vgpu_uq_kick {
	__u32 ctx_id;
	__u32 pad;
};

/* HOST_MAP flags. */
/* The device only reads the memory: pages pinned without write access,
 * mapped READ. Without it they are mapped READ|WRITE. */
#define VGPU_HOST_MAP_READ_ONLY      (1u << 0)
#define VGPU_HOST_MAP_FLAGS          VGPU_HOST_MAP_READ_ONLY

/* Largest host mapping, and the most a file may have mapped at once. */
#define VGPU_HOST_MAP_MAX_SIZE       (64ull << 20)
#define VGPU_HOST_MAP_MAX_TOTAL      (192ull << 20)

/**
 * struct drm_vgpu_host_map - map process memory for the GPU (zero-copy)
 * @addr:   in, the process address of the memory: 4 KiB aligned.
 * @size:   in, bytes: a multiple of 4 KiB, at most VGPU_HOST_MAP_MAX_SIZE.
 * @flags:  in, VGPU_HOST_MAP_*.
 * @pad:    zero.
 * @gpu_va: out, where the file's VM maps the memory: a VA in the range the
 *          KMD keeps (above VGPU_PARAM_VA_END), chosen by the KMD.
 *
 * The pages are pinned (long-term, as for DMA) and mapped in the file's VM,
 * so that the file's contexts can COPY or DISPATCH straight into (or out of)
 * the process's memory: a device-to-host read becomes one copy, made by the
 * device. Until DRM_IOCTL_VGPU_HOST_UNMAP (or the file's close) the pages
 * stay where they are whatever the process does with its mapping; the
 * process sees the device's writes once the job's fence signalled. The
 * pinned bytes count against the file's GEM memory (ENOSPC) and the
 * device's (ENOMEM) like GEM_CREATE's, and a file maps at most
 * VGPU_HOST_MAP_MAX_TOTAL bytes at once (ENOSPC).
 *
 * EINVAL (alignment, size, flags, pad), EFAULT (the range is not mapped in
 * the process, or not writable without VGPU_HOST_MAP_READ_ONLY), ENOMEM,
 * ENOSPC (the limits are checked first), EIO (wedged), ENODEV.
 */
struct drm_vgpu_host_map {
	__u64 addr;
	__u64 size;
	__u32 flags;
	__u32 pad;
	__u64 gpu_va;
};

/**
 * struct drm_vgpu_host_unmap - undo a DRM_IOCTL_VGPU_HOST_MAP
 * @gpu_va: in, the @gpu_va HOST_MAP returned (ENOENT otherwise).
 *
 * The entries are cleared and every context of the file has its TLBs
 * invalidated before the pages are unpinned (marked dirty unless mapped
 * read-only): a job still using the range faults, it never reaches memory
 * the process gave back. EIO if an invalidation failed: the mapping is gone
 * but its pages stay pinned until the file is closed.
 */
struct drm_vgpu_host_unmap {
	__u64 gpu_va;
};

#define DRM_VGPU_GET_PARAM      0x00
#define DRM_VGPU_PING           0x01
#define DRM_VGPU_GEM_CREATE     0x02
#define DRM_VGPU_GEM_MMAP_OFFSET 0x03
#define DRM_VGPU_VM_BIND        0x04
#define DRM_VGPU_VM_UNBIND      0x05
#define DRM_VGPU_CTX_CREATE     0x06
#define DRM_VGPU_CTX_DESTROY    0x07
#define DRM_VGPU_CTX_QUERY      0x08
#define DRM_VGPU_SUBMIT         0x09
#define DRM_VGPU_WAIT           0x0a
#define DRM_VGPU_QUERY_STATS    0x0b
#define DRM_VGPU_FENCE_EXPORT   0x0c
#define DRM_VGPU_VM_BIND_OPS    0x0d
#define DRM_VGPU_SAN_REPORT     0x0e
#define DRM_VGPU_UQ_CREATE      0x0f
#define DRM_VGPU_UQ_KICK        0x10
#define DRM_VGPU_HOST_MAP       0x11
#define DRM_VGPU_HOST_UNMAP     0x12

/* Note: enum members, not #defines, so that bindgen can resolve them. */
enum {
	DRM_IOCTL_VGPU_GET_PARAM = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_GET_PARAM,
					    struct drm_vgpu_get_param),
	DRM_IOCTL_VGPU_PING      = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_PING,
					    struct drm_vgpu_ping),
	DRM_IOCTL_VGPU_GEM_CREATE = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_GEM_CREATE,
					     struct drm_vgpu_gem_create),
	DRM_IOCTL_VGPU_GEM_MMAP_OFFSET = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_GEM_MMAP_OFFSET,
						  struct drm_vgpu_gem_mmap_offset),
	DRM_IOCTL_VGPU_VM_BIND   = DRM_IOW(DRM_COMMAND_BASE + DRM_VGPU_VM_BIND,
					   struct drm_vgpu_vm_bind),
	DRM_IOCTL_VGPU_VM_UNBIND = DRM_IOW(DRM_COMMAND_BASE + DRM_VGPU_VM_UNBIND,
					   struct drm_vgpu_vm_unbind),
	DRM_IOCTL_VGPU_CTX_CREATE = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_CTX_CREATE,
					     struct drm_vgpu_ctx_create),
	DRM_IOCTL_VGPU_CTX_DESTROY = DRM_IOW(DRM_COMMAND_BASE + DRM_VGPU_CTX_DESTROY,
					     struct drm_vgpu_ctx_destroy),
	DRM_IOCTL_VGPU_CTX_QUERY = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_CTX_QUERY,
					    struct drm_vgpu_ctx_query),
	DRM_IOCTL_VGPU_SUBMIT    = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_SUBMIT,
					    struct drm_vgpu_submit),
	DRM_IOCTL_VGPU_WAIT      = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_WAIT,
					    struct drm_vgpu_wait),
	DRM_IOCTL_VGPU_QUERY_STATS = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_QUERY_STATS,
					      struct drm_vgpu_query_stats),
	DRM_IOCTL_VGPU_FENCE_EXPORT = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_FENCE_EXPORT,
					       struct drm_vgpu_fence_export),
	DRM_IOCTL_VGPU_VM_BIND_OPS = DRM_IOW(DRM_COMMAND_BASE + DRM_VGPU_VM_BIND_OPS,
					     struct drm_vgpu_vm_bind_ops),
	DRM_IOCTL_VGPU_SAN_REPORT = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_SAN_REPORT,
					     struct drm_vgpu_san_report),
	DRM_IOCTL_VGPU_UQ_CREATE = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_UQ_CREATE,
					    struct drm_vgpu_uq_create),
	DRM_IOCTL_VGPU_UQ_KICK   = DRM_IOW(DRM_COMMAND_BASE + DRM_VGPU_UQ_KICK,
					   struct drm_vgpu_uq_kick),
	DRM_IOCTL_VGPU_HOST_MAP  = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_HOST_MAP,
					    struct drm_vgpu_host_map),
	DRM_IOCTL_VGPU_HOST_UNMAP = DRM_IOW(DRM_COMMAND_BASE + DRM_VGPU_HOST_UNMAP,
					    struct drm_vgpu_host_unmap),
};

#if defined(__cplusplus)
}
#endif

#endif /* __VGPU_DRM_H__ */
