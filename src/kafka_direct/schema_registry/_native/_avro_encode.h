/* Shared by _avro_encode.c (the module, records, arrays, maps, unions) and
 * _avro_encode_values.c (scalars): the program's numbers, the encoder's state, and the small
 * output and Arrow-buffer helpers, inline because they run once per field. */
#ifndef KAFKA_DIRECT_AVRO_ENCODE_H
#define KAFKA_DIRECT_AVRO_ENCODE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Node operations and union modes: avro_encode_program.py's numbers (keep in step). */
enum {
  ENC_OP_NULL, ENC_OP_BOOL, ENC_OP_INT, ENC_OP_FLOAT, ENC_OP_DOUBLE, ENC_OP_BYTES, ENC_OP_FIXED,
  ENC_OP_ENUM, ENC_OP_DEC_BYTES, ENC_OP_DEC_FIXED, ENC_OP_DATE, ENC_OP_TIMESTAMP, ENC_OP_RECORD,
  ENC_OP_ARRAY, ENC_OP_MAP, ENC_OP_UNION
};
enum { ENC_U_ONE, ENC_U_INT_LONG, ENC_U_MEMBERS };
#define ENC_NODE_WIDTH 8

/* Why a batch goes back to fastavro (avro_encode_native.REASONS says them in words). */
enum {
  ENC_E_NULL = 1,          /* null where the schema has no null */
  ENC_E_RANGE = 2,         /* a date or timestamp outside what Python's datetime holds */
  ENC_E_ENUM = 3,          /* a string that is not one of the enum's symbols */
  ENC_E_FIXED_SIZE = 4,    /* binary of another length than the fixed's size */
  ENC_E_DECIMAL = 5,       /* more digits than the precision, or too wide for the fixed */
  ENC_E_DUPLICATE_KEY = 6, /* a map with a key twice */
  ENC_E_BOUNDS = 7,        /* Arrow buffers shorter than their lengths say, or a bad program */
  ENC_E_NO_MEMORY = 8,
  ENC_E_TOO_BIG = 9,       /* more than 2 GiB of output in one batch */
  ENC_E_BAD_OP = 10,
  ENC_E_UTF8 = 11          /* a string that is not UTF-8 (pyarrow's to_pylist fails on it) */
};

typedef struct {
  Py_buffer views[3]; /* validity, buffer 1 (values or offsets), buffer 2 (string data) */
  int has[3];
  int64_t offset, length;
} column;

typedef struct {
  const int64_t *nodes;
  int64_t node_count;
  const int64_t *kids;
  int64_t kid_count;
  const uint8_t *consts;
  int64_t consts_len;
  column *columns;
  int64_t column_count;
  uint8_t *out;
  size_t len, cap;
} encoder;

#define NODE(e, n, k) ((e)->nodes[(n) * ENC_NODE_WIDTH + (k)])

/* Room for `more` bytes; the output only grows (doubling), so a batch reallocates log times. */
static inline int reserve(encoder *e, size_t more) {
  if (e->len + more <= e->cap) return 0;
  size_t cap = e->cap ? e->cap : 4096;
  while (cap < e->len + more) {
    if (cap > ((size_t)1 << 40)) return ENC_E_TOO_BIG;
    cap *= 2;
  }
  uint8_t *grown = realloc(e->out, cap);
  if (grown == NULL) return ENC_E_NO_MEMORY;
  e->out = grown;
  e->cap = cap;
  return 0;
}

/* Avro's int and long: zigzag, then 7 bits a byte, low first (fastavro's write_long). */
static inline int put_long(encoder *e, int64_t v) {
  if (reserve(e, 10)) return ENC_E_NO_MEMORY;
  uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
  while (z >= 0x80) {
    e->out[e->len++] = (uint8_t)(z | 0x80);
    z >>= 7;
  }
  e->out[e->len++] = (uint8_t)z;
  return 0;
}

static inline int put_bytes(encoder *e, const void *p, size_t n) {
  int rc = reserve(e, n);
  if (rc) return rc;
  if (n) memcpy(e->out + e->len, p, n);
  e->len += n;
  return 0;
}

static inline int valid(const column *c, int64_t j) {
  if (!c->has[0]) return 1;
  int64_t bit = c->offset + j;
  return (((const uint8_t *)c->views[0].buf)[bit >> 3] >> (bit & 7)) & 1;
}

/* The address of element j of buffer `which`, `width` bytes wide, or NULL when the buffer is
 * too short (a malformed array must not make us read outside it). */
static inline const uint8_t *element(const column *c, int which, int64_t j, int64_t width) {
  if (!c->has[which]) return NULL;
  int64_t end = (c->offset + j + 1) * width;
  if (end > c->views[which].len) return NULL;
  return (const uint8_t *)c->views[which].buf + end - width;
}

int enc_utf8(const uint8_t *s, int64_t n);
int enc_span(const column *c, int64_t j, int width, int64_t *start, int64_t *end);
int enc_blob(const column *c, int64_t j, int width, const uint8_t **p, int64_t *n);
int encode_node(encoder *e, int64_t node, int64_t j);
int encode_value(encoder *e, int64_t node, const column *c, int64_t j);
int encode_int_long(encoder *e, int64_t node, const column *c, int64_t j);

#endif
