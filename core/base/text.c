/* Strings devmm hands to the caller: one allocator (malloc), one way to free them. */
#include "base.h"

#include <stdlib.h>

void devmm_string_free(char *s) { free(s); }
