/* Prints the configuration devmm chose (for the set-uid test in test-hardening.c). Linked with
 * an absolute RUNPATH: the loader ignores $ORIGIN and LD_LIBRARY_PATH in set-uid programs. */
#include <devmm/devmm.h>

#include <stdio.h>

int main(void) {
  devmm_init(NULL); /* a missing plugin is fine here: only the choice of file matters */
  puts(devmm_config_source());
  return 0;
}
