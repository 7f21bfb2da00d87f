/* devmm — status codes and the thread-local error message.
 *
 * Every devmm function that can fail returns a devmm_status: 0 on success, a negative code
 * otherwise, and on failure leaves a message in devmm_last_error() saying what was wrong and
 * what was expected.
 *
 *   if (devmm_allocate(r, n, 0, NULL, &p) != DEVMM_OK) fprintf(stderr, "%s\n", devmm_last_error());
 */
#ifndef DEVMM_ERROR_H
#define DEVMM_ERROR_H

#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, description): the one table of codes; names and texts are generated from it. */
#define DEVMM_STATUS_MAP(X)                                                                        \
  X(OK, 0, "success")                                                                              \
  X(EINVAL, -1, "invalid argument")                                                                \
  X(ENOMEM, -2, "out of memory")                                                                   \
  X(EOVERFLOW, -3, "size computation overflows")                                                   \
  X(ENOTSUP, -4, "operation not supported")                                                        \
  X(ENOENT, -5, "not found")                                                                       \
  X(ESTATE, -6, "object in the wrong state")                                                       \
  X(EPLUGIN, -7, "plugin error")                                                                   \
  X(ECONFIG, -8, "configuration error")                                                            \
  X(EDEVICE, -9, "device or driver error")                                                         \
  X(EIO, -10, "input/output error")                                                                \
  X(ECALLBACK, -11, "user callback failed")

typedef enum devmm_status {
#define DEVMM__STATUS_ENUM(name, value, text) DEVMM_##name = value,
  DEVMM_STATUS_MAP(DEVMM__STATUS_ENUM)
#undef DEVMM__STATUS_ENUM
} devmm_status;

/* The message left by the last failing devmm call on this thread ("" if none). */
DEVMM_API const char *devmm_last_error(void);
/* The status of the last failing devmm call on this thread (DEVMM_OK if none). */
DEVMM_API devmm_status devmm_last_status(void);
/* Clears this thread's error message and status. */
DEVMM_API void devmm_clear_error(void);
/* The symbolic name of a status code ("DEVMM_ENOMEM"); "DEVMM_UNKNOWN" for others. */
DEVMM_API const char *devmm_status_name(int status);
/* A short description of a status code ("out of memory"). */
DEVMM_API const char *devmm_strerror(int status);
/* Sets the level of devmm's own diagnostics (stderr) by name: "error", "warn", "info" or
 * "debug" (RMM's "critical" is error, "trace" debug); DEVMM_EINVAL for another. It overrides
 * DEVMM_LOG_LEVEL, until a devmm.ini that sets log_level is read (ADR 41). */
DEVMM_API int devmm_set_log_level(const char *name);
/* The name of the diagnostics level now ("error", "warn", "info" or "debug"). */
DEVMM_API const char *devmm_log_level(void);
/* Sets this thread's error (printf-style) and returns status: for code that links libdevmm
 * (adaptors, applications). Plugins link nothing: they call host->set_error (plugin.h). */
DEVMM_API int devmm_set_error(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
