/* The simulated runtime's events: each belongs to the device current at its creation (recording
 * it on another device's stream is simErrorInvalidResourceHandle, as in CUDA); a record and a
 * wait are operations queued on a stream, and a wait (or a host synchronize) holds the record
 * made before its call, never a later one (sim_record); a destroyed event is detected, never
 * freed. */
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
  if (!e && s->capture) {              /* a node of the capture: only waits inside it may use it */
    if (s->capture->invalidated)
      e = simErrorStreamCaptureInvalidated;
    else
      ev->capture_id = s->capture->id;
    pthread_mutex_unlock(&rt.lock);
    return e;
  }
  if (!e)
    ev->capture_id = 0;
  sim_record *rec = NULL;
  if (!e && !(rec = calloc(1, sizeof *rec)))
    e = simErrorMemoryAllocation;
  if (!e) {
    rec->refs = 2; /* the event's, and the queued record's (dropped when it runs) */
    e = sim__submit(s, (sim_op){.kind = OP_RECORD, .event = ev, .record = rec});
    if (e) {
      free(rec);
    } else {
      if (ev->last)
        sim__record_unref(ev->last);
      ev->last = rec;
    }
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

void sim__record_unref(sim_record *r) {
  if (--r->refs == 0)
    free(r);
}

simError_t simStreamWaitEvent(simStream_t h, simEvent_t ev, unsigned flags) {
  INJECT("StreamWaitEvent");
  if (flags)
    return simErrorInvalidValue;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = valid_event(ev) ? sim__stream_of(h, &s) : simErrorInvalidResourceHandle;
  sim_capture *in = e ? NULL : sim__capture_by_id(ev->capture_id);
  if (!e && s->capture) { /* capture order keeps the graph's order: a wait inside is implied */
    if (s->capture->invalidated)
      e = simErrorStreamCaptureInvalidated;
    else if (in != s->capture && (in || ev->last)) /* across the capture's boundary */
      e = sim__capture_invalidate(s, simErrorStreamCaptureIsolation);
  } else if (!e && in) {
    s->capture = in;                              /* a wait on a captured event joins the capture */
  } else if (!e && ev->last && !ev->last->done) { /* holds the record made before this call */
    e = sim__submit(s, (sim_op){.kind = OP_WAIT_EVENT, .event = ev, .record = ev->last});
    if (!e)
      ev->last->refs++;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simEventSynchronize(simEvent_t ev) {
  INJECT("EventSynchronize");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_event(ev) ? simSuccess : simErrorInvalidResourceHandle;
  sim_capture *in = e ? NULL : sim__capture_by_id(ev->capture_id);
  if (in) { /* a host wait on a graph's node */
    in->invalidated = 1;
    e = simErrorCapturedEvent;
  }
  sim_record *rec = e ? NULL : ev->last;
  if (rec) { /* the record made before this call, not a later one */
    rec->refs++;
    while (!rec->done) {
      sim__host_wait("an event synchronize");
    }
    sim__record_unref(rec);
    sim__pool_trim(ev->device); /* pools give back what they keep above their threshold */
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simEventDestroy(simEvent_t ev) {
  INJECT("EventDestroy");
  pthread_mutex_lock(&rt.lock);
  simError_t e = valid_event(ev) ? simSuccess : simErrorInvalidResourceHandle;
  if (!e) {
    ev->destroyed = 1; /* queued records and waits still complete: they hold their records */
    if (ev->last)
      sim__record_unref(ev->last);
    ev->last = NULL;
    rt.events_live--;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}
