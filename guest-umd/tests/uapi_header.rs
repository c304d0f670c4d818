//! The C header `include/uapi/drm/vgpu_drm.h` is the source of truth for the
//! uAPI: this test compiles a C program against it and checks every size,
//! offset, parameter and ioctl number of the Rust mirror against it.
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use vgpu_umd::uapi::{self, param, DrmVgpuGetParam, DrmVgpuPing};

const PROBE: &str = r#"
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stddef.h>
#include <fcntl.h>
#include "vgpu_drm.h"
#define P(name, expr) printf("%s %llu\n", name, (unsigned long long)(expr))
int main(void) {
    P("sizeof.get_param", sizeof(struct drm_vgpu_get_param));
    P("get_param.param", offsetof(struct drm_vgpu_get_param, param));
    P("get_param.pad", offsetof(struct drm_vgpu_get_param, pad));
    P("get_param.value", offsetof(struct drm_vgpu_get_param, value));
    P("sizeof.ping", sizeof(struct drm_vgpu_ping));
    P("ping.cookie", offsetof(struct drm_vgpu_ping, cookie));
    P("ping.timeout_ns", offsetof(struct drm_vgpu_ping, timeout_ns));
    P("ping.event_seq", offsetof(struct drm_vgpu_ping, event_seq));
    P("ping.latency_ns", offsetof(struct drm_vgpu_ping, latency_ns));
    P("DRM_IOCTL_VGPU_GET_PARAM", (unsigned int)DRM_IOCTL_VGPU_GET_PARAM);
    P("DRM_IOCTL_VGPU_PING", (unsigned int)DRM_IOCTL_VGPU_PING);
    P("DRM_IOCTL_VERSION", (unsigned int)DRM_IOCTL_VERSION);
    P("sizeof.drm_version", sizeof(struct drm_version));
    P("VGPU_PARAM_GENERATION", VGPU_PARAM_GENERATION);
    P("VGPU_PARAM_PROTOCOL_VERSION", VGPU_PARAM_PROTOCOL_VERSION);
    P("VGPU_PARAM_FIRMWARE_VERSION", VGPU_PARAM_FIRMWARE_VERSION);
    P("VGPU_PARAM_ENGINE_MASK", VGPU_PARAM_ENGINE_MASK);
    P("VGPU_PARAM_VA_BITS", VGPU_PARAM_VA_BITS);
    P("VGPU_PARAM_PAGE_SIZES", VGPU_PARAM_PAGE_SIZES);
    P("VGPU_PARAM_MAX_CONTEXTS", VGPU_PARAM_MAX_CONTEXTS);
    P("VGPU_PARAM_MAX_RING_SIZE", VGPU_PARAM_MAX_RING_SIZE);
    P("VGPU_PARAM_MIN_RING_SIZE", VGPU_PARAM_MIN_RING_SIZE);
    P("VGPU_PARAM_COMPUTE_UNITS", VGPU_PARAM_COMPUTE_UNITS);
    P("VGPU_PARAM_DEVICE_ID", VGPU_PARAM_DEVICE_ID);
    P("VGPU_PARAM_EVENTS_RECEIVED", VGPU_PARAM_EVENTS_RECEIVED);
    P("VGPU_PARAM_HWIF_FINGERPRINT", VGPU_PARAM_HWIF_FINGERPRINT);
    P("VGPU_PARAM_DEVICE_FINGERPRINT", VGPU_PARAM_DEVICE_FINGERPRINT);
    P("sizeof.gem_create", sizeof(struct drm_vgpu_gem_create));
    P("gem_create.size", offsetof(struct drm_vgpu_gem_create, size));
    P("gem_create.flags", offsetof(struct drm_vgpu_gem_create, flags));
    P("gem_create.handle", offsetof(struct drm_vgpu_gem_create, handle));
    P("sizeof.gem_mmap_offset", sizeof(struct drm_vgpu_gem_mmap_offset));
    P("gem_mmap_offset.handle", offsetof(struct drm_vgpu_gem_mmap_offset, handle));
    P("gem_mmap_offset.pad", offsetof(struct drm_vgpu_gem_mmap_offset, pad));
    P("gem_mmap_offset.offset", offsetof(struct drm_vgpu_gem_mmap_offset, offset));
    P("sizeof.vm_bind", sizeof(struct drm_vgpu_vm_bind));
    P("vm_bind.handle", offsetof(struct drm_vgpu_vm_bind, handle));
    P("vm_bind.flags", offsetof(struct drm_vgpu_vm_bind, flags));
    P("vm_bind.bo_offset", offsetof(struct drm_vgpu_vm_bind, bo_offset));
    P("vm_bind.va", offsetof(struct drm_vgpu_vm_bind, va));
    P("vm_bind.size", offsetof(struct drm_vgpu_vm_bind, size));
    P("sizeof.vm_unbind", sizeof(struct drm_vgpu_vm_unbind));
    P("vm_unbind.va", offsetof(struct drm_vgpu_vm_unbind, va));
    P("vm_unbind.size", offsetof(struct drm_vgpu_vm_unbind, size));
    P("sizeof.ctx_create", sizeof(struct drm_vgpu_ctx_create));
    P("ctx_create.priority", offsetof(struct drm_vgpu_ctx_create, priority));
    P("ctx_create.engine_mask", offsetof(struct drm_vgpu_ctx_create, engine_mask));
    P("ctx_create.flags", offsetof(struct drm_vgpu_ctx_create, flags));
    P("ctx_create.ctx_id", offsetof(struct drm_vgpu_ctx_create, ctx_id));
    P("sizeof.ctx_destroy", sizeof(struct drm_vgpu_ctx_destroy));
    P("ctx_destroy.ctx_id", offsetof(struct drm_vgpu_ctx_destroy, ctx_id));
    P("ctx_destroy.pad", offsetof(struct drm_vgpu_ctx_destroy, pad));
    P("sizeof.ctx_query", sizeof(struct drm_vgpu_ctx_query));
    P("ctx_query.ctx_id", offsetof(struct drm_vgpu_ctx_query, ctx_id));
    P("ctx_query.reset_status", offsetof(struct drm_vgpu_ctx_query, reset_status));
    P("ctx_query.state", offsetof(struct drm_vgpu_ctx_query, state));
    P("ctx_query.fault_access", offsetof(struct drm_vgpu_ctx_query, fault_access));
    P("ctx_query.fault_va", offsetof(struct drm_vgpu_ctx_query, fault_va));
    P("ctx_query.fault_reason", offsetof(struct drm_vgpu_ctx_query, fault_reason));
    P("ctx_query.hangs", offsetof(struct drm_vgpu_ctx_query, hangs));
    P("ctx_query.faults", offsetof(struct drm_vgpu_ctx_query, faults));
    P("ctx_query.engine_error", offsetof(struct drm_vgpu_ctx_query, engine_error));
    P("ctx_query.error_packet_va", offsetof(struct drm_vgpu_ctx_query, error_packet_va));
    P("ctx_query.error_seqno", offsetof(struct drm_vgpu_ctx_query, error_seqno));
    P("ctx_query.error_header", offsetof(struct drm_vgpu_ctx_query, error_header));
    P("ctx_query.error_engine", offsetof(struct drm_vgpu_ctx_query, error_engine));
    P("ctx_query.error_cmd_index", offsetof(struct drm_vgpu_ctx_query, error_cmd_index));
    P("ctx_query.error_cmd_offset", offsetof(struct drm_vgpu_ctx_query, error_cmd_offset));
    P("ctx_query.error_depth", offsetof(struct drm_vgpu_ctx_query, error_depth));
    P("ctx_query.san_reports", offsetof(struct drm_vgpu_ctx_query, san_reports));
    P("ctx_query.san_last_seq", offsetof(struct drm_vgpu_ctx_query, san_last_seq));
    P("VGPU_CMD_INDEX_NONE", VGPU_CMD_INDEX_NONE);
    P("sizeof.san_record", sizeof(struct drm_vgpu_san_record));
    P("san_record.check", offsetof(struct drm_vgpu_san_record, check));
    P("san_record.flags", offsetof(struct drm_vgpu_san_record, flags));
    P("san_record.seq", offsetof(struct drm_vgpu_san_record, seq));
    P("san_record.time_ns", offsetof(struct drm_vgpu_san_record, time_ns));
    P("san_record.ctx_id", offsetof(struct drm_vgpu_san_record, ctx_id));
    P("san_record.engine", offsetof(struct drm_vgpu_san_record, engine));
    P("san_record.rptr", offsetof(struct drm_vgpu_san_record, rptr));
    P("san_record.depth", offsetof(struct drm_vgpu_san_record, depth));
    P("san_record.packet_va", offsetof(struct drm_vgpu_san_record, packet_va));
    P("san_record.cmd_offset", offsetof(struct drm_vgpu_san_record, cmd_offset));
    P("san_record.packet_len", offsetof(struct drm_vgpu_san_record, packet_len));
    P("san_record.packet", offsetof(struct drm_vgpu_san_record, packet));
    P("san_record.access", offsetof(struct drm_vgpu_san_record, access));
    P("san_record.va", offsetof(struct drm_vgpu_san_record, va));
    P("san_record.size", offsetof(struct drm_vgpu_san_record, size));
    P("san_record.pa", offsetof(struct drm_vgpu_san_record, pa));
    P("san_record.prior_ctx", offsetof(struct drm_vgpu_san_record, prior_ctx));
    P("san_record.prior_engine", offsetof(struct drm_vgpu_san_record, prior_engine));
    P("san_record.prior_packet_va", offsetof(struct drm_vgpu_san_record, prior_packet_va));
    P("san_record.prior_header", offsetof(struct drm_vgpu_san_record, prior_header));
    P("san_record.prior_access", offsetof(struct drm_vgpu_san_record, prior_access));
    P("san_record.prior_time_ns", offsetof(struct drm_vgpu_san_record, prior_time_ns));
    P("san_record.detail", offsetof(struct drm_vgpu_san_record, detail));
    P("san_record.history", offsetof(struct drm_vgpu_san_record, history));
    P("san_record.object", offsetof(struct drm_vgpu_san_record, object));
    P("san_record.object_gen", offsetof(struct drm_vgpu_san_record, object_gen));
    P("san_record.object_gen_now", offsetof(struct drm_vgpu_san_record, object_gen_now));
    P("san_record.object_pa_now", offsetof(struct drm_vgpu_san_record, object_pa_now));
    P("san_record.released_ns", offsetof(struct drm_vgpu_san_record, released_ns));
    P("sizeof.san_report", sizeof(struct drm_vgpu_san_report));
    P("san_report.ctx_id", offsetof(struct drm_vgpu_san_report, ctx_id));
    P("san_report.pad", offsetof(struct drm_vgpu_san_report, pad));
    P("san_report.after_seq", offsetof(struct drm_vgpu_san_report, after_seq));
    P("san_report.report", offsetof(struct drm_vgpu_san_report, report));
    P("DRM_IOCTL_VGPU_SAN_REPORT", (unsigned int)DRM_IOCTL_VGPU_SAN_REPORT);
    P("sizeof.doorbell", sizeof(struct drm_vgpu_doorbell));
    P("doorbell.wptr", offsetof(struct drm_vgpu_doorbell, wptr));
    P("doorbell.sleeping", offsetof(struct drm_vgpu_doorbell, sleeping));
    P("doorbell.seen", offsetof(struct drm_vgpu_doorbell, seen));
    P("doorbell.reserved", offsetof(struct drm_vgpu_doorbell, reserved));
    P("sizeof.uq_create", sizeof(struct drm_vgpu_uq_create));
    P("uq_create.priority", offsetof(struct drm_vgpu_uq_create, priority));
    P("uq_create.engine", offsetof(struct drm_vgpu_uq_create, engine));
    P("uq_create.ring_va", offsetof(struct drm_vgpu_uq_create, ring_va));
    P("uq_create.doorbell_va", offsetof(struct drm_vgpu_uq_create, doorbell_va));
    P("uq_create.ring_size", offsetof(struct drm_vgpu_uq_create, ring_size));
    P("uq_create.flags", offsetof(struct drm_vgpu_uq_create, flags));
    P("uq_create.ctx_id", offsetof(struct drm_vgpu_uq_create, ctx_id));
    P("uq_create.pad", offsetof(struct drm_vgpu_uq_create, pad));
    P("sizeof.uq_kick", sizeof(struct drm_vgpu_uq_kick));
    P("uq_kick.ctx_id", offsetof(struct drm_vgpu_uq_kick, ctx_id));
    P("uq_kick.pad", offsetof(struct drm_vgpu_uq_kick, pad));
    P("DRM_IOCTL_VGPU_UQ_CREATE", (unsigned int)DRM_IOCTL_VGPU_UQ_CREATE);
    P("DRM_IOCTL_VGPU_UQ_KICK", (unsigned int)DRM_IOCTL_VGPU_UQ_KICK);
    P("sizeof.host_map", sizeof(struct drm_vgpu_host_map));
    P("host_map.addr", offsetof(struct drm_vgpu_host_map, addr));
    P("host_map.size", offsetof(struct drm_vgpu_host_map, size));
    P("host_map.flags", offsetof(struct drm_vgpu_host_map, flags));
    P("host_map.pad", offsetof(struct drm_vgpu_host_map, pad));
    P("host_map.gpu_va", offsetof(struct drm_vgpu_host_map, gpu_va));
    P("sizeof.host_unmap", sizeof(struct drm_vgpu_host_unmap));
    P("host_unmap.gpu_va", offsetof(struct drm_vgpu_host_unmap, gpu_va));
    P("DRM_IOCTL_VGPU_HOST_MAP", (unsigned int)DRM_IOCTL_VGPU_HOST_MAP);
    P("DRM_IOCTL_VGPU_HOST_UNMAP", (unsigned int)DRM_IOCTL_VGPU_HOST_UNMAP);
    P("VGPU_HOST_MAP_READ_ONLY", VGPU_HOST_MAP_READ_ONLY);
    P("VGPU_HOST_MAP_FLAGS", VGPU_HOST_MAP_FLAGS);
    P("VGPU_HOST_MAP_MAX_SIZE", VGPU_HOST_MAP_MAX_SIZE);
    P("VGPU_HOST_MAP_MAX_TOTAL", VGPU_HOST_MAP_MAX_TOTAL);
    P("VGPU_CTX_STATE_USER_QUEUE", VGPU_CTX_STATE_USER_QUEUE);
    P("VGPU_CTX_STATE_SUSPENDED", VGPU_CTX_STATE_SUSPENDED);
    P("VGPU_UQ_CREATE_FLAGS", VGPU_UQ_CREATE_FLAGS);
    P("VGPU_SAN_FLAG_STOPPED", VGPU_SAN_FLAG_STOPPED);
    P("VGPU_SAN_FLAG_PRIOR", VGPU_SAN_FLAG_PRIOR);
    P("VGPU_SAN_FLAG_PACKET", VGPU_SAN_FLAG_PACKET);
    P("VGPU_SAN_PACKET_WORDS", VGPU_SAN_PACKET_WORDS);
    P("VGPU_SAN_HISTORY", VGPU_SAN_HISTORY);
    P("sizeof.fence", sizeof(struct drm_vgpu_fence));
    P("fence.ctx_id", offsetof(struct drm_vgpu_fence, ctx_id));
    P("fence.engine", offsetof(struct drm_vgpu_fence, engine));
    P("fence.seqno", offsetof(struct drm_vgpu_fence, seqno));
    P("sizeof.cmd", sizeof(struct drm_vgpu_cmd));
    P("cmd.va", offsetof(struct drm_vgpu_cmd, va));
    P("cmd.size", offsetof(struct drm_vgpu_cmd, size));
    P("sizeof.submit", sizeof(struct drm_vgpu_submit));
    P("submit.ctx_id", offsetof(struct drm_vgpu_submit, ctx_id));
    P("submit.engine", offsetof(struct drm_vgpu_submit, engine));
    P("submit.cmds", offsetof(struct drm_vgpu_submit, cmds));
    P("submit.num_cmds", offsetof(struct drm_vgpu_submit, num_cmds));
    P("submit.num_in_fences", offsetof(struct drm_vgpu_submit, num_in_fences));
    P("submit.in_fences", offsetof(struct drm_vgpu_submit, in_fences));
    P("submit.flags", offsetof(struct drm_vgpu_submit, flags));
    P("submit.pad", offsetof(struct drm_vgpu_submit, pad));
    P("submit.seqno", offsetof(struct drm_vgpu_submit, seqno));
    P("sizeof.wait", sizeof(struct drm_vgpu_wait));
    P("wait.fences", offsetof(struct drm_vgpu_wait, fences));
    P("wait.num_fences", offsetof(struct drm_vgpu_wait, num_fences));
    P("wait.flags", offsetof(struct drm_vgpu_wait, flags));
    P("wait.timeout_ns", offsetof(struct drm_vgpu_wait, timeout_ns));
    P("wait.first_signaled", offsetof(struct drm_vgpu_wait, first_signaled));
    P("wait.pad", offsetof(struct drm_vgpu_wait, pad));
    P("DRM_IOCTL_VGPU_GEM_CREATE", (unsigned int)DRM_IOCTL_VGPU_GEM_CREATE);
    P("DRM_IOCTL_VGPU_GEM_MMAP_OFFSET", (unsigned int)DRM_IOCTL_VGPU_GEM_MMAP_OFFSET);
    P("DRM_IOCTL_VGPU_VM_BIND", (unsigned int)DRM_IOCTL_VGPU_VM_BIND);
    P("DRM_IOCTL_VGPU_VM_UNBIND", (unsigned int)DRM_IOCTL_VGPU_VM_UNBIND);
    P("DRM_IOCTL_VGPU_CTX_CREATE", (unsigned int)DRM_IOCTL_VGPU_CTX_CREATE);
    P("DRM_IOCTL_VGPU_CTX_DESTROY", (unsigned int)DRM_IOCTL_VGPU_CTX_DESTROY);
    P("DRM_IOCTL_VGPU_CTX_QUERY", (unsigned int)DRM_IOCTL_VGPU_CTX_QUERY);
    P("DRM_IOCTL_VGPU_SUBMIT", (unsigned int)DRM_IOCTL_VGPU_SUBMIT);
    P("DRM_IOCTL_VGPU_WAIT", (unsigned int)DRM_IOCTL_VGPU_WAIT);
    P("DRM_IOCTL_GEM_CLOSE", (unsigned int)DRM_IOCTL_GEM_CLOSE);
    P("VGPU_GEM_CREATE_LAZY", VGPU_GEM_CREATE_LAZY);
    P("VGPU_GEM_CREATE_VRAM", VGPU_GEM_CREATE_VRAM);
    P("VGPU_GEM_CREATE_SYSTEM", VGPU_GEM_CREATE_SYSTEM);
    P("VGPU_GEM_CREATE_CPU_ACCESS", VGPU_GEM_CREATE_CPU_ACCESS);
    P("VGPU_GEM_CREATE_FLAGS", VGPU_GEM_CREATE_FLAGS);
    P("VGPU_GEM_MAX_SIZE", VGPU_GEM_MAX_SIZE);
    P("VGPU_VM_BIND_READ", VGPU_VM_BIND_READ);
    P("VGPU_VM_BIND_WRITE", VGPU_VM_BIND_WRITE);
    P("VGPU_VM_BIND_EXEC", VGPU_VM_BIND_EXEC);
    P("VGPU_VM_BIND_FLAGS", VGPU_VM_BIND_FLAGS);
    P("VGPU_CTX_PRIORITY_LOW", VGPU_CTX_PRIORITY_LOW);
    P("VGPU_CTX_PRIORITY_NORMAL", VGPU_CTX_PRIORITY_NORMAL);
    P("VGPU_CTX_PRIORITY_HIGH", VGPU_CTX_PRIORITY_HIGH);
    P("VGPU_CTX_PRIORITY_REALTIME", VGPU_CTX_PRIORITY_REALTIME);
    P("VGPU_ENGINE_COPY", VGPU_ENGINE_COPY);
    P("VGPU_ENGINE_COMPUTE", VGPU_ENGINE_COMPUTE);
    P("VGPU_CTX_CREATE_REPLAYABLE", VGPU_CTX_CREATE_REPLAYABLE);
    P("VGPU_CTX_CREATE_FLAGS", VGPU_CTX_CREATE_FLAGS);
    P("VGPU_CTX_RESET_NONE", VGPU_CTX_RESET_NONE);
    P("VGPU_CTX_RESET_GUILTY", VGPU_CTX_RESET_GUILTY);
    P("VGPU_CTX_RESET_INNOCENT", VGPU_CTX_RESET_INNOCENT);
    P("VGPU_CTX_RESET_VRAM_LOST", VGPU_CTX_RESET_VRAM_LOST);
    P("VGPU_CTX_STATE_ERRORED", VGPU_CTX_STATE_ERRORED);
    P("VGPU_CTX_STATE_BANNED", VGPU_CTX_STATE_BANNED);
    P("VGPU_CTX_STATE_FAULTED", VGPU_CTX_STATE_FAULTED);
    P("VGPU_CTX_STATE_DEVICE_LOST", VGPU_CTX_STATE_DEVICE_LOST);
    P("VGPU_ACCESS_READ", VGPU_ACCESS_READ);
    P("VGPU_ACCESS_WRITE", VGPU_ACCESS_WRITE);
    P("VGPU_ACCESS_EXECUTE", VGPU_ACCESS_EXECUTE);
    P("VGPU_ACCESS_ATOMIC", VGPU_ACCESS_ATOMIC);
    P("VGPU_SUBMIT_MAX_CMDS", VGPU_SUBMIT_MAX_CMDS);
    P("VGPU_SUBMIT_MAX_IN_FENCES", VGPU_SUBMIT_MAX_IN_FENCES);
    P("VGPU_CTX_MAX_PENDING", VGPU_CTX_MAX_PENDING);
    P("VGPU_SUBMIT_BUSY_IS_EBUSY", VGPU_SUBMIT_BUSY_IS_EBUSY);
    P("VGPU_SUBMIT_FLAGS", VGPU_SUBMIT_FLAGS);
    P("VGPU_WAIT_ALL", VGPU_WAIT_ALL);
    P("VGPU_WAIT_FLAGS", VGPU_WAIT_FLAGS);
    P("VGPU_WAIT_MAX_FENCES", VGPU_WAIT_MAX_FENCES);
    P("VGPU_PARAM_VA_START", VGPU_PARAM_VA_START);
    P("VGPU_PARAM_VA_END", VGPU_PARAM_VA_END);
    P("VGPU_PARAM_VRAM_SIZE", VGPU_PARAM_VRAM_SIZE);
    P("VGPU_PARAM_VRAM_VISIBLE", VGPU_PARAM_VRAM_VISIBLE);
    P("VGPU_PARAM_PM_STATE", VGPU_PARAM_PM_STATE);
    P("VGPU_PARAM_PM_SUSPENDS", VGPU_PARAM_PM_SUSPENDS);
    P("VGPU_PARAM_PM_RESUMES", VGPU_PARAM_PM_RESUMES);
    P("VGPU_PARAM_PM_SUSPENDED_MS", VGPU_PARAM_PM_SUSPENDED_MS);
    P("VGPU_PARAM_SYSTEM_SLEEPS", VGPU_PARAM_SYSTEM_SLEEPS);
    P("VGPU_PARAM_PM_D3COLD_SUSPENDS", VGPU_PARAM_PM_D3COLD_SUSPENDS);
    P("VGPU_PARAM_VIRTUAL_FUNCTION", VGPU_PARAM_VIRTUAL_FUNCTION);
    P("VGPU_PARAM_COUNT", VGPU_PARAM_COUNT);
    P("sizeof.counters", sizeof(struct drm_vgpu_counters));
    P("counters.busy_ns", offsetof(struct drm_vgpu_counters, busy_ns));
    P("counters.packets", offsetof(struct drm_vgpu_counters, packets));
    P("counters.bytes", offsetof(struct drm_vgpu_counters, bytes));
    P("counters.faults", offsetof(struct drm_vgpu_counters, faults));
    P("counters.errors", offsetof(struct drm_vgpu_counters, errors));
    P("counters.resets", offsetof(struct drm_vgpu_counters, resets));
    P("counters.fences", offsetof(struct drm_vgpu_counters, fences));
    P("counters.tlb_hits", offsetof(struct drm_vgpu_counters, tlb_hits));
    P("counters.tlb_misses", offsetof(struct drm_vgpu_counters, tlb_misses));
    P("counters.workgroups", offsetof(struct drm_vgpu_counters, workgroups));
    P("counters.lane_ops", offsetof(struct drm_vgpu_counters, lane_ops));
    P("counters.cycles", offsetof(struct drm_vgpu_counters, cycles));
    P("sizeof.ctx_stats", sizeof(struct drm_vgpu_ctx_stats));
    P("ctx_stats.ctx_id", offsetof(struct drm_vgpu_ctx_stats, ctx_id));
    P("ctx_stats.pid", offsetof(struct drm_vgpu_ctx_stats, pid));
    P("ctx_stats.priority", offsetof(struct drm_vgpu_ctx_stats, priority));
    P("ctx_stats.engines", offsetof(struct drm_vgpu_ctx_stats, engines));
    P("ctx_stats.reset_status", offsetof(struct drm_vgpu_ctx_stats, reset_status));
    P("ctx_stats.state", offsetof(struct drm_vgpu_ctx_stats, state));
    P("ctx_stats.hangs", offsetof(struct drm_vgpu_ctx_stats, hangs));
    P("ctx_stats.faults", offsetof(struct drm_vgpu_ctx_stats, faults));
    P("ctx_stats.mem_bytes", offsetof(struct drm_vgpu_ctx_stats, mem_bytes));
    P("ctx_stats.submitted", offsetof(struct drm_vgpu_ctx_stats, submitted));
    P("ctx_stats.completed", offsetof(struct drm_vgpu_ctx_stats, completed));
    P("ctx_stats.counters", offsetof(struct drm_vgpu_ctx_stats, counters));
    P("ctx_stats.engine_error", offsetof(struct drm_vgpu_ctx_stats, engine_error));
    P("ctx_stats.error_engine", offsetof(struct drm_vgpu_ctx_stats, error_engine));
    P("ctx_stats.error_header", offsetof(struct drm_vgpu_ctx_stats, error_header));
    P("ctx_stats.error_cmd_index", offsetof(struct drm_vgpu_ctx_stats, error_cmd_index));
    P("ctx_stats.error_packet_va", offsetof(struct drm_vgpu_ctx_stats, error_packet_va));
    P("ctx_stats.error_seqno", offsetof(struct drm_vgpu_ctx_stats, error_seqno));
    P("ctx_stats.error_cmd_offset", offsetof(struct drm_vgpu_ctx_stats, error_cmd_offset));
    P("ctx_stats.san_reports", offsetof(struct drm_vgpu_ctx_stats, san_reports));
    P("ctx_stats.vram_bytes", offsetof(struct drm_vgpu_ctx_stats, vram_bytes));
    P("sizeof.query_stats", sizeof(struct drm_vgpu_query_stats));
    P("query_stats.sample_ns", offsetof(struct drm_vgpu_query_stats, sample_ns));
    P("query_stats.device", offsetof(struct drm_vgpu_query_stats, device));
    P("query_stats.engines", offsetof(struct drm_vgpu_query_stats, engines));
    P("query_stats.mem_bytes", offsetof(struct drm_vgpu_query_stats, mem_bytes));
    P("query_stats.mem_objects", offsetof(struct drm_vgpu_query_stats, mem_objects));
    P("query_stats.pt_bytes", offsetof(struct drm_vgpu_query_stats, pt_bytes));
    P("query_stats.engine_resets", offsetof(struct drm_vgpu_query_stats, engine_resets));
    P("query_stats.device_resets", offsetof(struct drm_vgpu_query_stats, device_resets));
    P("query_stats.hangs", offsetof(struct drm_vgpu_query_stats, hangs));
    P("query_stats.faults", offsetof(struct drm_vgpu_query_stats, faults));
    P("query_stats.wedged", offsetof(struct drm_vgpu_query_stats, wedged));
    P("query_stats.num_contexts", offsetof(struct drm_vgpu_query_stats, num_contexts));
    P("query_stats.contexts", offsetof(struct drm_vgpu_query_stats, contexts));
    P("query_stats.flags", offsetof(struct drm_vgpu_query_stats, flags));
    P("query_stats.pad", offsetof(struct drm_vgpu_query_stats, pad));
    P("query_stats.mem_limit", offsetof(struct drm_vgpu_query_stats, mem_limit));
    P("query_stats.file_mem_limit", offsetof(struct drm_vgpu_query_stats, file_mem_limit));
    P("query_stats.mem_refused", offsetof(struct drm_vgpu_query_stats, mem_refused));
    P("query_stats.retired_pages", offsetof(struct drm_vgpu_query_stats, retired_pages));
    P("query_stats.lost", offsetof(struct drm_vgpu_query_stats, lost));
    P("query_stats.vram_used", offsetof(struct drm_vgpu_query_stats, vram_used));
    P("query_stats.vram_evictions", offsetof(struct drm_vgpu_query_stats, vram_evictions));
    P("DRM_IOCTL_VGPU_QUERY_STATS", (unsigned int)DRM_IOCTL_VGPU_QUERY_STATS);
    P("sizeof.fence_export", sizeof(struct drm_vgpu_fence_export));
    P("fence_export.fence", offsetof(struct drm_vgpu_fence_export, fence));
    P("fence_export.flags", offsetof(struct drm_vgpu_fence_export, flags));
    P("fence_export.fd", offsetof(struct drm_vgpu_fence_export, fd));
    P("DRM_IOCTL_VGPU_FENCE_EXPORT", (unsigned int)DRM_IOCTL_VGPU_FENCE_EXPORT);
    P("VGPU_STATS_ENGINES", VGPU_STATS_ENGINES);
    P("VGPU_STATS_MAX_CONTEXTS", VGPU_STATS_MAX_CONTEXTS);
    P("submit.in_syncs", offsetof(struct drm_vgpu_submit, in_syncs));
    P("submit.out_syncs", offsetof(struct drm_vgpu_submit, out_syncs));
    P("submit.num_in_syncs", offsetof(struct drm_vgpu_submit, num_in_syncs));
    P("submit.num_out_syncs", offsetof(struct drm_vgpu_submit, num_out_syncs));
    P("submit.bos", offsetof(struct drm_vgpu_submit, bos));
    P("submit.num_bos", offsetof(struct drm_vgpu_submit, num_bos));
    P("submit.pad2", offsetof(struct drm_vgpu_submit, pad2));
    P("sizeof.sync", sizeof(struct drm_vgpu_sync));
    P("sync.handle", offsetof(struct drm_vgpu_sync, handle));
    P("sync.flags", offsetof(struct drm_vgpu_sync, flags));
    P("sync.point", offsetof(struct drm_vgpu_sync, point));
    P("sizeof.submit_bo", sizeof(struct drm_vgpu_submit_bo));
    P("submit_bo.handle", offsetof(struct drm_vgpu_submit_bo, handle));
    P("submit_bo.flags", offsetof(struct drm_vgpu_submit_bo, flags));
    P("sizeof.vm_op", sizeof(struct drm_vgpu_vm_op));
    P("vm_op.op", offsetof(struct drm_vgpu_vm_op, op));
    P("vm_op.flags", offsetof(struct drm_vgpu_vm_op, flags));
    P("vm_op.handle", offsetof(struct drm_vgpu_vm_op, handle));
    P("vm_op.pad", offsetof(struct drm_vgpu_vm_op, pad));
    P("vm_op.bo_offset", offsetof(struct drm_vgpu_vm_op, bo_offset));
    P("vm_op.va", offsetof(struct drm_vgpu_vm_op, va));
    P("vm_op.size", offsetof(struct drm_vgpu_vm_op, size));
    P("sizeof.vm_bind_ops", sizeof(struct drm_vgpu_vm_bind_ops));
    P("vm_bind_ops.ops", offsetof(struct drm_vgpu_vm_bind_ops, ops));
    P("vm_bind_ops.num_ops", offsetof(struct drm_vgpu_vm_bind_ops, num_ops));
    P("vm_bind_ops.flags", offsetof(struct drm_vgpu_vm_bind_ops, flags));
    P("vm_bind_ops.in_syncs", offsetof(struct drm_vgpu_vm_bind_ops, in_syncs));
    P("vm_bind_ops.out_syncs", offsetof(struct drm_vgpu_vm_bind_ops, out_syncs));
    P("vm_bind_ops.num_in_syncs", offsetof(struct drm_vgpu_vm_bind_ops, num_in_syncs));
    P("vm_bind_ops.num_out_syncs", offsetof(struct drm_vgpu_vm_bind_ops, num_out_syncs));
    P("DRM_IOCTL_VGPU_VM_BIND_OPS", (unsigned int)DRM_IOCTL_VGPU_VM_BIND_OPS);
    P("VGPU_CTX_MAX_PENDING", VGPU_CTX_MAX_PENDING);
    P("VGPU_SUBMIT_MAX_SYNCS", VGPU_SUBMIT_MAX_SYNCS);
    P("VGPU_SUBMIT_MAX_BOS", VGPU_SUBMIT_MAX_BOS);
    P("VGPU_SUBMIT_BO_READ", VGPU_SUBMIT_BO_READ);
    P("VGPU_SUBMIT_BO_WRITE", VGPU_SUBMIT_BO_WRITE);
    P("VGPU_SUBMIT_BO_FLAGS", VGPU_SUBMIT_BO_FLAGS);
    P("VGPU_VM_OP_MAP", VGPU_VM_OP_MAP);
    P("VGPU_VM_OP_UNMAP", VGPU_VM_OP_UNMAP);
    P("VGPU_VM_BIND_MAX_OPS", VGPU_VM_BIND_MAX_OPS);
    P("VGPU_VM_BIND_MAX_SYNCS", VGPU_VM_BIND_MAX_SYNCS);
    P("DRM_IOCTL_GET_CAP", (unsigned int)DRM_IOCTL_GET_CAP);
    P("DRM_CAP_PRIME", DRM_CAP_PRIME);
    P("DRM_PRIME_CAP_IMPORT", DRM_PRIME_CAP_IMPORT);
    P("DRM_PRIME_CAP_EXPORT", DRM_PRIME_CAP_EXPORT);
    P("DRM_CAP_SYNCOBJ", DRM_CAP_SYNCOBJ);
    P("DRM_CAP_SYNCOBJ_TIMELINE", DRM_CAP_SYNCOBJ_TIMELINE);
    P("sizeof.prime_handle", sizeof(struct drm_prime_handle));
    P("prime_handle.fd", offsetof(struct drm_prime_handle, fd));
    P("DRM_IOCTL_PRIME_HANDLE_TO_FD", (unsigned int)DRM_IOCTL_PRIME_HANDLE_TO_FD);
    P("DRM_IOCTL_PRIME_FD_TO_HANDLE", (unsigned int)DRM_IOCTL_PRIME_FD_TO_HANDLE);
    P("DRM_CLOEXEC", DRM_CLOEXEC);
    P("DRM_RDWR", DRM_RDWR);
    P("sizeof.syncobj_create", sizeof(struct drm_syncobj_create));
    P("sizeof.syncobj_destroy", sizeof(struct drm_syncobj_destroy));
    P("sizeof.syncobj_handle", sizeof(struct drm_syncobj_handle));
    P("syncobj_handle.fd", offsetof(struct drm_syncobj_handle, fd));
    P("sizeof.syncobj_transfer", sizeof(struct drm_syncobj_transfer));
    P("syncobj_transfer.dst_point", offsetof(struct drm_syncobj_transfer, dst_point));
    P("sizeof.syncobj_wait", sizeof(struct drm_syncobj_wait));
    P("syncobj_wait.first_signaled", offsetof(struct drm_syncobj_wait, first_signaled));
    P("sizeof.syncobj_timeline_wait", sizeof(struct drm_syncobj_timeline_wait));
    P("syncobj_timeline_wait.first_signaled", offsetof(struct drm_syncobj_timeline_wait, first_signaled));
    P("sizeof.syncobj_array", sizeof(struct drm_syncobj_array));
    P("sizeof.syncobj_timeline_array", sizeof(struct drm_syncobj_timeline_array));
    P("syncobj_timeline_array.flags", offsetof(struct drm_syncobj_timeline_array, flags));
    P("DRM_SYNCOBJ_CREATE_SIGNALED", DRM_SYNCOBJ_CREATE_SIGNALED);
    P("DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE", DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE);
    P("DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE", DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE);
    P("DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL", DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL);
    P("DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT", DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT);
    P("DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE", DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE);
    P("DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED", DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED);
    P("DRM_IOCTL_SYNCOBJ_CREATE", (unsigned int)DRM_IOCTL_SYNCOBJ_CREATE);
    P("DRM_IOCTL_SYNCOBJ_DESTROY", (unsigned int)DRM_IOCTL_SYNCOBJ_DESTROY);
    P("DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD", (unsigned int)DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD);
    P("DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE", (unsigned int)DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE);
    P("DRM_IOCTL_SYNCOBJ_WAIT", (unsigned int)DRM_IOCTL_SYNCOBJ_WAIT);
    P("DRM_IOCTL_SYNCOBJ_RESET", (unsigned int)DRM_IOCTL_SYNCOBJ_RESET);
    P("DRM_IOCTL_SYNCOBJ_SIGNAL", (unsigned int)DRM_IOCTL_SYNCOBJ_SIGNAL);
    P("DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT", (unsigned int)DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT);
    P("DRM_IOCTL_SYNCOBJ_QUERY", (unsigned int)DRM_IOCTL_SYNCOBJ_QUERY);
    P("DRM_IOCTL_SYNCOBJ_TRANSFER", (unsigned int)DRM_IOCTL_SYNCOBJ_TRANSFER);
    P("DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL", (unsigned int)DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL);
    return 0;
}
"#;

fn c_values() -> Vec<(String, u64)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("uapi-probe");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, PROBE).unwrap();
    // drm.h: from libdrm-dev (scripts/setup-host installs it).
    let out = Command::new("cc")
        .args(["-Wall", "-Werror", "-std=c11", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-I{}", root.join("include/uapi/drm").display()))
        .arg("-I/usr/include/libdrm")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "compiling against vgpu_drm.h failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run probe");
    assert!(run.status.success());
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn rust_mirror_matches_c_header() {
    let rust: Vec<(&str, u64)> = vec![
        ("sizeof.get_param", size_of::<DrmVgpuGetParam>() as u64),
        ("get_param.param", offset_of!(DrmVgpuGetParam, param) as u64),
        ("get_param.pad", offset_of!(DrmVgpuGetParam, pad) as u64),
        ("get_param.value", offset_of!(DrmVgpuGetParam, value) as u64),
        ("sizeof.ping", size_of::<DrmVgpuPing>() as u64),
        ("ping.cookie", offset_of!(DrmVgpuPing, cookie) as u64),
        (
            "ping.timeout_ns",
            offset_of!(DrmVgpuPing, timeout_ns) as u64,
        ),
        ("ping.event_seq", offset_of!(DrmVgpuPing, event_seq) as u64),
        (
            "ping.latency_ns",
            offset_of!(DrmVgpuPing, latency_ns) as u64,
        ),
        (
            "DRM_IOCTL_VGPU_GET_PARAM",
            u64::from(uapi::DRM_IOCTL_VGPU_GET_PARAM),
        ),
        ("DRM_IOCTL_VGPU_PING", u64::from(uapi::DRM_IOCTL_VGPU_PING)),
        ("DRM_IOCTL_VERSION", u64::from(uapi::DRM_IOCTL_VERSION)),
        ("sizeof.drm_version", size_of::<uapi::DrmVersion>() as u64),
        ("VGPU_PARAM_GENERATION", param::GENERATION.into()),
        (
            "VGPU_PARAM_PROTOCOL_VERSION",
            param::PROTOCOL_VERSION.into(),
        ),
        (
            "VGPU_PARAM_FIRMWARE_VERSION",
            param::FIRMWARE_VERSION.into(),
        ),
        ("VGPU_PARAM_ENGINE_MASK", param::ENGINE_MASK.into()),
        ("VGPU_PARAM_VA_BITS", param::VA_BITS.into()),
        ("VGPU_PARAM_PAGE_SIZES", param::PAGE_SIZES.into()),
        ("VGPU_PARAM_MAX_CONTEXTS", param::MAX_CONTEXTS.into()),
        ("VGPU_PARAM_MAX_RING_SIZE", param::MAX_RING_SIZE.into()),
        ("VGPU_PARAM_MIN_RING_SIZE", param::MIN_RING_SIZE.into()),
        ("VGPU_PARAM_COMPUTE_UNITS", param::COMPUTE_UNITS.into()),
        ("VGPU_PARAM_DEVICE_ID", param::DEVICE_ID.into()),
        ("VGPU_PARAM_EVENTS_RECEIVED", param::EVENTS_RECEIVED.into()),
        (
            "VGPU_PARAM_HWIF_FINGERPRINT",
            param::HWIF_FINGERPRINT.into(),
        ),
        (
            "VGPU_PARAM_DEVICE_FINGERPRINT",
            param::DEVICE_FINGERPRINT.into(),
        ),
        (
            "sizeof.gem_create",
            size_of::<uapi::DrmVgpuGemCreate>() as u64,
        ),
        (
            "gem_create.size",
            offset_of!(uapi::DrmVgpuGemCreate, size) as u64,
        ),
        (
            "gem_create.flags",
            offset_of!(uapi::DrmVgpuGemCreate, flags) as u64,
        ),
        (
            "gem_create.handle",
            offset_of!(uapi::DrmVgpuGemCreate, handle) as u64,
        ),
        (
            "sizeof.gem_mmap_offset",
            size_of::<uapi::DrmVgpuGemMmapOffset>() as u64,
        ),
        (
            "gem_mmap_offset.handle",
            offset_of!(uapi::DrmVgpuGemMmapOffset, handle) as u64,
        ),
        (
            "gem_mmap_offset.pad",
            offset_of!(uapi::DrmVgpuGemMmapOffset, pad) as u64,
        ),
        (
            "gem_mmap_offset.offset",
            offset_of!(uapi::DrmVgpuGemMmapOffset, offset) as u64,
        ),
        ("sizeof.vm_bind", size_of::<uapi::DrmVgpuVmBind>() as u64),
        (
            "vm_bind.handle",
            offset_of!(uapi::DrmVgpuVmBind, handle) as u64,
        ),
        (
            "vm_bind.flags",
            offset_of!(uapi::DrmVgpuVmBind, flags) as u64,
        ),
        (
            "vm_bind.bo_offset",
            offset_of!(uapi::DrmVgpuVmBind, bo_offset) as u64,
        ),
        ("vm_bind.va", offset_of!(uapi::DrmVgpuVmBind, va) as u64),
        ("vm_bind.size", offset_of!(uapi::DrmVgpuVmBind, size) as u64),
        (
            "sizeof.vm_unbind",
            size_of::<uapi::DrmVgpuVmUnbind>() as u64,
        ),
        ("vm_unbind.va", offset_of!(uapi::DrmVgpuVmUnbind, va) as u64),
        (
            "vm_unbind.size",
            offset_of!(uapi::DrmVgpuVmUnbind, size) as u64,
        ),
        (
            "sizeof.ctx_create",
            size_of::<uapi::DrmVgpuCtxCreate>() as u64,
        ),
        (
            "ctx_create.priority",
            offset_of!(uapi::DrmVgpuCtxCreate, priority) as u64,
        ),
        (
            "ctx_create.engine_mask",
            offset_of!(uapi::DrmVgpuCtxCreate, engine_mask) as u64,
        ),
        (
            "ctx_create.flags",
            offset_of!(uapi::DrmVgpuCtxCreate, flags) as u64,
        ),
        (
            "ctx_create.ctx_id",
            offset_of!(uapi::DrmVgpuCtxCreate, ctx_id) as u64,
        ),
        (
            "sizeof.ctx_destroy",
            size_of::<uapi::DrmVgpuCtxDestroy>() as u64,
        ),
        (
            "ctx_destroy.ctx_id",
            offset_of!(uapi::DrmVgpuCtxDestroy, ctx_id) as u64,
        ),
        (
            "ctx_destroy.pad",
            offset_of!(uapi::DrmVgpuCtxDestroy, pad) as u64,
        ),
        (
            "sizeof.ctx_query",
            size_of::<uapi::DrmVgpuCtxQuery>() as u64,
        ),
        (
            "ctx_query.ctx_id",
            offset_of!(uapi::DrmVgpuCtxQuery, ctx_id) as u64,
        ),
        (
            "ctx_query.reset_status",
            offset_of!(uapi::DrmVgpuCtxQuery, reset_status) as u64,
        ),
        (
            "ctx_query.state",
            offset_of!(uapi::DrmVgpuCtxQuery, state) as u64,
        ),
        (
            "ctx_query.fault_access",
            offset_of!(uapi::DrmVgpuCtxQuery, fault_access) as u64,
        ),
        (
            "ctx_query.fault_va",
            offset_of!(uapi::DrmVgpuCtxQuery, fault_va) as u64,
        ),
        (
            "ctx_query.fault_reason",
            offset_of!(uapi::DrmVgpuCtxQuery, fault_reason) as u64,
        ),
        (
            "ctx_query.hangs",
            offset_of!(uapi::DrmVgpuCtxQuery, hangs) as u64,
        ),
        (
            "ctx_query.faults",
            offset_of!(uapi::DrmVgpuCtxQuery, faults) as u64,
        ),
        (
            "ctx_query.engine_error",
            offset_of!(uapi::DrmVgpuCtxQuery, engine_error) as u64,
        ),
        (
            "ctx_query.error_packet_va",
            offset_of!(uapi::DrmVgpuCtxQuery, error_packet_va) as u64,
        ),
        (
            "ctx_query.error_seqno",
            offset_of!(uapi::DrmVgpuCtxQuery, error_seqno) as u64,
        ),
        (
            "ctx_query.error_header",
            offset_of!(uapi::DrmVgpuCtxQuery, error_header) as u64,
        ),
        (
            "ctx_query.error_engine",
            offset_of!(uapi::DrmVgpuCtxQuery, error_engine) as u64,
        ),
        (
            "ctx_query.error_cmd_index",
            offset_of!(uapi::DrmVgpuCtxQuery, error_cmd_index) as u64,
        ),
        (
            "ctx_query.error_cmd_offset",
            offset_of!(uapi::DrmVgpuCtxQuery, error_cmd_offset) as u64,
        ),
        (
            "ctx_query.error_depth",
            offset_of!(uapi::DrmVgpuCtxQuery, error_depth) as u64,
        ),
        (
            "ctx_query.san_reports",
            offset_of!(uapi::DrmVgpuCtxQuery, san_reports) as u64,
        ),
        (
            "ctx_query.san_last_seq",
            offset_of!(uapi::DrmVgpuCtxQuery, san_last_seq) as u64,
        ),
        ("VGPU_CMD_INDEX_NONE", u64::from(uapi::CMD_INDEX_NONE)),
        (
            "sizeof.san_record",
            size_of::<uapi::DrmVgpuSanRecord>() as u64,
        ),
        (
            "san_record.check",
            offset_of!(uapi::DrmVgpuSanRecord, check) as u64,
        ),
        (
            "san_record.flags",
            offset_of!(uapi::DrmVgpuSanRecord, flags) as u64,
        ),
        (
            "san_record.seq",
            offset_of!(uapi::DrmVgpuSanRecord, seq) as u64,
        ),
        (
            "san_record.time_ns",
            offset_of!(uapi::DrmVgpuSanRecord, time_ns) as u64,
        ),
        (
            "san_record.ctx_id",
            offset_of!(uapi::DrmVgpuSanRecord, ctx_id) as u64,
        ),
        (
            "san_record.engine",
            offset_of!(uapi::DrmVgpuSanRecord, engine) as u64,
        ),
        (
            "san_record.rptr",
            offset_of!(uapi::DrmVgpuSanRecord, rptr) as u64,
        ),
        (
            "san_record.depth",
            offset_of!(uapi::DrmVgpuSanRecord, depth) as u64,
        ),
        (
            "san_record.packet_va",
            offset_of!(uapi::DrmVgpuSanRecord, packet_va) as u64,
        ),
        (
            "san_record.cmd_offset",
            offset_of!(uapi::DrmVgpuSanRecord, cmd_offset) as u64,
        ),
        (
            "san_record.packet_len",
            offset_of!(uapi::DrmVgpuSanRecord, packet_len) as u64,
        ),
        (
            "san_record.packet",
            offset_of!(uapi::DrmVgpuSanRecord, packet) as u64,
        ),
        (
            "san_record.access",
            offset_of!(uapi::DrmVgpuSanRecord, access) as u64,
        ),
        (
            "san_record.va",
            offset_of!(uapi::DrmVgpuSanRecord, va) as u64,
        ),
        (
            "san_record.size",
            offset_of!(uapi::DrmVgpuSanRecord, size) as u64,
        ),
        (
            "san_record.pa",
            offset_of!(uapi::DrmVgpuSanRecord, pa) as u64,
        ),
        (
            "san_record.prior_ctx",
            offset_of!(uapi::DrmVgpuSanRecord, prior_ctx) as u64,
        ),
        (
            "san_record.prior_engine",
            offset_of!(uapi::DrmVgpuSanRecord, prior_engine) as u64,
        ),
        (
            "san_record.prior_packet_va",
            offset_of!(uapi::DrmVgpuSanRecord, prior_packet_va) as u64,
        ),
        (
            "san_record.prior_header",
            offset_of!(uapi::DrmVgpuSanRecord, prior_header) as u64,
        ),
        (
            "san_record.prior_access",
            offset_of!(uapi::DrmVgpuSanRecord, prior_access) as u64,
        ),
        (
            "san_record.prior_time_ns",
            offset_of!(uapi::DrmVgpuSanRecord, prior_time_ns) as u64,
        ),
        (
            "san_record.detail",
            offset_of!(uapi::DrmVgpuSanRecord, detail) as u64,
        ),
        (
            "san_record.history",
            offset_of!(uapi::DrmVgpuSanRecord, history) as u64,
        ),
        (
            "san_record.object",
            offset_of!(uapi::DrmVgpuSanRecord, object) as u64,
        ),
        (
            "san_record.object_gen",
            offset_of!(uapi::DrmVgpuSanRecord, object_gen) as u64,
        ),
        (
            "san_record.object_gen_now",
            offset_of!(uapi::DrmVgpuSanRecord, object_gen_now) as u64,
        ),
        (
            "san_record.object_pa_now",
            offset_of!(uapi::DrmVgpuSanRecord, object_pa_now) as u64,
        ),
        (
            "san_record.released_ns",
            offset_of!(uapi::DrmVgpuSanRecord, released_ns) as u64,
        ),
        (
            "sizeof.san_report",
            size_of::<uapi::DrmVgpuSanReport>() as u64,
        ),
        (
            "san_report.ctx_id",
            offset_of!(uapi::DrmVgpuSanReport, ctx_id) as u64,
        ),
        (
            "san_report.pad",
            offset_of!(uapi::DrmVgpuSanReport, pad) as u64,
        ),
        (
            "san_report.after_seq",
            offset_of!(uapi::DrmVgpuSanReport, after_seq) as u64,
        ),
        (
            "san_report.report",
            offset_of!(uapi::DrmVgpuSanReport, report) as u64,
        ),
        (
            "DRM_IOCTL_VGPU_SAN_REPORT",
            u64::from(uapi::DRM_IOCTL_VGPU_SAN_REPORT),
        ),
        ("sizeof.doorbell", size_of::<uapi::DrmVgpuDoorbell>() as u64),
        (
            "doorbell.wptr",
            offset_of!(uapi::DrmVgpuDoorbell, wptr) as u64,
        ),
        (
            "doorbell.sleeping",
            offset_of!(uapi::DrmVgpuDoorbell, sleeping) as u64,
        ),
        (
            "doorbell.seen",
            offset_of!(uapi::DrmVgpuDoorbell, seen) as u64,
        ),
        (
            "doorbell.reserved",
            offset_of!(uapi::DrmVgpuDoorbell, reserved) as u64,
        ),
        (
            "sizeof.uq_create",
            size_of::<uapi::DrmVgpuUqCreate>() as u64,
        ),
        (
            "uq_create.priority",
            offset_of!(uapi::DrmVgpuUqCreate, priority) as u64,
        ),
        (
            "uq_create.engine",
            offset_of!(uapi::DrmVgpuUqCreate, engine) as u64,
        ),
        (
            "uq_create.ring_va",
            offset_of!(uapi::DrmVgpuUqCreate, ring_va) as u64,
        ),
        (
            "uq_create.doorbell_va",
            offset_of!(uapi::DrmVgpuUqCreate, doorbell_va) as u64,
        ),
        (
            "uq_create.ring_size",
            offset_of!(uapi::DrmVgpuUqCreate, ring_size) as u64,
        ),
        (
            "uq_create.flags",
            offset_of!(uapi::DrmVgpuUqCreate, flags) as u64,
        ),
        (
            "uq_create.ctx_id",
            offset_of!(uapi::DrmVgpuUqCreate, ctx_id) as u64,
        ),
        (
            "uq_create.pad",
            offset_of!(uapi::DrmVgpuUqCreate, pad) as u64,
        ),
        ("sizeof.uq_kick", size_of::<uapi::DrmVgpuUqKick>() as u64),
        (
            "uq_kick.ctx_id",
            offset_of!(uapi::DrmVgpuUqKick, ctx_id) as u64,
        ),
        ("uq_kick.pad", offset_of!(uapi::DrmVgpuUqKick, pad) as u64),
        (
            "DRM_IOCTL_VGPU_UQ_CREATE",
            u64::from(uapi::DRM_IOCTL_VGPU_UQ_CREATE),
        ),
        (
            "DRM_IOCTL_VGPU_UQ_KICK",
            u64::from(uapi::DRM_IOCTL_VGPU_UQ_KICK),
        ),
        ("sizeof.host_map", size_of::<uapi::DrmVgpuHostMap>() as u64),
        (
            "host_map.addr",
            offset_of!(uapi::DrmVgpuHostMap, addr) as u64,
        ),
        (
            "host_map.size",
            offset_of!(uapi::DrmVgpuHostMap, size) as u64,
        ),
        (
            "host_map.flags",
            offset_of!(uapi::DrmVgpuHostMap, flags) as u64,
        ),
        ("host_map.pad", offset_of!(uapi::DrmVgpuHostMap, pad) as u64),
        (
            "host_map.gpu_va",
            offset_of!(uapi::DrmVgpuHostMap, gpu_va) as u64,
        ),
        (
            "sizeof.host_unmap",
            size_of::<uapi::DrmVgpuHostUnmap>() as u64,
        ),
        (
            "host_unmap.gpu_va",
            offset_of!(uapi::DrmVgpuHostUnmap, gpu_va) as u64,
        ),
        (
            "DRM_IOCTL_VGPU_HOST_MAP",
            u64::from(uapi::DRM_IOCTL_VGPU_HOST_MAP),
        ),
        (
            "DRM_IOCTL_VGPU_HOST_UNMAP",
            u64::from(uapi::DRM_IOCTL_VGPU_HOST_UNMAP),
        ),
        (
            "VGPU_HOST_MAP_READ_ONLY",
            u64::from(uapi::HOST_MAP_READ_ONLY),
        ),
        ("VGPU_HOST_MAP_FLAGS", u64::from(uapi::HOST_MAP_FLAGS)),
        ("VGPU_HOST_MAP_MAX_SIZE", uapi::HOST_MAP_MAX_SIZE),
        ("VGPU_HOST_MAP_MAX_TOTAL", uapi::HOST_MAP_MAX_TOTAL),
        (
            "VGPU_CTX_STATE_USER_QUEUE",
            u64::from(uapi::CTX_STATE_USER_QUEUE),
        ),
        (
            "VGPU_CTX_STATE_SUSPENDED",
            u64::from(uapi::CTX_STATE_SUSPENDED),
        ),
        ("VGPU_UQ_CREATE_FLAGS", u64::from(uapi::UQ_CREATE_FLAGS)),
        ("VGPU_SAN_FLAG_STOPPED", u64::from(uapi::san::FLAG_STOPPED)),
        ("VGPU_SAN_FLAG_PRIOR", u64::from(uapi::san::FLAG_PRIOR)),
        ("VGPU_SAN_FLAG_PACKET", u64::from(uapi::san::FLAG_PACKET)),
        ("VGPU_SAN_PACKET_WORDS", uapi::san::PACKET_WORDS as u64),
        ("VGPU_SAN_HISTORY", uapi::san::HISTORY as u64),
        ("sizeof.fence", size_of::<uapi::DrmVgpuFence>() as u64),
        (
            "fence.ctx_id",
            offset_of!(uapi::DrmVgpuFence, ctx_id) as u64,
        ),
        (
            "fence.engine",
            offset_of!(uapi::DrmVgpuFence, engine) as u64,
        ),
        ("fence.seqno", offset_of!(uapi::DrmVgpuFence, seqno) as u64),
        ("sizeof.cmd", size_of::<uapi::DrmVgpuCmd>() as u64),
        ("cmd.va", offset_of!(uapi::DrmVgpuCmd, va) as u64),
        ("cmd.size", offset_of!(uapi::DrmVgpuCmd, size) as u64),
        ("sizeof.submit", size_of::<uapi::DrmVgpuSubmit>() as u64),
        (
            "submit.ctx_id",
            offset_of!(uapi::DrmVgpuSubmit, ctx_id) as u64,
        ),
        (
            "submit.engine",
            offset_of!(uapi::DrmVgpuSubmit, engine) as u64,
        ),
        ("submit.cmds", offset_of!(uapi::DrmVgpuSubmit, cmds) as u64),
        (
            "submit.num_cmds",
            offset_of!(uapi::DrmVgpuSubmit, num_cmds) as u64,
        ),
        (
            "submit.num_in_fences",
            offset_of!(uapi::DrmVgpuSubmit, num_in_fences) as u64,
        ),
        (
            "submit.in_fences",
            offset_of!(uapi::DrmVgpuSubmit, in_fences) as u64,
        ),
        (
            "submit.flags",
            offset_of!(uapi::DrmVgpuSubmit, flags) as u64,
        ),
        ("submit.pad", offset_of!(uapi::DrmVgpuSubmit, pad) as u64),
        (
            "submit.seqno",
            offset_of!(uapi::DrmVgpuSubmit, seqno) as u64,
        ),
        ("sizeof.wait", size_of::<uapi::DrmVgpuWait>() as u64),
        ("wait.fences", offset_of!(uapi::DrmVgpuWait, fences) as u64),
        (
            "wait.num_fences",
            offset_of!(uapi::DrmVgpuWait, num_fences) as u64,
        ),
        ("wait.flags", offset_of!(uapi::DrmVgpuWait, flags) as u64),
        (
            "wait.timeout_ns",
            offset_of!(uapi::DrmVgpuWait, timeout_ns) as u64,
        ),
        (
            "wait.first_signaled",
            offset_of!(uapi::DrmVgpuWait, first_signaled) as u64,
        ),
        ("wait.pad", offset_of!(uapi::DrmVgpuWait, pad) as u64),
        (
            "DRM_IOCTL_VGPU_GEM_CREATE",
            u64::from(uapi::DRM_IOCTL_VGPU_GEM_CREATE),
        ),
        (
            "DRM_IOCTL_VGPU_GEM_MMAP_OFFSET",
            u64::from(uapi::DRM_IOCTL_VGPU_GEM_MMAP_OFFSET),
        ),
        (
            "DRM_IOCTL_VGPU_VM_BIND",
            u64::from(uapi::DRM_IOCTL_VGPU_VM_BIND),
        ),
        (
            "DRM_IOCTL_VGPU_VM_UNBIND",
            u64::from(uapi::DRM_IOCTL_VGPU_VM_UNBIND),
        ),
        (
            "DRM_IOCTL_VGPU_CTX_CREATE",
            u64::from(uapi::DRM_IOCTL_VGPU_CTX_CREATE),
        ),
        (
            "DRM_IOCTL_VGPU_CTX_DESTROY",
            u64::from(uapi::DRM_IOCTL_VGPU_CTX_DESTROY),
        ),
        (
            "DRM_IOCTL_VGPU_CTX_QUERY",
            u64::from(uapi::DRM_IOCTL_VGPU_CTX_QUERY),
        ),
        (
            "DRM_IOCTL_VGPU_SUBMIT",
            u64::from(uapi::DRM_IOCTL_VGPU_SUBMIT),
        ),
        ("DRM_IOCTL_VGPU_WAIT", u64::from(uapi::DRM_IOCTL_VGPU_WAIT)),
        ("DRM_IOCTL_GEM_CLOSE", u64::from(uapi::DRM_IOCTL_GEM_CLOSE)),
        ("VGPU_GEM_CREATE_LAZY", u64::from(uapi::GEM_CREATE_LAZY)),
        ("VGPU_GEM_CREATE_VRAM", u64::from(uapi::GEM_CREATE_VRAM)),
        ("VGPU_GEM_CREATE_SYSTEM", u64::from(uapi::GEM_CREATE_SYSTEM)),
        (
            "VGPU_GEM_CREATE_CPU_ACCESS",
            u64::from(uapi::GEM_CREATE_CPU_ACCESS),
        ),
        ("VGPU_GEM_CREATE_FLAGS", u64::from(uapi::GEM_CREATE_FLAGS)),
        ("VGPU_GEM_MAX_SIZE", uapi::GEM_MAX_SIZE),
        ("VGPU_VM_BIND_READ", u64::from(uapi::VM_BIND_READ)),
        ("VGPU_VM_BIND_WRITE", u64::from(uapi::VM_BIND_WRITE)),
        ("VGPU_VM_BIND_EXEC", u64::from(uapi::VM_BIND_EXEC)),
        ("VGPU_VM_BIND_FLAGS", u64::from(uapi::VM_BIND_FLAGS)),
        ("VGPU_CTX_PRIORITY_LOW", u64::from(uapi::CTX_PRIORITY_LOW)),
        (
            "VGPU_CTX_PRIORITY_NORMAL",
            u64::from(uapi::CTX_PRIORITY_NORMAL),
        ),
        ("VGPU_CTX_PRIORITY_HIGH", u64::from(uapi::CTX_PRIORITY_HIGH)),
        (
            "VGPU_CTX_PRIORITY_REALTIME",
            u64::from(uapi::CTX_PRIORITY_REALTIME),
        ),
        ("VGPU_ENGINE_COPY", u64::from(uapi::ENGINE_COPY)),
        ("VGPU_ENGINE_COMPUTE", u64::from(uapi::ENGINE_COMPUTE)),
        (
            "VGPU_CTX_CREATE_REPLAYABLE",
            u64::from(uapi::CTX_CREATE_REPLAYABLE),
        ),
        ("VGPU_CTX_CREATE_FLAGS", u64::from(uapi::CTX_CREATE_FLAGS)),
        ("VGPU_CTX_RESET_NONE", u64::from(uapi::CTX_RESET_NONE)),
        ("VGPU_CTX_RESET_GUILTY", u64::from(uapi::CTX_RESET_GUILTY)),
        (
            "VGPU_CTX_RESET_INNOCENT",
            u64::from(uapi::CTX_RESET_INNOCENT),
        ),
        (
            "VGPU_CTX_RESET_VRAM_LOST",
            u64::from(uapi::CTX_RESET_VRAM_LOST),
        ),
        ("VGPU_CTX_STATE_ERRORED", u64::from(uapi::CTX_STATE_ERRORED)),
        ("VGPU_CTX_STATE_BANNED", u64::from(uapi::CTX_STATE_BANNED)),
        ("VGPU_CTX_STATE_FAULTED", u64::from(uapi::CTX_STATE_FAULTED)),
        (
            "VGPU_CTX_STATE_DEVICE_LOST",
            u64::from(uapi::CTX_STATE_DEVICE_LOST),
        ),
        ("VGPU_ACCESS_READ", u64::from(uapi::ACCESS_READ)),
        ("VGPU_ACCESS_WRITE", u64::from(uapi::ACCESS_WRITE)),
        ("VGPU_ACCESS_EXECUTE", u64::from(uapi::ACCESS_EXECUTE)),
        ("VGPU_ACCESS_ATOMIC", u64::from(uapi::ACCESS_ATOMIC)),
        ("VGPU_SUBMIT_MAX_CMDS", u64::from(uapi::SUBMIT_MAX_CMDS)),
        (
            "VGPU_SUBMIT_MAX_IN_FENCES",
            u64::from(uapi::SUBMIT_MAX_IN_FENCES),
        ),
        ("VGPU_CTX_MAX_PENDING", u64::from(uapi::CTX_MAX_PENDING)),
        (
            "VGPU_SUBMIT_BUSY_IS_EBUSY",
            u64::from(uapi::SUBMIT_BUSY_IS_EBUSY),
        ),
        ("VGPU_SUBMIT_FLAGS", u64::from(uapi::SUBMIT_FLAGS)),
        ("VGPU_WAIT_ALL", u64::from(uapi::WAIT_ALL)),
        ("VGPU_WAIT_FLAGS", u64::from(uapi::WAIT_FLAGS)),
        ("VGPU_WAIT_MAX_FENCES", u64::from(uapi::WAIT_MAX_FENCES)),
        ("VGPU_PARAM_VA_START", param::VA_START.into()),
        ("VGPU_PARAM_VA_END", param::VA_END.into()),
        ("VGPU_PARAM_VRAM_SIZE", param::VRAM_SIZE.into()),
        ("VGPU_PARAM_VRAM_VISIBLE", param::VRAM_VISIBLE.into()),
        ("VGPU_PARAM_PM_STATE", param::PM_STATE.into()),
        ("VGPU_PARAM_PM_SUSPENDS", param::PM_SUSPENDS.into()),
        ("VGPU_PARAM_PM_RESUMES", param::PM_RESUMES.into()),
        ("VGPU_PARAM_PM_SUSPENDED_MS", param::PM_SUSPENDED_MS.into()),
        ("VGPU_PARAM_SYSTEM_SLEEPS", param::SYSTEM_SLEEPS.into()),
        (
            "VGPU_PARAM_PM_D3COLD_SUSPENDS",
            param::PM_D3COLD_SUSPENDS.into(),
        ),
        (
            "VGPU_PARAM_VIRTUAL_FUNCTION",
            param::VIRTUAL_FUNCTION.into(),
        ),
        ("VGPU_PARAM_COUNT", param::COUNT.into()),
        ("sizeof.counters", size_of::<uapi::DrmVgpuCounters>() as u64),
        (
            "counters.busy_ns",
            offset_of!(uapi::DrmVgpuCounters, busy_ns) as u64,
        ),
        (
            "counters.packets",
            offset_of!(uapi::DrmVgpuCounters, packets) as u64,
        ),
        (
            "counters.bytes",
            offset_of!(uapi::DrmVgpuCounters, bytes) as u64,
        ),
        (
            "counters.faults",
            offset_of!(uapi::DrmVgpuCounters, faults) as u64,
        ),
        (
            "counters.errors",
            offset_of!(uapi::DrmVgpuCounters, errors) as u64,
        ),
        (
            "counters.resets",
            offset_of!(uapi::DrmVgpuCounters, resets) as u64,
        ),
        (
            "counters.fences",
            offset_of!(uapi::DrmVgpuCounters, fences) as u64,
        ),
        (
            "counters.tlb_hits",
            offset_of!(uapi::DrmVgpuCounters, tlb_hits) as u64,
        ),
        (
            "counters.tlb_misses",
            offset_of!(uapi::DrmVgpuCounters, tlb_misses) as u64,
        ),
        (
            "counters.workgroups",
            offset_of!(uapi::DrmVgpuCounters, workgroups) as u64,
        ),
        (
            "counters.lane_ops",
            offset_of!(uapi::DrmVgpuCounters, lane_ops) as u64,
        ),
        (
            "counters.cycles",
            offset_of!(uapi::DrmVgpuCounters, cycles) as u64,
        ),
        (
            "sizeof.ctx_stats",
            size_of::<uapi::DrmVgpuCtxStats>() as u64,
        ),
        (
            "ctx_stats.ctx_id",
            offset_of!(uapi::DrmVgpuCtxStats, ctx_id) as u64,
        ),
        (
            "ctx_stats.pid",
            offset_of!(uapi::DrmVgpuCtxStats, pid) as u64,
        ),
        (
            "ctx_stats.priority",
            offset_of!(uapi::DrmVgpuCtxStats, priority) as u64,
        ),
        (
            "ctx_stats.engines",
            offset_of!(uapi::DrmVgpuCtxStats, engines) as u64,
        ),
        (
            "ctx_stats.reset_status",
            offset_of!(uapi::DrmVgpuCtxStats, reset_status) as u64,
        ),
        (
            "ctx_stats.state",
            offset_of!(uapi::DrmVgpuCtxStats, state) as u64,
        ),
        (
            "ctx_stats.hangs",
            offset_of!(uapi::DrmVgpuCtxStats, hangs) as u64,
        ),
        (
            "ctx_stats.faults",
            offset_of!(uapi::DrmVgpuCtxStats, faults) as u64,
        ),
        (
            "ctx_stats.mem_bytes",
            offset_of!(uapi::DrmVgpuCtxStats, mem_bytes) as u64,
        ),
        (
            "ctx_stats.submitted",
            offset_of!(uapi::DrmVgpuCtxStats, submitted) as u64,
        ),
        (
            "ctx_stats.completed",
            offset_of!(uapi::DrmVgpuCtxStats, completed) as u64,
        ),
        (
            "ctx_stats.counters",
            offset_of!(uapi::DrmVgpuCtxStats, counters) as u64,
        ),
        (
            "ctx_stats.engine_error",
            offset_of!(uapi::DrmVgpuCtxStats, engine_error) as u64,
        ),
        (
            "ctx_stats.error_engine",
            offset_of!(uapi::DrmVgpuCtxStats, error_engine) as u64,
        ),
        (
            "ctx_stats.error_header",
            offset_of!(uapi::DrmVgpuCtxStats, error_header) as u64,
        ),
        (
            "ctx_stats.error_cmd_index",
            offset_of!(uapi::DrmVgpuCtxStats, error_cmd_index) as u64,
        ),
        (
            "ctx_stats.error_packet_va",
            offset_of!(uapi::DrmVgpuCtxStats, error_packet_va) as u64,
        ),
        (
            "ctx_stats.error_seqno",
            offset_of!(uapi::DrmVgpuCtxStats, error_seqno) as u64,
        ),
        (
            "ctx_stats.error_cmd_offset",
            offset_of!(uapi::DrmVgpuCtxStats, error_cmd_offset) as u64,
        ),
        (
            "ctx_stats.san_reports",
            offset_of!(uapi::DrmVgpuCtxStats, san_reports) as u64,
        ),
        (
            "ctx_stats.vram_bytes",
            offset_of!(uapi::DrmVgpuCtxStats, vram_bytes) as u64,
        ),
        (
            "sizeof.query_stats",
            size_of::<uapi::DrmVgpuQueryStats>() as u64,
        ),
        (
            "query_stats.sample_ns",
            offset_of!(uapi::DrmVgpuQueryStats, sample_ns) as u64,
        ),
        (
            "query_stats.device",
            offset_of!(uapi::DrmVgpuQueryStats, device) as u64,
        ),
        (
            "query_stats.engines",
            offset_of!(uapi::DrmVgpuQueryStats, engines) as u64,
        ),
        (
            "query_stats.mem_bytes",
            offset_of!(uapi::DrmVgpuQueryStats, mem_bytes) as u64,
        ),
        (
            "query_stats.mem_objects",
            offset_of!(uapi::DrmVgpuQueryStats, mem_objects) as u64,
        ),
        (
            "query_stats.pt_bytes",
            offset_of!(uapi::DrmVgpuQueryStats, pt_bytes) as u64,
        ),
        (
            "query_stats.engine_resets",
            offset_of!(uapi::DrmVgpuQueryStats, engine_resets) as u64,
        ),
        (
            "query_stats.device_resets",
            offset_of!(uapi::DrmVgpuQueryStats, device_resets) as u64,
        ),
        (
            "query_stats.hangs",
            offset_of!(uapi::DrmVgpuQueryStats, hangs) as u64,
        ),
        (
            "query_stats.faults",
            offset_of!(uapi::DrmVgpuQueryStats, faults) as u64,
        ),
        (
            "query_stats.wedged",
            offset_of!(uapi::DrmVgpuQueryStats, wedged) as u64,
        ),
        (
            "query_stats.num_contexts",
            offset_of!(uapi::DrmVgpuQueryStats, num_contexts) as u64,
        ),
        (
            "query_stats.contexts",
            offset_of!(uapi::DrmVgpuQueryStats, contexts) as u64,
        ),
        (
            "query_stats.flags",
            offset_of!(uapi::DrmVgpuQueryStats, flags) as u64,
        ),
        (
            "query_stats.pad",
            offset_of!(uapi::DrmVgpuQueryStats, pad) as u64,
        ),
        (
            "query_stats.mem_limit",
            offset_of!(uapi::DrmVgpuQueryStats, mem_limit) as u64,
        ),
        (
            "query_stats.file_mem_limit",
            offset_of!(uapi::DrmVgpuQueryStats, file_mem_limit) as u64,
        ),
        (
            "query_stats.mem_refused",
            offset_of!(uapi::DrmVgpuQueryStats, mem_refused) as u64,
        ),
        (
            "query_stats.retired_pages",
            offset_of!(uapi::DrmVgpuQueryStats, retired_pages) as u64,
        ),
        (
            "query_stats.lost",
            offset_of!(uapi::DrmVgpuQueryStats, lost) as u64,
        ),
        (
            "query_stats.vram_used",
            offset_of!(uapi::DrmVgpuQueryStats, vram_used) as u64,
        ),
        (
            "query_stats.vram_evictions",
            offset_of!(uapi::DrmVgpuQueryStats, vram_evictions) as u64,
        ),
        (
            "DRM_IOCTL_VGPU_QUERY_STATS",
            u64::from(uapi::DRM_IOCTL_VGPU_QUERY_STATS),
        ),
        (
            "sizeof.fence_export",
            size_of::<uapi::DrmVgpuFenceExport>() as u64,
        ),
        (
            "fence_export.fence",
            offset_of!(uapi::DrmVgpuFenceExport, fence) as u64,
        ),
        (
            "fence_export.flags",
            offset_of!(uapi::DrmVgpuFenceExport, flags) as u64,
        ),
        (
            "fence_export.fd",
            offset_of!(uapi::DrmVgpuFenceExport, fd) as u64,
        ),
        (
            "DRM_IOCTL_VGPU_FENCE_EXPORT",
            u64::from(uapi::DRM_IOCTL_VGPU_FENCE_EXPORT),
        ),
        ("VGPU_STATS_ENGINES", uapi::STATS_ENGINES as u64),
        (
            "VGPU_STATS_MAX_CONTEXTS",
            u64::from(uapi::STATS_MAX_CONTEXTS),
        ),
        (
            "submit.in_syncs",
            offset_of!(uapi::DrmVgpuSubmit, in_syncs) as u64,
        ),
        (
            "submit.out_syncs",
            offset_of!(uapi::DrmVgpuSubmit, out_syncs) as u64,
        ),
        (
            "submit.num_in_syncs",
            offset_of!(uapi::DrmVgpuSubmit, num_in_syncs) as u64,
        ),
        (
            "submit.num_out_syncs",
            offset_of!(uapi::DrmVgpuSubmit, num_out_syncs) as u64,
        ),
        ("submit.bos", offset_of!(uapi::DrmVgpuSubmit, bos) as u64),
        (
            "submit.num_bos",
            offset_of!(uapi::DrmVgpuSubmit, num_bos) as u64,
        ),
        ("submit.pad2", offset_of!(uapi::DrmVgpuSubmit, pad2) as u64),
        ("sizeof.sync", size_of::<uapi::DrmVgpuSync>() as u64),
        ("sync.handle", offset_of!(uapi::DrmVgpuSync, handle) as u64),
        ("sync.flags", offset_of!(uapi::DrmVgpuSync, flags) as u64),
        ("sync.point", offset_of!(uapi::DrmVgpuSync, point) as u64),
        (
            "sizeof.submit_bo",
            size_of::<uapi::DrmVgpuSubmitBo>() as u64,
        ),
        (
            "submit_bo.handle",
            offset_of!(uapi::DrmVgpuSubmitBo, handle) as u64,
        ),
        (
            "submit_bo.flags",
            offset_of!(uapi::DrmVgpuSubmitBo, flags) as u64,
        ),
        ("sizeof.vm_op", size_of::<uapi::DrmVgpuVmOp>() as u64),
        ("vm_op.op", offset_of!(uapi::DrmVgpuVmOp, op) as u64),
        ("vm_op.flags", offset_of!(uapi::DrmVgpuVmOp, flags) as u64),
        ("vm_op.handle", offset_of!(uapi::DrmVgpuVmOp, handle) as u64),
        ("vm_op.pad", offset_of!(uapi::DrmVgpuVmOp, pad) as u64),
        (
            "vm_op.bo_offset",
            offset_of!(uapi::DrmVgpuVmOp, bo_offset) as u64,
        ),
        ("vm_op.va", offset_of!(uapi::DrmVgpuVmOp, va) as u64),
        ("vm_op.size", offset_of!(uapi::DrmVgpuVmOp, size) as u64),
        (
            "sizeof.vm_bind_ops",
            size_of::<uapi::DrmVgpuVmBindOps>() as u64,
        ),
        (
            "vm_bind_ops.ops",
            offset_of!(uapi::DrmVgpuVmBindOps, ops) as u64,
        ),
        (
            "vm_bind_ops.num_ops",
            offset_of!(uapi::DrmVgpuVmBindOps, num_ops) as u64,
        ),
        (
            "vm_bind_ops.flags",
            offset_of!(uapi::DrmVgpuVmBindOps, flags) as u64,
        ),
        (
            "vm_bind_ops.in_syncs",
            offset_of!(uapi::DrmVgpuVmBindOps, in_syncs) as u64,
        ),
        (
            "vm_bind_ops.out_syncs",
            offset_of!(uapi::DrmVgpuVmBindOps, out_syncs) as u64,
        ),
        (
            "vm_bind_ops.num_in_syncs",
            offset_of!(uapi::DrmVgpuVmBindOps, num_in_syncs) as u64,
        ),
        (
            "vm_bind_ops.num_out_syncs",
            offset_of!(uapi::DrmVgpuVmBindOps, num_out_syncs) as u64,
        ),
        (
            "DRM_IOCTL_VGPU_VM_BIND_OPS",
            u64::from(uapi::DRM_IOCTL_VGPU_VM_BIND_OPS),
        ),
        ("VGPU_CTX_MAX_PENDING", u64::from(uapi::CTX_MAX_PENDING)),
        ("VGPU_SUBMIT_MAX_SYNCS", u64::from(uapi::SUBMIT_MAX_SYNCS)),
        ("VGPU_SUBMIT_MAX_BOS", u64::from(uapi::SUBMIT_MAX_BOS)),
        ("VGPU_SUBMIT_BO_READ", u64::from(uapi::SUBMIT_BO_READ)),
        ("VGPU_SUBMIT_BO_WRITE", u64::from(uapi::SUBMIT_BO_WRITE)),
        ("VGPU_SUBMIT_BO_FLAGS", u64::from(uapi::SUBMIT_BO_FLAGS)),
        ("VGPU_VM_OP_MAP", u64::from(uapi::VM_OP_MAP)),
        ("VGPU_VM_OP_UNMAP", u64::from(uapi::VM_OP_UNMAP)),
        ("VGPU_VM_BIND_MAX_OPS", u64::from(uapi::VM_BIND_MAX_OPS)),
        ("VGPU_VM_BIND_MAX_SYNCS", u64::from(uapi::VM_BIND_MAX_SYNCS)),
        ("DRM_IOCTL_GET_CAP", u64::from(uapi::DRM_IOCTL_GET_CAP)),
        ("DRM_CAP_PRIME", uapi::DRM_CAP_PRIME),
        ("DRM_PRIME_CAP_IMPORT", uapi::DRM_PRIME_CAP_IMPORT),
        ("DRM_PRIME_CAP_EXPORT", uapi::DRM_PRIME_CAP_EXPORT),
        ("DRM_CAP_SYNCOBJ", uapi::DRM_CAP_SYNCOBJ),
        ("DRM_CAP_SYNCOBJ_TIMELINE", uapi::DRM_CAP_SYNCOBJ_TIMELINE),
        (
            "sizeof.prime_handle",
            size_of::<uapi::DrmPrimeHandle>() as u64,
        ),
        (
            "prime_handle.fd",
            offset_of!(uapi::DrmPrimeHandle, fd) as u64,
        ),
        (
            "DRM_IOCTL_PRIME_HANDLE_TO_FD",
            u64::from(uapi::DRM_IOCTL_PRIME_HANDLE_TO_FD),
        ),
        (
            "DRM_IOCTL_PRIME_FD_TO_HANDLE",
            u64::from(uapi::DRM_IOCTL_PRIME_FD_TO_HANDLE),
        ),
        ("DRM_CLOEXEC", u64::from(uapi::DRM_CLOEXEC)),
        ("DRM_RDWR", u64::from(uapi::DRM_RDWR)),
        (
            "sizeof.syncobj_create",
            size_of::<uapi::DrmSyncobjCreate>() as u64,
        ),
        (
            "sizeof.syncobj_destroy",
            size_of::<uapi::DrmSyncobjDestroy>() as u64,
        ),
        (
            "sizeof.syncobj_handle",
            size_of::<uapi::DrmSyncobjHandle>() as u64,
        ),
        (
            "syncobj_handle.fd",
            offset_of!(uapi::DrmSyncobjHandle, fd) as u64,
        ),
        (
            "sizeof.syncobj_transfer",
            size_of::<uapi::DrmSyncobjTransfer>() as u64,
        ),
        (
            "syncobj_transfer.dst_point",
            offset_of!(uapi::DrmSyncobjTransfer, dst_point) as u64,
        ),
        (
            "sizeof.syncobj_wait",
            size_of::<uapi::DrmSyncobjWait>() as u64,
        ),
        (
            "syncobj_wait.first_signaled",
            offset_of!(uapi::DrmSyncobjWait, first_signaled) as u64,
        ),
        (
            "sizeof.syncobj_timeline_wait",
            size_of::<uapi::DrmSyncobjTimelineWait>() as u64,
        ),
        (
            "syncobj_timeline_wait.first_signaled",
            offset_of!(uapi::DrmSyncobjTimelineWait, first_signaled) as u64,
        ),
        (
            "sizeof.syncobj_array",
            size_of::<uapi::DrmSyncobjArray>() as u64,
        ),
        (
            "sizeof.syncobj_timeline_array",
            size_of::<uapi::DrmSyncobjTimelineArray>() as u64,
        ),
        (
            "syncobj_timeline_array.flags",
            offset_of!(uapi::DrmSyncobjTimelineArray, flags) as u64,
        ),
        (
            "DRM_SYNCOBJ_CREATE_SIGNALED",
            u64::from(uapi::SYNCOBJ_CREATE_SIGNALED),
        ),
        (
            "DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE",
            u64::from(uapi::SYNCOBJ_FD_TO_HANDLE_IMPORT_SYNC_FILE),
        ),
        (
            "DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE",
            u64::from(uapi::SYNCOBJ_HANDLE_TO_FD_EXPORT_SYNC_FILE),
        ),
        (
            "DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL",
            u64::from(uapi::SYNCOBJ_WAIT_ALL),
        ),
        (
            "DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT",
            u64::from(uapi::SYNCOBJ_WAIT_FOR_SUBMIT),
        ),
        (
            "DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE",
            u64::from(uapi::SYNCOBJ_WAIT_AVAILABLE),
        ),
        (
            "DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED",
            u64::from(uapi::SYNCOBJ_QUERY_LAST_SUBMITTED),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_CREATE",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_CREATE),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_DESTROY",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_DESTROY),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_WAIT",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_WAIT),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_RESET",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_RESET),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_SIGNAL",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_SIGNAL),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_QUERY",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_QUERY),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_TRANSFER",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_TRANSFER),
        ),
        (
            "DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL",
            u64::from(uapi::DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL),
        ),
    ];
    let c = c_values();
    assert_eq!(c.len(), rust.len(), "probe and mirror list differ");
    for ((ck, cv), (rk, rv)) in c.iter().zip(&rust) {
        assert_eq!(ck, rk);
        assert_eq!(cv, rv, "{ck}: C header says {cv}, Rust mirror says {rv}");
    }
}

/// `#define PREFIXNAME VALUE` lines of the header: (NAME, VALUE).
fn defines(prefix: &str) -> Vec<(String, u32)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let h = std::fs::read_to_string(root.join("include/uapi/drm/vgpu_drm.h")).unwrap();
    h.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("#define ")?.strip_prefix(prefix)?;
            let mut it = rest.split_whitespace();
            let name = it.next()?.to_owned();
            let value = it.next()?.parse().ok()?;
            Some((name, value))
        })
        .collect()
}

#[test]
fn engine_error_and_fault_reason_names_are_hwifs() {
    use vgpu_hwif::mmu::FaultReason;
    use vgpu_hwif::packet::EngineError;
    let errors = defines("VGPU_ENGINE_ERROR_");
    assert_eq!(errors.len(), 18, "NONE and every EngineError");
    for (name, v) in &errors {
        match EngineError::from_u32(*v) {
            Some(e) => assert_eq!(e.name(), name, "VGPU_ENGINE_ERROR_{name} = {v}"),
            None => assert_eq!((name.as_str(), *v), ("NONE", 0)),
        }
    }
    assert!(
        EngineError::from_u32(errors.len() as u32).is_none(),
        "every error is in the header"
    );
    assert_eq!(uapi::engine_error::SANITIZER, EngineError::Sanitizer as u32);
    assert_eq!(uapi::engine_error::INTERNAL, EngineError::Internal as u32);
    assert_eq!(
        uapi::engine_error::BAD_HEADER,
        EngineError::BadHeader as u32
    );
    let reasons = defines("VGPU_FAULT_REASON_");
    assert_eq!(
        reasons,
        uapi::fault_reason::ALL
            .iter()
            .map(|&(v, n)| (n.to_owned(), v))
            .collect::<Vec<_>>()
    );
    for (name, v) in &reasons {
        match FaultReason::from_u8(*v as u8) {
            Some(r) => assert_eq!(r.name(), name, "VGPU_FAULT_REASON_{name} = {v}"),
            None => assert_eq!((name.as_str(), *v), ("NONE", 0)),
        }
    }
}

#[test]
fn sanitizer_checks_in_header_are_hwifs() {
    use vgpu_hwif::sanitize::{Check, CHECKS};
    let checks: Vec<(String, u32)> = defines("VGPU_SAN_")
        .into_iter()
        .filter(|(n, _)| !n.starts_with("FLAG_") && !n.contains("WORDS") && n != "HISTORY")
        .collect();
    assert_eq!(checks.len(), CHECKS);
    for (name, v) in &checks {
        let c = Check::from_u32(*v).unwrap();
        assert_eq!(
            c.id(),
            format!("SAN-{}", name.replace('_', "-")),
            "VGPU_SAN_{name}"
        );
    }
    assert_eq!(uapi::san::TEARDOWN, Check::Teardown as u32);
    assert_eq!(uapi::san::RING_UNPUBLISHED, Check::RingUnpublished as u32);
    assert_eq!(
        size_of::<uapi::DrmVgpuSanRecord>(),
        size_of::<vgpu_hwif::sanitize::SanReport>(),
        "the record mirrors hwif's report"
    );
}

#[test]
fn every_param_define_in_header_is_mirrored() {
    // A new VGPU_PARAM_* in the header without a mirror entry fails here.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let h = std::fs::read_to_string(root.join("include/uapi/drm/vgpu_drm.h")).unwrap();
    let n = h
        .lines()
        .filter(|l| l.starts_with("#define VGPU_PARAM_"))
        .count();
    // COUNT is one past the last; params start at 1.
    assert_eq!(n as u32, param::COUNT, "VGPU_PARAM_* defines vs mirror");
}
