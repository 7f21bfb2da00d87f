/* The simulated runtime's stream capture (simrt.h), as CUDA's: a capturing stream records its
 * work into a graph instead of running it; an unsafe call made while a capture forbids it fails
 * and invalidates the capture. Who is forbidden follows cudaThreadExchangeStreamCaptureMode's
 * rules: a thread whose own mode is relaxed never is; the capturing thread is, unless its
 * capture is relaxed; another thread is when the capture is global and the thread's mode is
 * global too (ADR 37). The legacy stream is another matter: any use of it invalidates every
 * capture of its device that a blocking stream takes part in, in any mode, from any thread, and
 * none on non-blocking streams. Graphs replay their nodes, in capture order, on one stream: capture
 * order respects every dependency the capture saw, so it is a valid order of the graph. */
#include "simrt_internal.h"

#include <stdlib.h>

struct simGraph {
  sim_op *head;
  size_t nodes;
};

static __thread int tls_mode = simStreamCaptureModeGlobal; /* the thread's interaction mode */

/* Whether capture c forbids the calling thread an unsafe call. */
static int forbids(const sim_capture *c) {
  if (tls_mode == simStreamCaptureModeRelaxed || c->mode == simStreamCaptureModeRelaxed)
    return 0;
  if (pthread_equal(c->thread, pthread_self()))
    return 1;
  return c->mode == simStreamCaptureModeGlobal && tls_mode == simStreamCaptureModeGlobal;
}

/* Whether a blocking stream takes part in capture c: then the legacy stream of its device is
 * unusable until the capture ends, whatever the capture's mode (cudaStreamIsCapturing: "When a
 * blocking stream is capturing, the legacy stream is in an unusable state"); a capture on
 * non-blocking streams only leaves it usable. */
static int blocking_capture(const sim_capture *c) {
  for (struct simStream *x = rt.streams; x; x = x->next)
    if (x->capture == c && !x->legacy && !(x->flags & simStreamNonBlocking))
      return 1;
  return 0;
}

simError_t sim__capture_check(int d, int legacy) {
  simError_t e = simSuccess;
  for (sim_capture *c = rt.captures; c; c = c->next)
    if (legacy ? c->device == d && blocking_capture(c) : forbids(c)) {
      c->invalidated = 1;
      e = legacy ? simErrorStreamCaptureImplicit : simErrorStreamCaptureUnsupported;
    }
  return e;
}

sim_capture *sim__capture_by_id(uint64_t id) {
  for (sim_capture *c = rt.captures; id && c; c = c->next)
    if (c->id == id)
      return c;
  return NULL;
}

simError_t sim__capture_invalidate(struct simStream *s, simError_t e) {
  if (s->capture)
    s->capture->invalidated = 1;
  return e;
}

simError_t sim__capture_take(struct simStream *s, sim_op *o) {
  sim_capture *c = s->capture;
  if (c->invalidated) {
    sim__op_free(o);
    return simErrorStreamCaptureInvalidated;
  }
  o->next = NULL;
  if (c->tail)
    c->tail->next = o;
  else
    c->head = o;
  c->tail = o;
  c->nodes++;
  return simSuccess;
}

static void free_ops(sim_op *o) {
  while (o) {
    sim_op *next = o->next;
    sim__op_free(o);
    o = next;
  }
}

simError_t simStreamBeginCapture(simStream_t h, simStreamCaptureMode mode) {
  INJECT("StreamBeginCapture");
  if (mode != simStreamCaptureModeGlobal && mode != simStreamCaptureModeThreadLocal &&
      mode != simStreamCaptureModeRelaxed)
    return simErrorInvalidValue;
  if (h == NULL || h == simStreamLegacy)
    return simErrorStreamCaptureUnsupported; /* CUDA: the legacy stream cannot capture */
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = sim__stream_of(h, &s);
  if (!e && s->capture)
    e = simErrorIllegalState; /* already capturing */
  sim_capture *c = e ? NULL : calloc(1, sizeof *c);
  if (!e && !c)
    e = simErrorMemoryAllocation;
  if (!e) {
    c->mode = mode;
    c->device = s->device;
    c->thread = pthread_self();
    c->id = ++rt.capture_serial;
    c->origin = s;
    c->next = rt.captures;
    rt.captures = c;
    s->capture = c;
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simStreamEndCapture(simStream_t h, simGraph_t *graph) {
  INJECT("StreamEndCapture");
  if (!graph)
    return simErrorInvalidValue;
  *graph = NULL;
  if (h == NULL || h == simStreamLegacy)
    return simErrorIllegalState;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = sim__stream_of(h, &s);
  sim_capture *c = e ? NULL : s->capture;
  if (!e && !c)
    e = simErrorIllegalState; /* not capturing */
  else if (!e && c->origin != s)
    e = simErrorStreamCaptureUnmatched;
  else if (!e && c->mode != simStreamCaptureModeRelaxed &&
           !pthread_equal(c->thread, pthread_self()))
    e = simErrorStreamCaptureWrongThread;
  if (!e) { /* the capture ends for every stream that joined it */
    for (struct simStream *x = rt.streams; x; x = x->next)
      if (x->capture == c)
        x->capture = NULL;
    for (sim_capture **p = &rt.captures; *p; p = &(*p)->next)
      if (*p == c) {
        *p = c->next;
        break;
      }
    struct simGraph *g = c->invalidated ? NULL : calloc(1, sizeof *g);
    if (g) {
      g->head = c->head;
      g->nodes = c->nodes;
      *graph = g;
    } else {
      free_ops(c->head);
      e = c->invalidated ? simErrorStreamCaptureInvalidated : simErrorMemoryAllocation;
    }
    free(c);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

static simError_t capture_status(simStream_t h, simStreamCaptureStatus *status, uint64_t *id) {
  pthread_mutex_lock(&rt.lock);
  simError_t e = simSuccess;
  *status = simStreamCaptureStatusNone;
  *id = 0;
  if (h == NULL || h == simStreamLegacy) { /* not a use of the stream: a question about it */
    for (sim_capture *c = rt.captures; c; c = c->next)
      if (c->device == tls_device && blocking_capture(c))
        e = simErrorStreamCaptureImplicit;
  } else {
    struct simStream *s;
    e = sim__stream_of(h, &s);
    if (!e && s->capture) {
      *status = s->capture->invalidated ? simStreamCaptureStatusInvalidated
                                        : simStreamCaptureStatusActive;
      *id = s->capture->id;
    }
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simStreamIsCapturing(simStream_t h, simStreamCaptureStatus *status) {
  if (!status)
    return simErrorInvalidValue;
  uint64_t id;
  return capture_status(h, status, &id);
}

simError_t simStreamGetCaptureInfo(simStream_t h, simStreamCaptureStatus *status,
                                   unsigned long long *id) {
  if (!status)
    return simErrorInvalidValue;
  uint64_t x;
  simError_t e = capture_status(h, status, &x);
  if (id)
    *id = x;
  return e;
}

simError_t simThreadExchangeStreamCaptureMode(simStreamCaptureMode *mode) {
  if (!mode || (*mode != simStreamCaptureModeGlobal && *mode != simStreamCaptureModeThreadLocal &&
                *mode != simStreamCaptureModeRelaxed))
    return simErrorInvalidValue;
  int prev = tls_mode;
  tls_mode = *mode;
  *mode = (simStreamCaptureMode)prev;
  return simSuccess;
}

simError_t simGraphLaunch(simGraph_t g, simStream_t h) {
  INJECT("GraphLaunch");
  if (!g)
    return simErrorInvalidResourceHandle;
  pthread_mutex_lock(&rt.lock);
  struct simStream *s;
  simError_t e = sim__stream_of(h, &s);
  if (!e && s->capture)
    e = sim__capture_invalidate(s, simErrorStreamCaptureUnsupported); /* no nested graphs */
  for (sim_op *o = g->head; !e && o; o = o->next) {
    sim_op copy = *o;
    copy.user_free = NULL; /* the graph keeps what its nodes own */
    e = sim__submit(s, copy);
  }
  pthread_mutex_unlock(&rt.lock);
  return e;
}

simError_t simGraphDestroy(simGraph_t g) {
  if (!g)
    return simErrorInvalidResourceHandle;
  pthread_mutex_lock(&rt.lock);
  for (int d = 0; d < SIM_MAX_DEVICES; d++) /* launches still queued use what the nodes own */
    sim__drain_device(d);
  free_ops(g->head);
  pthread_mutex_unlock(&rt.lock);
  free(g);
  return simSuccess;
}

size_t sim__graph_nodes(simGraph_t g) { return g ? g->nodes : 0; }
