/* Opening another process's memfd for IPC (ADR 30): shared by cpu.shm (plugins/cpu/shm.c) and
 * the simulator's device memory (plugins/gpu/sim/), compiled into each plugin that uses it
 * (plugins/common/ipc_fd.c; hidden, like every plugin symbol). The exporter keeps its memfd
 * open; the handle names the exporter's pid, the descriptor number and the file's inode; the
 * importer looks the file up through /proc/<pid>/fd/<n> and checks it before it maps a byte. */
#ifndef DEVMM_PLUGINS_IPC_FD_H
#define DEVMM_PLUGINS_IPC_FD_H

#include <stddef.h>
#include <stdint.h>

/* What a handle's payload says about the file (the rest of the payload is the user's). */
typedef struct ipcfd_ref {
  uint64_t ino, dev; /* the exporter's fstat of the memfd */
  uint64_t offset;   /* where the shared range starts in the file */
  int32_t fd;        /* the exporter's descriptor number */
  uint32_t pidns;    /* the exporter's pid namespace (inode, low 32 bits); never 0 (ADR 40) */
} ipcfd_ref;

/* The memfd names devmm gives its shared files ("/memfd:<name> (deleted)" in /proc). */
#define IPCFD_NAME_CPU "devmm-cpu.shm"
#define IPCFD_NAME_SIM "devmm-sim"
#define IPCFD_NAME_LEDGER "devmm-ipc-ledger" /* the GPU plugin's export counts (ADR 38) */
#define IPCFD_NAME_POOL                                                                            \
  "devmm-pool" /* a runtime's shareable pool, as ipc.c's pool import expects */

/* What a kind expects of the memfd a handle names: its one name (cpu.shm: IPCFD_NAME_CPU only,
 * the simulator IPCFD_NAME_SIM, the ledger IPCFD_NAME_LEDGER), for messages what it is, and for
 * cpu.shm the allocation's token (ADR 40): the memfd is named "<name>:<32 hex digits>:<bytes>",
 * a name only the exporter's /proc readers (ptrace read access) see, and the handle carries the
 * token; the importer compares them in constant time and refuses a range past <bytes>. */
#define IPCFD_TOKEN_BYTES 16
typedef struct ipcfd_expect {
  const char *name, *what;
  const uint8_t *token; /* IPCFD_TOKEN_BYTES, or NULL: a name without a token */
} ipcfd_expect;

/* A new random token (getrandom); 0, or an errno. */
int ipcfd_new_token(uint8_t token[IPCFD_TOKEN_BYTES]);

/* The memfd name "<name>:<token in hex>:<bytes>", in out (at least 80 bytes). */
void ipcfd_token_name(char *out, size_t cap, const char *name,
                      const uint8_t token[IPCFD_TOKEN_BYTES], uint64_t bytes);

/* Seals a new memfd (made with MFD_ALLOW_SEALING) against shrinking, so that no peer's ftruncate
 * can send a process mapping it SIGBUS; 0, or an errno. */
int ipcfd_seal(int fd);

/* Fills ref for descriptor fd at offset; 0, or an errno. */
int ipcfd_describe(int fd, uint64_t offset, ipcfd_ref *ref);

/* Reopens the exporter's file through /proc/<pid>/fd/<n>, checked (the inode exported, a regular
 * file, a devmm memfd sealed against shrinking, then need bytes from ref->offset, the size read
 * only once the seal is seen): the new descriptor, or -1 with a devmm status in *status and the
 * reason in why (which says so when the exporter is in another pid namespace). */
int ipcfd_open(const ipcfd_ref *ref, int32_t pid, uint64_t need, const ipcfd_expect *x, int *status,
               char *why, size_t cap);

/* A descriptor received from the exporter (SCM_RIGHTS, multiprocessing's DupFd), checked as
 * ipcfd_open checks: a close-on-exec duplicate the caller owns, or -1 as ipcfd_open. */
int ipcfd_adopt(const ipcfd_ref *ref, int given, uint64_t need, const ipcfd_expect *x, int *status,
                char *why, size_t cap);

#endif
