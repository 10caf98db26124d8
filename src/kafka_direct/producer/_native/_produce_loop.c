/* kafka_direct.producer._rdkafka_produce: Producer.produce, the rows of one Arrow batch into
 * librdkafka. Runs in Spark executors (Python workers).
 *
 * The hot path. Python hands over the batch's buffers (kafka_direct.producer.native): for each
 * column its array offset and length, validity bitmap, offsets and data. Every size is checked
 * against the lengths before the loop, and every value's offsets against its data buffer as it
 * is read, so a malformed batch stops the write with an error instead of a read out of bounds.
 * The loop then runs with the GIL released and makes no Python object:
 *
 * - rows without headers go to librdkafka in runs of up to PRODUCE_RUN records of one topic,
 *   with rd_kafka_produce_batch() (the topic looked up once per run, RD_KAFKA_MSG_F_COPY: the
 *   Arrow buffers do not outlive the call; RD_KAFKA_MSG_F_PARTITION: each record's own
 *   partition, RD_KAFKA_PARTITION_UA for the partitioner);
 * - a row with headers goes alone, with rd_kafka_produceva() and RD_KAFKA_VTYPE_HEADERS (a list
 *   built with rd_kafka_headers_new / rd_kafka_header_add, which the record then owns);
 * - a full queue (RD_KAFKA_RESP_ERR__QUEUE_FULL) makes the loop serve the main queue for
 *   FULL_QUEUE_WAIT_MS and offer the same records again: it never fails the write and never
 *   grows the queue. Records that wait too long fail by kafka.delivery.timeout.ms, and that
 *   failed delivery stops the loop;
 * - every poll_every rows the main queue is served (delivery reports, error events, log lines),
 *   and a failed delivery or a fatal error stops the loop, as the Python path's check does.
 *
 * The records before the row where the loop stops are handed over; Python raises the reason.
 */
#include "_rdkafka_produce.h"

/* Why the loop stopped; Python (native.py) raises the matching error. */
enum {
    STOP_NONE = 0,
    STOP_REFUSED = 1,       /* librdkafka refused a record: code, reason, topic, partition */
    STOP_NULL_TOPIC = 2,    /* a null 'topic' and no 'topic' option */
    STOP_BAD_PARTITION = 3, /* a negative partition: topic, partition */
    STOP_DELIVERY = 4,      /* a delivery failed, or a fatal error: Python raises it */
    STOP_MALFORMED = 5,     /* buffers that do not match their lengths: reason */
    STOP_BAD_HEADER = 6,    /* a null header, or a header with a null key: topic, reason */
    STOP_NO_MEMORY = 7,
};

typedef struct {
    int kind;
    Py_ssize_t row;
    int code;
    int32_t partition;
    const char *topic; /* into a buffer held until the call returns */
    size_t topic_len;
    char reason[200];
} stop_t;

/* One Arrow column's buffers, held (PyObject_GetBuffer) for the call. */
typedef struct {
    int present;
    Py_ssize_t offset, length;
    int wide; /* int64 offsets (large_binary, large_string, large_list) */
    Py_buffer validity, offsets, data;
} col_t;

static const char empty[1] = "";

static int get_buffer(PyObject *obj, Py_buffer *view, int optional, const char *what) {
    memset(view, 0, sizeof(*view));
    if (obj == Py_None && optional) return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: a buffer is required", what);
        return -1;
    }
    return 0;
}

static void release_col(col_t *c) {
    if (c->validity.obj != NULL) PyBuffer_Release(&c->validity);
    if (c->offsets.obj != NULL) PyBuffer_Release(&c->offsets);
    if (c->data.obj != NULL) PyBuffer_Release(&c->data);
    c->present = 0;
}

/* Checks an array's offset and length, and that its validity bitmap covers them. */
static int check_extent(col_t *c, const char *what) {
    if (c->offset < 0 || c->length < 0 || c->offset > PY_SSIZE_T_MAX / 16 - c->length) {
        PyErr_Format(PyExc_ValueError, "%s: offset %zd and length %zd out of range", what,
                     c->offset, c->length);
        return -1;
    }
    if (c->validity.obj != NULL && c->validity.len < (c->offset + c->length + 7) / 8) {
        PyErr_Format(PyExc_ValueError, "%s: validity bitmap of %zd bytes for %zd entries", what,
                     c->validity.len, c->offset + c->length);
        return -1;
    }
    return 0;
}

/* A binary or string column: (offset, length, validity, offsets, data, wide). */
static int parse_binary(PyObject *spec, col_t *c, const char *what) {
    PyObject *validity, *offsets, *data;
    memset(c, 0, sizeof(*c));
    if (spec == Py_None) return 0;
    if (!PyArg_ParseTuple(spec, "nnOOOp", &c->offset, &c->length, &validity, &offsets, &data,
                          &c->wide))
        return -1;
    c->present = 1;
    if (get_buffer(validity, &c->validity, 1, what) < 0 ||
        get_buffer(offsets, &c->offsets, 0, what) < 0 || get_buffer(data, &c->data, 0, what) < 0)
        return -1;
    if (check_extent(c, what) < 0) return -1;
    Py_ssize_t width = c->wide ? 8 : 4;
    if (c->offsets.len / width < c->offset + c->length + 1) {
        PyErr_Format(PyExc_ValueError, "%s: offsets buffer of %zd bytes for %zd entries", what,
                     c->offsets.len, c->offset + c->length);
        return -1;
    }
    return 0;
}

/* An int32 column: (offset, length, validity, data). */
static int parse_int32(PyObject *spec, col_t *c, const char *what) {
    PyObject *validity, *data;
    memset(c, 0, sizeof(*c));
    if (spec == Py_None) return 0;
    if (!PyArg_ParseTuple(spec, "nnOO", &c->offset, &c->length, &validity, &data)) return -1;
    c->present = 1;
    if (get_buffer(validity, &c->validity, 1, what) < 0 ||
        get_buffer(data, &c->data, 0, what) < 0)
        return -1;
    if (check_extent(c, what) < 0) return -1;
    if (c->data.len / 4 < c->offset + c->length) {
        PyErr_Format(PyExc_ValueError, "%s: data buffer of %zd bytes for %zd entries", what,
                     c->data.len, c->offset + c->length);
        return -1;
    }
    return 0;
}

/* Spark's headers, array<struct<key: string, value: binary>>: (offset, length, validity,
 * offsets, wide, entries_offset, entries_length, entries_validity, key, value). The list's
 * offsets index the entries (the struct array); key and value are its children, already sliced
 * to the struct's offset (StructArray.field), so entry j is their element j. */
typedef struct {
    col_t list;    /* validity + offsets; data unused */
    col_t entries; /* the struct array: validity only */
    col_t key, value;
} headers_t;

static int parse_headers(PyObject *spec, headers_t *h) {
    PyObject *validity, *offsets, *evalidity, *key, *value;
    memset(h, 0, sizeof(*h));
    if (spec == Py_None) return 0;
    col_t *l = &h->list, *e = &h->entries;
    if (!PyArg_ParseTuple(spec, "nnOOpnnOOO", &l->offset, &l->length, &validity, &offsets,
                          &l->wide, &e->offset, &e->length, &evalidity, &key, &value))
        return -1;
    l->present = e->present = 1;
    if (get_buffer(validity, &l->validity, 1, "headers") < 0 ||
        get_buffer(offsets, &l->offsets, 0, "headers") < 0 ||
        get_buffer(evalidity, &e->validity, 1, "header entries") < 0)
        return -1;
    if (check_extent(l, "headers") < 0 || check_extent(e, "header entries") < 0) return -1;
    Py_ssize_t width = l->wide ? 8 : 4;
    if (l->offsets.len / width < l->offset + l->length + 1) {
        PyErr_Format(PyExc_ValueError, "headers: offsets buffer of %zd bytes for %zd entries",
                     l->offsets.len, l->offset + l->length);
        return -1;
    }
    if (parse_binary(key, &h->key, "header keys") < 0 ||
        parse_binary(value, &h->value, "header values") < 0)
        return -1;
    if (!h->key.present || !h->value.present || h->key.length < e->length ||
        h->value.length < e->length) {
        PyErr_SetString(PyExc_ValueError, "headers: keys and values must cover every entry");
        return -1;
    }
    return 0;
}

static void release_headers(headers_t *h) {
    release_col(&h->list);
    release_col(&h->entries);
    release_col(&h->key);
    release_col(&h->value);
}

/* --- reading the buffers (no GIL; every read checked) ------------------------------------------ */

static inline int valid_at(const col_t *c, Py_ssize_t i) {
    if (c->validity.obj == NULL) return 1;
    Py_ssize_t b = c->offset + i;
    return (((const uint8_t *)c->validity.buf)[b >> 3] >> (b & 7)) & 1;
}

/* Offsets are read with memcpy: a buffer from Python need not be aligned. */
static inline int64_t offset_at(const col_t *c, Py_ssize_t k) {
    const char *base = (const char *)c->offsets.buf;
    if (c->wide) {
        int64_t v;
        memcpy(&v, base + k * 8, 8);
        return v;
    }
    int32_t v;
    memcpy(&v, base + k * 4, 4);
    return v;
}

/* Value i of a binary column: 1 with its bytes, 0 for null, -1 if its offsets are out of
 * bounds. A value that is empty but not null gets a non-NULL pointer (librdkafka reads NULL as
 * null). */
static inline int binary_at(const col_t *c, Py_ssize_t i, const char **p, size_t *len) {
    if (!valid_at(c, i)) return 0;
    int64_t start = offset_at(c, c->offset + i), end = offset_at(c, c->offset + i + 1);
    if (start < 0 || end < start || end > (int64_t)c->data.len) return -1;
    *p = end > start ? (const char *)c->data.buf + start : empty;
    *len = (size_t)(end - start);
    return 1;
}

static inline int32_t int32_at(const col_t *c, Py_ssize_t i) {
    int32_t v;
    memcpy(&v, (const char *)c->data.buf + (c->offset + i) * 4, 4);
    return v;
}

/* --- producing ------------------------------------------------------------------------------- */

/* The records waiting in self->msgs for one produce_batch() call, all of one topic. */
typedef struct {
    rd_kafka_topic_t *rkt;
    const char *topic;
    size_t topic_len;
    int count;
} run_t;

static int stop_at(stop_t *stop, int kind, Py_ssize_t row) {
    stop->kind = kind;
    stop->row = row;
    return 1;
}

/* Serves the main queue while the queue is full; 1 (and the stop) if a delivery failed. */
static int wait_for_room(Producer *self, Py_ssize_t row, stop_t *stop) {
    atomic_fetch_add_explicit(&self->full_waits, 1, memory_order_relaxed);
    rk.poll(self->rk, FULL_QUEUE_WAIT_MS);
    return kd_delivery_failed(self) ? stop_at(stop, STOP_DELIVERY, row) : 0;
}

static int refused(stop_t *stop, Py_ssize_t row, int code, const char *topic, size_t topic_len,
                   int32_t partition) {
    const char *why = rk.err2str(code);
    /* confluent-kafka's wording for a record produce() refuses: the messages match. */
    snprintf(stop->reason, sizeof(stop->reason), "Unable to produce message: %s",
             why ? why : "");
    stop->code = code;
    stop->topic = topic;
    stop->topic_len = topic_len;
    stop->partition = partition;
    return stop_at(stop, STOP_REFUSED, row);
}

/* Hands the run to librdkafka; 0, or 1 with the stop. Always empties the run. */
static int send_run(Producer *self, run_t *run, stop_t *stop) {
    rd_kafka_message_t *msgs = self->msgs;
    int count = run->count, start = 0;
    run->count = 0;
    while (start < count) {
        for (int j = start; j < count; j++) msgs[j].err = 0;
        rk.produce_batch(run->rkt, RD_KAFKA_PARTITION_UA,
                         RD_KAFKA_MSG_F_COPY | RD_KAFKA_MSG_F_PARTITION, msgs + start,
                         count - start);
        int j = start;
        while (j < count && msgs[j].err == 0) j++;
        if (j == count) return 0;
        /* After a full queue, librdkafka refuses every later record of the call with the same
         * error: records from j on are offered again, in order. */
        if (msgs[j].err == ERR_QUEUE_FULL) {
            if (wait_for_room(self, self->rows[j], stop)) return 1;
            start = j;
            continue;
        }
        return refused(stop, self->rows[j], msgs[j].err, run->topic, run->topic_len,
                       msgs[j].partition);
    }
    return 0;
}

/* One record with headers, which produce_batch() cannot take. The record owns hdrs once
 * librdkafka took it; until then (and on a refusal) they are ours. */
static int send_one(Producer *self, rd_kafka_topic_t *rkt, const char *topic, size_t topic_len,
                    int32_t partition, const char *value, size_t value_len, const char *key,
                    size_t key_len, rd_kafka_headers_t *hdrs, Py_ssize_t row, stop_t *stop) {
    rd_kafka_vu_t vus[6];
    size_t n = 0;
    memset(vus, 0, sizeof(vus));
    vus[n].vtype = RD_KAFKA_VTYPE_RKT;
    vus[n++].u.rkt = rkt;
    vus[n].vtype = RD_KAFKA_VTYPE_PARTITION;
    vus[n++].u.i32 = partition;
    vus[n].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
    vus[n++].u.i = RD_KAFKA_MSG_F_COPY;
    vus[n].vtype = RD_KAFKA_VTYPE_VALUE;
    vus[n].u.mem.ptr = (void *)value;
    vus[n++].u.mem.size = value_len;
    if (key != NULL) {
        vus[n].vtype = RD_KAFKA_VTYPE_KEY;
        vus[n].u.mem.ptr = (void *)key;
        vus[n++].u.mem.size = key_len;
    }
    vus[n].vtype = RD_KAFKA_VTYPE_HEADERS;
    vus[n++].u.headers = hdrs;
    for (;;) {
        rd_kafka_error_t *error = rk.produceva(self->rk, vus, n);
        if (error == NULL) return 0;
        int code = rk.error_code(error);
        rk.error_destroy(error);
        if (code == ERR_QUEUE_FULL) {
            if (!wait_for_room(self, row, stop)) continue;
            rk.headers_destroy(hdrs);
            return 1;
        }
        rk.headers_destroy(hdrs);
        return refused(stop, row, code, topic, topic_len, partition);
    }
}

/* The headers of row i, or NULL (none, or a stop: *stopped then says so). */
static rd_kafka_headers_t *headers_at(const headers_t *h, Py_ssize_t i, Py_ssize_t row,
                                      stop_t *stop, int *stopped) {
    *stopped = 0;
    if (!h->list.present || !valid_at(&h->list, i)) return NULL;
    int64_t start = offset_at(&h->list, h->list.offset + i);
    int64_t end = offset_at(&h->list, h->list.offset + i + 1);
    if (start < 0 || end < start || end > (int64_t)h->entries.length) {
        snprintf(stop->reason, sizeof(stop->reason), "header offsets out of bounds");
        *stopped = stop_at(stop, STOP_MALFORMED, row);
        return NULL;
    }
    if (end == start) return NULL; /* an empty list: no headers, as in the Python path */
    rd_kafka_headers_t *hdrs = rk.headers_new((size_t)(end - start));
    if (hdrs == NULL) {
        *stopped = stop_at(stop, STOP_NO_MEMORY, row);
        return NULL;
    }
    for (int64_t j = start; j < end; j++) {
        const char *k = NULL, *v = NULL;
        size_t klen = 0, vlen = 0;
        int has_key = valid_at(&h->entries, (Py_ssize_t)j)
                          ? binary_at(&h->key, (Py_ssize_t)j, &k, &klen)
                          : 0;
        int has_value = has_key > 0 ? binary_at(&h->value, (Py_ssize_t)j, &v, &vlen) : 0;
        if (has_key < 0 || has_value < 0) {
            snprintf(stop->reason, sizeof(stop->reason), "header offsets out of bounds");
            *stopped = stop_at(stop, STOP_MALFORMED, row);
        } else if (has_key == 0) {
            snprintf(stop->reason, sizeof(stop->reason), "%s",
                     valid_at(&h->entries, (Py_ssize_t)j) ? "a header with a null key"
                                                          : "a null header");
            *stopped = stop_at(stop, STOP_BAD_HEADER, row);
        }
        if (*stopped) {
            rk.headers_destroy(hdrs);
            return NULL;
        }
        /* A null value stays null (NULL, 0); an empty one is empty. */
        rk.header_add(hdrs, k, (ssize_t)klen, has_value ? v : NULL, has_value ? (ssize_t)vlen : 0);
    }
    return hdrs;
}

typedef struct {
    Py_ssize_t rows, poll_every;
    col_t value, key, topic_col, partition;
    headers_t headers;
    const char *topic; /* the 'topic' option (UTF-8 of a str the caller holds), or NULL */
    Py_ssize_t topic_len;
} batch_t;

/* The loop, with the GIL released (see the top of the file). 0 when every row was handed
 * over, else 1 with the stop. */
static int produce_rows(Producer *self, const batch_t *b, stop_t *stop) {
    run_t run = {NULL, NULL, 0, 0};
    rd_kafka_topic_t *fixed = NULL;
    Py_ssize_t since_poll = 0;
    if (b->topic != NULL) {
        int err = 0;
        fixed = kd_topic(self, b->topic, (size_t)b->topic_len, &err);
        if (fixed == NULL) {
            if (err == -1) return stop_at(stop, STOP_NO_MEMORY, 0);
            return refused(stop, 0, err, b->topic, (size_t)b->topic_len, RD_KAFKA_PARTITION_UA);
        }
    }
    for (Py_ssize_t i = 0; i < b->rows; i++) {
        rd_kafka_topic_t *rkt = fixed;
        const char *topic = b->topic;
        size_t topic_len = (size_t)b->topic_len;
        if (fixed == NULL) {
            int got = binary_at(&b->topic_col, i, &topic, &topic_len);
            if (got <= 0) {
                if (send_run(self, &run, stop)) return 1;
                if (got == 0) return stop_at(stop, STOP_NULL_TOPIC, i);
                snprintf(stop->reason, sizeof(stop->reason), "topic offsets out of bounds");
                return stop_at(stop, STOP_MALFORMED, i);
            }
            if (run.count > 0 && run.topic_len == topic_len &&
                memcmp(run.topic, topic, topic_len) == 0) {
                rkt = run.rkt;
            } else {
                int err = 0;
                rkt = kd_topic(self, topic, topic_len, &err);
                if (rkt == NULL) {
                    if (send_run(self, &run, stop)) return 1;
                    if (err == -1) return stop_at(stop, STOP_NO_MEMORY, i);
                    return refused(stop, i, err, topic, topic_len, RD_KAFKA_PARTITION_UA);
                }
            }
        }
        int32_t partition = RD_KAFKA_PARTITION_UA;
        if (b->partition.present && valid_at(&b->partition, i)) {
            partition = int32_at(&b->partition, i);
            if (partition < 0) {
                if (send_run(self, &run, stop)) return 1;
                stop->topic = topic;
                stop->topic_len = topic_len;
                stop->partition = partition;
                return stop_at(stop, STOP_BAD_PARTITION, i);
            }
        }
        const char *value = NULL, *key = NULL;
        size_t value_len = 0, key_len = 0;
        int has_value = binary_at(&b->value, i, &value, &value_len);
        int has_key = b->key.present ? binary_at(&b->key, i, &key, &key_len) : 0;
        if (has_value < 0 || has_key < 0) {
            if (send_run(self, &run, stop)) return 1;
            snprintf(stop->reason, sizeof(stop->reason), "%s offsets out of bounds",
                     has_value < 0 ? "value" : "key");
            return stop_at(stop, STOP_MALFORMED, i);
        }
        if (!has_value) value = NULL; /* a tombstone */
        if (!has_key) key = NULL;
        int stopped = 0;
        rd_kafka_headers_t *hdrs = headers_at(&b->headers, i, i, stop, &stopped);
        if (stopped) {
            stop_t why = *stop;
            if (send_run(self, &run, stop)) return 1;
            why.topic = topic;
            why.topic_len = topic_len;
            *stop = why;
            return 1;
        }
        if (hdrs != NULL) {
            if (send_run(self, &run, stop)) {
                rk.headers_destroy(hdrs);
                return 1;
            }
            if (send_one(self, rkt, topic, topic_len, partition, value, value_len, key, key_len,
                         hdrs, i, stop))
                return 1;
        } else {
            if (run.count == PRODUCE_RUN || (run.count > 0 && run.rkt != rkt)) {
                if (send_run(self, &run, stop)) return 1;
            }
            if (run.count == 0) {
                run.rkt = rkt;
                run.topic = topic;
                run.topic_len = topic_len;
            }
            rd_kafka_message_t *m = &self->msgs[run.count];
            memset(m, 0, sizeof(*m));
            m->partition = partition;
            m->payload = (void *)value;
            m->len = value_len;
            m->key = (void *)key;
            m->key_len = key_len;
            self->rows[run.count++] = i;
        }
        if (++since_poll >= b->poll_every) {
            since_poll = 0;
            if (send_run(self, &run, stop)) return 1;
            rk.poll(self->rk, 0);
            if (kd_delivery_failed(self)) return stop_at(stop, STOP_DELIVERY, i + 1);
        }
    }
    if (send_run(self, &run, stop)) return 1;
    rk.poll(self->rk, 0);
    return 0;
}

/* produce(rows, value, key, topic, topic_column, partition, headers, poll_every)
 *
 * rows:         the batch's row count;
 * value, key, topic_column: None or (offset, length, validity, offsets, data, wide), the
 *               buffers of a binary or string column (wide: int64 offsets);
 * topic:        the 'topic' option (every record's topic), or None for topic_column;
 * partition:    None or (offset, length, validity, data) of an int32 column;
 * headers:      None or (offset, length, validity, offsets, wide, entries_offset,
 *               entries_length, entries_validity, key, value), see parse_headers;
 * poll_every:   rows between two polls of the main queue.
 *
 * Returns None when every row was handed to librdkafka, else why it stopped, after the rows
 * before `row` were handed over:
 *   (kind, row, code, reason, topic, partition)  (see the STOP_ kinds above)
 */
PyObject *kd_produce(Producer *self, PyObject *args) {
    PyObject *value, *key, *topic, *topic_col, *partition, *headers;
    batch_t b;
    memset(&b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "nOOOOOOn", &b.rows, &value, &key, &topic, &topic_col,
                          &partition, &headers, &b.poll_every))
        return NULL;
    if (b.rows < 0) {
        PyErr_SetString(PyExc_ValueError, "rows must be >= 0");
        return NULL;
    }
    if (b.poll_every < 1) b.poll_every = 1;
    PyObject *result = NULL;
    if (topic != Py_None) {
        b.topic = PyUnicode_AsUTF8AndSize(topic, &b.topic_len);
        if (b.topic == NULL) return NULL;
    }
    if (parse_binary(value, &b.value, "value") < 0 || parse_binary(key, &b.key, "key") < 0 ||
        parse_binary(topic_col, &b.topic_col, "topic") < 0 ||
        parse_int32(partition, &b.partition, "partition") < 0 ||
        parse_headers(headers, &b.headers) < 0)
        goto done;
    if (!b.value.present || (b.topic == NULL && !b.topic_col.present)) {
        PyErr_SetString(PyExc_ValueError, "a value column, and a topic or a topic column");
        goto done;
    }
    /* Every column covers every row. */
    const col_t *cols[] = {&b.value, &b.key, &b.topic_col, &b.partition, &b.headers.list};
    for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++) {
        if (cols[c]->present && cols[c]->length < b.rows) {
            PyErr_Format(PyExc_ValueError, "a column of %zd rows in a batch of %zd",
                         cols[c]->length, b.rows);
            goto done;
        }
    }
    if (!kd_producer_enter(self)) goto done;
    stop_t stop;
    memset(&stop, 0, sizeof(stop));
    int stopped;
    Py_BEGIN_ALLOW_THREADS
    stopped = produce_rows(self, &b, &stop);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (!stopped) {
        result = Py_NewRef(Py_None);
    } else if (stop.kind == STOP_NO_MEMORY) {
        PyErr_NoMemory();
    } else {
        result = Py_BuildValue("iniNNi", stop.kind, stop.row, stop.code, kd_text(stop.reason),
                               kd_text_n(stop.topic, stop.topic ? stop.topic_len : 0),
                               (int)stop.partition);
    }
done:
    release_col(&b.value);
    release_col(&b.key);
    release_col(&b.topic_col);
    release_col(&b.partition);
    release_headers(&b.headers);
    return result;
}
