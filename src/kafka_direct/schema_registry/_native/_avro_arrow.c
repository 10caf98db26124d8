/* kafka_direct.schema_registry._avro_arrow: a batch of Avro records (an Arrow binary column,
 * bare or in the Confluent wire format) -> the Arrow buffers of the reader's type, in C, with
 * no Python object per record or field. Runs in the Spark Python worker, inside from_avro's
 * Arrow UDF; kafka_direct.schema_registry.avro_native drives it.
 *
 * schema_ids(data, offsets, width, validity, first, count) -> the distinct schema ids of the
 *   framed records (so that Python fetches and compiles each writer schema before decoding).
 * decode(spec, programs, data, offsets, width, validity, first, count, framed, stop[, limit])
 *   -> ([(length, null count, validity, data, offsets) per builder], errors, fallback rows)
 *   limit: the largest offset of an Arrow array, 2^31 - 1 (tests lower it).
 *   programs: [(schema id, program or None, constants)]; None makes the id's records null
 *   (each listed as an E_NO_SCHEMA error).
 *   A record whose id has no entry is left null and listed in `fallback rows`, for Python to
 *   decode. A bad record is null and listed in `errors` as (row, code, schema id, left over);
 *   with `stop`, the first one ends the batch. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "_arrow_batch.h"
#include "_avro_decode.h"


static uint32_t framed_id(const uint8_t *p) {
  return ((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 8) | p[4];
}

static PyObject *schema_ids(PyObject *self, PyObject *args) {
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
  PyObject *ids = PySet_New(NULL);
  int64_t last = -1;
  for (Py_ssize_t row = 0; ids && row < count; row++) {
    if (!is_valid(&b, row)) continue;
    int64_t begin = offset_at(&b, row), end = offset_at(&b, row + 1);
    const uint8_t *p = data_at(&b, begin);
    if (end - begin < 5 || p[0] != 0) continue;
    int64_t id = framed_id(p);
    if (id == last) continue;
    last = id;
    PyObject *value = PyLong_FromLongLong(id);
    if (value == NULL || PySet_Add(ids, value) < 0) Py_CLEAR(ids);
    Py_XDECREF(value);
  }
  batch_release(&b);
  return ids;
}

typedef struct {
  int64_t id;
  int has_program;
  Py_buffer program, consts;
} writer;

typedef struct {
  int64_t row, code, id, left_over;
} failure;

typedef struct {
  failure *errors;
  size_t nerrors, errors_cap;
  int64_t *fallback;
  size_t nfallback, fallback_cap;
} outcome;

static int grow(void **items, size_t *cap, size_t used, size_t size) {
  if (used < *cap) return 0;
  size_t next = *cap ? *cap * 2 : 16;
  void *grown = realloc(*items, next * size);
  if (grown == NULL) return E_MEMORY;
  *items = grown;
  *cap = next;
  return 0;
}

static int add_error(outcome *o, int64_t row, int code, int64_t id, int64_t left_over) {
  if (grow((void **)&o->errors, &o->errors_cap, o->nerrors, sizeof(failure))) return E_MEMORY;
  o->errors[o->nerrors++] = (failure){row, code, id, left_over};
  return 0;
}

static int add_fallback(outcome *o, int64_t row) {
  if (grow((void **)&o->fallback, &o->fallback_cap, o->nfallback, sizeof(int64_t)))
    return E_MEMORY;
  o->fallback[o->nfallback++] = row;
  return 0;
}

static int run_record(kd_builders *all, const writer *w, kd_input *in) {
  kd_decoder d = {all, w->program.buf, (size_t)w->program.len / 4, w->consts.buf,
                  (size_t)w->consts.len, 0};
  int err = kd_run(&d, in);
  return !err && in->p != in->end ? E_LEFT_OVER : err;
}

/* A record that passed 2 GiB in an array (E_TOO_LARGE): decoded again, measuring from where it
 * began, to tell whether it alone is too large (its own error, whatever the batch size) or only
 * the batch with it is (0: a smaller batch would do). With the builders restored after. */
static int too_large(kd_builders *all, const writer *w, kd_input *in, kd_input record) {
  kd_builders_restore(all);
  kd_builders_measure(all, 1);
  *in = record;
  int err = run_record(all, w, in);
  kd_builders_measure(all, 0);
  kd_builders_restore(all);
  return err;
}

/* Decodes every row; 0, or E_MEMORY / E_PROGRAM / E_TOO_LARGE (the batch passes 2 GiB in an
 * array, no record alone does) for the whole batch. Runs without the GIL. */
static int decode_rows(kd_builders *all, writer *writers, Py_ssize_t nwriters, const batch *b,
                       int framed, int stop, outcome *o) {
  Py_ssize_t current = -1;
  for (Py_ssize_t row = 0; row < b->count; row++) {
    int err;
    if (!is_valid(b, row)) {
      if ((err = kd_append_null(all, 0))) return err;
      continue;
    }
    int64_t begin = offset_at(b, row), end = offset_at(b, row + 1);
    kd_input in = {data_at(b, begin), data_at(b, begin) + (end - begin)};
    int64_t id = -1;
    if (framed) {
      if (end - begin < 5 || in.p[0] != 0) {
        if ((err = kd_append_null(all, 0)) || (err = add_error(o, row, E_NOT_FRAMED, -1, 0)))
          return err;
        if (stop) return 0;
        continue;
      }
      id = framed_id(in.p);
      in.p += 5;
      if (current < 0 || writers[current].id != id) {
        current = -1;
        for (Py_ssize_t w = 0; w < nwriters; w++)
          if (writers[w].id == id) current = w;
      }
      if (current < 0) {
        if ((err = kd_append_null(all, 0)) || (err = add_fallback(o, row))) return err;
        continue;
      }
    } else {
      current = 0;
    }
    writer *w = &writers[current];
    if (!w->has_program) {
      if ((err = kd_append_null(all, 0)) || (err = add_error(o, row, E_NO_SCHEMA, id, 0)))
        return err;
      if (stop) return 0;
      continue;
    }
    kd_builders_save(all);
    kd_input record = in;
    err = run_record(all, w, &in);
    if (err == E_TOO_LARGE && !(err = too_large(all, w, &in, record))) return E_TOO_LARGE;
    int64_t left_over = in.end - in.p;
    /* Not the record's fault: the whole batch fails, in PERMISSIVE mode too. */
    if (err == E_MEMORY || err == E_PROGRAM) return err;
    if (err) {
      kd_builders_restore(all);
      if (err != E_LEFT_OVER) left_over = 0;
      if ((err = add_error(o, row, err, id, left_over))) return err;
      if ((err = kd_append_null(all, 0))) return err;
      if (stop) return 0;
    }
  }
  return 0;
}

static PyObject *bytes_of(const kd_buf *buf) {
  return PyBytes_FromStringAndSize((const char *)buf->p, (Py_ssize_t)buf->len);
}

static PyObject *result_of(const kd_builders *all, const outcome *o) {
  PyObject *builders = PyList_New(all->n), *errors = PyList_New((Py_ssize_t)o->nerrors),
           *fallback = PyList_New((Py_ssize_t)o->nfallback);
  if (!builders || !errors || !fallback) goto fail;
  for (int i = 0; i < all->n; i++) {
    const kd_builder *b = &all->b[i];
    PyObject *validity = b->null_count ? bytes_of(&b->validity) : Py_NewRef(Py_None);
    PyObject *item = Py_BuildValue("(LLNNN)", (long long)b->length, (long long)b->null_count,
                                   validity, bytes_of(&b->data), bytes_of(&b->offsets));
    if (item == NULL) goto fail;
    PyList_SET_ITEM(builders, i, item);
  }
  for (size_t i = 0; i < o->nerrors; i++) {
    const failure *f = &o->errors[i];
    PyObject *item = Py_BuildValue("(LLLL)", (long long)f->row, (long long)f->code,
                                   (long long)f->id, (long long)f->left_over);
    if (item == NULL) goto fail;
    PyList_SET_ITEM(errors, (Py_ssize_t)i, item);
  }
  for (size_t i = 0; i < o->nfallback; i++) {
    PyObject *item = PyLong_FromLongLong(o->fallback[i]);
    if (item == NULL) goto fail;
    PyList_SET_ITEM(fallback, (Py_ssize_t)i, item);
  }
  return Py_BuildValue("(NNN)", builders, errors, fallback);
fail:
  Py_XDECREF(builders);
  Py_XDECREF(errors);
  Py_XDECREF(fallback);
  return NULL;
}

static PyObject *decode(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer spec;
  PyObject *programs, *data, *offsets, *validity;
  int width, framed, stop;
  Py_ssize_t first, count;
  long long limit = INT32_MAX;
  if (!PyArg_ParseTuple(args, "y*O!OOiOnnpp|L", &spec, &PyList_Type, &programs, &data, &offsets,
                        &width, &validity, &first, &count, &framed, &stop, &limit))
    return NULL;
  PyObject *result = NULL;
  batch b;
  kd_builders all = {NULL, 0};
  outcome o = {0};
  Py_ssize_t nwriters = PyList_GET_SIZE(programs), opened = 0;
  writer *writers = calloc((size_t)(nwriters ? nwriters : 1), sizeof(writer));
  int open_failed = batch_open(&b, data, offsets, width, validity, first, count) < 0;
  if (writers == NULL) {
    PyErr_NoMemory();
    goto done;
  }
  if (open_failed) goto done;
  if (limit < 1 || limit > INT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "limit outside 1 to 2^31 - 1");
    goto done;
  }
  if (!framed && nwriters != 1) {
    PyErr_SetString(PyExc_ValueError, "bare Avro needs exactly one program");
    goto done;
  }
  for (; opened < nwriters; opened++) {
    PyObject *item = PyList_GET_ITEM(programs, opened), *program, *consts;
    long long id;
    if (!PyArg_ParseTuple(item, "LOO", &id, &program, &consts)) goto done;
    writer *w = &writers[opened];
    w->id = id;
    if (program == Py_None) continue;
    if (PyObject_GetBuffer(program, &w->program, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(consts, &w->consts, PyBUF_SIMPLE) < 0) {
      PyBuffer_Release(&w->program);
      goto done;
    }
    w->has_program = 1;
  }
  int err = kd_builders_init(&all, spec.buf, (size_t)spec.len / 4);
  if (!err) kd_builders_limit(&all, limit);
  if (!err) {
    Py_BEGIN_ALLOW_THREADS
    err = decode_rows(&all, writers, nwriters, &b, framed, stop, &o);
    Py_END_ALLOW_THREADS
  }
  if (err == E_MEMORY)
    PyErr_NoMemory();
  else if (err == E_TOO_LARGE)
    PyErr_SetString(PyExc_OverflowError,
                    "the decoded batch holds more than 2 GiB in one Arrow array (32-bit "
                    "offsets), though no record alone does: lower "
                    "spark.sql.execution.arrow.maxRecordsPerBatch");
  else if (err)
    PyErr_SetString(PyExc_ValueError, "malformed decode program or builder spec");
  else
    result = result_of(&all, &o);
done:
  for (Py_ssize_t i = 0; i < opened && i < nwriters; i++) {
    if (writers[i].has_program) {
      PyBuffer_Release(&writers[i].program);
      PyBuffer_Release(&writers[i].consts);
    }
  }
  free(writers);
  free(o.errors);
  free(o.fallback);
  kd_builders_free(&all);
  batch_release(&b);
  PyBuffer_Release(&spec);
  return result;
}

static PyMethodDef methods[] = {
    {"schema_ids", schema_ids, METH_VARARGS, "The distinct schema ids of framed records."},
    {"decode", decode, METH_VARARGS, "Decode a batch of Avro records into Arrow buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_avro_arrow", "Avro binary -> Arrow buffers.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__avro_arrow(void) { return PyModule_Create(&module); }
