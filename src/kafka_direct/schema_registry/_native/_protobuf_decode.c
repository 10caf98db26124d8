/* The Protobuf decode program's interpreter: one record's message -> the Arrow builders. Runs
 * in the Spark Python worker, inside from_protobuf's Arrow UDF, without the GIL.
 *
 * A message is read in two passes over its bytes, because Protobuf fields come in any order
 * and may repeat while the builders only append: the first pass finds, per field, its last
 * occurrence (a singular field repeated on the wire: the last one wins) and, per oneof, the
 * member set last, skipping unknown fields; the second appends the fields in the reader's
 * order, scanning the bytes again for each repeated field present (its elements in order,
 * packed or not). What the Python path does differently or better is left to it
 * (PB_FALLBACK): a singular message field that occurs twice (Protobuf merges the two), a map
 * with a repeated key or an entry with unknown fields (Protobuf keeps such an entry out of the
 * map), an enum number without a name, a string that is not UTF-8 (in any occurrence, also one
 * that a later one replaces), a oneof's message member that another member replaces, a wire
 * type that does not match the field, a field number out of range, groups, and anything
 * malformed. */
#include "_protobuf_decode.h"
#include "_utf8.h"

#include <stdlib.h>
#include <string.h>

#define FB PB_FALLBACK

static int varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
  uint64_t value = 0;
  for (int shift = 0; *p < end && shift < 64; shift += 7) {
    uint8_t byte = *(*p)++;
    value |= (uint64_t)(byte & 0x7F) << shift;
    if (!(byte & 0x80)) {
      *out = value;
      return 0;
    }
  }
  return FB;
}

/* A tag: its field number must be 1 to 2^29 - 1, as Protobuf's parsers require. */
static int read_tag(const uint8_t **p, const uint8_t *end, uint64_t *number, int *wire) {
  uint64_t tag;
  if (varint(p, end, &tag) || tag > UINT32_MAX || (tag >> 3) == 0 || (tag >> 3) > 0x1FFFFFFF)
    return FB;
  *number = tag >> 3;
  *wire = (int)(tag & 7);
  return 0;
}

static int skip(const uint8_t **p, const uint8_t *end, int wire) {
  uint64_t n;
  switch (wire) {
    case 0:
      return varint(p, end, &n);
    case 1:
      if (end - *p < 8) return FB;
      *p += 8;
      return 0;
    case 2:
      if (varint(p, end, &n) || n > (uint64_t)(end - *p)) return FB;
      *p += n;
      return 0;
    case 5:
      if (end - *p < 4) return FB;
      *p += 4;
      return 0;
    default:
      return FB; /* groups (3, 4) and invalid wire types */
  }
}

static int wire_of(int type) {
  switch (type) {
    case PT_FIXED64: case PT_SFIXED64: case PT_DOUBLE: return 1;
    case PT_FIXED32: case PT_SFIXED32: case PT_FLOAT: return 5;
    case PT_STRING: case PT_BYTES: case PT_MESSAGE: case PT_TIMESTAMP: case PT_MAP: return 2;
    default: return 0;
  }
}

static int kind_of(int type) {
  switch (type) {
    case PT_INT32: case PT_UINT32: case PT_SINT32: case PT_FIXED32: case PT_SFIXED32:
      return K_I32;
    case PT_INT64: case PT_UINT64: case PT_SINT64: case PT_FIXED64: case PT_SFIXED64:
    case PT_TIMESTAMP:
      return K_I64;
    case PT_FLOAT: return K_F32;
    case PT_DOUBLE: return K_F64;
    case PT_BOOL: return K_BOOL;
    case PT_STRING: case PT_BYTES: case PT_ENUM: return K_BIN;
    case PT_MESSAGE: case PT_MAP: return K_STRUCT;
    default: return 0;
  }
}

static const int32_t *message_at(const pb_decoder *d, int m) {
  return d->code + d->code[2 + m];
}

static const int32_t *enum_at(const pb_decoder *d, int e) {
  return d->code + d->code[2 + d->code[0] + e];
}

/* -- checking the program ------------------------------------------------------------------ */

static int check_enum(const pb_decoder *d, int e) {
  int32_t at = d->code[2 + d->code[0] + e];
  if (at < 0 || (size_t)at + 2 > d->code_len) return E_PROGRAM;
  const int32_t *body = d->code + at;
  if (body[0] < 0 || (size_t)body[0] > (d->code_len - (size_t)at - 2) / 3) return E_PROGRAM;
  for (int v = 0; v < body[0]; v++) {
    int32_t off = body[2 + 3 * v + 1], len = body[2 + 3 * v + 2];
    if (off < 0 || len < 0 || (size_t)off + (size_t)len > d->names_len) return E_PROGRAM;
  }
  return 0;
}

static int check_message(const pb_decoder *d, int m) {
  const kd_builders *all = d->builders;
  int32_t at = d->code[2 + m];
  if (at < 0 || (size_t)at + PB_MESSAGE_HEADER > d->code_len) return E_PROGRAM;
  const int32_t *h = d->code + at;
  int32_t sb = h[1], nf = h[2], no = h[3], slot = h[4];
  if (sb < 0 || sb >= all->n || nf < 0 || no < 0 || slot < 0) return E_PROGRAM;
  if ((size_t)nf > (d->code_len - (size_t)at - PB_MESSAGE_HEADER) / PB_FIELD) return E_PROGRAM;
  if ((size_t)slot + (size_t)nf + (size_t)no > d->nslots) return E_PROGRAM;
  const kd_builder *sbuilder = &all->b[sb];
  if (sbuilder->kind != K_STRUCT || sbuilder->nchildren != nf) return E_PROGRAM;
  for (int i = 0; i < nf; i++) {
    const int32_t *f = h + PB_MESSAGE_HEADER + i * PB_FIELD;
    int type = f[1], label = f[2], b = f[3], aux = f[4], oneof = f[5];
    if (f[0] <= 0 || b != sbuilder->children[i] || oneof >= no || oneof < -1) return E_PROGRAM;
    if (label < PL_IMPLICIT || label > PL_REPEATED || kind_of(type) == 0) return E_PROGRAM;
    int element = b;
    if (label == PL_REPEATED) {
      if (all->b[b].kind != K_LIST) return E_PROGRAM;
      element = all->b[b].children[0];
    } else if (type == PT_MAP) {
      return E_PROGRAM;
    }
    if (all->b[element].kind != kind_of(type)) return E_PROGRAM;
    if (type == PT_MESSAGE || type == PT_MAP) {
      if (aux < 0 || aux >= d->code[0] || message_at(d, aux)[1] != element) return E_PROGRAM;
    } else if (type == PT_ENUM) {
      if (aux < 0 || aux >= d->code[1]) return E_PROGRAM;
    }
  }
  return 0;
}

int pb_check(const pb_decoder *d) {
  if (d->code_len < 2 || d->code[0] < 1 || d->code[1] < 0) return E_PROGRAM;
  if ((size_t)d->code[0] + (size_t)d->code[1] > d->code_len - 2) return E_PROGRAM;
  for (int m = 0; m < d->code[0]; m++)
    if (check_message(d, m)) return E_PROGRAM;
  for (int e = 0; e < d->code[1]; e++)
    if (check_enum(d, e)) return E_PROGRAM;
  return message_at(d, 0)[1] == 0 ? 0 : E_PROGRAM;
}

/* -- values -------------------------------------------------------------------------------- */

static int decode_message(pb_decoder *d, int m, const uint8_t *p, const uint8_t *end);

static int append_enum(pb_decoder *d, int e, int b, int32_t number) {
  const int32_t *body = enum_at(d, e);
  for (int v = 0; v < body[0]; v++) {
    const int32_t *value = body + 2 + 3 * v;
    if (value[0] == number)
      return kd_append_bytes(&d->builders->b[b], d->names + value[1], (size_t)value[2]);
  }
  return FB;
}

static int timestamp(const uint8_t *p, const uint8_t *end, int64_t *micros) {
  int64_t seconds = 0, nanos = 0;
  while (p < end) {
    uint64_t number, raw;
    int wire;
    if (read_tag(&p, end, &number, &wire)) return FB;
    if (number == 1 || number == 2) {
      if (wire != 0 || varint(&p, end, &raw)) return FB;
      if (number == 1)
        seconds = (int64_t)raw;
      else
        nanos = (int32_t)(uint32_t)raw;
    } else if (skip(&p, end, wire)) {
      return FB;
    }
  }
  /* datetime's range: years 1 to 9999 */
  if (seconds < -62135596800LL || seconds > 253402300799LL) return FB;
  int64_t extra = nanos >= 0 ? nanos / 1000 : -((-nanos + 999) / 1000); /* floor */
  int64_t value = seconds * 1000000 + extra;
  if (value < -62135596800000000LL || value > 253402300799999999LL) return FB;
  *micros = value;
  return 0;
}

/* Appends a varint / fixed32 / fixed64 value, or null when `null_if_zero` and it is zero. */
static int append_scalar(pb_decoder *d, int type, int aux, int b, uint64_t raw,
                         int null_if_zero) {
  kd_builder *builder = &d->builders->b[b];
  /* A 32-bit field (an enum too) is the varint's low 32 bits, as Protobuf's parsers read it
   * (Java's (int) cast, upb's): 2^32 is 0, the default, and so null as in the Python path, not
   * a 0 (or the enum's first name) that the 64-bit value would not be. */
  int narrow = type == PT_INT32 || type == PT_UINT32 || type == PT_SINT32 || type == PT_ENUM;
  int zero = (narrow ? (uint32_t)raw : raw) == 0;
  if (null_if_zero && zero) return kd_append_null(d->builders, b);
  switch (type) {
    case PT_INT32: case PT_SFIXED32: case PT_UINT32: case PT_FIXED32: {
      /* unsigned ones above the signed range wrap, as spark-protobuf's Java values do */
      int32_t v = (int32_t)(uint32_t)raw;
      return kd_append_fixed(builder, &v, 4);
    }
    case PT_SINT32: {
      uint32_t n = (uint32_t)raw;
      int32_t v = (int32_t)((n >> 1) ^ (~(n & 1) + 1));
      return kd_append_fixed(builder, &v, 4);
    }
    case PT_INT64: case PT_SFIXED64: case PT_UINT64: case PT_FIXED64: {
      int64_t v = (int64_t)raw;
      return kd_append_fixed(builder, &v, 8);
    }
    case PT_SINT64: {
      int64_t v = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
      return kd_append_fixed(builder, &v, 8);
    }
    case PT_FLOAT: {
      uint32_t bits = (uint32_t)raw;
      return kd_append_fixed(builder, &bits, 4);
    }
    case PT_DOUBLE:
      return kd_append_fixed(builder, &raw, 8);
    case PT_BOOL:
      return kd_append_bool(builder, raw != 0);
    case PT_ENUM:
      return append_enum(d, aux, b, (int32_t)(uint32_t)raw);
    default:
      return E_PROGRAM;
  }
}

/* Appends the value at *p (after its tag) to builder b; *p moves past it. */
static int append_value(pb_decoder *d, int type, int aux, int b, const uint8_t **p,
                        const uint8_t *end, int null_if_zero) {
  uint64_t raw;
  switch (wire_of(type)) {
    case 0:
      if (varint(p, end, &raw)) return FB;
      break;
    case 1:
      if (end - *p < 8) return FB;
      memcpy(&raw, *p, 8);
      *p += 8;
      break;
    case 5: {
      uint32_t v;
      if (end - *p < 4) return FB;
      memcpy(&v, *p, 4);
      *p += 4;
      raw = v;
      break;
    }
    default: {
      uint64_t n;
      if (varint(p, end, &n) || n > (uint64_t)(end - *p)) return FB;
      const uint8_t *value = *p;
      *p += n;
      if (type == PT_MESSAGE || type == PT_MAP) return decode_message(d, aux, value, value + n);
      if (type == PT_TIMESTAMP) {
        int64_t micros;
        if (timestamp(value, value + n, &micros)) return FB;
        return kd_append_fixed(&d->builders->b[b], &micros, 8);
      }
      if (type == PT_STRING && !kd_valid_utf8(value, (size_t)n)) return FB;
      if (null_if_zero && n == 0) return kd_append_null(d->builders, b);
      return kd_append_bytes(&d->builders->b[b], value, (size_t)n);
    }
  }
  return append_scalar(d, type, aux, b, raw, null_if_zero);
}

/* A map entry's absent key or value: its type's default, as Protobuf's maps give it. */
static int append_default(pb_decoder *d, int type, int aux, int b) {
  static const uint8_t nothing[1] = {0};
  switch (type) {
    case PT_MESSAGE: return decode_message(d, aux, nothing, nothing);
    case PT_STRING: case PT_BYTES: return kd_append_bytes(&d->builders->b[b], nothing, 0);
    case PT_TIMESTAMP: {
      int64_t zero = 0;
      return kd_append_fixed(&d->builders->b[b], &zero, 8);
    }
    case PT_ENUM: return append_enum(d, aux, b, enum_at(d, aux)[1]);
    default: return append_scalar(d, type, aux, b, 0, 0);
  }
}

static int same_key(const kd_builder *k, int64_t i, int64_t j) {
  if (k->kind == K_BIN) {
    int32_t a0, a1, b0, b1;
    memcpy(&a0, k->offsets.p + i * 4, 4);
    memcpy(&a1, k->offsets.p + (i + 1) * 4, 4);
    memcpy(&b0, k->offsets.p + j * 4, 4);
    memcpy(&b1, k->offsets.p + (j + 1) * 4, 4);
    return a1 - a0 == b1 - b0 &&
           (a1 == a0 || memcmp(k->data.p + a0, k->data.p + b0, (size_t)(a1 - a0)) == 0);
  }
  if (k->kind == K_BOOL)
    return ((k->data.p[i / 8] >> (i % 8)) & 1) == ((k->data.p[j / 8] >> (j % 8)) & 1);
  size_t width = k->kind == K_I32 ? 4 : 8;
  return memcmp(k->data.p + (size_t)i * width, k->data.p + (size_t)j * width, width) == 0;
}

typedef struct {
  const uint8_t *p;
  size_t n;
} pb_key;

static int bytes_order(const void *a, const void *b) {
  const pb_key *x = a, *y = b;
  size_t n = x->n < y->n ? x->n : y->n;
  int c = n ? memcmp(x->p, y->p, n) : 0; /* no bytes at all: no buffer either (NULL) */
  return c ? c : (x->n > y->n) - (x->n < y->n);
}

static int number_order(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* FB if a key repeats among the map's entries (keys first to the builder's end): Protobuf's
 * parsers keep the last, which the Python path does; else 0, or E_MEMORY. Sorted copies of the
 * keys, not every pair compared: a map of n entries costs n log n, not n^2 (seconds at 40,000). */
static int repeated_key(const kd_builders *all, int entries, int64_t first) {
  const kd_builder *keys = &all->b[all->b[entries].children[0]];
  int64_t count = keys->length - first;
  if (count < 2) return 0;
  if (keys->kind == K_BOOL) return count > 2 || same_key(keys, first, first + 1) ? FB : 0;
  if (count <= 16) { /* small maps: no allocation */
    for (int64_t i = first; i < keys->length; i++)
      for (int64_t j = i + 1; j < keys->length; j++)
        if (same_key(keys, i, j)) return FB;
    return 0;
  }
  int found = 0;
  if (keys->kind == K_BIN) {
    pb_key *all_keys = malloc((size_t)count * sizeof(pb_key));
    if (all_keys == NULL) return E_MEMORY;
    for (int64_t i = 0; i < count; i++) {
      int32_t a, b;
      memcpy(&a, keys->offsets.p + (first + i) * 4, 4);
      memcpy(&b, keys->offsets.p + (first + i + 1) * 4, 4);
      all_keys[i] = (pb_key){b > a ? keys->data.p + a : NULL, (size_t)(b - a)};
    }
    qsort(all_keys, (size_t)count, sizeof(pb_key), bytes_order);
    for (int64_t i = 1; i < count && !found; i++)
      found = bytes_order(&all_keys[i - 1], &all_keys[i]) == 0;
    free(all_keys);
  } else {
    /* int32 or int64 keys: compared as their bytes are, zero-extended (equal iff equal) */
    size_t width = keys->kind == K_I32 ? 4 : 8;
    uint64_t *values = malloc((size_t)count * sizeof(uint64_t));
    if (values == NULL) return E_MEMORY;
    for (int64_t i = 0; i < count; i++) {
      values[i] = 0;
      memcpy(&values[i], keys->data.p + (size_t)(first + i) * width, width);
    }
    qsort(values, (size_t)count, sizeof(uint64_t), number_order);
    for (int64_t i = 1; i < count && !found; i++) found = values[i - 1] == values[i];
    free(values);
  }
  return found ? FB : 0;
}

/* Appends the list of every occurrence of field f in [p, end), in order. */
static int decode_repeated(pb_decoder *d, const int32_t *f, const uint8_t *p, const uint8_t *end) {
  kd_builder *list = &d->builders->b[f[3]];
  int child = list->children[0], type = f[1], aux = f[4];
  int64_t first = d->builders->b[child].length;
  int err;
  while (p < end) {
    uint64_t number;
    int wire;
    if (read_tag(&p, end, &number, &wire)) return FB;
    const uint8_t *value = p;
    if (skip(&p, end, wire)) return FB;
    if (number != (uint64_t)f[0]) continue;
    if (wire == 2 && wire_of(type) != 2) { /* packed */
      uint64_t n;
      if (varint(&value, end, &n) || n > (uint64_t)(end - value)) return FB;
      const uint8_t *packed_end = value + n;
      while (value < packed_end)
        if ((err = append_value(d, type, aux, child, &value, packed_end, 0))) return err;
    } else if ((err = append_value(d, type, aux, child, &value, end, 0))) {
      return err;
    }
  }
  if (type == PT_MAP && (err = repeated_key(d->builders, child, first))) return err;
  return kd_close_list(d->builders, list, child);
}

/* An occurrence that a later one replaces (a singular field repeated, a oneof member that
 * another member replaced): the second pass never reads it, but Protobuf's parsers do, and a
 * record they refuse for it must not decode here. A string must be UTF-8; a message is left to
 * the Python path. */
static int check_replaced(int type, const uint8_t *value, const uint8_t *end) {
  uint64_t n;
  if (type == PT_MESSAGE || type == PT_TIMESTAMP || type == PT_MAP) return FB;
  if (type != PT_STRING) return 0;
  if (varint(&value, end, &n) || n > (uint64_t)(end - value)) return FB;
  return kd_valid_utf8(value, (size_t)n) ? 0 : FB;
}

static int decode_message(pb_decoder *d, int m, const uint8_t *p, const uint8_t *end) {
  const int32_t *h = message_at(d, m);
  int entry = h[0] & PM_ENTRY, nf = h[2], no = h[3];
  pb_slot *slots = d->slots + h[4];
  const int32_t *fields = h + PB_MESSAGE_HEADER;
  for (int i = 0; i < nf + no; i++) slots[i] = (pb_slot){NULL, i < nf ? 0 : -1};
  for (const uint8_t *q = p; q < end;) {
    uint64_t number;
    int wire;
    if (read_tag(&q, end, &number, &wire)) return FB;
    const uint8_t *value = q;
    if (skip(&q, end, wire)) return FB;
    int i = 0;
    while (i < nf && (uint64_t)fields[i * PB_FIELD] != number) i++;
    if (i == nf) {
      /* Unknown: skipped; but Protobuf keeps a map entry with unknown fields out of the map
       * (among the message's unknown fields). */
      if (entry) return FB;
      continue;
    }
    const int32_t *f = fields + i * PB_FIELD;
    int expected = wire_of(f[1]);
    if (wire != expected && !(f[2] == PL_REPEATED && expected != 2 && wire == 2)) return FB;
    if (f[2] != PL_REPEATED && expected == 2 && (f[1] == PT_MESSAGE || f[1] == PT_TIMESTAMP) &&
        slots[i].count)
      return FB; /* Protobuf merges the two messages */
    if (f[2] != PL_REPEATED && slots[i].count && check_replaced(f[1], slots[i].last, end))
      return FB;
    slots[i].last = value;
    slots[i].count++;
    if (f[5] >= 0) {
      int was = slots[nf + f[5]].count;
      if (was >= 0 && was != i && check_replaced(fields[was * PB_FIELD + 1], slots[was].last, end))
        return FB;
      slots[nf + f[5]].count = i;
    }
  }
  for (int i = 0; i < nf; i++) {
    const int32_t *f = fields + i * PB_FIELD;
    int present = slots[i].count > 0 && (f[5] < 0 || slots[nf + f[5]].count == i), err;
    if (f[2] == PL_REPEATED)
      err = present ? decode_repeated(d, f, p, end) : kd_append_null(d->builders, f[3]);
    else if (!present)
      err = entry ? append_default(d, f[1], f[4], f[3]) : kd_append_null(d->builders, f[3]);
    else {
      const uint8_t *value = slots[i].last;
      err = append_value(d, f[1], f[4], f[3], &value, end, f[2] == PL_IMPLICIT && !entry);
    }
    if (err) return err;
  }
  return kd_append_valid(&d->builders->b[h[1]]);
}

int pb_run(pb_decoder *d, const uint8_t *p, const uint8_t *end) {
  return decode_message(d, 0, p, end);
}
