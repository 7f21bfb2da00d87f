/* libFuzzer target: the text parsers — sizes, dtypes, devices, booleans (through sizes with a
 * total for percentages). Results must be consistent: a parsed dtype formats back to the same
 * name, a parsed device formats back to something that parses to it again. */
#include <devmm/devmm.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char text[256];
  if (size >= sizeof text)
    return -1;
  memcpy(text, data, size);
  text[size] = '\0';
  size_t v;
  int rc = devmm_parse_size(text, 1u << 30, &v);
  if (rc != DEVMM_OK && rc != DEVMM_EINVAL && rc != DEVMM_EOVERFLOW)
    abort();
  devmm_dtype t;
  if (devmm_dtype_parse(text, &t) == DEVMM_OK) {
    char back[64];
    if (devmm_dtype_format(t, back, sizeof back) != DEVMM_OK || strcmp(back, text) != 0)
      abort();
  }
  devmm_device d, d2;
  if (devmm_device_parse(text, &d) == DEVMM_OK) {
    char back[64];
    if (devmm_device_format(d, back, sizeof back) != DEVMM_OK ||
        devmm_device_parse(back, &d2) != DEVMM_OK || d.device_type != d2.device_type ||
        d.device_id != d2.device_id)
      abort();
  }
  return 0;
}
