/* devmm — element types: every DLPack 1.1 data type, with names.
 *
 *   devmm_dtype t; devmm_dtype_parse("bfloat16", &t);   // {4, 16, 1}
 *   char name[32]; devmm_dtype_format(t, name, sizeof name);
 */
#ifndef DEVMM_DTYPE_H
#define DEVMM_DTYPE_H

#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Laid out exactly like DLPack's DLDataType. */
typedef struct devmm_dtype {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} devmm_dtype;

/* DLPack 1.1 type codes. */
enum {
  DEVMM_DTYPE_INT = 0,
  DEVMM_DTYPE_UINT = 1,
  DEVMM_DTYPE_FLOAT = 2,
  DEVMM_DTYPE_OPAQUE_HANDLE = 3,
  DEVMM_DTYPE_BFLOAT = 4,
  DEVMM_DTYPE_COMPLEX = 5,
  DEVMM_DTYPE_BOOL = 6,
  DEVMM_DTYPE_FLOAT8_E3M4 = 7,
  DEVMM_DTYPE_FLOAT8_E4M3 = 8,
  DEVMM_DTYPE_FLOAT8_E4M3B11FNUZ = 9,
  DEVMM_DTYPE_FLOAT8_E4M3FN = 10,
  DEVMM_DTYPE_FLOAT8_E4M3FNUZ = 11,
  DEVMM_DTYPE_FLOAT8_E5M2 = 12,
  DEVMM_DTYPE_FLOAT8_E5M2FNUZ = 13,
  DEVMM_DTYPE_FLOAT8_E8M0FNU = 14,
  DEVMM_DTYPE_FLOAT6_E2M3FN = 15,
  DEVMM_DTYPE_FLOAT6_E3M2FN = 16,
  DEVMM_DTYPE_FLOAT4_E2M1FN = 17,
};

/* Parses a type name ("float32", "bool", "float8_e4m3fn", ...) into t; DEVMM_EINVAL if unknown. */
DEVMM_API int devmm_dtype_parse(const char *name, devmm_dtype *t);
/* Writes the name of t into buf (cap bytes); DEVMM_EINVAL for a type devmm does not know. */
DEVMM_API int devmm_dtype_format(devmm_dtype t, char *buf, size_t cap);
/* Bytes per element, or 0 for sub-byte types (float4/float6) and unknown types. */
DEVMM_API size_t devmm_dtype_itemsize(devmm_dtype t);
/* Number of names known; devmm_dtype_name_at(i) returns the i-th (for listings). */
DEVMM_API size_t devmm_dtype_count(void);
/* The i-th known type name, or NULL past the end. */
DEVMM_API const char *devmm_dtype_name_at(size_t i);

#ifdef __cplusplus
}
#endif
#endif
