/* Entry points for foreign-function front ends (include/devmm/ffi.h): plain C, packed arguments.
 * The CPython built-ins are in builtins.c; torch's allocator entry points in core/bridges/. */
#include "python_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

devmm_tensor *devmm_ffi_tensor_empty(devmm_resource *r, int64_t device, const devmm_layout *layout,
                                     int ndim, const int64_t *shape, uint32_t dtype,
                                     devmm_stream stream) {
  devmm_device d = {(int32_t)(device >> 32), (int32_t)(device & 0xffffffff)};
  devmm_dtype t = {(uint8_t)(dtype & 0xff), (uint8_t)((dtype >> 8) & 0xff),
                   (uint16_t)(dtype >> 16)};
  devmm_tensor *out;
  return devmm_tensor_empty(r, d, layout, ndim, shape, t, stream, &out) == DEVMM_OK ? out : NULL;
}

int devmm_ffi_open_page(const char *path, int *fd) {
  static const devmm__output_rules page_rules = {
      .refusing = "refusing to write",
      .cannot = "cannot open",
      .expected_file = "expected a regular file of this user's, or a new name",
      .mode = 0644,
  };
  if (!path || !fd)
    return devmm_set_error(DEVMM_EINVAL, "devmm_ffi_open_page: %s is NULL", !path ? "path" : "fd");
  struct stat st;
  int rc = devmm__open_output(path, &page_rules, fd, &st);
  if (!rc && ftruncate(*fd, 0) != 0) {
    rc = devmm_set_error(DEVMM_EIO, "cannot truncate '%s': %s", path, strerror(errno));
    close(*fd);
    *fd = -1;
  }
  return rc;
}

int devmm_ffi_init(const char *path, char **warnings) {
  devmm__diag_capture(1);
  int rc = devmm_init(path);
  *warnings = devmm__diag_captured();
  devmm__diag_capture(0);
  return rc;
}

int devmm_ffi_init_text(const char *text, size_t len, const char *name, char **warnings) {
  devmm__diag_capture(1);
  int rc = devmm_init_text(text, len, name);
  *warnings = devmm__diag_captured();
  devmm__diag_capture(0);
  return rc;
}

uint32_t devmm_ffi_dtype_pack(devmm_dtype t) {
  return (uint32_t)t.code | (uint32_t)t.bits << 8 | (uint32_t)t.lanes << 16;
}
