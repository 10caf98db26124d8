/* Protobuf binary -> Arrow buffers: the program's layout and the interpreter's entry point
 * (_protobuf_decode.c), called per record by the module (_protobuf_arrow.c). Runs in the Spark
 * Python worker, inside from_protobuf's Arrow UDF. The builders are the Avro decoder's
 * (_avro_builders.c, linked in unchanged).
 *
 * The Python side (kafka_direct.schema_registry.protobuf_program) compiles one int32 program
 * per reader message:
 *   [n messages, n enums, message offsets..., enum offsets..., bodies...]
 * a message body: [flags, struct builder, n fields, n oneofs, first slot, fields...], each
 * field PB_FIELD int32s: [number, type, label, builder, aux, oneof or -1]; aux is the message
 * of a message or map field and the enum of an enum field. An enum body: [n values, default
 * number, (number, name offset, name length)...], the names in the constants.
 * Keep the numbers below in step with protobuf_program.py. */
#ifndef KAFKA_DIRECT_PROTOBUF_DECODE_H
#define KAFKA_DIRECT_PROTOBUF_DECODE_H

#include "_avro_arrow.h"

/* field types */
enum {
  PT_INT32 = 1, PT_INT64, PT_UINT32, PT_UINT64, PT_SINT32, PT_SINT64, PT_FIXED32, PT_FIXED64,
  PT_SFIXED32, PT_SFIXED64, PT_FLOAT, PT_DOUBLE, PT_BOOL, PT_STRING, PT_BYTES, PT_ENUM,
  PT_MESSAGE, PT_TIMESTAMP, PT_MAP
};

/* labels: a singular field without presence (its default value is null), with presence, and
 * repeated (map fields too) */
enum { PL_IMPLICIT = 1, PL_PRESENCE, PL_REPEATED };

/* message flags: a map entry (an absent key or value is its default, never null) */
enum { PM_ENTRY = 1 };

enum { PB_FIELD = 6, PB_MESSAGE_HEADER = 5 };

/* A record the C path leaves to the Python path (malformed, or outside what it covers); not an
 * E_* code of the builders. */
enum { PB_FALLBACK = 100 };

typedef struct {
  const uint8_t *last;
  int32_t count;
} pb_slot;

typedef struct {
  kd_builders *builders;
  const int32_t *code;
  size_t code_len;
  const uint8_t *names;
  size_t names_len;
  pb_slot *slots; /* one per field and per oneof of every message, at its first slot */
  size_t nslots;
} pb_decoder;

/* Checks the program against itself and the builders: 0 or E_PROGRAM. */
int pb_check(const pb_decoder *d);

/* Decodes one message (the program's first) from [p, end) into the builders: 0, PB_FALLBACK,
 * or a builders' E_* code (E_MEMORY, E_TOO_LARGE). On PB_FALLBACK the builders may hold part of
 * the record: the caller restores them. */
int pb_run(pb_decoder *d, const uint8_t *p, const uint8_t *end);

#endif
