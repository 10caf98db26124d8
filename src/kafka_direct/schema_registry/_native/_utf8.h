/* Strict UTF-8, as Python's decoder checks it (and so fastavro, protobuf's Python runtime and
 * pyarrow's to_pylist): no overlong forms, no surrogates, nothing above U+10FFFF. One check for
 * the Avro decoder, the Protobuf decoder and the Avro encoder, so that all three accept exactly
 * the strings Python would; static inline, each extension compiling its own copy. */
#ifndef KD_UTF8_H
#define KD_UTF8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline int kd_valid_utf8(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (n - i >= 8) { /* ASCII runs, 8 bytes a step: the common case */
      uint64_t word;
      memcpy(&word, s + i, 8);
      if (!(word & 0x8080808080808080ULL)) {
        i += 8;
        continue;
      }
    }
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return 0;
    }
    if (n - i < len) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
      return 0;
    i += len;
  }
  return 1;
}

#endif
