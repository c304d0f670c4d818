/* Failure mode: the device goes away, as a C application sees it.
 *
 * The render node's PCI function is unbound from the driver through sysfs
 * (what a hot-unplug or a driver reload does). The next synchronize fails
 * with VGPU_ERROR_DEVICE_LOST, vgpu_last_error() names the call, the KMD
 * context and the reason, vgpu_context_status() says VGPU_LOST_REMOVED, and
 * every later call fails the same way. The function is bound again at the
 * end and a new context works. Needs root.
 *
 *   c-device_lost      exit status 0 when the loss is reported and the rebind works
 */
#include <dirent.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "vgpu.h"

static int setup_failed(const char *call)
{
	printf("device-lost: FAIL %s: %s\n", call, vgpu_last_error());
	return 1;
}

static int write_sysfs(const char *path, const char *value)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	int rc = fputs(value, f) < 0 ? -1 : 0;
	if (fclose(f))
		rc = -1;
	return rc;
}

/* The PCI name of the first render node the vgpu driver drives (the node
 * number changes when the device is bound again). */
static int vgpu_pci_name(char *out, size_t len)
{
	DIR *d = opendir("/sys/class/drm");
	struct dirent *e;
	int rc = -1;

	if (!d)
		return -1;
	while (rc && (e = readdir(d))) {
		char path[PATH_MAX], link[PATH_MAX];
		ssize_t n;

		if (strncmp(e->d_name, "renderD", 7))
			continue;
		snprintf(path, sizeof(path), "/sys/class/drm/%s/device/driver", e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (strcmp(basename(link), "vgpu"))
			continue;
		snprintf(path, sizeof(path), "/sys/class/drm/%s/device", e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		snprintf(out, len, "%s", basename(link));
		rc = 0;
	}
	closedir(d);
	return rc;
}

int main(void)
{
	vgpu_context_t ctx, ctx2;
	vgpu_stream_t s;
	vgpu_buffer_t b, later_buf;

	char pci[64];
	if (vgpu_pci_name(pci, sizeof(pci))) {
		printf("device-lost: FAIL no render node driven by vgpu under /sys/class/drm\n");
		return 1;
	}

	if (vgpu_context_create(0, &ctx))
		return setup_failed("vgpu_context_create");
	if (vgpu_stream_create(ctx, &s))
		return setup_failed("vgpu_stream_create");
	if (vgpu_mem_alloc(ctx, 4096, VGPU_MEM_DEVICE_LOCAL, &b))
		return setup_failed("vgpu_mem_alloc");
	if (vgpu_memset_async(s, b, 0, 1, 4096) || vgpu_stream_synchronize(s))
		return setup_failed("vgpu_memset_async");

	printf("device-lost: unbinding %s from the driver\n", pci);
	if (write_sysfs("/sys/bus/pci/drivers/vgpu/unbind", pci)) {
		printf("device-lost: FAIL unbind %s (root needed)\n", pci);
		return 1;
	}
	vgpu_status st = vgpu_memset_async(s, b, 0, 2, 4096);
	if (st == VGPU_SUCCESS)
		st = vgpu_stream_synchronize(s);
	printf("device-lost: the call returned %d (%s)\n", st, vgpu_status_string(st));
	printf("device-lost: the application sees: %s\n", st ? vgpu_last_error() : "success");

	vgpu_context_state cs = { 0 };
	vgpu_status qs = vgpu_context_status(ctx, &cs);
	printf("device-lost: vgpu_context_status: reason %u, kmd context %u\n", cs.reason, cs.kmd_context);
	vgpu_status later = vgpu_mem_alloc(ctx, 64, VGPU_MEM_DEVICE_LOCAL, &later_buf);
	printf("device-lost: and every later call: %s\n", later ? vgpu_last_error() : "success");
	vgpu_context_destroy(ctx);

	int rebound = write_sysfs("/sys/bus/pci/drivers/vgpu/bind", pci) == 0;
	int works = rebound && vgpu_context_create(0, &ctx2) == VGPU_SUCCESS;
	if (works)
		vgpu_context_destroy(ctx2);
	printf("device-lost: rebound; a new context works: %s\n", works ? "true" : "false");

	int ok = st == VGPU_ERROR_DEVICE_LOST && qs == VGPU_SUCCESS && cs.reason == VGPU_LOST_REMOVED &&
		 later == VGPU_ERROR_DEVICE_LOST && works;
	printf("device-lost: %s\n", ok ? "ok, device loss reported" : "FAIL: expected the device removed");
	return ok ? 0 : 1;
}
