/* The library's version string. */
#include "base.h"

#include "devmm-config.h"

const char *devmm_version(void) { return DEVMM_VERSION; }
