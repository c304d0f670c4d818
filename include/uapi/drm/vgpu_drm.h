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
#define VGPU_PARAM_COUNT             0x0f /* one past the last valid parameter */

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

#define DRM_VGPU_GET_PARAM  0x00
#define DRM_VGPU_PING       0x01

/* Note: enum members, not #defines, so that bindgen can resolve them. */
enum {
	DRM_IOCTL_VGPU_GET_PARAM = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_GET_PARAM,
					    struct drm_vgpu_get_param),
	DRM_IOCTL_VGPU_PING      = DRM_IOWR(DRM_COMMAND_BASE + DRM_VGPU_PING,
					    struct drm_vgpu_ping),
};

#if defined(__cplusplus)
}
#endif

#endif /* __VGPU_DRM_H__ */
