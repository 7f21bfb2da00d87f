/* Who besides root and this user may write an open plugin file or directory (ADR 27, ADR 39):
 * its mode bits, who is in its group, and its POSIX ACLs (the access ACL, and a directory's
 * default ACL), all read from the descriptor the trust walk (trust.c) opened, never by name.
 *
 * The trusted users are root and this process's effective user: the owner of whatever passes
 * is one of them, so "another user" is anyone else. Group write is trusted for root's group, or
 * for a group no other user is in, as primary group (the user database, enumerated) or as a
 * member (the group database); a group or a member the databases do not know is anyone's. The
 * ACL is parsed here from its extended attribute (version 2: a header, then entries of tag,
 * permissions, id), so libdevmm needs no libacl. */
#include "plugin_host_internal.h"

#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static int trusted_uid(uid_t uid) { return uid == 0 || uid == geteuid(); }

/* ------------------------------------------------------------------ groups */

/* The user database is enumerated with getpwent_r, whose position is the process's one: devmm's
 * own enumerations take turns. Another caller of setpwent/getpwent in the program, at the same
 * moment, could make one enumeration skip accounts (docs/plugins.md says so). */
static pthread_mutex_t pwent_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether someone other than root and this user may be in group gid: 0 if not; else 1, with why
 * (a phrase that follows "gid N, ") in why. Anything that cannot be known counts against it:
 * an unknown group, a member with no account, an unreadable database, an enumeration cut short
 * (an entry too long, out of memory) is taken as an outsider. */
static int group_has_outsider(gid_t gid, char *why, size_t n) {
  if (gid == 0)
    return 0;
  size_t cap = 16384;
  char *buf = malloc(cap), *pbuf = malloc(cap);
  struct group gr, *g = NULL;
  int rc = buf && pbuf ? ERANGE : ENOMEM;
  while (rc == ERANGE && buf) {
    rc = getgrgid_r(gid, &gr, buf, cap, &g);
    if (rc == ERANGE) {
      char *grown = cap < (1u << 24) ? realloc(buf, cap * 2) : NULL;
      if (!grown)
        break;
      buf = grown;
      cap *= 2;
    }
  }
  int outsider = 1;
  if (rc != 0 || !g) {
    if (rc == 0 || rc == ENOENT || rc == ESRCH)
      snprintf(why, n,
               "a group with no entry in the group database, so who is in it cannot be "
               "known");
    else
      snprintf(why, n, "a group whose entry cannot be read (%s), so who is in it cannot be known",
               strerror(rc));
    goto done;
  }
  for (char **m = g->gr_mem; *m; m++) {
    struct passwd pw, *p = NULL;
    int prc = getpwnam_r(*m, &pw, pbuf, 16384, &p);
    if (prc != 0 || !p) {
      snprintf(why, n, "a group of which '%.64s', a member with no account, may be anyone", *m);
      goto done;
    }
    if (!trusted_uid(p->pw_uid)) {
      snprintf(why, n, "a group of which user %.64s (uid %u) is a member", p->pw_name,
               (unsigned)p->pw_uid);
      goto done;
    }
  }
  /* and nobody else has it as primary group */
  pthread_mutex_lock(&pwent_lock);
  setpwent();
  struct passwd pw, *p = NULL;
  int prc;
  outsider = 0;
  while ((prc = getpwent_r(&pw, pbuf, 16384, &p)) == 0 && p) {
    if (p->pw_gid == gid && !trusted_uid(p->pw_uid)) {
      snprintf(why, n, "a group that user %.64s (uid %u) has as primary group", p->pw_name,
               (unsigned)p->pw_uid);
      outsider = 1;
      break;
    }
  }
  if (!outsider && prc != 0 && prc != ENOENT) {
    snprintf(why, n, "a group whose users cannot all be read from the user database (%s)",
             strerror(prc));
    outsider = 1;
  }
  endpwent();
  pthread_mutex_unlock(&pwent_lock);
done:
  if (!buf || !pbuf) {
    snprintf(why, n, "a group whose members cannot be read (out of memory)");
    outsider = 1;
  }
  free(buf);
  free(pbuf);
  return outsider;
}

/* ------------------------------------------------------------------ ACLs */

enum { ACL_V2 = 2, T_USER_OBJ = 1, T_USER = 2, T_GROUP_OBJ = 4, T_GROUP = 8, T_MASK = 16 };
enum { T_OTHER = 32, P_WRITE = 2 };

typedef struct {
  unsigned tag, perm, id;
} acl_entry;

typedef struct {
  size_t n;
  acl_entry *e;
  int has_mask;
  unsigned mask;
} acl;

static unsigned le(const unsigned char *p, int bytes) {
  unsigned v = 0;
  while (bytes--)
    v = v << 8 | p[bytes];
  return v;
}

/* Reads the ACL in attribute `name` of fd into *a (n == 0: it has none). NULL, or a refusal. An
 * O_PATH descriptor (the walk's, for a file) is one fgetxattr refuses on some kernels (EBADF):
 * then the same inode is read through /proc/self/fd, which costs a path lookup in /proc. */
static char *read_acl(int fd, const char *name, const char *what, const char *path, acl *a) {
  memset(a, 0, sizeof *a);
  char self[64];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  int via_proc = 0;
  unsigned char *buf = NULL;
  ssize_t len = -1;
  for (int tries = 0; tries < 4; tries++) {
    ssize_t want = via_proc ? getxattr(self, name, NULL, 0) : fgetxattr(fd, name, NULL, 0);
    if (want < 0 && errno == EBADF && !via_proc) {
      via_proc = 1;
      tries--;
      continue;
    }
    if (want < 0)
      break;
    unsigned char *grown = realloc(buf, (size_t)want + 1);
    if (!grown) {
      free(buf);
      return devmm__fmt_dup("cannot read the ACL of %s '%s': out of memory", what, path);
    }
    buf = grown;
    len = via_proc ? getxattr(self, name, buf, (size_t)want + 1)
                   : fgetxattr(fd, name, buf, (size_t)want + 1);
    if (len >= 0 || errno != ERANGE)
      break;
  }
  if (len < 0) {
    int e = errno;
    free(buf);
    if (e == ENODATA || e == ENOTSUP || e == EOPNOTSUPP)
      return NULL; /* none, or a file system without ACLs */
    return devmm__fmt_dup("refusing %s '%s': its ACL (%s) cannot be read: %s%s", what, path, name,
                          strerror(e),
                          via_proc ? " (through /proc/self/fd: is /proc mounted?)" : "");
  }
  if (len < 4 || (len - 4) % 8 != 0 || le(buf, 4) != ACL_V2) {
    free(buf);
    return devmm__fmt_dup("refusing %s '%s': its ACL (%s) is not one this devmm can read (%zd "
                          "bytes, version %u; expected version 2)",
                          what, path, name, len, len >= 4 ? le(buf, 4) : 0);
  }
  a->n = (size_t)(len - 4) / 8;
  a->e = calloc(a->n ? a->n : 1, sizeof *a->e);
  if (!a->e) {
    free(buf);
    return devmm__fmt_dup("cannot read the ACL of %s '%s': out of memory", what, path);
  }
  for (size_t i = 0; i < a->n; i++) {
    const unsigned char *p = buf + 4 + 8 * i;
    a->e[i] = (acl_entry){le(p, 2), le(p + 2, 2) & 7, le(p + 4, 4)};
    if (a->e[i].tag == T_MASK) {
      a->has_mask = 1;
      a->mask = a->e[i].perm;
    }
  }
  free(buf);
  return NULL;
}

static const char *rwx(unsigned perm, char out[4]) {
  out[0] = perm & 4 ? 'r' : '-';
  out[1] = perm & 2 ? 'w' : '-';
  out[2] = perm & 1 ? 'x' : '-';
  out[3] = '\0';
  return out;
}

/* What an entry of the group class may really do: its permissions within the mask. */
static unsigned effective(const acl *a, const acl_entry *e) {
  return a->has_mask && e->tag != T_USER_OBJ && e->tag != T_OTHER ? e->perm & a->mask : e->perm;
}

/* The named users and groups of ACL a (the default ACL when dflt) that may write: the first
 * one that is not root, this user, or a group of theirs is a refusal. */
static char *check_acl_entries(const char *what, const char *path, const acl *a, int dflt,
                               gid_t owner_gid) {
  const char *pre = dflt ? "default:" : "", *kind = dflt ? "default" : "access";
  const char *obj = dflt ? "what is made in it" : "it";
  char perm[4], mask[4], why[256];
  if (a->has_mask)
    rwx(a->mask, mask);
  else
    snprintf(mask, sizeof mask, "---");
  for (size_t i = 0; i < a->n; i++) {
    const acl_entry *e = &a->e[i];
    if (!(effective(a, e) & P_WRITE))
      continue;
    rwx(e->perm, perm);
    if (e->tag == T_USER && !trusted_uid(e->id))
      return devmm__fmt_dup(
          "refusing %s '%s': its %s ACL lets uid %u write %s (entry %suser:%u:%s, mask %s); "
          "expected write for its owner, root and this user only; fix with setfacl %s-x u:%u",
          what, path, kind, e->id, obj, pre, e->id, perm, mask, dflt ? "-d " : "", e->id);
    if (e->tag == T_GROUP && group_has_outsider(e->id, why, sizeof why))
      return devmm__fmt_dup("refusing %s '%s': its %s ACL lets gid %u write %s (entry "
                            "%sgroup:%u:%s, mask %s), %s; expected root's group, or a group no "
                            "user but root and this one is in; fix with setfacl %s-x g:%u",
                            what, path, kind, e->id, obj, pre, e->id, perm, mask, why,
                            dflt ? "-d " : "", e->id);
    /* in the access ACL these two are the mode bits, which the caller checks */
    if (dflt && e->tag == T_OTHER)
      return devmm__fmt_dup("refusing %s '%s': its default ACL lets others write what is made in "
                            "it (entry default:other::%s); expected write for its owner, root and "
                            "this user only; fix with setfacl -d -m o::r-x",
                            what, path, perm);
    if (dflt && e->tag == T_GROUP_OBJ && group_has_outsider(owner_gid, why, sizeof why))
      return devmm__fmt_dup("refusing %s '%s': its default ACL lets its group, gid %u, write "
                            "what is made in it (entry default:group::%s, mask %s), %s; expected "
                            "root's group, or a group no user but root and this one is in; fix "
                            "with setfacl -d -m g::r-x",
                            what, path, (unsigned)owner_gid, perm, mask, why);
  }
  return NULL;
}

/* ------------------------------------------------------------------ the check */

char *devmm__trust_check_open(const char *what, const char *path, int fd, const struct stat *st) {
  unsigned mode = (unsigned)(st->st_mode & 07777);
  int dir = S_ISDIR(st->st_mode), sticky = dir && (st->st_mode & S_ISVTX);
  acl a;
  char *err = read_acl(fd, "system.posix_acl_access", what, path, &a);
  if (err)
    return err;
  /* with a mask, the group bits of the mode are the mask; the owning group's own permissions
   * are its entry's */
  int group_write = (mode & S_IWGRP) != 0;
  for (size_t i = 0; a.has_mask && i < a.n; i++)
    if (a.e[i].tag == T_GROUP_OBJ)
      group_write = (effective(&a, &a.e[i]) & P_WRITE) != 0;
  char why[256];
  if ((st->st_mode & S_IWOTH) && !sticky)
    err = devmm__fmt_dup("refusing %s '%s': it is writable by others (mode %04o); fix with "
                         "chmod o-w",
                         what, path, mode);
  else if (group_write && !sticky && group_has_outsider(st->st_gid, why, sizeof why))
    err = devmm__fmt_dup("refusing %s '%s': it is writable by its group, gid %u (mode %04o), %s; "
                         "expected root's group, or a group no user but root and this one is in; "
                         "fix with chmod g-w",
                         what, path, (unsigned)st->st_gid, mode, why);
  else if (!trusted_uid(st->st_uid))
    err = devmm__fmt_dup("refusing %s '%s': it is owned by uid %u, neither root nor this user",
                         what, path, (unsigned)st->st_uid);
  else if (!sticky)
    err = check_acl_entries(what, path, &a, 0, st->st_gid);
  free(a.e);
  if (err || !dir || sticky)
    return err;
  /* a directory's default ACL: what is made in it later would be writable by these */
  if ((err = read_acl(fd, "system.posix_acl_default", what, path, &a)) != NULL)
    return err;
  err = check_acl_entries(what, path, &a, 1, st->st_gid);
  free(a.e);
  return err;
}
