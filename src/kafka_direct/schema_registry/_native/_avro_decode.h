/* The decode program's interpreter (_avro_decode.c), called per record by the module
 * (_avro_arrow.c). Runs in the Spark Python worker, inside from_avro's Arrow UDF. */
#ifndef KAFKA_DIRECT_AVRO_DECODE_H
#define KAFKA_DIRECT_AVRO_DECODE_H

#include "_avro_arrow.h"

typedef struct {
  const uint8_t *p, *end;
} kd_input;

typedef struct {
  kd_builders *builders;
  const int32_t *program;
  size_t program_len;
  const uint8_t *consts;
  size_t consts_len;
  /* array and map items the record may still ask for (kd_run sets it per record) */
  int64_t items_left;
} kd_decoder;

/* Decodes one record from `in` into the builders; 0 or an E_* code (the builders may then hold
 * part of the record: the caller restores them). */
int kd_run(kd_decoder *d, kd_input *in);

#endif
