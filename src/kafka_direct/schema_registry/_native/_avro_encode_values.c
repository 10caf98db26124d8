/* The scalar values of kafka_direct.schema_registry._avro_encode: one Arrow value -> its Avro
 * bytes, exactly as fastavro writes the Python value pyarrow's to_pylist gives for it (that is
 * the path this replaces, and what confluent's AvroSerializer writes). Runs in the Spark Python
 * worker, called by encode_node (_avro_encode.c) for each field of each record. */
#include "_avro_encode.h"

typedef __int128 i128;
typedef unsigned __int128 u128;

static int read_int(const column *c, int64_t j, int64_t width, int64_t *v) {
  const uint8_t *p = element(c, 1, j, width);
  if (p == NULL) return ENC_E_BOUNDS;
  switch (width) {
    case 1: *v = (int8_t)p[0]; return 0;
    case 2: { int16_t x; memcpy(&x, p, 2); *v = x; return 0; }
    case 4: { int32_t x; memcpy(&x, p, 4); *v = x; return 0; }
    case 8: memcpy(v, p, 8); return 0;
    default: return ENC_E_BOUNDS;
  }
}

/* Floor division: fastavro's millis are whole seconds of a timedelta (floored) plus
 * int(microseconds / 1000) of its non-negative microseconds, i.e. floor(micros / 1000). */
static int64_t floor_div(int64_t v, int64_t d) {
  int64_t q = v / d;
  return (v % d != 0 && (v < 0) != (d < 0)) ? q - 1 : q;
}

static int bit_length(u128 m) {
  int n = 0;
  while (m) {
    n++;
    m >>= 1;
  }
  return n;
}

/* fastavro's decimal check: the Decimal's digits (pyarrow gives it the column's scale, so
 * they are the unscaled value's, and zero has one) must not be more than the precision. */
static int too_many_digits(u128 m, int64_t precision) {
  if (precision >= 39) return 0; /* 10^39 > 2^128: every 128-bit value fits */
  u128 limit = 1;
  for (int64_t k = 0; k < precision; k++) limit *= 10;
  return m >= limit;
}

/* `n` big-endian bytes of v in two's complement, sign-extended past its 16 bytes. */
static int put_twos(encoder *e, i128 v, int64_t n) {
  int rc = reserve(e, (size_t)n);
  if (rc) return rc;
  u128 u = (u128)v;
  for (int64_t k = n - 1; k >= 0; k--)
    e->out[e->len++] = k >= 16 ? (v < 0 ? 0xFF : 0x00) : (uint8_t)(u >> (8 * k));
  return 0;
}

static int encode_decimal(encoder *e, int64_t node, const column *c, int64_t j, int fixed) {
  const uint8_t *p = element(c, 1, j, 16);
  if (p == NULL) return ENC_E_BOUNDS;
  i128 v;
  memcpy(&v, p, 16); /* Arrow's decimal128: little-endian two's complement */
  u128 m = v < 0 ? (u128)0 - (u128)v : (u128)v;
  if (too_many_digits(m, NODE(e, node, 2))) return ENC_E_DECIMAL;
  int bits = bit_length(m) + 1; /* fastavro's bits_req: the magnitude's bits and a sign bit */
  if (!fixed) {
    /* fastavro: (bit_length + 8) // 8 bytes, signed; so -128 is ff 80 (Java writes 80). */
    int64_t n = (bits + 7) / 8;
    int rc = put_long(e, n);
    return rc ? rc : put_twos(e, v, n);
  }
  int64_t size = NODE(e, node, 3);
  /* A wider value fails fastavro's size check (positive) or is cut (negative): leave both. */
  if (bits > size * 8) return ENC_E_DECIMAL;
  return put_twos(e, v, size);
}

static int find_symbol(encoder *e, int64_t node, const uint8_t *s, int64_t n) {
  int64_t at = NODE(e, node, 3), count = NODE(e, node, 4);
  for (int64_t index = 0; index < count; index++) {
    uint32_t len;
    if (at < 0 || at + 4 > e->consts_len) return -1;
    memcpy(&len, e->consts + at, 4);
    if (at + 4 + (int64_t)len > e->consts_len) return -1;
    if (len == (uint64_t)n && memcmp(e->consts + at + 4, s, (size_t)n) == 0) return (int)index;
    at += 4 + (int64_t)len;
  }
  return -1;
}

int encode_value(encoder *e, int64_t node, const column *c, int64_t j) {
  int64_t a = NODE(e, node, 2), b = NODE(e, node, 3), cc = NODE(e, node, 4);
  int64_t v;
  int rc;
  switch (NODE(e, node, 0)) {
    case ENC_OP_BOOL: {
      if (!c->has[1] || (c->offset + j) / 8 >= c->views[1].len) return ENC_E_BOUNDS;
      int64_t bit = c->offset + j;
      uint8_t byte = (((const uint8_t *)c->views[1].buf)[bit >> 3] >> (bit & 7)) & 1;
      return put_bytes(e, &byte, 1);
    }
    case ENC_OP_INT:
      return (rc = read_int(c, j, a, &v)) ? rc : put_long(e, v);
    case ENC_OP_DATE: /* days since 1970-01-01, as fastavro's toordinal() difference */
      if ((rc = read_int(c, j, 4, &v))) return rc;
      return v < a || v > b ? ENC_E_RANGE : put_long(e, v);
    case ENC_OP_TIMESTAMP: /* a: 1000 for millis; b..c: what datetime holds, in micros */
      if ((rc = read_int(c, j, 8, &v))) return rc;
      if (v < b || v > cc) return ENC_E_RANGE;
      return put_long(e, a == 1 ? v : floor_div(v, a));
    case ENC_OP_FLOAT: {
      const uint8_t *p = element(c, 1, j, 4);
      if (p == NULL) return ENC_E_BOUNDS;
      float f;
      memcpy(&f, p, 4);
      /* through a double and back, as the Python float on fastavro's path goes */
      volatile double d = (double)f;
      float g = (float)d;
      return put_bytes(e, &g, 4);
    }
    case ENC_OP_DOUBLE: {
      const uint8_t *p = element(c, 1, j, 8);
      return p == NULL ? ENC_E_BOUNDS : put_bytes(e, p, 8);
    }
    case ENC_OP_BYTES:
    case ENC_OP_FIXED:
    case ENC_OP_ENUM: {
      const uint8_t *p;
      int64_t n;
      if ((rc = enc_blob(c, j, (int)a, &p, &n))) return rc;
      if (NODE(e, node, 0) == ENC_OP_ENUM) {
        int index = find_symbol(e, node, p, n);
        return index < 0 ? ENC_E_ENUM : put_long(e, index);
      }
      if (NODE(e, node, 0) == ENC_OP_FIXED) {
        return n != b ? ENC_E_FIXED_SIZE : put_bytes(e, p, (size_t)n);
      }
      if (b && !enc_utf8(p, n)) return ENC_E_UTF8; /* b: a string, not binary */
      return (rc = put_long(e, n)) ? rc : put_bytes(e, p, (size_t)n);
    }
    case ENC_OP_DEC_BYTES:
      return encode_decimal(e, node, c, j, 0);
    case ENC_OP_DEC_FIXED:
      return encode_decimal(e, node, c, j, 1);
    default:
      return ENC_E_BAD_OP;
  }
}

/* [int, long] (spark-avro's long): fastavro takes the first branch that holds the value, so the
 * int's index while it fits in 32 bits and the int comes first. Both write the same varint. */
int encode_int_long(encoder *e, int64_t node, const column *c, int64_t j) {
  int64_t int_at = NODE(e, node, 4), long_at = NODE(e, node, 5), v;
  if (NODE(e, node, 7) < 1 || NODE(e, node, 6) >= e->kid_count) return ENC_E_BOUNDS;
  int64_t kid = e->kids[NODE(e, node, 6)];
  if (kid < 0 || kid >= e->node_count) return ENC_E_BOUNDS;
  int rc = read_int(c, j, NODE(e, kid, 2), &v);
  if (rc) return rc;
  int64_t index = int_at < long_at && v >= INT32_MIN && v <= INT32_MAX ? int_at : long_at;
  return (rc = put_long(e, index)) ? rc : put_long(e, v);
}
