/* kafka_direct._rdkafka_arrow: Consumer.consume, one read of the consumer queue into Arrow
 * buffers. Runs in Spark executors (Python workers).
 *
 * The hot path: the GIL is released while librdkafka delivers records, and each record is
 * touched once to filter the range and once per column to copy it (_arrow_columns.c).
 */
#include "_rdkafka_arrow.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The bytes a record adds to a batch: key and value, and its headers' names and values when the
 * batch carries headers. */
static int64_t record_bytes(const rd_kafka_message_t *m, int headers) {
    int64_t bytes = (int64_t)m->len + (int64_t)m->key_len;
    rd_kafka_headers_t *hdrs = NULL;
    if (headers && rk.message_headers(m, &hdrs) == 0 && hdrs != NULL) {
        size_t c = rk.header_cnt(hdrs), j, size;
        const char *name;
        const void *value;
        for (j = 0; j < c; j++)
            if (rk.header_get_all(hdrs, j, &name, &value, &size) == 0)
                bytes += (int64_t)strlen(name) + (value ? (int64_t)size : 0);
    }
    return bytes;
}

/* One read of the queue into msgs, without the GIL: until max_messages records or events came,
 * max_bytes of records came, an event came (it may end a range, or need the caller), or
 * timeout_s passed. Returns how many came; *failed is set when the call itself failed.
 *
 * After an EOF event the read goes on without waiting, through what is queued already. A pooled
 * consumer that sat at the log end between micro-batches holds an EOF per partition ahead of
 * the records that came since: read alone, that stale EOF looks like a log shorter than the
 * range, and the caller asks the broker for its watermarks, a request that waits behind the
 * consumer's own fetch long-poll (fetch.wait.max.ms) on the same connection. Read together
 * with the records behind it, it is recognised as stale (an EOF followed by records).
 *
 * librdkafka cannot put records back, so the byte budget is kept by taking records in chunks:
 * the first chunk is one record (a record larger than the whole budget is then alone in its
 * batch), and each later one is sized to fill half of what is left of the budget at the mean
 * record size so far, so the chunks shrink as the budget nears and a batch of records of like
 * sizes stops within about one record of it. Each chunk waits what is left of the deadline. */
Py_ssize_t kd_take(rd_kafka_queue_t *queue, rd_kafka_message_t **msgs, Py_ssize_t max_messages,
                   Py_ssize_t max_bytes, double timeout_s, int headers, int *failed) {
    Py_ssize_t got = 0;
    int64_t bytes = 0;
    int event_seen = 0, eof_seen = 0;
    double deadline = now_s() + timeout_s;
    *failed = 0;
    while (got < max_messages && bytes < max_bytes && !event_seen) {
        double left = deadline - now_s();
        int wait_ms = left > 0 && !eof_seen ? (int)(left * 1000.0 + 0.5) : 0;
        Py_ssize_t chunk = max_messages - got;
        Py_ssize_t cap = 1;
        if (got > 0) {
            int64_t mean = bytes / got + 1;
            int64_t fits = (max_bytes - bytes) / mean / 2 + 1;
            cap = fits < 4096 ? (Py_ssize_t)fits : 4096;
        }
        if (chunk > cap) chunk = cap;
        ssize_t n = rk.consume_batch_queue(queue, wait_ms, msgs + got, (size_t)chunk);
        if (n < 0) {
            /* As confluent-kafka's consume() does: the call itself failed. */
            *failed = rk.last_error();
            break;
        }
        if (n == 0) break;
        for (Py_ssize_t i = got; i < got + n; i++) {
            if (msgs[i]->err == ERR_PARTITION_EOF) eof_seen = 1;
            else if (msgs[i]->err) event_seen = 1;
            else bytes += record_bytes(msgs[i], headers);
        }
        got += n;
        if (wait_ms == 0 && n < chunk) break;
    }
    return got;
}

/* consume(partition, nxt, until, max_messages, timeout_s, max_bytes[, headers])
 *
 * One read of the consumer queue, the counterpart of confluent-kafka's consume(n, timeout) plus
 * fetch._split_events and the range filter: waits as kd_take does (max_messages, max_bytes of
 * records, an event, or timeout_s). Returns None if nothing came, else a tuple
 *   (rows, columns, last, beyond, eof, error)
 * rows:    records kept, those with nxt <= offset < until;
 * columns: None if rows == 0, else (key_offsets, key_data, key_validity, value_offsets,
 *          value_data, value_validity, offsets, timestamps_us, timestamp_types) as bytes, and
 *          with headers true a tenth item, the headers' buffers (see fill_headers);
 * last:    offset of the last record taken off the queue (kept or not), or -1;
 * beyond:  whether a record at or past until came;
 * eof:     the log end if the read ended with an EOF event (an EOF followed by records is stale),
 *          -1 for "offset out of range" (after the records queued before it), else None;
 * error:   None, or (code, reason) of any other error event: the caller raises it.
 */
PyObject *kd_consume(Consumer *self, PyObject *args) {
    int partition;
    long long nxt, until;
    Py_ssize_t max_messages, max_bytes;
    double timeout_s;
    int headers = 0;
    if (!PyArg_ParseTuple(args, "iLLndn|p", &partition, &nxt, &until, &max_messages, &timeout_s,
                          &max_bytes, &headers))
        return NULL;
    if (max_messages < 1) max_messages = 1;
    if (max_bytes < 1) max_bytes = 1; /* else nothing would ever be read */
    if ((size_t)max_messages > SIZE_MAX / sizeof(void *)) return PyErr_NoMemory();
    /* (int) of a double beyond INT_MAX is undefined: a day is as good as forever here. */
    if (!(timeout_s <= 86400.0)) timeout_s = timeout_s > 0 ? 86400.0 : 0.0;
    if (!kd_enter(self)) return NULL;
    if ((size_t)max_messages > self->msgs_cap) {
        rd_kafka_message_t **grown =
            PyMem_RawRealloc(self->msgs, sizeof(void *) * (size_t)max_messages);
        if (grown == NULL) {
            self->busy = 0;
            return PyErr_NoMemory();
        }
        self->msgs = grown;
        self->msgs_cap = (size_t)max_messages;
    }
    rd_kafka_message_t **msgs = self->msgs;
    Py_ssize_t got = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    got = kd_take(self->queue, msgs, max_messages, max_bytes, timeout_s, headers, &failed);
    Py_END_ALLOW_THREADS
    if (got == 0) {
        self->busy = 0;
        if (failed) return kd_fail(failed, rk.err2str(failed));
        Py_RETURN_NONE;
    }

    /* One pass: keep in-range records in place (msgs[0..kept)), note events, and destroy
     * everything else at once, so that from here on only msgs[0..kept) is ours to destroy.
     * Records of another partition cannot be queued (one partition is assigned; librdkafka
     * drops outdated ones). */
    Py_ssize_t kept = 0;
    long long last = -1;
    int beyond = 0, have_eof = 0, out_of_range = 0, err_code = 0;
    long long eof = 0;
    char err_reason[512] = "";
    size_t err_len = 0;
    Py_ssize_t i;
    for (i = 0; i < got; i++) {
        rd_kafka_message_t *m = msgs[i];
        if (out_of_range || err_code) {
            rk.message_destroy(m);
            continue;
        }
        if (m->err == 0 && m->partition == partition) {
            last = m->offset;
            have_eof = 0;
            if (m->offset >= until) beyond = 1;
            if (m->offset >= nxt && m->offset < until) {
                msgs[kept++] = m;
                continue;
            }
        } else if (m->err == ERR_PARTITION_EOF) {
            have_eof = 1;
            eof = m->offset;
        } else if (m->err == ERR_AUTO_OFFSET_RESET) {
            out_of_range = 1;
        } else if (m->err == ERR_GROUP_AUTHORIZATION_FAILED) {
            /* The consumer only assigns and never commits, but librdkafka looks its group up:
             * a principal without rights on the executors' group reads on, as the JVM
             * connector's executors (which never contact the group) do. */
        } else if (m->err != 0) {
            err_code = m->err;
            /* An error event's payload is its reason (not NUL-terminated). */
            if (m->payload != NULL && m->len > 0) {
                err_len = m->len < sizeof(err_reason) - 1 ? m->len : sizeof(err_reason) - 1;
                memcpy(err_reason, m->payload, err_len);
            } else {
                const char *why = rk.err2str(m->err);
                snprintf(err_reason, sizeof(err_reason), "%s", why ? why : "");
                err_len = strlen(err_reason);
            }
        }
        rk.message_destroy(m);
    }

    PyObject *columns = NULL, *result = NULL;
    PyObject *ko = NULL, *kd = NULL, *kv = NULL, *vo = NULL, *vd = NULL, *vv = NULL;
    PyObject *offs = NULL, *stamps = NULL, *types = NULL, *hdrs = NULL;
    if (kept > 0 && !err_code) {
        if (kd_fill_binary(msgs, kept, 0, &ko, &kd, &kv) < 0) goto done;
        if (kd_fill_binary(msgs, kept, 1, &vo, &vd, &vv) < 0) goto done;
        offs = PyBytes_FromStringAndSize(NULL, kept * 8);
        stamps = PyBytes_FromStringAndSize(NULL, kept * 8);
        types = PyBytes_FromStringAndSize(NULL, kept * 4);
        if (offs == NULL || stamps == NULL || types == NULL) goto done;
        int64_t *o = (int64_t *)PyBytes_AS_STRING(offs);
        int64_t *ts = (int64_t *)PyBytes_AS_STRING(stamps);
        int32_t *tt = (int32_t *)PyBytes_AS_STRING(types);
        for (i = 0; i < kept; i++) {
            int type = 0;
            o[i] = msgs[i]->offset;
            /* Spark's Kafka schema: microseconds, and librdkafka's timestamp types 0/1/2
             * (not available, create, log append) as Spark's -1/0/1. */
            ts[i] = rk.message_timestamp(msgs[i], &type) * 1000;
            tt[i] = type - 1;
        }
        if (headers) {
            hdrs = kd_fill_headers(msgs, kept);
            if (hdrs == NULL) goto done;
            columns = PyTuple_Pack(10, ko, kd, kv, vo, vd, vv, offs, stamps, types, hdrs);
        } else {
            columns = PyTuple_Pack(9, ko, kd, kv, vo, vd, vv, offs, stamps, types);
        }
        if (columns == NULL) goto done;
    }
    {
        PyObject *eof_obj = out_of_range ? PyLong_FromLong(-1)
                            : have_eof   ? PyLong_FromLongLong(eof)
                                         : Py_NewRef(Py_None);
        PyObject *error = err_code ? Py_BuildValue("iN", err_code, kd_text_n(err_reason, err_len))
                                   : Py_NewRef(Py_None);
        if (eof_obj != NULL && error != NULL) {
            result = Py_BuildValue("nOLOOO", err_code ? (Py_ssize_t)0 : kept,
                                   columns ? columns : Py_None, last, beyond ? Py_True : Py_False,
                                   eof_obj, error);
        }
        Py_XDECREF(eof_obj);
        Py_XDECREF(error);
    }
done:
    for (i = 0; i < kept; i++) rk.message_destroy(msgs[i]);
    self->busy = 0;
    Py_XDECREF(columns);
    Py_XDECREF(ko);
    Py_XDECREF(kd);
    Py_XDECREF(kv);
    Py_XDECREF(vo);
    Py_XDECREF(vd);
    Py_XDECREF(vv);
    Py_XDECREF(offs);
    Py_XDECREF(stamps);
    Py_XDECREF(types);
    Py_XDECREF(hdrs);
    return result;
}
