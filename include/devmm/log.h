/* devmm — compatibility include, for one release: the memory-log reader's header is now
 * memlog.h (devmm_log_read, devmm_log_parse, devmm_log_free are unchanged). Include
 * <devmm/memlog.h>; this header goes away in the next release (ADR 34). */
#ifndef DEVMM_LOG_H
#define DEVMM_LOG_H

#include "memlog.h"

#endif
