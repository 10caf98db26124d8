/* kafka_direct.schema_registry._protobuf_arrow: a batch of Protobuf records in the Confluent
 * wire format (an Arrow binary column) -> the Arrow buffers of the reader message's Spark type,
 * in C, with no Python object per record or field. Runs in the Spark Python worker, inside
 * from_protobuf's Arrow UDF; kafka_direct.schema_registry.protobuf_native drives it.
 *
 * headers(data, offsets, width, validity, first, count)
 *   -> the distinct (schema id, message index bytes) of the framed records, so that Python
 *      can say which of them are the reader's message.
 * decode(spec, code, names, nslots, accepted, data, offsets, width, validity, first, count)
 *   -> ([(length, null count, validity, data, offsets) per builder], fallback rows)
 *   accepted: [(schema id, message index bytes)] whose records the program decodes. Every
 *   other record, and every record the program leaves to Python (PB_FALLBACK), is null and
 *   listed in `fallback rows`, for the Python path: it decodes them, or raises its error. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "_arrow_batch.h"
#include "_protobuf_decode.h"


/* A framed record's schema id and message index bytes; 0, or -1 if it is not framed or its
 * message indexes do not parse. */
typedef struct {
  int64_t id;
  const uint8_t *indexes, *payload, *end;
} header;

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
  uint64_t value = 0;
  for (int shift = 0; *p < end && shift < 64; shift += 7) {
    uint8_t byte = *(*p)++;
    value |= (uint64_t)(byte & 0x7F) << shift;
    if (!(byte & 0x80)) {
      *out = value;
      return 0;
    }
  }
  return -1;
}

static int header_of(const batch *b, Py_ssize_t row, header *h) {
  int64_t begin = offset_at(b, row), end = offset_at(b, row + 1);
  const uint8_t *p = data_at(b, begin);
  if (end - begin < 6 || p[0] != 0) return -1;
  h->id = ((int64_t)p[1] << 24) | ((int64_t)p[2] << 16) | ((int64_t)p[3] << 8) | p[4];
  h->end = p + (end - begin);
  h->indexes = p + 5;
  const uint8_t *q = h->indexes;
  uint64_t count, index;
  if (read_varint(&q, h->end, &count)) return -1;
  count = (count >> 1) ^ (~(count & 1) + 1); /* zigzag */
  if (count > 64) return -1; /* deeper than any message nesting: let Python say so */
  for (uint64_t i = 0; i < count; i++)
    if (read_varint(&q, h->end, &index)) return -1;
  h->payload = q;
  return 0;
}

static PyObject *headers(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *data, *offsets, *validity;
  int width;
  Py_ssize_t first, count;
  if (!PyArg_ParseTuple(args, "OOiOnn", &data, &offsets, &width, &validity, &first, &count))
    return NULL;
  batch b;
  if (batch_open(&b, data, offsets, width, validity, first, count) < 0) {
    batch_release(&b);
    return NULL;
  }
  PyObject *found = PySet_New(NULL);
  header last = {-1, NULL, NULL, NULL};
  for (Py_ssize_t row = 0; found && row < count; row++) {
    header h;
    if (!is_valid(&b, row) || header_of(&b, row, &h)) continue;
    if (last.indexes && h.id == last.id && h.payload - h.indexes == last.payload - last.indexes &&
        memcmp(h.indexes, last.indexes, (size_t)(h.payload - h.indexes)) == 0)
      continue;
    last = h;
    PyObject *key = Py_BuildValue("(Ly#)", (long long)h.id, (const char *)h.indexes,
                                  (Py_ssize_t)(h.payload - h.indexes));
    if (key == NULL || PySet_Add(found, key) < 0) Py_CLEAR(found);
    Py_XDECREF(key);
  }
  batch_release(&b);
  return found;
}

typedef struct {
  int64_t id;
  const char *indexes;
  Py_ssize_t len;
} key;

typedef struct {
  int64_t *rows;
  size_t n, cap;
} rows;

static int add_row(rows *r, int64_t row) {
  if (r->n == r->cap) {
    size_t next = r->cap ? r->cap * 2 : 16;
    int64_t *grown = realloc(r->rows, next * sizeof(int64_t));
    if (grown == NULL) return E_MEMORY;
    r->rows = grown;
    r->cap = next;
  }
  r->rows[r->n++] = row;
  return 0;
}

static int accepted_at(const key *keys, Py_ssize_t nkeys, const header *h) {
  for (Py_ssize_t k = 0; k < nkeys; k++)
    if (keys[k].id == h->id && keys[k].len == h->payload - h->indexes &&
        memcmp(keys[k].indexes, h->indexes, (size_t)keys[k].len) == 0)
      return 1;
  return 0;
}

/* Decodes every row; 0, or E_MEMORY / E_TOO_LARGE for the whole batch. Runs without the GIL. */
static int decode_rows(pb_decoder *d, const key *keys, Py_ssize_t nkeys, const batch *b,
                       rows *fallback) {
  for (Py_ssize_t row = 0; row < b->count; row++) {
    int err;
    if (!is_valid(b, row)) {
      if ((err = kd_append_null(d->builders, 0))) return err;
      continue;
    }
    header h;
    err = header_of(b, row, &h) || !accepted_at(keys, nkeys, &h) ? PB_FALLBACK : 0;
    if (!err) {
      kd_builders_save(d->builders);
      err = pb_run(d, h.payload, h.end);
      if (err == PB_FALLBACK) kd_builders_restore(d->builders);
    }
    if (err == PB_FALLBACK) {
      if ((err = kd_append_null(d->builders, 0)) || (err = add_row(fallback, row))) return err;
    } else if (err) {
      return err;
    }
  }
  return 0;
}

static PyObject *bytes_of(const kd_buf *buf) {
  return PyBytes_FromStringAndSize((const char *)buf->p, (Py_ssize_t)buf->len);
}

static PyObject *result_of(const kd_builders *all, const rows *fallback) {
  PyObject *builders = PyList_New(all->n), *listed = PyList_New((Py_ssize_t)fallback->n);
  if (!builders || !listed) goto fail;
  for (int i = 0; i < all->n; i++) {
    const kd_builder *b = &all->b[i];
    PyObject *validity = b->null_count ? bytes_of(&b->validity) : Py_NewRef(Py_None);
    PyObject *item = Py_BuildValue("(LLNNN)", (long long)b->length, (long long)b->null_count,
                                   validity, bytes_of(&b->data), bytes_of(&b->offsets));
    if (item == NULL) goto fail;
    PyList_SET_ITEM(builders, i, item);
  }
  for (size_t i = 0; i < fallback->n; i++) {
    PyObject *item = PyLong_FromLongLong(fallback->rows[i]);
    if (item == NULL) goto fail;
    PyList_SET_ITEM(listed, (Py_ssize_t)i, item);
  }
  return Py_BuildValue("(NN)", builders, listed);
fail:
  Py_XDECREF(builders);
  Py_XDECREF(listed);
  return NULL;
}

static PyObject *decode(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer spec, code, names;
  Py_ssize_t nslots, first, count;
  PyObject *accepted, *data, *offsets, *validity;
  int width;
  if (!PyArg_ParseTuple(args, "y*y*y*nO!OOiOnn", &spec, &code, &names, &nslots, &PyList_Type,
                        &accepted, &data, &offsets, &width, &validity, &first, &count))
    return NULL;
  PyObject *result = NULL;
  batch b;
  kd_builders all = {NULL, 0};
  rows fallback = {NULL, 0, 0};
  Py_ssize_t nkeys = PyList_GET_SIZE(accepted);
  key *keys = calloc((size_t)(nkeys ? nkeys : 1), sizeof(key));
  pb_slot *slots = calloc((size_t)(nslots > 0 ? nslots : 1), sizeof(pb_slot));
  int open_failed = batch_open(&b, data, offsets, width, validity, first, count) < 0;
  if (keys == NULL || slots == NULL) {
    PyErr_NoMemory();
    goto done;
  }
  if (open_failed || nslots < 0) goto done;
  for (Py_ssize_t k = 0; k < nkeys; k++) {
    long long id;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(accepted, k), "Ly#", &id, &keys[k].indexes,
                          &keys[k].len))
      goto done;
    keys[k].id = id;
  }
  int err = kd_builders_init(&all, spec.buf, (size_t)spec.len / 4);
  pb_decoder d = {&all, code.buf, (size_t)code.len / 4, names.buf, (size_t)names.len, slots,
                  (size_t)nslots};
  if (!err) err = pb_check(&d);
  if (!err) {
    Py_BEGIN_ALLOW_THREADS
    err = decode_rows(&d, keys, nkeys, &b, &fallback);
    Py_END_ALLOW_THREADS
  }
  if (err == E_MEMORY)
    PyErr_NoMemory();
  else if (err == E_TOO_LARGE)
    PyErr_SetString(PyExc_OverflowError,
                    "the decoded batch holds more than 2 GiB in one Arrow array (32-bit "
                    "offsets): lower spark.sql.execution.arrow.maxRecordsPerBatch");
  else if (err)
    PyErr_SetString(PyExc_ValueError, "malformed Protobuf decode program or builder spec");
  else
    result = result_of(&all, &fallback);
done:
  free(keys);
  free(slots);
  free(fallback.rows);
  kd_builders_free(&all);
  batch_release(&b);
  PyBuffer_Release(&spec);
  PyBuffer_Release(&code);
  PyBuffer_Release(&names);
  return result;
}

static PyMethodDef methods[] = {
    {"headers", headers, METH_VARARGS, "The distinct (schema id, message indexes) of a batch."},
    {"decode", decode, METH_VARARGS, "Decode a batch of Protobuf records into Arrow buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_protobuf_arrow", "Protobuf binary -> Arrow buffers.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__protobuf_arrow(void) { return PyModule_Create(&module); }
