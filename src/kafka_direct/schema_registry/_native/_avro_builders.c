/* Growable Arrow buffers, one builder per Arrow array of the reader's type. Runs in the Spark
 * Python worker (from_avro's Arrow UDF), called by the decoder in _avro_arrow.c.
 *
 * Every buffer's size follows from the builder's length (and, for binary data, from its last
 * offset), so undoing a record that failed half-way is just restoring the lengths saved before
 * it (kd_builders_save / kd_builders_restore). Offsets are Arrow's 32-bit ones (binary, string,
 * list, map): a batch that would pass 2 GiB in one array is refused (E_TOO_LARGE).
 *
 * Measuring (kd_builders_measure) decodes a record again without writing anything, counting its
 * offsets from where the record began: an E_TOO_LARGE then means the record alone passes 2 GiB
 * (its own fault), none means only the batch does. It needs no memory, where decoding the record
 * into empty builders would need up to 2 GiB more. */
#include "_avro_arrow.h"

#include <stdlib.h>
#include <string.h>

static int reserve(kd_buf *buf, size_t needed) {
  if (needed <= buf->cap) return 0;
  size_t cap = buf->cap ? buf->cap : 64;
  while (cap < needed) {
    if (cap > SIZE_MAX / 2) return E_MEMORY;
    cap *= 2;
  }
  uint8_t *grown = realloc(buf->p, cap);
  if (grown == NULL) return E_MEMORY;
  buf->p = grown;
  buf->cap = cap;
  return 0;
}

static size_t width_of(int kind) {
  switch (kind) {
    case K_I32: case K_F32: return 4;
    case K_I64: case K_F64: return 8;
    case K_DEC: return 16;
    default: return 0;
  }
}

static int has_offsets(int kind) { return kind == K_BIN || kind == K_LIST; }

static int32_t last_offset(const kd_builder *b) {
  int32_t value;
  memcpy(&value, b->offsets.p + (size_t)b->length * 4, 4);
  return value;
}

static int push_offset(kd_builder *b, int64_t value) {
  if (value - b->base > b->limit) return E_TOO_LARGE;
  if (b->measuring) return 0;
  size_t at = (size_t)(b->length + 1) * 4;
  int err = reserve(&b->offsets, at + 4);
  if (err) return err;
  int32_t v = (int32_t)value;
  memcpy(b->offsets.p + at, &v, 4);
  b->offsets.len = at + 4;
  return 0;
}

int kd_builders_init(kd_builders *all, const int32_t *spec, size_t spec_len) {
  all->b = NULL;
  all->n = 0;
  if (spec_len < 1 || spec[0] < 1 || (size_t)spec[0] > spec_len) return E_PROGRAM;
  int n = spec[0];
  all->b = calloc((size_t)n, sizeof(kd_builder));
  if (all->b == NULL) return E_MEMORY;
  all->n = n;
  size_t at = 1;
  for (int i = 0; i < n; i++) {
    if (at + 2 > spec_len) return E_PROGRAM;
    kd_builder *b = &all->b[i];
    b->limit = INT32_MAX;
    b->kind = spec[at];
    b->nchildren = spec[at + 1];
    if (b->kind < K_BOOL || b->kind > K_LIST || b->nchildren < 0 ||
        (size_t)b->nchildren > spec_len - at - 2)
      return E_PROGRAM;
    b->children = spec + at + 2;
    for (int c = 0; c < b->nchildren; c++)
      if (b->children[c] <= i || b->children[c] >= n) return E_PROGRAM;
    if ((b->kind == K_LIST) != (b->nchildren == 1) && b->kind != K_STRUCT) return E_PROGRAM;
    if (b->kind != K_STRUCT && b->kind != K_LIST && b->nchildren != 0) return E_PROGRAM;
    at += 2 + (size_t)b->nchildren;
    if (has_offsets(b->kind)) {
      int err = reserve(&b->offsets, 4);
      if (err) return err;
      memset(b->offsets.p, 0, 4);
      b->offsets.len = 4;
    }
  }
  return 0;
}

void kd_builders_free(kd_builders *all) {
  for (int i = 0; i < all->n; i++) {
    free(all->b[i].validity.p);
    free(all->b[i].data.p);
    free(all->b[i].offsets.p);
  }
  free(all->b);
  all->b = NULL;
  all->n = 0;
}

void kd_builders_save(kd_builders *all) {
  for (int i = 0; i < all->n; i++) {
    all->b[i].saved_length = all->b[i].length;
    all->b[i].saved_null_count = all->b[i].null_count;
  }
}

void kd_builders_restore(kd_builders *all) {
  for (int i = 0; i < all->n; i++) {
    kd_builder *b = &all->b[i];
    b->length = b->saved_length;
    b->null_count = b->saved_null_count;
    b->validity.len = (size_t)(b->length + 7) / 8;
    if (has_offsets(b->kind)) {
      b->offsets.len = (size_t)(b->length + 1) * 4;
      if (b->kind == K_BIN) b->data.len = (size_t)last_offset(b);
    } else if (b->kind == K_BOOL) {
      b->data.len = (size_t)(b->length + 7) / 8;
    } else {
      b->data.len = (size_t)b->length * width_of(b->kind);
    }
  }
}

void kd_builders_limit(kd_builders *all, int64_t limit) {
  for (int i = 0; i < all->n; i++) all->b[i].limit = limit;
}

/* On: the builders must hold whole records (just restored), so that the last offset is where
 * the record begins. Off: kd_builders_restore must follow, measuring moved the lengths. */
void kd_builders_measure(kd_builders *all, int on) {
  for (int i = 0; i < all->n; i++) {
    kd_builder *b = &all->b[i];
    b->measuring = on;
    b->base = on && has_offsets(b->kind) ? last_offset(b) : 0;
  }
}

static int set_bit(kd_buf *buf, int64_t index, int value) {
  size_t byte = (size_t)(index / 8);
  int err = reserve(buf, byte + 1);
  if (err) return err;
  if (buf->len <= byte) {
    memset(buf->p + buf->len, 0, byte + 1 - buf->len);
    buf->len = byte + 1;
  }
  uint8_t mask = (uint8_t)(1u << (index % 8));
  buf->p[byte] = value ? (uint8_t)(buf->p[byte] | mask) : (uint8_t)(buf->p[byte] & ~mask);
  return 0;
}

static int finish(kd_builder *b, int valid) {
  int err = b->measuring ? 0 : set_bit(&b->validity, b->length, valid);
  if (err) return err;
  b->length++;
  if (!valid) b->null_count++;
  return 0;
}

int kd_append_valid(kd_builder *b) { return finish(b, 1); }

int kd_append_null(kd_builders *all, int index) {
  kd_builder *b = &all->b[index];
  int err = 0;
  switch (b->kind) {
    case K_BOOL:
      err = b->measuring ? 0 : set_bit(&b->data, b->length, 0);
      break;
    case K_BIN:
      /* measuring writes no offsets: the data's length is the last one */
      err = push_offset(b, b->measuring ? (int64_t)b->data.len : last_offset(b));
      break;
    case K_LIST:
      err = push_offset(b, all->b[b->children[0]].length);
      break;
    case K_STRUCT:
      for (int c = 0; c < b->nchildren && !err; c++) err = kd_append_null(all, b->children[c]);
      break;
    default: {
      if (b->measuring) break;
      size_t width = width_of(b->kind);
      err = reserve(&b->data, b->data.len + width);
      if (!err) {
        memset(b->data.p + b->data.len, 0, width);
        b->data.len += width;
      }
    }
  }
  return err ? err : finish(b, 0);
}

int kd_append_bool(kd_builder *b, int value) {
  int err = b->measuring ? 0 : set_bit(&b->data, b->length, value);
  return err ? err : finish(b, 1);
}

int kd_append_fixed(kd_builder *b, const void *value, size_t width) {
  if (b->measuring) return finish(b, 1);
  int err = reserve(&b->data, b->data.len + width);
  if (err) return err;
  memcpy(b->data.p + b->data.len, value, width);
  b->data.len += width;
  return finish(b, 1);
}

int kd_append_bytes(kd_builder *b, const uint8_t *value, size_t n) {
  size_t end = b->data.len + n;
  if (end - (size_t)b->base > (size_t)b->limit) return E_TOO_LARGE;
  if (!b->measuring) {
    int err = reserve(&b->data, end);
    if (err) return err;
    if (n) memcpy(b->data.p + b->data.len, value, n);
  }
  b->data.len = end;
  int err = push_offset(b, (int64_t)end);
  return err ? err : finish(b, 1);
}

int kd_close_list(kd_builders *all, kd_builder *b, int child) {
  int err = push_offset(b, all->b[child].length);
  return err ? err : finish(b, 1);
}
