/* uapi_check: exercises the vgpu render node through the C uAPI header
 * exactly as a C program would, including the error paths.
 * Exit status 0 when every check passes; each check prints one line. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "vgpu_drm.h"

static int failures;

static void check(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok" : "FAIL", what);
	if (!ok)
		failures++;
}

static int get_param(int fd, uint32_t param, uint32_t pad, uint64_t *value)
{
	struct drm_vgpu_get_param p = { .param = param, .pad = pad };
	int rc = ioctl(fd, DRM_IOCTL_VGPU_GET_PARAM, &p);
	if (rc == 0 && value)
		*value = p.value;
	return rc == 0 ? 0 : errno;
}

int main(int argc, char **argv)
{
	const char *node = argc > 1 ? argv[1] : "/dev/dri/renderD128";
	int fd = open(node, O_RDWR | O_CLOEXEC);
	uint64_t v = 0;

	if (fd < 0) {
		perror(node);
		return 2;
	}
	check(get_param(fd, VGPU_PARAM_GENERATION, 0, &v) == 0 && (v == 1 || v == 2),
	      "GET_PARAM(GENERATION) is 1 or 2");
	printf("generation %llu\n", (unsigned long long)v);
	uint64_t want_va = v == 2 ? 48 : 40;
	check(get_param(fd, VGPU_PARAM_VA_BITS, 0, &v) == 0 && v == want_va,
	      "GET_PARAM(VA_BITS) is 40 on gen 1, 48 on gen 2");
	for (uint32_t p = 1; p < VGPU_PARAM_COUNT; p++) {
		char what[64];
		snprintf(what, sizeof(what), "GET_PARAM(%u) succeeds", p);
		check(get_param(fd, p, 0, NULL) == 0, what);
	}
	check(get_param(fd, 0, 0, NULL) == EINVAL, "GET_PARAM(0) fails with EINVAL");
	check(get_param(fd, VGPU_PARAM_COUNT, 0, NULL) == EINVAL, "GET_PARAM(COUNT) fails with EINVAL");
	check(get_param(fd, 0xffffffffu, 0, NULL) == EINVAL, "GET_PARAM(0xffffffff) fails with EINVAL");
	check(get_param(fd, VGPU_PARAM_GENERATION, 1, NULL) == EINVAL,
	      "GET_PARAM with nonzero pad fails with EINVAL");

	struct drm_vgpu_ping ping = { .cookie = 0x1234abcd5678ef00ull, .timeout_ns = 2000000000ull };
	int rc = ioctl(fd, DRM_IOCTL_VGPU_PING, &ping);
	check(rc == 0 && ping.event_seq > 0, "PING returns the event's sequence number");
	struct drm_vgpu_ping ping2 = { .cookie = 7, .timeout_ns = 2000000000ull };
	rc = ioctl(fd, DRM_IOCTL_VGPU_PING, &ping2);
	check(rc == 0 && ping2.event_seq > ping.event_seq, "event sequence numbers increase");
	printf("ping latency %llu ns\n", (unsigned long long)ping2.latency_ns);

	/* An ioctl number from another driver's range is refused. */
	check(ioctl(fd, DRM_IOWR(DRM_COMMAND_BASE + 0x3f, struct drm_vgpu_ping), &ping) == -1,
	      "unknown vgpu ioctl is refused");
	close(fd);
	printf("uapi_check: %d failures\n", failures);
	return failures ? 1 : 0;
}
