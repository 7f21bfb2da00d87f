/* devmm-cpu's internals, shared by its files: plugin.c (the entry, the descriptor, the ops every
 * kind shares) and one file per kind (malloc.c, aligned.c, mmap.c, shm.c). */
#ifndef DEVMM_PLUGINS_CPU_INTERNAL_H
#define DEVMM_PLUGINS_CPU_INTERNAL_H

#include <devmm/plugin.h>

#include <stddef.h>
#include <stdint.h>

/* The host table devmm passed at the entry (plugin.c). */
extern const devmm_host_services *cpu_host;

#define CPU0 ((devmm_device){DEVMM_DEVICE_CPU, 0})
#define CPU_FLAGS (DEVMM_RESOURCE_THREAD_SAFE | DEVMM_RESOURCE_HOST_ACCESSIBLE)

static inline size_t cpu_round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* The ops every kind shares (plugin.c): the machine's free and total memory, memmove, memset. */
int cpu_mem_info(devmm_resource *self, size_t *free_bytes, size_t *total_bytes);
int cpu_copy(devmm_resource *self, void *dst, const void *src, size_t n, devmm_stream s);
int cpu_memset(devmm_resource *self, void *dst, int v, size_t n, devmm_stream s);
/* DEVMM_OK for no stream; CPU memory has none, so any other stream is an error naming kind. */
int cpu_check_stream(const char *kind, devmm_stream s);
/* DEVMM_OK for device 0, the one CPU device; an error naming kind otherwise. */
int cpu_device_zero(const char *kind, int32_t id);
/* DEVMM_EINVAL for an option whose value h's parse_size/parse_bool refused: "<kind>: <option>:
 * <the parser's message>", so that the message names the option (test_first_hour). */
int cpu_option_error(const devmm_host_services *h, const char *kind, const char *option);

/* malloc.c: bytes at align (malloc up to 16, posix_memalign above), or DEVMM_ENOMEM naming
 * kind; and free, the deallocate of cpu.malloc and cpu.aligned. */
int cpu_alloc_aligned(const char *kind, size_t bytes, size_t align, void **out);
int cpu_free_deallocate(devmm_resource *self, void *ptr, size_t bytes, size_t align,
                        devmm_stream s);

/* The kinds, in the descriptor's order. */
extern const devmm_resource_kind cpu_malloc_kind;  /* malloc.c */
extern const devmm_resource_kind cpu_aligned_kind; /* aligned.c */
extern const devmm_resource_kind cpu_mmap_kind;    /* mmap.c */
extern const devmm_resource_kind cpu_shm_kind;     /* shm.c */

#endif
