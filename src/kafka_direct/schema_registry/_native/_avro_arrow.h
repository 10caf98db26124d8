/* Avro binary -> Arrow buffers: shared declarations of the builders (_avro_builders.c) and the
 * decoder (_avro_arrow.c). Runs in the Spark Python worker, inside from_avro's Arrow UDF.
 *
 * The Python side (kafka_direct.schema_registry.avro_program) compiles two int32 arrays:
 * - the builder spec, one builder per Arrow array of the reader's type (preorder):
 *     [count, then per builder: kind, child count, child indices...];
 * - a decode program per writer schema, already resolved to the reader schema: a tree of
 *     nodes [op, target builder or -1 (read and drop), node size in int32s, args..., children].
 * Keep the numbers below in step with avro_program.py. */
#ifndef KAFKA_DIRECT_AVRO_ARROW_H
#define KAFKA_DIRECT_AVRO_ARROW_H

#include <stddef.h>
#include <stdint.h>

/* builder kinds */
enum { K_BOOL = 1, K_I32, K_I64, K_F32, K_F64, K_BIN, K_DEC, K_STRUCT, K_LIST };

/* decode ops */
enum {
  OP_NULL = 1, OP_BOOL, OP_INT, OP_LONG, OP_FLOAT, OP_DOUBLE, OP_BYTES, OP_FIXED,
  OP_DEC_BYTES, OP_DEC_FIXED, OP_ENUM, OP_RECORD, OP_DEFAULT, OP_ARRAY, OP_MAP, OP_UNION,
  OP_ERROR, OP_MEMBER
};

/* conversions of OP_INT / OP_LONG / OP_FLOAT */
enum { CV_I32 = 1, CV_I64, CV_F32, CV_F64, CV_MILLIS };

/* per-record errors (0 is success); E_MEMORY and E_PROGRAM are not a record's fault and fail
 * the batch; E_TOO_LARGE fails the batch unless the record alone is too large (_avro_arrow.c
 * tells which) */
enum {
  E_TRUNCATED = 1, E_VARINT, E_NEGATIVE_LENGTH, E_UTF8, E_UNION_INDEX, E_ENUM_INDEX,
  E_ENUM_SYMBOL, E_NULL, E_DECIMAL, E_INT_RANGE, E_TOO_LARGE, E_LEFT_OVER, E_NOT_FRAMED,
  E_BLOCK_COUNT, E_PROGRAM, E_MEMORY,
  /* a schema id the caller could not fetch (PERMISSIVE mode): the record is null and listed */
  E_NO_SCHEMA,
  /* more array / map items in one record than its size allows (_avro_decode.c) */
  E_ITEMS
};

typedef struct {
  uint8_t *p;
  size_t len, cap;
} kd_buf;

typedef struct {
  int kind;
  int nchildren;
  const int32_t *children;
  int64_t length, null_count;
  int64_t saved_length, saved_null_count;
  kd_buf validity, data, offsets;
  /* Measuring (kd_builders_measure): appends count and check, and write nothing; `base` is the
   * last offset when measuring began (0 otherwise), what the 2 GiB limit is counted from. */
  int measuring;
  int64_t base;
  int64_t limit; /* the largest offset: INT32_MAX (Arrow's 32-bit offsets), lower in tests */
} kd_builder;

typedef struct {
  kd_builder *b;
  int n;
} kd_builders;

int kd_builders_init(kd_builders *all, const int32_t *spec, size_t spec_len);
void kd_builders_free(kd_builders *all);
void kd_builders_save(kd_builders *all);
void kd_builders_restore(kd_builders *all);
void kd_builders_limit(kd_builders *all, int64_t limit);
void kd_builders_measure(kd_builders *all, int on);

int kd_append_null(kd_builders *all, int index);
int kd_append_valid(kd_builder *b);
int kd_append_bool(kd_builder *b, int value);
int kd_append_fixed(kd_builder *b, const void *value, size_t width);
int kd_append_bytes(kd_builder *b, const uint8_t *value, size_t n);
int kd_close_list(kd_builders *all, kd_builder *b, int child);

#endif
