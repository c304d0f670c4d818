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
#define VGPU_PARAM_COUNT             0x11 /* one past the last valid parameter */

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
 */

/* DRM_VGPU_GEM_CREATE flags. */
/* Demand paging: no backing pages are mapped at VM_BIND; the first GPU
 * access faults, and the KMD maps the page and lets the job continue
 * (the context must be created with VGPU_CTX_CREATE_REPLAYABLE). */
#define VGPU_GEM_CREATE_LAZY         (1u << 0)
#define VGPU_GEM_CREATE_FLAGS        VGPU_GEM_CREATE_LAZY

/* Largest BO, in bytes. */
#define VGPU_GEM_MAX_SIZE            (1ull << 30)

/**
 * struct drm_vgpu_gem_create - create a buffer object
 * @size:   in, bytes; rounded up to 4 KiB. 0 or more than VGPU_GEM_MAX_SIZE:
 *          EINVAL. ENOMEM when memory runs out.
 * @flags:  in, VGPU_GEM_CREATE_*.
 * @handle: out, a GEM handle of this file (close with DRM_IOCTL_GEM_CLOSE).
 *
 * The BO is backed by shmem pages, zero-filled, allocated on first use (CPU
 * fault, VM_BIND of a non-lazy BO, or a GPU fault on a lazy one).
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

/* CTX_QUERY state bits. */
#define VGPU_CTX_STATE_ERRORED       (1u << 0) /* stopped by a fault or error: submits fail with EIO */
#define VGPU_CTX_STATE_BANNED        (1u << 1) /* too many hangs: submits fail with EIO */
#define VGPU_CTX_STATE_FAULTED       (1u << 2) /* fault_va/fault_access describe a GPU fault */

/* CTX_QUERY fault_access (hwif mmu::Access). */
#define VGPU_ACCESS_READ             1
#define VGPU_ACCESS_WRITE            2
#define VGPU_ACCESS_EXECUTE          3
#define VGPU_ACCESS_ATOMIC           4

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
 * @engine_error:  out, hwif packet::EngineError number of the first engine
 *                 error that stopped the context (0: none); ignored on input.
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
#define VGPU_CTX_MAX_PENDING         256 /* unsignalled jobs per context */

/* SUBMIT flags. */
/* When the ring has no room, or the context has VGPU_CTX_MAX_PENDING jobs
 * pending, fail with EBUSY instead of EAGAIN (for callers that treat the two
 * differently; neither blocks). */
#define VGPU_SUBMIT_BUSY_IS_EBUSY    (1u << 0)
#define VGPU_SUBMIT_FLAGS            VGPU_SUBMIT_BUSY_IS_EBUSY

/**
 * struct drm_vgpu_submit - queue command buffers on a context's engine ring
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
 *
 * Command buffers not inside a READ|EXEC mapping: EINVAL. The context is
 * errored or banned: EIO. Ring full or too many pending jobs: EAGAIN (EBUSY
 * with VGPU_SUBMIT_BUSY_IS_EBUSY); retry after waiting on an earlier fence.
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
};

#if defined(__cplusplus)
}
#endif

#endif /* __VGPU_DRM_H__ */
