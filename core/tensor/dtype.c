/* Element types: the table of every DLPack 1.1 type devmm names. */
#include "tensor_internal.h"

#include <string.h>

typedef struct {
  const char *name;
  devmm_dtype t;
} dtype_entry;

static const dtype_entry dtypes[] = {
    {"int8", {DEVMM_DTYPE_INT, 8, 1}},
    {"int16", {DEVMM_DTYPE_INT, 16, 1}},
    {"int32", {DEVMM_DTYPE_INT, 32, 1}},
    {"int64", {DEVMM_DTYPE_INT, 64, 1}},
    {"uint8", {DEVMM_DTYPE_UINT, 8, 1}},
    {"uint16", {DEVMM_DTYPE_UINT, 16, 1}},
    {"uint32", {DEVMM_DTYPE_UINT, 32, 1}},
    {"uint64", {DEVMM_DTYPE_UINT, 64, 1}},
    {"float16", {DEVMM_DTYPE_FLOAT, 16, 1}},
    {"float32", {DEVMM_DTYPE_FLOAT, 32, 1}},
    {"float64", {DEVMM_DTYPE_FLOAT, 64, 1}},
    {"bfloat16", {DEVMM_DTYPE_BFLOAT, 16, 1}},
    {"complex64", {DEVMM_DTYPE_COMPLEX, 64, 1}},
    {"complex128", {DEVMM_DTYPE_COMPLEX, 128, 1}},
    {"bool", {DEVMM_DTYPE_BOOL, 8, 1}},
    {"float8_e3m4", {DEVMM_DTYPE_FLOAT8_E3M4, 8, 1}},
    {"float8_e4m3", {DEVMM_DTYPE_FLOAT8_E4M3, 8, 1}},
    {"float8_e4m3b11fnuz", {DEVMM_DTYPE_FLOAT8_E4M3B11FNUZ, 8, 1}},
    {"float8_e4m3fn", {DEVMM_DTYPE_FLOAT8_E4M3FN, 8, 1}},
    {"float8_e4m3fnuz", {DEVMM_DTYPE_FLOAT8_E4M3FNUZ, 8, 1}},
    {"float8_e5m2", {DEVMM_DTYPE_FLOAT8_E5M2, 8, 1}},
    {"float8_e5m2fnuz", {DEVMM_DTYPE_FLOAT8_E5M2FNUZ, 8, 1}},
    {"float8_e8m0fnu", {DEVMM_DTYPE_FLOAT8_E8M0FNU, 8, 1}},
    {"float6_e2m3fn", {DEVMM_DTYPE_FLOAT6_E2M3FN, 6, 1}},
    {"float6_e3m2fn", {DEVMM_DTYPE_FLOAT6_E3M2FN, 6, 1}},
    {"float4_e2m1fn", {DEVMM_DTYPE_FLOAT4_E2M1FN, 4, 1}},
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

size_t devmm_dtype_count(void) { return NDTYPES; }

const char *devmm_dtype_name_at(size_t i) { return i < NDTYPES ? dtypes[i].name : NULL; }

int devmm_dtype_parse(const char *name, devmm_dtype *t) {
  if (!name || !t)
    return devmm_set_error(DEVMM_EINVAL, "devmm_dtype_parse: %s is NULL", !name ? "name" : "t");
  for (size_t i = 0; i < NDTYPES; i++)
    if (strcmp(name, dtypes[i].name) == 0) {
      *t = dtypes[i].t;
      return DEVMM_OK;
    }
  return devmm_set_error(DEVMM_EINVAL,
                         "unknown dtype '%.64s': expected one of int8..int64, uint8..uint64, "
                         "float16, float32, float64, bfloat16, complex64, complex128, bool, "
                         "float8_e4m3fn, float8_e5m2 (and the other DLPack 1.1 float8/6/4 names)",
                         name);
}

int devmm_dtype_format(devmm_dtype t, char *buf, size_t cap) {
  if (!buf || cap == 0)
    return devmm_set_error(DEVMM_EINVAL, "devmm_dtype_format: empty buffer");
  for (size_t i = 0; i < NDTYPES; i++)
    if (dtypes[i].t.code == t.code && dtypes[i].t.bits == t.bits && t.lanes == 1) {
      size_t n = strlen(dtypes[i].name);
      if (n + 1 > cap)
        return devmm_set_error(DEVMM_EINVAL,
                               "devmm_dtype_format: buffer of %zu bytes is "
                               "too small for '%s'",
                               cap, dtypes[i].name);
      memcpy(buf, dtypes[i].name, n + 1);
      return DEVMM_OK;
    }
  buf[0] = '\0';
  return devmm_set_error(DEVMM_EINVAL,
                         "unknown dtype {code=%u, bits=%u, lanes=%u}: devmm "
                         "knows the DLPack 1.1 types with lanes=1",
                         t.code, t.bits, t.lanes);
}

size_t devmm_dtype_itemsize(devmm_dtype t) {
  for (size_t i = 0; i < NDTYPES; i++)
    if (dtypes[i].t.code == t.code && dtypes[i].t.bits == t.bits && t.lanes == 1)
      return t.bits % 8 ? 0 : t.bits / 8;
  return 0;
}
