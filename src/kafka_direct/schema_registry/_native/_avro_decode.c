/* The decode program's interpreter: Avro binary of one record -> appends to the builders.
 * Runs in the Spark Python worker (from_avro's Arrow UDF), called per record by _avro_arrow.c.
 *
 * Every read is bounds-checked against the record's end, every length and count against what is
 * left, and every program node against the program's size: a malformed or truncated record is
 * an error code for that record, never a read outside the batch. */
#include "_avro_decode.h"
#include "_utf8.h"

#include <string.h>

/* The deepest node a program may have (the root is 0): it bounds the interpreter's recursion.
 * avro_program.MAX_DEPTH is the same number: the compiler leaves deeper schemas to fastavro. */
#define KD_MAX_DEPTH 256

/* The array and map items one record may have in all, every block of every array and map in it
 * counted: KD_ITEMS_BASE + KD_ITEMS_PER_BYTE * its length in bytes.
 * Items of at least one byte cannot outnumber the record's bytes. Items of no bytes (nulls, empty
 * records, fixed(0)) cost nothing to write: one block may hold 1 << 20 of them (run_blocks), and
 * without a bound in all a record of a few KB repeating such blocks asked for billions (seconds
 * of CPU, hundreds of MB, then a batch-wide 2 GiB overflow). Writers write an array in one
 * block, so the base lets any single array of them through as before, and the per-byte part
 * leaves 16 per byte for many small ones (say arrays of arrays of nulls); the work a record can
 * cause stays proportional to its size. A reader field's default is not counted: its items are
 * the schema's, bounded by the schema's size for every item that reads it. */
#define KD_ITEMS_BASE ((int64_t)1 << 20)
#define KD_ITEMS_PER_BYTE 16

static int read_long(kd_input *in, int64_t *out) {
  uint64_t value = 0;
  for (int shift = 0;; shift += 7) {
    if (in->p >= in->end) return E_TRUNCATED;
    uint8_t byte = *in->p++;
    if (shift == 63 && (byte & 0xfe)) return E_VARINT;
    value |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) break;
    if (shift == 63) return E_VARINT;
  }
  *out = (int64_t)((value >> 1) ^ (~(value & 1) + 1));
  return 0;
}

static int read_int(kd_input *in, int64_t *out) {
  int err = read_long(in, out);
  if (!err && (*out < INT32_MIN || *out > INT32_MAX)) return E_INT_RANGE;
  return err;
}

static int read_length(kd_input *in, size_t *out) {
  int64_t n;
  int err = read_long(in, &n);
  if (err) return err;
  if (n < 0) return E_NEGATIVE_LENGTH;
  if ((uint64_t)n > (uint64_t)(in->end - in->p)) return E_TRUNCATED;
  *out = (size_t)n;
  return 0;
}

static int put_int(kd_builder *b, int64_t v, int conv) {
  switch (conv) {
    case CV_I32: { int32_t x = (int32_t)v; return kd_append_fixed(b, &x, 4); }
    case CV_I64: return kd_append_fixed(b, &v, 8);
    case CV_F32: { float x = (float)v; return kd_append_fixed(b, &x, 4); }
    case CV_F64: { double x = (double)v; return kd_append_fixed(b, &x, 8); }
    case CV_MILLIS: {
      if (v > INT64_MAX / 1000 || v < INT64_MIN / 1000) return E_INT_RANGE;
      int64_t x = v * 1000;
      return kd_append_fixed(b, &x, 8);
    }
    default: return E_PROGRAM;
  }
}

/* GCC's and Clang's 128-bit integers (not ISO C: __extension__ keeps -Wpedantic quiet). */
__extension__ typedef unsigned __int128 kd_u128;
__extension__ typedef __int128 kd_i128;

/* 10^p for p = 0..38, as unsigned 128-bit integers, for the precision check of decimals. */
static kd_u128 pow10_128(int p) {
  kd_u128 v = 1;
  while (p-- > 0) v *= 10;
  return v;
}

/* A big-endian two's complement integer of n bytes -> Arrow's little-endian decimal128. */
static int put_decimal(kd_builder *b, const uint8_t *s, size_t n, int precision) {
  if (n == 0) return E_DECIMAL;
  uint8_t sign = (s[0] & 0x80) ? 0xff : 0x00;
  while (n > 16) {  /* leading sign-extension bytes carry nothing */
    if (s[0] != sign) return E_DECIMAL;
    s++;
    n--;
  }
  kd_u128 u = sign ? ~(kd_u128)0 : 0;
  for (size_t i = 0; i < n; i++) u = (u << 8) | s[i];
  kd_i128 v = (kd_i128)u;
  if ((sign != 0) != (v < 0)) return E_DECIMAL;
  kd_u128 magnitude = v < 0 ? (kd_u128)0 - u : u;
  if (precision < 1 || precision > 38 || magnitude >= pow10_128(precision)) return E_DECIMAL;
  uint8_t out[16];
  for (int i = 0; i < 16; i++) out[i] = (uint8_t)(u >> (8 * i));
  return kd_append_fixed(b, out, 16);
}

#define NEED(count) \
  do { if ((size_t)(count) > size) return E_PROGRAM; } while (0)
/* A program that writes a value into a builder of another kind is a compiler bug: refused. */
#define KIND(k) \
  do { if (b && b->kind != (k)) return E_PROGRAM; } while (0)

static int run_at(kd_decoder *d, const int32_t *node, size_t size, kd_input *in, int depth);

/* The children of a node: `first` int32s in, each [op, target, size, ...]. */
static int child_at(const int32_t *node, size_t size, size_t at, size_t *child_size) {
  if (at + 3 > size || node[at + 2] < 3 || (size_t)node[at + 2] > size - at) return E_PROGRAM;
  *child_size = (size_t)node[at + 2];
  return 0;
}

static int run_blocks(kd_decoder *d, const int32_t *node, size_t size, kd_input *in, int depth,
                      int is_map) {
  /* array: [op, target, size, min item bytes, item]; map: [..., entries, keys, value] */
  size_t first = is_map ? 6 : 4;
  NEED(first);
  int target = node[1];
  int64_t min_bytes = node[3];
  int entries = is_map ? node[4] : -1, keys = is_map ? node[5] : -1;
  size_t item_size;
  int err = child_at(node, size, first, &item_size);
  if (err) return err;
  kd_builder *b = target >= 0 ? &d->builders->b[target] : NULL;
  if (b && b->kind != K_LIST) return E_PROGRAM;
  int child = b ? b->children[0] : -1;
  if (is_map && b &&
      (entries != child || d->builders->b[entries].kind != K_STRUCT || keys < 0 ||
       keys >= d->builders->n || d->builders->b[keys].kind != K_BIN))
    return E_PROGRAM;
  for (;;) {
    int64_t count;
    if ((err = read_long(in, &count))) return err;
    if (count == 0) break;
    if (count < 0) {
      int64_t bytes;
      if (count == INT64_MIN) return E_BLOCK_COUNT;
      count = -count;
      if ((err = read_long(in, &bytes))) return err;
    }
    /* Items of at least one byte cannot outnumber the bytes left; items of none (nulls,
     * empty records) are capped, so that a few bytes cannot ask for a huge array; and all the
     * blocks of the record together have a budget (KD_ITEMS_BASE), so that many such blocks
     * cannot either. */
    int64_t left = in->end - in->p;
    if (min_bytes > 0 ? count > left / min_bytes + 1 : count > (1 << 20)) return E_BLOCK_COUNT;
    if (count > d->items_left) return E_ITEMS;
    d->items_left -= count;
    for (int64_t i = 0; i < count; i++) {
      if (is_map) {
        size_t n;
        if ((err = read_length(in, &n))) return err;
        if (!kd_valid_utf8(in->p, n)) return E_UTF8;
        if (b) {
          if ((err = kd_append_valid(&d->builders->b[entries]))) return err;
          if ((err = kd_append_bytes(&d->builders->b[keys], in->p, n))) return err;
        }
        in->p += n;
      }
      if ((err = run_at(d, node + first, item_size, in, depth + 1))) return err;
    }
  }
  return b ? kd_close_list(d->builders, b, child) : 0;
}

static int run_at(kd_decoder *d, const int32_t *node, size_t size, kd_input *in, int depth) {
  NEED(3);
  if (depth > KD_MAX_DEPTH) return E_PROGRAM;
  int op = node[0], target = node[1];
  if (target >= d->builders->n) return E_PROGRAM;
  kd_builder *b = target >= 0 ? &d->builders->b[target] : NULL;
  int err;
  switch (op) {
    case OP_NULL:
      return b ? kd_append_null(d->builders, target) : 0;
    case OP_BOOL:
      KIND(K_BOOL);
      if (in->p >= in->end) return E_TRUNCATED;
      err = b ? kd_append_bool(b, *in->p != 0) : 0;
      in->p++;
      return err;
    case OP_INT:
    case OP_LONG: {
      NEED(4);
      int64_t v;
      int conv = node[3];
      KIND(conv == CV_I32 ? K_I32 : conv == CV_F32 ? K_F32 : conv == CV_F64 ? K_F64 : K_I64);
      if ((err = op == OP_INT ? read_int(in, &v) : read_long(in, &v))) return err;
      return b ? put_int(b, v, conv) : 0;
    }
    case OP_FLOAT: {
      NEED(4);
      KIND(node[3] == CV_F64 ? K_F64 : K_F32);
      float f;
      if (in->end - in->p < 4) return E_TRUNCATED;
      memcpy(&f, in->p, 4);
      in->p += 4;
      if (!b) return 0;
      if (node[3] == CV_F64) {
        double x = f;
        return kd_append_fixed(b, &x, 8);
      }
      return kd_append_fixed(b, &f, 4);
    }
    case OP_DOUBLE:
      KIND(K_F64);
      if (in->end - in->p < 8) return E_TRUNCATED;
      err = b ? kd_append_fixed(b, in->p, 8) : 0;
      in->p += 8;
      return err;
    case OP_BYTES:
    case OP_DEC_BYTES: {
      NEED(4);
      KIND(op == OP_BYTES ? K_BIN : K_DEC);
      size_t n;
      if ((err = read_length(in, &n))) return err;
      const uint8_t *s = in->p;
      in->p += n;
      if (op == OP_DEC_BYTES) return b ? put_decimal(b, s, n, node[3]) : 0;
      if (node[3] && !kd_valid_utf8(s, n)) return E_UTF8;
      return b ? kd_append_bytes(b, s, n) : 0;
    }
    case OP_FIXED:
    case OP_DEC_FIXED: {
      NEED(op == OP_FIXED ? 4 : 5);
      KIND(op == OP_FIXED ? K_BIN : K_DEC);
      int32_t n = op == OP_FIXED ? node[3] : node[4];
      if (n < 0) return E_PROGRAM;
      if (in->end - in->p < n) return E_TRUNCATED;
      const uint8_t *s = in->p;
      in->p += n;
      if (op == OP_DEC_FIXED) return b ? put_decimal(b, s, (size_t)n, node[3]) : 0;
      return b ? kd_append_bytes(b, s, (size_t)n) : 0;
    }
    case OP_ENUM: {
      /* [op, target, size, symbols, (offset, length) of the reader's symbol per writer's] */
      NEED(4);
      KIND(K_BIN);
      int64_t index;
      if ((err = read_int(in, &index))) return err;
      int32_t symbols = node[3];
      if (symbols < 0 || (size_t)symbols > (size - 4) / 2) return E_PROGRAM;
      if (index < 0 || index >= symbols) return E_ENUM_INDEX;
      int32_t at = node[4 + 2 * index], len = node[5 + 2 * index];
      if (at < 0) return E_ENUM_SYMBOL;
      if (len < 0 || (size_t)at > d->consts_len || (size_t)len > d->consts_len - (size_t)at)
        return E_PROGRAM;
      return b ? kd_append_bytes(b, d->consts + at, (size_t)len) : 0;
    }
    case OP_RECORD: {
      /* [op, target, size, children...]: the writer's fields in order, then defaults */
      KIND(K_STRUCT);
      if (b && (err = kd_append_valid(b))) return err;
      for (size_t at = 3, child; at < size; at += child) {
        if ((err = child_at(node, size, at, &child))) return err;
        if ((err = run_at(d, node + at, child, in, depth + 1))) return err;
      }
      return 0;
    }
    case OP_DEFAULT: {
      /* [op, -1, size, const offset, const length, child]: the child decodes the default's
       * Avro bytes, written into the constants when the program was compiled */
      NEED(5);
      int32_t at = node[3], len = node[4];
      size_t child;
      if (at < 0 || len < 0 || (size_t)at > d->consts_len ||
          (size_t)len > d->consts_len - (size_t)at)
        return E_PROGRAM;
      if ((err = child_at(node, size, 5, &child))) return err;
      kd_input constant = {d->consts + at, d->consts + at + len};
      /* the default's items are not the record's (see KD_ITEMS_BASE): not counted */
      int64_t items_left = d->items_left;
      d->items_left = INT64_MAX;
      err = run_at(d, node + 5, child, &constant, depth + 1);
      d->items_left = items_left;
      if (err) return err;
      return constant.p == constant.end ? 0 : E_PROGRAM;
    }
    case OP_ARRAY:
      return run_blocks(d, node, size, in, depth, 0);
    case OP_MAP:
      return run_blocks(d, node, size, in, depth, 1);
    case OP_UNION: {
      /* [op, -1, size, branches, children...]: one child per writer branch */
      NEED(4);
      int64_t index;
      if ((err = read_long(in, &index))) return err;
      if (index < 0 || index >= node[3]) return E_UNION_INDEX;
      size_t at = 4, child = 0;
      for (int64_t i = 0; i <= index; i++, at += child)
        if ((err = child_at(node, size, at, &child))) return err;
      return run_at(d, node + at - child, child, in, depth + 1);
    }
    case OP_MEMBER: {
      /* [op, struct target, size, member, child]: one branch of a reader union of several
       * types, spark-avro's struct<member0, member1, ...>: that member set, the others null */
      NEED(5);
      KIND(K_STRUCT);
      int member = node[3];
      size_t child;
      if (b) {
        if (member < 0 || member >= b->nchildren) return E_PROGRAM;
        if ((err = kd_append_valid(b))) return err;
        for (int c = 0; c < b->nchildren; c++)
          if (c != member && (err = kd_append_null(d->builders, b->children[c]))) return err;
      }
      if ((err = child_at(node, size, 4, &child))) return err;
      return run_at(d, node + 4, child, in, depth + 1);
    }
    case OP_ERROR:
      NEED(4);
      return node[3];
    default:
      return E_PROGRAM;
  }
}

int kd_run(kd_decoder *d, kd_input *in) {
  int64_t bytes = in->end - in->p;
  d->items_left = bytes > (INT64_MAX - KD_ITEMS_BASE) / KD_ITEMS_PER_BYTE
                      ? INT64_MAX
                      : KD_ITEMS_BASE + KD_ITEMS_PER_BYTE * bytes;
  return run_at(d, d->program, d->program_len, in, 0);
}
