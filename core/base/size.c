/* Sizes and booleans as written in devmm.ini, and sizes written for people (include/devmm/size.h).
 */
#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
  const char *unit;
  double factor;
} units[] = {
    {"", 1},
    {"B", 1},
    {"KiB", 1024.0},
    {"MiB", 1024.0 * 1024},
    {"GiB", 1024.0 * 1024 * 1024},
    {"TiB", 1024.0 * 1024 * 1024 * 1024},
    {"KB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
    {"K", 1024.0},
    {"M", 1024.0 * 1024},
    {"G", 1024.0 * 1024 * 1024},
};

/* Parses text once: bytes, or a percentage resolved later against a device's total. */
int devmm__parse_size_spec(const char *text, devmm__size_spec *out) {
  if (!text || !out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_parse_size: %s is NULL", !text ? "text" : "out");
  const char *p = text;
  while (isspace((unsigned char)*p))
    p++;
  /* decimal only, as devmm.ini's sizes are documented: digits with an optional fraction.
   * strtod alone would take 0x10, 0x1p4 and 1e3 (tests/c/suite_config.c parse_sizes). */
  size_t digits = strspn(p, "0123456789"),
         frac = p[digits] == '.' ? 1 + strspn(p + digits + 1, "0123456789") : 0;
  if (digits + frac == 0 || (digits == 0 && frac == 1))
    goto bad;
  const char *after = p + digits + frac;
  int hex = digits == 1 && !frac && p[0] == '0' && (*after == 'x' || *after == 'X');
  int exponent = (*after == 'e' || *after == 'E') &&
                 (isdigit((unsigned char)after[1]) || after[1] == '+' || after[1] == '-');
  if (hex || exponent)
    return devmm_set_error(DEVMM_EINVAL,
                           "bad size '%.64s': not a decimal number (hexadecimal and exponent "
                           "forms are not sizes): expected digits with an optional fraction "
                           "and unit B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, or a percentage "
                           "like 90%%",
                           text);
  errno = 0;
  char *end;
  double v = strtod(p, &end); /* stops where the digits do: no 0x, no exponent follows */
  if (errno || end != after || v < 0 || !isfinite(v))
    goto bad;
  while (isspace((unsigned char)*end))
    end++;
  size_t n = strlen(end);
  while (n && isspace((unsigned char)end[n - 1]))
    n--;
  *out = (devmm__size_spec){.percent = n == 1 && end[0] == '%', .value = v};
  if (out->percent)
    return v > 100
               ? devmm_set_error(DEVMM_EINVAL, "size '%.64s': a percentage must be 0..100%%", text)
               : DEVMM_OK;
  size_t i = 0;
  for (; i < sizeof units / sizeof units[0]; i++)
    if (strlen(units[i].unit) == n && strncasecmp(end, units[i].unit, n) == 0)
      break;
  if (i == sizeof units / sizeof units[0])
    goto bad;
  double bytes = v * units[i].factor;
  if (bytes >= 18446744073709551616.0)
    return devmm_set_error(DEVMM_EOVERFLOW, "size '%.64s' does not fit in 64 bits", text);
  out->bytes = (size_t)bytes;
  return DEVMM_OK;
bad:
  return devmm_set_error(DEVMM_EINVAL,
                         "bad size '%.64s': expected a number with an optional unit B, KiB, "
                         "MiB, GiB, TiB, KB, MB, GB, TB, or a percentage like 90%%",
                         text);
}

int devmm__size_resolve(const devmm__size_spec *spec, const char *text, size_t total, size_t *out) {
  if (!spec->percent)
    return *out = spec->bytes, DEVMM_OK;
  if (!total)
    return devmm_set_error(DEVMM_EINVAL,
                           "size '%.64s': a percentage needs the device's total memory, which "
                           "is unknown here",
                           text);
  *out = (size_t)((double)total * spec->value / 100.0);
  return DEVMM_OK;
}

int devmm_parse_size(const char *text, size_t total, size_t *out) {
  devmm__size_spec spec;
  int rc = devmm__parse_size_spec(text, &spec);
  return rc ? rc : devmm__size_resolve(&spec, text, total, out);
}

int devmm_format_size(double bytes, int decimals, char *buf, size_t cap) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (!buf || !cap)
    return devmm_set_error(DEVMM_EINVAL, "devmm_format_size: %s",
                           !buf ? "buf is NULL" : "cap is 0");
  buf[0] = '\0';
  if (!(bytes >= 0) || !isfinite(bytes)) /* NaN fails the first test */
    return devmm_set_error(DEVMM_EINVAL, "devmm_format_size: %g bytes: expected a finite size >= 0",
                           bytes);
  if (decimals < 0 || decimals > 6)
    return devmm_set_error(DEVMM_EINVAL, "devmm_format_size: decimals %d: expected 0..6", decimals);
  int i = 0;
  while (bytes >= 1024 && i < 5)
    bytes /= 1024, i++;
  int n = snprintf(buf, cap, "%.*f %s", i ? decimals : 0, bytes, unit[i]);
  if (n < 0 || (size_t)n >= cap) {
    buf[0] = '\0';
    return devmm_set_error(DEVMM_EINVAL, "devmm_format_size: cap %zu is too small for '%.*f %s'",
                           cap, i ? decimals : 0, bytes, unit[i]);
  }
  return DEVMM_OK;
}

int devmm__parse_bool(const char *text, int *out) {
  static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
  for (int i = 0; text && i < 4; i++) {
    if (strcasecmp(text, yes[i]) == 0)
      return *out = 1, DEVMM_OK;
    if (strcasecmp(text, no[i]) == 0)
      return *out = 0, DEVMM_OK;
  }
  return devmm_set_error(DEVMM_EINVAL,
                         "bad boolean '%.64s': expected true/false, yes/no, on/off or 1/0",
                         text ? text : "(null)");
}
