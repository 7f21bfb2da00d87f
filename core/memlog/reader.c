/* The logging adaptor's CSV read back and paired (see include/devmm/memlog.h). */
#include "../base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER "Thread,Time,Action,Pointer,Size,Stream"
#define DAY_NS (86400ull * 1000000000ull)

/* Open-addressing map from a 64-bit key to two int64 values (linear probing, no deletion). */
typedef struct {
  uint64_t *keys;
  int64_t *a, *b;
  unsigned char *used;
  size_t cap, n;
} map;

static size_t slot_of(const map *m, uint64_t k) {
  uint64_t h = k * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(h ^ (h >> 29)) & (m->cap - 1);
  while (m->used[i] && m->keys[i] != k)
    i = (i + 1) & (m->cap - 1);
  return i;
}

static int map_grow(map *m) {
  map n = {0};
  n.cap = m->cap ? m->cap * 2 : 64;
  n.keys = malloc(n.cap * sizeof *n.keys);
  n.a = malloc(n.cap * sizeof *n.a);
  n.b = malloc(n.cap * sizeof *n.b);
  n.used = calloc(n.cap, 1);
  if (!n.keys || !n.a || !n.b || !n.used) {
    free(n.keys), free(n.a), free(n.b), free(n.used);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++)
    if (m->used[i]) {
      size_t j = slot_of(&n, m->keys[i]);
      n.used[j] = 1, n.keys[j] = m->keys[i], n.a[j] = m->a[i], n.b[j] = m->b[i];
    }
  n.n = m->n;
  free(m->keys), free(m->a), free(m->b), free(m->used);
  *m = n;
  return 0;
}

/* The slot of k, inserted with (a, b) = (-1, -1) if new; SIZE_MAX when out of memory. */
static size_t map_get(map *m, uint64_t k) {
  if ((m->n + 1) * 2 > m->cap && map_grow(m))
    return SIZE_MAX;
  size_t i = slot_of(m, k);
  if (!m->used[i]) {
    m->used[i] = 1, m->keys[i] = k, m->a[i] = m->b[i] = -1;
    m->n++;
  }
  return i;
}

static void map_free(map *m) { free(m->keys), free(m->a), free(m->b), free(m->used); }

/* ------------------------------------------------------------------ fields */

typedef struct {
  const char *name;
  size_t line;
} where;

/* A field's first 64 bytes, escaped (control characters as \xNN): a log's text never reaches a
 * terminal raw through a message (tests/c/suite_log.c log_fields_escaped_in_messages). */
#define FIELD_SHOWN (64 * 4 + 4)

/* fmt has "%s:%zu" for where and a "%s" for the field, escaped. */
static int bad(const where *w, const char *fmt, const char *field, size_t len) {
  char shown[FIELD_SHOWN];
  devmm__escape(field, len > 64 ? 64 : len, shown, sizeof shown);
  return devmm_set_error(DEVMM_EINVAL, fmt, w->name, w->line, shown);
}

/* 0; -1 not a number; -2 a number past UINT64_MAX (told apart: log_bad_input_is_named). */
static int parse_u64(const char *s, size_t len, int base, uint64_t *out) {
  if (!len)
    return -1;
  uint64_t v = 0;
  int over = 0;
  for (size_t i = 0; i < len; i++) {
    int d;
    char c = s[i];
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return -1;
    if (over || v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
      over = 1;
    else
      v = v * (uint64_t)base + (uint64_t)d;
  }
  *out = v;
  return over ? -2 : 0;
}

/* "0x7f...", "(nil)" or "0" (how %p prints NULL), or plain decimal. */
static int parse_pointer(const char *s, size_t len, uint64_t *out) {
  if ((len == 5 && memcmp(s, "(nil)", 5) == 0)) {
    *out = 0;
    return 0;
  }
  if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    return len - 2 > 16 ? -1 : parse_u64(s + 2, len - 2, 16, out);
  return parse_u64(s, len, 10, out);
}

/* "HH:MM:SS:ffffff" (devmm) or "HH:MM:SS.fff..." (any number of fraction digits). */
static int parse_time(const char *s, size_t len, uint64_t *ns) {
  uint64_t h, m, sec, frac = 0, scale = 1000000000ull;
  if (len < 8 || s[2] != ':' || s[5] != ':' || parse_u64(s, 2, 10, &h) ||
      parse_u64(s + 3, 2, 10, &m) || parse_u64(s + 6, 2, 10, &sec) || h > 23 || m > 59 || sec > 60)
    return -1;
  if (len > 8) {
    if ((s[8] != ':' && s[8] != '.') || len == 9 || len - 9 > 9)
      return -1;
    for (size_t i = 9; i < len; i++) {
      if (s[i] < '0' || s[i] > '9')
        return -1;
      scale /= 10;
      frac += (uint64_t)(s[i] - '0') * scale;
    }
  }
  *ns = ((h * 60 + m) * 60 + sec) * 1000000000ull + frac;
  return 0;
}

static int parse_action(const char *s, size_t len, uint32_t *out) {
  static const char *names[] = {"allocate", "free", "allocate failure", "free failure"};
  for (uint32_t i = 0; i < 4; i++)
    if (strlen(names[i]) == len && memcmp(s, names[i], len) == 0) {
      *out = i;
      return 0;
    }
  return -1;
}

/* ------------------------------------------------------------------ parsing */

typedef struct {
  devmm_log *log;
  size_t cap_events, cap_threads;
  map threads; /* thread id -> index (a) */
  map open;    /* pointer -> oldest open allocation (a), newest (b); b is -2 once every allocation
                * of it was freed (a free then is a double free) */
  int64_t *next_open; /* per event: the next open allocation of the same pointer */
  uint64_t last_ns, day;
} parser;

static int oom(const where *w) {
  return devmm_set_error(DEVMM_ENOMEM, "%s: out of host memory reading the log at line %zu",
                         w->name, w->line);
}

static int add_event(parser *p, const where *w, const devmm_log_event *e) {
  devmm_log *log = p->log;
  if (log->nevents == p->cap_events) {
    size_t cap = p->cap_events ? p->cap_events * 2 : 1024;
    devmm_log_event *ev = realloc(log->events, cap * sizeof *ev);
    if (!ev)
      return oom(w);
    log->events = ev;
    int64_t *nx = realloc(p->next_open, cap * sizeof *nx);
    if (!nx)
      return oom(w);
    p->next_open = nx;
    p->cap_events = cap;
  }
  size_t i = log->nevents++;
  log->events[i] = *e;
  p->next_open[i] = -1;
  devmm_log_event *ev = &log->events[i];
  if (e->action == DEVMM_LOG_ALLOCATE) {
    size_t s = map_get(&p->open, e->ptr);
    if (s == SIZE_MAX)
      return oom(w);
    if (p->open.b[s] >= 0)
      p->next_open[p->open.b[s]] = (int64_t)i;
    else
      p->open.a[s] = (int64_t)i;
    p->open.b[s] = (int64_t)i;
    log->never_freed++;
  } else if (e->action == DEVMM_LOG_FREE) {
    size_t s = map_get(&p->open, e->ptr);
    if (s == SIZE_MAX)
      return oom(w);
    int64_t a = p->open.a[s];
    if (a < 0 && p->open.b[s] == -2) { /* freed already: counted apart (test_observability) */
      ev->peer = -2;
      if (!log->double_frees++)
        log->first_double_free = i, log->double_free_line = w->line;
    } else if (a < 0) {
      log->unmatched_frees++;
      p->open.b[s] = -2; /* a second free of it is a double free */
    } else {
      p->open.a[s] = p->next_open[a];
      if (p->open.a[s] < 0)
        p->open.b[s] = -2;
      log->events[a].peer = (int64_t)i;
      ev->peer = a;
      log->never_freed--;
      if (e->bytes != log->events[a].bytes && !log->resized_frees++)
        log->first_resized_free = i, log->resized_free_line = w->line;
    }
  }
  return DEVMM_OK;
}

static int thread_index(parser *p, const where *w, uint64_t id, uint32_t *out) {
  size_t s = map_get(&p->threads, id);
  if (s == SIZE_MAX)
    return oom(w);
  if (p->threads.a[s] < 0) {
    devmm_log *log = p->log;
    if (log->nthreads == p->cap_threads) {
      size_t cap = p->cap_threads ? p->cap_threads * 2 : 16;
      uint64_t *t = realloc(log->threads, cap * sizeof *t);
      if (!t)
        return oom(w);
      log->threads = t;
      p->cap_threads = cap;
    }
    p->threads.a[s] = (int64_t)log->nthreads;
    log->threads[log->nthreads++] = id;
  }
  *out = (uint32_t)p->threads.a[s];
  return DEVMM_OK;
}

static int parse_line(parser *p, const where *w, const char *s, size_t len) {
  const char *f[6];
  size_t fl[6], nf = 0;
  const char *start = s, *end = s + len;
  for (const char *c = s; c <= end; c++)
    if (c == end || *c == ',') {
      if (nf == 6)
        return devmm_set_error(DEVMM_EINVAL,
                               "%s:%zu: more than 6 fields: expected "
                               "Thread,Time,Action,Pointer,Size,Stream",
                               w->name, w->line);
      f[nf] = start, fl[nf++] = (size_t)(c - start);
      start = c + 1;
    }
  if (nf != 6)
    return devmm_set_error(DEVMM_EINVAL,
                           "%s:%zu: %zu field%s: expected 6 "
                           "(Thread,Time,Action,Pointer,Size,Stream)",
                           w->name, w->line, nf, nf == 1 ? "" : "s");
  devmm_log_event e = {0};
  uint64_t tid, ns;
  e.peer = -1;
  int prc = parse_u64(f[0], fl[0], 10, &tid);
  if (prc == -2)
    return bad(w, "%s:%zu: Thread '%s' is too large: expected at most 18446744073709551615", f[0],
               fl[0]);
  if (prc)
    return bad(w, "%s:%zu: Thread '%s' is not a thread id: expected a decimal number", f[0], fl[0]);
  if (parse_time(f[1], fl[1], &ns))
    return bad(w, "%s:%zu: Time '%s' is not a time of day: expected HH:MM:SS:micro", f[1], fl[1]);
  if (parse_action(f[2], fl[2], &e.action))
    return bad(w,
               "%s:%zu: Action '%s' is unknown: expected allocate, free, allocate failure "
               "or free failure",
               f[2], fl[2]);
  if (parse_pointer(f[3], fl[3], &e.ptr))
    return bad(w, "%s:%zu: Pointer '%s' is not an address: expected 0x<hex> or (nil)", f[3], fl[3]);
  if ((prc = parse_u64(f[4], fl[4], 10, &e.bytes)) == -2)
    return bad(w, "%s:%zu: Size '%s' is too large: expected at most 18446744073709551615", f[4],
               fl[4]);
  if (prc)
    return bad(w, "%s:%zu: Size '%s' is not a number of bytes: expected a decimal number", f[4],
               fl[4]);
  if (parse_pointer(f[5], fl[5], &e.stream))
    return bad(w, "%s:%zu: Stream '%s' is not a stream: expected 0x<hex> or (nil)", f[5], fl[5]);
  if ((e.action == DEVMM_LOG_ALLOCATE || e.action == DEVMM_LOG_FREE) && !e.ptr)
    return devmm_set_error(DEVMM_EINVAL, "%s:%zu: %s of a NULL pointer: expected an address",
                           w->name, w->line, e.action ? "free" : "allocate");
  /* times of day: a jump back by more than 12 hours is the next day. The day count grows by one
   * a line at most, so its time can pass 64 bits only after ~213,503 days: refused, never
   * wrapped (tests/c/suite_log.c log_times_cannot_wrap). */
  uint64_t day_ns;
  int wraps = __builtin_mul_overflow(p->day, DAY_NS, &day_ns) ||
              __builtin_add_overflow(day_ns, ns, &e.time_ns);
  if (!wraps && p->log->nevents && p->last_ns > DAY_NS / 2 && e.time_ns < p->last_ns - DAY_NS / 2)
    wraps = __builtin_mul_overflow(++p->day, DAY_NS, &day_ns) ||
            __builtin_add_overflow(day_ns, ns, &e.time_ns);
  if (wraps) {
    char shown[FIELD_SHOWN];
    devmm__escape(f[1], fl[1] > 64 ? 64 : fl[1], shown, sizeof shown);
    return devmm_set_error(DEVMM_EINVAL,
                           "%s:%zu: Time '%s' is on day %llu of the log, past what 64 bits of "
                           "nanoseconds can count (each jump back of more than 12 hours is a "
                           "midnight): expected a log of fewer days",
                           w->name, w->line, shown, (unsigned long long)p->day);
  }
  if (e.time_ns > p->last_ns)
    p->last_ns = e.time_ns;
  int rc = thread_index(p, w, tid, &e.thread);
  return rc ? rc : add_event(p, w, &e);
}

void devmm_log_free(devmm_log *log) {
  if (!log)
    return;
  free(log->events);
  free(log->threads);
  free(log);
}

int devmm_log_parse(const char *text, size_t len, const char *name, devmm_log **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_log_parse: out is NULL");
  *out = NULL;
  if (!text && len)
    return devmm_set_error(DEVMM_EINVAL, "devmm_log_parse: text is NULL");
  where w = {name ? name : "(log)", 1};
  parser p = {0};
  p.log = calloc(1, sizeof *p.log);
  if (!p.log)
    return oom(&w);
  p.log->first_double_free = p.log->first_resized_free = SIZE_MAX;
  const char *s = text, *end = text + len;
  int rc = DEVMM_OK, header = 0;
  for (; s < end && !rc; w.line++) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
    const char *next = nl ? nl + 1 : end;
    if (n && s[n - 1] == '\r')
      n--;
    if (memchr(s, '\0', n)) {
      rc = devmm_set_error(DEVMM_EINVAL, "%s:%zu: a NUL byte: expected text", w.name, w.line);
    } else if (!header) {
      if (n != strlen(HEADER) || memcmp(s, HEADER, n) != 0) {
        char shown[FIELD_SHOWN];
        devmm__escape(s, n > 64 ? 64 : n, shown, sizeof shown);
        rc = devmm_set_error(DEVMM_EINVAL,
                             "%s:1: '%s' is not the log's header: expected '" HEADER
                             "' (a devmm or RMM memory log)",
                             w.name, shown);
      }
      header = 1;
    } else if (n) {
      rc = parse_line(&p, &w, s, n);
    }
    s = next;
  }
  if (!rc && !header)
    rc = devmm_set_error(DEVMM_EINVAL, "%s: empty: expected the header '" HEADER "'", w.name);
  map_free(&p.threads);
  map_free(&p.open);
  free(p.next_open);
  if (rc) {
    devmm_log_free(p.log);
    return rc;
  }
  *out = p.log;
  return DEVMM_OK;
}

int devmm_log_read(const char *path, devmm_log **out) {
  if (!out)
    return devmm_set_error(DEVMM_EINVAL, "devmm_log_read: out is NULL");
  *out = NULL;
  if (!path)
    return devmm_set_error(DEVMM_EINVAL, "devmm_log_read: path is NULL");
  /* never blocks: a FIFO (which another user can plant where a log is expected) would wait for
   * a writer; only a regular file is read (tests/c/suite_log.c log_read_refuses_what_is_not_a_file)
   */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return devmm_set_error(DEVMM_EIO, "cannot open log '%s': %s", path, strerror(errno));
  struct stat st;
  int stat_rc = fstat(fd, &st);
  if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
    int rc =
        stat_rc != 0
            ? devmm_set_error(DEVMM_EIO, "cannot stat log '%s': %s", path, strerror(errno))
            : devmm_set_error(DEVMM_EIO, "cannot read log '%s': it is %s: expected a regular file",
                              path, devmm__file_type(st.st_mode));
    close(fd);
    return rc;
  }
  FILE *f = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    int rc = devmm_set_error(DEVMM_EIO, "cannot open log '%s': %s", path, strerror(errno));
    close(fd);
    return rc;
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = DEVMM_OK;
  for (;;) {
    if (len == cap) {
      size_t ncap = cap ? cap * 2 : 1 << 16;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        rc = devmm_set_error(DEVMM_ENOMEM, "log '%s': out of host memory reading it", path);
        break;
      }
      buf = nb, cap = ncap;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) {
      if (ferror(f))
        rc = devmm_set_error(DEVMM_EIO, "cannot read log '%s': %s", path, strerror(errno));
      break;
    }
  }
  fclose(f);
  if (!rc)
    rc = devmm_log_parse(buf, len, path, out);
  free(buf);
  return rc;
}
