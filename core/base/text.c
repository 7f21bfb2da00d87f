/* Strings devmm hands to the caller (one allocator, malloc; one way to free them), and text that
 * came from elsewhere made safe to name in a message: kind names, escaping (ADR 40). */
#include "base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void devmm_string_free(char *s) { free(s); }

static int word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

int devmm__kind_name_plain(const char *kind) {
  size_t n = kind ? strlen(kind) : 0, dots = 0;
  if (n == 0 || n >= 48 || !word_char(kind[0]) || !word_char(kind[n - 1]))
    return 0;
  for (size_t i = 0; i < n; i++) {
    if (kind[i] == '.' && kind[i + 1] != '.')
      dots++;
    else if (!word_char(kind[i]))
      return 0;
  }
  return dots > 0;
}

const char *devmm__escape(const char *in, size_t max, char *out, size_t cap) {
  size_t o = 0;
  if (!cap)
    return out;
  for (size_t i = 0; in && i < max && in[i]; i++) {
    unsigned char c = (unsigned char)in[i];
    int plain = c >= 0x20 && c < 0x7f && c != '\\';
    if (o + (plain ? 1 : 4) + 4 > cap) { /* room for this, "..." and the NUL */
      snprintf(out + o, cap - o, "...");
      return out;
    }
    if (plain)
      out[o++] = (char)c;
    else
      o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
  }
  out[o] = '\0';
  return out;
}
