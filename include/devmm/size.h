/* devmm — sizes as devmm.ini writes them ("4GiB", "1.5 MB", "1000", "90%"), parsed by
 * core/base/size.c (plugins get the same parser as host->parse_size), and sizes written for
 * people ("512 B", "1.50 MiB"): the one formatter devmm's messages and tools use. */
#ifndef DEVMM_SIZE_H
#define DEVMM_SIZE_H

#include <stddef.h>

#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses a size ("4GiB", "1.5 MB", "1000", "90%" of total_bytes; total 0 refuses %): decimal
 * digits with an optional fraction and unit; hexadecimal (0x10) and exponents (1e3) are refused. */
DEVMM_API int devmm_parse_size(const char *text, size_t total_bytes, size_t *out);
/* Writes bytes in binary units ("512 B", then KiB .. PiB with `decimals` digits, 0..6) into buf;
 * DEVMM_EINVAL if buf is NULL, cap too small (32 always suffices), decimals out of range or
 * bytes negative or not finite (buf is then ""). */
DEVMM_API int devmm_format_size(double bytes, int decimals, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
