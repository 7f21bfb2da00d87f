/* The library's version string. */
#include "internal.h"

#include "devmm-config.h"

const char *devmm_version(void) { return DEVMM_VERSION; }
