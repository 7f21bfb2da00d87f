/* The simulated runtime's errors: their names and texts (simGetErrorName, simGetErrorString),
 * fault injection for tests (devmm_sim_inject: the named entry point fails once, with a chosen
 * error, after a number of calls that pass; "Kernel": a kernel faults when it runs), and CUDA's
 * sticky and asynchronous errors. */
#include "simrt_internal.h"

#include <stdio.h>
#include <string.h>

static const struct {
  simError_t e;
  const char *name, *text;
} errors[] = {
    {simSuccess, "simSuccess", "no error"},
    {simErrorInvalidValue, "simErrorInvalidValue", "invalid argument"},
    {simErrorMemoryAllocation, "simErrorMemoryAllocation", "out of memory"},
    {simErrorInitializationError, "simErrorInitializationError", "initialization error"},
    {simErrorInsufficientDriver, "simErrorInsufficientDriver",
     "simulated driver version is insufficient"},
    {simErrorNoDevice, "simErrorNoDevice", "no sim device is configured (devices = 0)"},
    {simErrorInvalidDevice, "simErrorInvalidDevice", "invalid device ordinal"},
    {simErrorInvalidContext, "simErrorInvalidContext",
     "invalid device context (no context is bound to this thread: set a device first)"},
    {simErrorMapBufferObjectFailed, "simErrorMapBufferObjectFailed",
     "mapping of buffer object failed"},
    {simErrorIllegalAddress, "simErrorIllegalAddress", "an illegal memory access was encountered"},
    {simErrorInvalidResourceHandle, "simErrorInvalidResourceHandle",
     "invalid resource handle (a destroyed stream or event, or one of another device)"},
    {simErrorNotReady, "simErrorNotReady", "device not ready (objects are still live)"},
    {simErrorPeerAccessAlreadyEnabled, "simErrorPeerAccessAlreadyEnabled",
     "peer access is already enabled"},
    {simErrorPeerAccessNotEnabled, "simErrorPeerAccessNotEnabled",
     "peer access has not been enabled"},
    {simErrorNotSupported, "simErrorNotSupported", "operation not supported"},
    {simErrorIllegalState, "simErrorIllegalState", "the operation is not valid in this state"},
    {simErrorStreamCaptureUnsupported, "simErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {simErrorStreamCaptureInvalidated, "simErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {simErrorStreamCaptureUnmatched, "simErrorStreamCaptureUnmatched",
     "the capture was not initiated in this stream"},
    {simErrorStreamCaptureIsolation, "simErrorStreamCaptureIsolation",
     "a dependency would have been created which crosses the capture sequence boundary"},
    {simErrorStreamCaptureImplicit, "simErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {simErrorCapturedEvent, "simErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {simErrorStreamCaptureWrongThread, "simErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {simErrorUnknown, "simErrorUnknown", "unknown error"},
};

const char *simGetErrorName(simError_t e) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].e == e)
      return errors[i].name;
  return "simErrorUnknown";
}

const char *simGetErrorString(simError_t e) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].e == e)
      return errors[i].text;
  return "unknown error";
}

/* Anything armed: an injection, a sticky error or an asynchronous one not yet reported. */
static volatile int any_injection;
/* CUDA's sticky errors: once one happened, every later call fails with it (the context is
 * gone); an asynchronous error (a fault of stream work) is reported by the next call, whatever
 * it is, and only once unless sticky. Both under rt.lock. */
static simError_t sticky, pending;

static int is_sticky(int e) {
  return e == simErrorIllegalAddress || e == 710 /* assert */ || (e >= 714 && e <= 719);
}

static void rearm(void) {
  __atomic_store_n(&any_injection, rt.ninj > 0 || sticky || pending, __ATOMIC_RELEASE);
}

/* The armed injection for call, if it fires now (caller holds the lock). */
static simError_t fire(const char *call) {
  for (int i = 0; i < rt.ninj; i++)
    if (strcmp(rt.inj[i].call, call) == 0) {
      if (rt.inj[i].skip-- > 0)
        break;
      simError_t e = (simError_t)rt.inj[i].error;
      rt.inj[i] = rt.inj[--rt.ninj];
      return e;
    }
  return simSuccess;
}

simError_t sim__injected(const char *call) {
  if (!__atomic_load_n(&any_injection, __ATOMIC_ACQUIRE))
    return simSuccess;
  simError_t e = simSuccess;
  pthread_mutex_lock(&rt.lock);
  if (sticky) {
    e = sticky;
  } else if (pending) {
    e = pending;
    pending = simSuccess;
  } else if ((e = fire(call)) != simSuccess && is_sticky(e)) {
    sticky = e;
  }
  rearm();
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t sim__async_fault(const char *what) {
  if (!__atomic_load_n(&any_injection, __ATOMIC_ACQUIRE))
    return simSuccess;
  pthread_mutex_lock(&rt.lock);
  simError_t e = fire(what);
  if (e && is_sticky(e))
    sticky = e;
  else if (e)
    pending = e;
  rearm();
  pthread_mutex_unlock(&rt.lock);
  return e;
}

int sim__inject(const char *call, int skip, int error) {
  pthread_mutex_lock(&rt.lock);
  int rc = 0;
  if (!call) {
    rt.ninj = 0;
    sticky = pending = simSuccess; /* a test's reset: no process of CUDA's can clear these */
  } else if (rt.ninj == (int)(sizeof rt.inj / sizeof rt.inj[0]) ||
             strlen(call) >= sizeof rt.inj[0].call) {
    rc = -1;
  } else {
    sim_injection *j = &rt.inj[rt.ninj++];
    snprintf(j->call, sizeof j->call, "%s", call);
    j->skip = skip;
    j->error = error;
  }
  rearm();
  pthread_mutex_unlock(&rt.lock);
  return rc;
}
