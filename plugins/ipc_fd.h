/* Opening another process's memfd for IPC (ADR 30): shared by cpu.shm (plugins/cpu/cpu.c) and
 * the simulator's device memory (plugins/sim/simrt.c). The exporter keeps its memfd open; the
 * handle names the exporter's pid, the descriptor number and the file's inode; the importer
 * reopens /proc/<pid>/fd/<n> (a new open file of the same memory: same user and ptrace read
 * access, as /proc enforces), checks that the inode is still the one exported (a pid or a
 * descriptor number may be reused), maps it and closes it again. Header-only, static inline. */
#ifndef DEVMM_PLUGINS_IPC_FD_H
#define DEVMM_PLUGINS_IPC_FD_H

#include <devmm/error.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a handle's payload says about the file (the rest of the payload is the user's). */
typedef struct ipcfd_ref {
  uint64_t ino, dev; /* the exporter's fstat of the memfd */
  uint64_t offset;   /* where the shared range starts in the file */
  int32_t fd;        /* the exporter's descriptor number */
  int32_t reserved;
} ipcfd_ref;

/* Fills ref for descriptor fd at offset; 0, or an errno. */
static inline int ipcfd_describe(int fd, uint64_t offset, ipcfd_ref *ref) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return errno;
  memset(ref, 0, sizeof *ref);
  ref->ino = (uint64_t)st.st_ino;
  ref->dev = (uint64_t)st.st_dev;
  ref->offset = offset;
  ref->fd = fd;
  return 0;
}

/* Reopens the exporter's file; returns the new descriptor, or -1 with a devmm status in *status
 * and the reason in why. need: bytes the file must hold from ref->offset. */
static inline int ipcfd_open(const ipcfd_ref *ref, int32_t pid, uint64_t need, int *status,
                             char *why, size_t cap) {
  char path[64];
  if (pid <= 0 || ref->fd < 0) {
    *status = DEVMM_EINVAL;
    snprintf(why, cap, "the IPC handle names no process or descriptor (pid %d, descriptor %d)",
             (int)pid, (int)ref->fd);
    return -1;
  }
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)ref->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    *status = e == ENOENT || e == ESRCH ? DEVMM_ENOENT : DEVMM_EIO;
    if (*status == DEVMM_ENOENT)
      snprintf(why, cap,
               "the exporting process %d has exited or freed the memory (%s: no such descriptor)",
               (int)pid, path);
    else if (e == EACCES || e == EPERM)
      snprintf(why, cap,
               "not allowed to open %s (process %d's memory: needs the same user and ptrace "
               "read access): %s",
               path, (int)pid, strerror(e));
    else
      snprintf(why, cap, "cannot open %s: %s", path, strerror(e));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != ref->ino || (uint64_t)st.st_dev != ref->dev) {
    close(fd);
    *status = DEVMM_ENOENT;
    snprintf(why, cap,
             "the exporting process %d freed the memory: %s is another file now (inode %llu, "
             "expected %llu)",
             (int)pid, path, (unsigned long long)st.st_ino, (unsigned long long)ref->ino);
    return -1;
  }
  if ((uint64_t)st.st_size < ref->offset || (uint64_t)st.st_size - ref->offset < need) {
    close(fd);
    *status = DEVMM_EINVAL;
    snprintf(why, cap, "IPC handle names bytes %llu..%llu of a %llu-byte file",
             (unsigned long long)ref->offset, (unsigned long long)(ref->offset + need),
             (unsigned long long)st.st_size);
    return -1;
  }
  return fd;
}

#endif
