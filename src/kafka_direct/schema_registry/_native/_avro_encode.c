/* kafka_direct.schema_registry._avro_encode: Arrow arrays of Spark values -> Avro records (bare,
 * or after a Confluent header), in C, with no Python object per record or field. Runs in the
 * Spark Python worker, inside to_avro's Arrow UDF; kafka_direct.schema_registry.avro_encode_native
 * drives it, with a program compiled by avro_encode_program.py.
 *
 * encode(nodes, kids, consts, columns, prefix, count) -> (data, offsets, error row, error code)
 *   nodes: int64[8] per node (op, column, a, b, c, d, first kid, kid count), node 0 the root;
 *   kids: int64s; consts: enum symbols (uint32 length + bytes each);
 *   columns: [(validity or None, buffer 1 or None, buffer 2 or None, offset, length)], one per
 *   Arrow array the nodes read; column 0 is the batch's array (count rows).
 *   data: every non-null row's prefix + Avro, one after another; offsets: int32[count + 1].
 *   On the first value the program cannot write exactly as fastavro would (a null the schema
 *   does not allow, an unknown enum symbol, a decimal too wide...), it stops and returns
 *   (None, None, row, code): the caller then runs the batch through fastavro, which writes it
 *   or raises today's error, so that behaviour never depends on which encoder ran. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_avro_encode.h"
#include "_utf8.h"

/* [start, end) of variable-length value j (string, binary, list, map), from its offsets. */
int enc_span(const column *c, int64_t j, int width, int64_t *start, int64_t *end) {
  const uint8_t *p = element(c, 1, j, width);
  const uint8_t *q = element(c, 1, j + 1, width);
  if (p == NULL || q == NULL) return ENC_E_BOUNDS;
  if (width == 4) {
    int32_t a, b;
    memcpy(&a, p, 4);
    memcpy(&b, q, 4);
    *start = a;
    *end = b;
  } else {
    memcpy(start, p, 8);
    memcpy(end, q, 8);
  }
  return *start < 0 || *end < *start ? ENC_E_BOUNDS : 0;
}

/* The bytes of string/binary value j: checked against the data buffer. */
int enc_blob(const column *c, int64_t j, int width, const uint8_t **p, int64_t *n) {
  int64_t start, end;
  int rc = enc_span(c, j, width, &start, &end);
  if (rc) return rc;
  int64_t have = c->has[2] ? c->views[2].len : 0;
  if (end > have) return ENC_E_BOUNDS;
  *p = c->has[2] ? (const uint8_t *)c->views[2].buf + start : (const uint8_t *)"";
  *n = end - start;
  return 0;
}

static int encode_kid(encoder *e, int64_t at, int64_t j) {
  if (at < 0 || at >= e->kid_count) return ENC_E_BOUNDS;
  return encode_node(e, e->kids[at], j);
}

/* Spark's strings may hold any bytes (a binary cast to string), and on fastavro's path pyarrow's
 * to_pylist fails on them, so they go to that path to fail as they do today. */
int enc_utf8(const uint8_t *s, int64_t n) { return n >= 0 && kd_valid_utf8(s, (size_t)n); }

typedef struct {
  const uint8_t *p;
  int64_t n;
} key;

static int key_order(const void *a, const void *b) {
  const key *x = a, *y = b;
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  return memcmp(x->p, y->p, (size_t)x->n);
}

/* Checks one map's keys: UTF-8, and no key twice. Spark's maps have no duplicate keys, but
 * fastavro's path makes a dict of the pairs (the last value wins, in the first key's place),
 * which we do not copy: such a map goes back to fastavro. Small maps compare pairwise; large
 * ones sort their keys, so that a huge map costs n log n, not n squared. */
static int check_keys(const column *keys, int64_t start, int64_t end) {
  int64_t count = end - start;
  key small[16];
  key *all = count <= 16 ? small : malloc((size_t)count * sizeof(key));
  if (all == NULL) return ENC_E_NO_MEMORY;
  int rc = 0;
  for (int64_t k = 0; k < count && !rc; k++) {
    rc = enc_blob(keys, start + k, 4, &all[k].p, &all[k].n);
    if (!rc && !enc_utf8(all[k].p, all[k].n)) rc = ENC_E_UTF8;
  }
  if (!rc && count <= 16) {
    for (int64_t a = 0; a < count && !rc; a++)
      for (int64_t b = a + 1; b < count && !rc; b++)
        if (key_order(&all[a], &all[b]) == 0) rc = ENC_E_DUPLICATE_KEY;
  } else if (!rc) {
    qsort(all, (size_t)count, sizeof(key), key_order);
    for (int64_t k = 1; k < count && !rc; k++)
      if (key_order(&all[k - 1], &all[k]) == 0) rc = ENC_E_DUPLICATE_KEY;
  }
  if (all != small) free(all);
  return rc;
}

int encode_node(encoder *e, int64_t node, int64_t j) {
  if (node < 0 || node >= e->node_count) return ENC_E_BOUNDS;
  int64_t op = NODE(e, node, 0), col = NODE(e, node, 1);
  if (col < 0 || col >= e->column_count) return ENC_E_BOUNDS;
  const column *c = &e->columns[col];
  if (op == ENC_OP_NULL) return 0; /* Avro's null is no bytes */
  if (j < 0 || j >= c->length) return ENC_E_BOUNDS;
  int64_t a = NODE(e, node, 2), b = NODE(e, node, 3);
  int64_t first = NODE(e, node, 6), count = NODE(e, node, 7);
  if (op == ENC_OP_UNION) {
    /* the branch index first; fastavro's null branch for None, else the compiled choice */
    if (!valid(c, j)) return b < 0 ? ENC_E_NULL : put_long(e, b);
    if (a == ENC_U_ONE) {
      int rc = put_long(e, NODE(e, node, 4));
      return rc ? rc : encode_kid(e, first, j);
    }
    if (a == ENC_U_INT_LONG) return encode_int_long(e, node, c, j);
    for (int64_t m = 0; m < count; m++) { /* spark-avro's struct: the first non-null member */
      if (first + 2 * m + 1 >= e->kid_count) return ENC_E_BOUNDS;
      int64_t member = e->kids[first + 2 * m + 1];
      if (member < 0 || member >= e->node_count) return ENC_E_BOUNDS;
      int64_t member_col = NODE(e, member, 1);
      if (member_col < 0 || member_col >= e->column_count) return ENC_E_BOUNDS;
      if (j >= e->columns[member_col].length) return ENC_E_BOUNDS;
      if (!valid(&e->columns[member_col], j)) continue;
      int rc = put_long(e, e->kids[first + 2 * m]);
      return rc ? rc : encode_node(e, member, j);
    }
    return b < 0 ? ENC_E_NULL : put_long(e, b); /* no member set: fastavro writes None */
  }
  if (!valid(c, j)) return ENC_E_NULL;
  switch (op) {
    case ENC_OP_RECORD:
      for (int64_t k = 0; k < count; k++) {
        int rc = encode_kid(e, first + k, j);
        if (rc) return rc;
      }
      return 0;
    case ENC_OP_ARRAY:
    case ENC_OP_MAP: {
      /* one block of all the items, then the empty block, as fastavro writes them */
      int64_t start, end;
      int rc = enc_span(c, j, (int)a, &start, &end);
      if (rc) return rc;
      const column *keys = NULL;
      if (op == ENC_OP_MAP) {
        if (b < 0 || b >= e->column_count) return ENC_E_BOUNDS;
        keys = &e->columns[b];
        if (end > keys->length) return ENC_E_BOUNDS;
        if ((rc = check_keys(keys, start, end))) return rc;
      }
      if (end > start && (rc = put_long(e, end - start))) return rc;
      for (int64_t i = start; i < end; i++) {
        if (keys != NULL) {
          const uint8_t *p;
          int64_t n;
          if ((rc = enc_blob(keys, i, 4, &p, &n)) || (rc = put_long(e, n)) ||
              (rc = put_bytes(e, p, (size_t)n)))
            return rc;
        }
        if ((rc = encode_kid(e, first, i))) return rc;
      }
      return put_long(e, 0);
    }
    default:
      return encode_value(e, node, c, j);
  }
}

static void release(column *columns, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; i++)
    for (int k = 0; k < 3; k++)
      if (columns[i].has[k]) PyBuffer_Release(&columns[i].views[k]);
  free(columns);
}

static PyObject *encode(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer nodes, kids, consts, prefix;
  PyObject *specs;
  Py_ssize_t count;
  if (!PyArg_ParseTuple(args, "y*y*y*O!y*n", &nodes, &kids, &consts, &PyList_Type, &specs,
                        &prefix, &count))
    return NULL;
  PyObject *result = NULL;
  Py_ssize_t ncols = PyList_GET_SIZE(specs);
  column *columns = calloc(ncols ? (size_t)ncols : 1, sizeof(column));
  int32_t *offsets = NULL;
  encoder e = {0};
  Py_ssize_t opened = 0;
  if (columns == NULL) {
    PyErr_NoMemory();
    goto done;
  }
  for (; opened < ncols; opened++) {
    PyObject *spec = PyList_GET_ITEM(specs, opened);
    PyObject *bufs[3];
    column *c = &columns[opened];
    if (!PyArg_ParseTuple(spec, "OOOLL", &bufs[0], &bufs[1], &bufs[2], &c->offset, &c->length))
      goto done;
    for (int k = 0; k < 3; k++) {
      if (bufs[k] == Py_None) continue;
      if (PyObject_GetBuffer(bufs[k], &c->views[k], PyBUF_SIMPLE) < 0) goto done;
      c->has[k] = 1;
    }
    if (c->offset < 0 || c->length < 0 ||
        (c->has[0] && c->views[0].len < (c->offset + c->length + 7) / 8)) {
      PyErr_SetString(PyExc_ValueError, "a validity bitmap shorter than its array");
      goto done;
    }
  }
  if (nodes.len < ENC_NODE_WIDTH * 8 || ncols < 1 || count > columns[0].length) {
    PyErr_SetString(PyExc_ValueError, "an empty program, or fewer rows than asked for");
    goto done;
  }
  e.nodes = nodes.buf;
  e.node_count = nodes.len / (ENC_NODE_WIDTH * 8);
  e.kids = kids.buf;
  e.kid_count = kids.len / 8;
  e.consts = consts.buf;
  e.consts_len = consts.len;
  e.columns = columns;
  e.column_count = ncols;
  offsets = malloc(((size_t)count + 1) * sizeof(int32_t));
  if (offsets == NULL) {
    PyErr_NoMemory();
    goto done;
  }
  offsets[0] = 0;
  int code = 0;
  Py_ssize_t row = 0;
  Py_BEGIN_ALLOW_THREADS;
  for (; row < count; row++) {
    if (valid(&columns[0], row)) { /* a null row is a null value: no bytes */
      if ((code = put_bytes(&e, prefix.buf, (size_t)prefix.len))) break;
      if ((code = encode_node(&e, 0, row))) break;
    }
    if (e.len > INT32_MAX) { /* Arrow's binary offsets are int32: fastavro's path fails too */
      code = ENC_E_TOO_BIG;
      break;
    }
    offsets[row + 1] = (int32_t)e.len;
  }
  Py_END_ALLOW_THREADS;
  if (code) {
    result = Py_BuildValue("OOni", Py_None, Py_None, row, code);
  } else {
    PyObject *data = PyBytes_FromStringAndSize((const char *)e.out, (Py_ssize_t)e.len);
    PyObject *offs =
        PyBytes_FromStringAndSize((const char *)offsets, (Py_ssize_t)(count + 1) * 4);
    if (data && offs) result = Py_BuildValue("OOni", data, offs, (Py_ssize_t)-1, 0);
    Py_XDECREF(data);
    Py_XDECREF(offs);
  }
done:
  free(offsets);
  free(e.out);
  if (columns) release(columns, ncols);
  PyBuffer_Release(&nodes);
  PyBuffer_Release(&kids);
  PyBuffer_Release(&consts);
  PyBuffer_Release(&prefix);
  return result;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS,
     "encode(nodes, kids, consts, columns, prefix, count) -> (data, offsets, row, code)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_avro_encode",
                                    "Arrow arrays -> Avro records, in C.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__avro_encode(void) { return PyModule_Create(&module); }
