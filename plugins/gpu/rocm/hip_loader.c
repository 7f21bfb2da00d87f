/* Finds HIP at run time for devmm-rocm: dlopens libamdhip64.so.7, then .so.6, then .so.5, and
 * resolves every call of ROCM_HIP_CALLS (backend.h) into rocm_hip. One build of the plugin thus
 * serves ROCm 7, 6 and 5 systems, and loads (with 0 devices) where there is no HIP at all.
 * HIP 6 changed hipDeviceProp_t; the plugin is compiled against HIP 5.2's layout, which HIP 6
 * and 7 still serve as hipGetDevicePropertiesR0000. ROCM_HIP_STEM may be set at compile time
 * (the tests build a copy that looks for libraries that cannot exist, in the same order). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

#ifndef ROCM_HIP_STEM
#define ROCM_HIP_STEM "libamdhip64"
#endif
/* Newest first: a machine with several ROCm installed gets the newest. */
#define ROCM_HIP_LIBRARIES ROCM_HIP_STEM ".so.7", ROCM_HIP_STEM ".so.6", ROCM_HIP_STEM ".so.5"

struct rocm_hip rocm_hip;

static const char *const libraries[] = {ROCM_HIP_LIBRARIES};
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *loaded; /* the library in use, NULL if none */
static char why[1024];     /* "<library>: <reason>" per library tried, separated by "; " */

static void tried(const char *library, const char *reason) {
  size_t n = strlen(why);
  snprintf(why + n, sizeof why - n, "%s%s: %s", n ? "; " : "", library, reason);
}

/* Fills rocm_hip from h; on a missing symbol, clears it and says which. */
static int resolve(void *h, const char *library) {
  void *p;
#define ROCM_HIP_RESOLVE(name)                                                                     \
  p = NULL;                                                                                        \
  if (strcmp(#name, "GetDeviceProperties") == 0)                                                   \
    p = dlsym(h, "hipGetDevicePropertiesR0000");                                                   \
  if (!p)                                                                                          \
    p = dlsym(h, "hip" #name);                                                                     \
  if (!p) {                                                                                        \
    memset(&rocm_hip, 0, sizeof rocm_hip);                                                         \
    tried(library, "has no hip" #name);                                                            \
    return -1;                                                                                     \
  }                                                                                                \
  *(void **)&rocm_hip.name = p;
  ROCM_HIP_CALLS(ROCM_HIP_RESOLVE)
#undef ROCM_HIP_RESOLVE
  return 0;
}

static void load(void) {
  for (size_t i = 0; i < sizeof libraries / sizeof libraries[0]; i++) {
    void *h = dlopen(libraries[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      /* dlerror starts with the library's name: keep only the reason */
      const char *colon = e ? strstr(e, ": ") : NULL;
      tried(libraries[i], colon ? colon + 2 : e ? e : "cannot be opened");
      continue;
    }
    if (resolve(h, libraries[i]) == 0) {
      loaded = libraries[i];
      return;
    }
    dlclose(h);
  }
}

hipError_t rocm_hip_load(void) {
  pthread_once(&once, load);
  return loaded ? hipSuccess : ROCM_NO_HIP;
}

const char *rocm_hip_tried(void) {
  pthread_once(&once, load);
  return loaded ? "" : why;
}

const char *rocm_hip_library(void) { return loaded; }
