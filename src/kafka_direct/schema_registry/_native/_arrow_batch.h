/* The binary column of an Arrow batch, as the C decoders read it: its data, offsets (32- or
 * 64-bit) and validity buffers, checked once when the batch is opened so that every later read
 * is inside them. Shared by kafka_direct.schema_registry._avro_arrow and _protobuf_arrow; the
 * functions are static inline, each extension compiling its own copy. Needs Python.h first. */
#ifndef KD_ARROW_BATCH_H
#define KD_ARROW_BATCH_H

#include <stdint.h>
#include <string.h>

typedef struct {
  Py_buffer data, offsets, validity;
  int has_data, has_offsets, has_validity;
  int width;
  Py_ssize_t first, count;
} batch;

static inline void batch_release(batch *b) {
  if (b->has_data) PyBuffer_Release(&b->data);
  if (b->has_offsets) PyBuffer_Release(&b->offsets);
  if (b->has_validity) PyBuffer_Release(&b->validity);
}

static inline int64_t offset_at(const batch *b, Py_ssize_t row) {
  if (b->width == 4) {
    int32_t v;
    memcpy(&v, (const char *)b->offsets.buf + (b->first + row) * 4, 4);
    return v;
  }
  int64_t v;
  memcpy(&v, (const char *)b->offsets.buf + (b->first + row) * 8, 8);
  return v;
}

/* Takes and checks the column's buffers: the offsets of rows first..first+count must be inside
 * their buffer, rising, and inside the data buffer. */
static inline int batch_open(batch *b, PyObject *data, PyObject *offsets, int width, PyObject *validity,
                      Py_ssize_t first, Py_ssize_t count) {
  memset(b, 0, sizeof *b);
  b->width = width;
  b->first = first;
  b->count = count;
  if ((width != 4 && width != 8) || first < 0 || count < 0) {
    PyErr_SetString(PyExc_ValueError, "bad offset width or row range");
    return -1;
  }
  if (data != Py_None) {
    if (PyObject_GetBuffer(data, &b->data, PyBUF_SIMPLE) < 0) return -1;
    b->has_data = 1;
  }
  if (PyObject_GetBuffer(offsets, &b->offsets, PyBUF_SIMPLE) < 0) return -1;
  b->has_offsets = 1;
  if (validity != Py_None) {
    if (PyObject_GetBuffer(validity, &b->validity, PyBUF_SIMPLE) < 0) return -1;
    b->has_validity = 1;
    if (b->validity.len < (first + count + 7) / 8) {
      PyErr_SetString(PyExc_ValueError, "validity buffer too short");
      return -1;
    }
  }
  if (b->offsets.len / width < first + count + 1) {
    PyErr_SetString(PyExc_ValueError, "offsets buffer too short");
    return -1;
  }
  Py_ssize_t data_len = b->has_data ? b->data.len : 0;
  int64_t previous = -1;
  for (Py_ssize_t i = 0; i <= count; i++) {
    int64_t at = offset_at(b, i);
    if (at < 0 || at > data_len || at < previous) {
      PyErr_SetString(PyExc_ValueError, "offsets outside the data buffer");
      return -1;
    }
    previous = at;
  }
  return 0;
}

static inline int is_valid(const batch *b, Py_ssize_t row) {
  if (!b->has_validity) return 1;
  Py_ssize_t bit = b->first + row;
  return (((const uint8_t *)b->validity.buf)[bit / 8] >> (bit % 8)) & 1;
}

static inline const uint8_t *data_at(const batch *b, int64_t at) {
  return b->has_data ? (const uint8_t *)b->data.buf + at : (const uint8_t *)"";
}

#endif
