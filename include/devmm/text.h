/* devmm — strings devmm allocates for the caller (devmm_info_json, devmm_tracking_report, ...),
 * freed by core/base/text.c. */
#ifndef DEVMM_TEXT_H
#define DEVMM_TEXT_H

#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Frees a string returned by devmm (NULL is fine). */
DEVMM_API void devmm_string_free(char *s);

#ifdef __cplusplus
}
#endif
#endif
