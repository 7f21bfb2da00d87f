/* devmm — sizes as devmm.ini writes them ("4GiB", "1.5 MB", "1000", "90%"), parsed by
 * core/size.c (plugins get the same parser as host->parse_size). */
#ifndef DEVMM_SIZE_H
#define DEVMM_SIZE_H

#include <stddef.h>

#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses a size ("4GiB", "1.5 MB", "1000", "90%" of total_bytes; total 0 refuses %). */
DEVMM_API int devmm_parse_size(const char *text, size_t total_bytes, size_t *out);

#ifdef __cplusplus
}
#endif
#endif
