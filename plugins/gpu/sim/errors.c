/* The simulated runtime's errors: their names and texts (simGetErrorName, simGetErrorString),
 * and fault injection for tests (devmm_sim_inject: the named entry point fails once, with a
 * chosen error, after a number of calls that pass). */
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
    {simErrorInvalidResourceHandle, "simErrorInvalidResourceHandle",
     "invalid resource handle (a destroyed stream or event, or one of another device)"},
    {simErrorNotReady, "simErrorNotReady", "device not ready (objects are still live)"},
    {simErrorNotSupported, "simErrorNotSupported", "operation not supported"},
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

static volatile int any_injection;

simError_t sim__injected(const char *call) {
  if (!__atomic_load_n(&any_injection, __ATOMIC_ACQUIRE))
    return simSuccess;
  simError_t e = simSuccess;
  pthread_mutex_lock(&rt.lock);
  for (int i = 0; i < rt.ninj; i++)
    if (strcmp(rt.inj[i].call, call) == 0) {
      if (rt.inj[i].skip-- > 0)
        break;
      e = (simError_t)rt.inj[i].error;
      rt.inj[i] = rt.inj[--rt.ninj];
      break;
    }
  __atomic_store_n(&any_injection, rt.ninj > 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rt.lock);
  return e;
}

int sim__inject(const char *call, int skip, int error) {
  pthread_mutex_lock(&rt.lock);
  int rc = 0;
  if (!call) {
    rt.ninj = 0;
  } else if (rt.ninj == (int)(sizeof rt.inj / sizeof rt.inj[0]) ||
             strlen(call) >= sizeof rt.inj[0].call) {
    rc = -1;
  } else {
    sim_injection *j = &rt.inj[rt.ninj++];
    snprintf(j->call, sizeof j->call, "%s", call);
    j->skip = skip;
    j->error = error;
  }
  __atomic_store_n(&any_injection, rt.ninj > 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rt.lock);
  return rc;
}
