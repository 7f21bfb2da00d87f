/* libFuzzer target: devmm.ini text through the pure parser (core/config/parse.c): no file, no
 * plugin, no global state. Every input must parse, or fail with DEVMM_ECONFIG/DEVMM_ENOMEM and a
 * message that starts with the source's name ("file:line: ..."); what was parsed must hold
 * together (absolute plugin directories, at least one plugin, adaptors from the table), and
 * freeing it must leave nothing behind (the sanitizer's leak check). The checks that need
 * plugins (kinds, their options) are devmm_init's and the golden files'. */
#include "config_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char source[] = "fuzz.ini";
  devmm__config c;
  int rc = devmm__config_parse((const char *)data, size, source, "/devmm-fuzz", &c);
  if (rc != DEVMM_OK) {
    if (rc != DEVMM_ECONFIG && rc != DEVMM_ENOMEM)
      abort(); /* an unexpected kind of failure */
    if (rc == DEVMM_ECONFIG && strncmp(devmm_last_error(), source, sizeof source - 1) != 0)
      abort(); /* a config error that does not say where */
  } else {
    if (!c.nplugins)
      abort(); /* no plugins = ... means cpu */
    for (size_t i = 0; i < c.npaths; i++)
      if (c.paths[i][0] != '/')
        abort(); /* relative entries were joined to the file's directory */
    for (size_t i = 0; i < c.nsections; i++)
      if (c.sections[i].stack.nadaptors > DEVMM__MAX_ADAPTORS)
        abort();
  }
  devmm__config_free(&c);
  return 0;
}
