/* The simulated runtime's events: each belongs to the device current at its creation (recording
 * it on another device's stream is simErrorInvalidResourceHandle, as in CUDA); a record and a
 * wait are operations queued on a stream; a destroyed event is detected, never freed. */
#include "simrt_internal.h"

#include <stdlib.h>

/* An event handle that exists and was not destroyed. Caller holds the lock. */
static int valid_event(simEvent_t ev) {
  for (struct simEvent *x = rt.events; x; x = x->next)
    if (x == ev)
      return !x->destroyed;
  return 0;
}

simError_t simEventCreateWithFlags(simEvent_t *out, unsigned flags) {
  INJECT("EventCreateWithFlags");
  if (flags & ~simEventDisableTiming)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  struct simEvent *ev = calloc(1, sizeof *ev);
  simError_t e = ev ? simSuccess : simErrorMemoryAllocation;
  if (ev) {
    ev->device = tls_device;
    ev->next = rt.events;
    rt.events = ev;
    rt.events_created++;
    rt.events_live++;
    *out = ev;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simEventRecord(simEvent_t ev, simStream_t h) {
  INJECT("EventRecord");
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = valid_event(ev) ? sim__stream_of(h, &s) : simErrorInvalidResourceHandle;
  if (!e && s->device != ev->device)
    e = simErrorInvalidResourceHandle; /* CUDA: the event and the stream must share a device */
  if (!e)
    e = sim__submit(s, (sim_op){.kind = OP_RECORD, .event = ev, .target = ev->recorded + 1});
  if (!e)
    ev->recorded++;
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simStreamWaitEvent(simStream_t h, simEvent_t ev, unsigned flags) {
  INJECT("StreamWaitEvent");
  if (flags)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = valid_event(ev) ? sim__stream_of(h, &s) : simErrorInvalidResourceHandle;
  if (!e && ev->completed < ev->recorded) /* waits for the record made before this call */
    e = sim__submit(s, (sim_op){.kind = OP_WAIT_EVENT, .event = ev, .target = ev->recorded});
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simEventSynchronize(simEvent_t ev) {
  INJECT("EventSynchronize");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_event(ev) ? simSuccess : simErrorInvalidResourceHandle;
  if (!e) {
    uint64_t target = ev->recorded;
    while (ev->completed < target)
      pthread_cond_wait(&rt.progress, &rt.lock);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simEventDestroy(simEvent_t ev) {
  INJECT("EventDestroy");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_event(ev) ? simSuccess : simErrorInvalidResourceHandle;
  if (!e) {
    ev->destroyed = 1; /* queued records and waits still complete */
    rt.events_live--;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}
