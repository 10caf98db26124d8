/* kafka_direct._rdkafka_arrow: Consumer.consume_many and Consumer.assign_many, the reads of a
 * packed task (several topic-partitions assigned to one consumer). Runs in Spark executors
 * (Python workers).
 *
 * librdkafka fetches all assigned partitions of a broker in one request and queues their
 * records on the one consumer queue, a partition's records in order. consume_many reads that
 * queue once, like consume() (_rdkafka_consume.c) does for one partition, but keeps each record
 * against its own partition's range, and reports per partition what the read learned.
 */
#include "_rdkafka_arrow.h"

/* assign_many([(topic, partition, offset), ...]): assign exactly these partitions. */
PyObject *kd_assign_many(Consumer *self, PyObject *args) {
    PyObject *items;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &items)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    rd_kafka_topic_partition_list_t *list = rk.tpl_new(n > 0 ? (int)n : 1);
    if (list == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *topic;
        int partition;
        long long offset;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(items, i), "siL", &topic, &partition, &offset)) {
            rk.tpl_destroy(list);
            return NULL;
        }
        rd_kafka_topic_partition_t *tp = rk.tpl_add(list, topic, partition);
        if (tp == NULL) {
            rk.tpl_destroy(list);
            return PyErr_NoMemory();
        }
        tp->offset = offset;
    }
    if (!kd_enter(self)) {
        rk.tpl_destroy(list);
        return NULL;
    }
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = rk.assign(self->rk, list);
    Py_END_ALLOW_THREADS
    rk.tpl_destroy(list);
    self->busy = 0;
    if (err != 0) return kd_fail(err, rk.err2str(err));
    Py_RETURN_NONE;
}

/* What one read learned of one range (a slot). */
typedef struct {
    long long last;
    long long eof;
    char touched, beyond, have_eof, out_of_range;
} slot_news_t;

/* consume_many(index, bounds, max_messages, timeout_s, max_bytes[, headers])
 *
 * index:  {(topic, partition): slot}, the ranges being read;
 * bounds: bytes of int64 pairs (nxt, until) per slot: keep records nxt <= offset < until.
 * Waits as consume() does (kd_take). Returns None if nothing came, else
 *   (rows, columns, slots, news, error)
 * rows, columns: as consume() (columns None when rows == 0);
 * slots:  None, or bytes of one int32 per row: the slot of its range;
 * news:   [(slot, last, beyond, eof)] for each slot the read touched, with consume()'s meaning
 *         of last, beyond and eof (eof -1: out of range; None: no trailing EOF);
 * error:  None, or (code, reason) of an error event not tied to an assigned partition.
 */
PyObject *kd_consume_many(Consumer *self, PyObject *args) {
    PyObject *index;
    Py_buffer bounds;
    Py_ssize_t max_messages, max_bytes;
    double timeout_s;
    int headers = 0;
    if (!PyArg_ParseTuple(args, "O!y*ndn|p", &PyDict_Type, &index, &bounds, &max_messages,
                          &timeout_s, &max_bytes, &headers))
        return NULL;
    Py_ssize_t n_slots = bounds.len / (Py_ssize_t)(2 * sizeof(int64_t));
    const int64_t *bound = (const int64_t *)bounds.buf;
    if (rk.topic_name == NULL) {
        PyBuffer_Release(&bounds);
        return kd_fail(ERR_INVALID_ARG, "this librdkafka has no rd_kafka_topic_name");
    }
    if (max_messages < 1) max_messages = 1;
    if (max_bytes < 1) max_bytes = 1;
    if ((size_t)max_messages > SIZE_MAX / sizeof(void *)) {
        PyBuffer_Release(&bounds);
        return PyErr_NoMemory();
    }
    if (!(timeout_s <= 86400.0)) timeout_s = timeout_s > 0 ? 86400.0 : 0.0;
    slot_news_t *news = PyMem_Calloc(n_slots > 0 ? (size_t)n_slots : 1, sizeof(slot_news_t));
    if (news == NULL) {
        PyBuffer_Release(&bounds);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n_slots; k++) news[k].last = -1;
    if (!kd_enter(self)) {
        PyMem_Free(news);
        PyBuffer_Release(&bounds);
        return NULL;
    }
    if ((size_t)max_messages > self->msgs_cap) {
        rd_kafka_message_t **grown =
            PyMem_RawRealloc(self->msgs, sizeof(void *) * (size_t)max_messages);
        if (grown == NULL) {
            self->busy = 0;
            PyMem_Free(news);
            PyBuffer_Release(&bounds);
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
    PyObject *result = NULL, *columns = NULL, *slots = NULL, *news_list = NULL;
    PyObject *ko = NULL, *kd = NULL, *kv = NULL, *vo = NULL, *vd = NULL, *vv = NULL;
    PyObject *offs = NULL, *stamps = NULL, *types = NULL, *hdrs = NULL;
    Py_ssize_t kept = 0, i;
    if (got == 0) {
        self->busy = 0;
        PyMem_Free(news);
        PyBuffer_Release(&bounds);
        if (failed) return kd_fail(failed, rk.err2str(failed));
        Py_RETURN_NONE;
    }
    /* The slot of each kept record, parallel to msgs[0..kept). */
    int32_t *kept_slot = PyMem_Malloc(sizeof(int32_t) * (size_t)got);
    if (kept_slot == NULL) {
        for (i = 0; i < got; i++) rk.message_destroy(msgs[i]);
        self->busy = 0;
        PyMem_Free(news);
        PyBuffer_Release(&bounds);
        return PyErr_NoMemory();
    }
    /* One pass, as in consume(): keep in-range records in place, note events per slot, and
     * destroy everything else at once. A partition's records come in runs, so the slot of the
     * previous record is tried before the dictionary. */
    const void *run_rkt = NULL;
    int32_t run_partition = -1;
    Py_ssize_t run_slot = -1;
    int err_code = 0, lookup_failed = 0;
    char err_reason[512] = "";
    size_t err_len = 0;
    for (i = 0; i < got; i++) {
        rd_kafka_message_t *m = msgs[i];
        if (err_code || lookup_failed) {
            rk.message_destroy(m);
            continue;
        }
        Py_ssize_t slot = -1;
        if (m->rkt != NULL) {
            if ((const void *)m->rkt == run_rkt && m->partition == run_partition) {
                slot = run_slot;
            } else {
                PyObject *key = Py_BuildValue("(si)", rk.topic_name(m->rkt), (int)m->partition);
                PyObject *found = key ? PyDict_GetItemWithError(index, key) : NULL;
                Py_XDECREF(key);
                if (found != NULL) {
                    slot = PyLong_AsSsize_t(found);
                    if (slot < 0 || slot >= n_slots) slot = -1;
                }
                if (PyErr_Occurred()) {
                    lookup_failed = 1;
                    rk.message_destroy(m);
                    continue;
                }
                run_rkt = m->rkt;
                run_partition = m->partition;
                run_slot = slot;
            }
        }
        slot_news_t *s = slot >= 0 ? &news[slot] : NULL;
        if (m->err == 0) {
            if (s != NULL && !s->out_of_range) {
                int64_t nxt = bound[2 * slot], until = bound[2 * slot + 1];
                s->touched = 1;
                s->last = m->offset;
                s->have_eof = 0;
                if (m->offset >= until) s->beyond = 1;
                if (m->offset >= nxt && m->offset < until) {
                    kept_slot[kept] = (int32_t)slot;
                    msgs[kept++] = m;
                    continue;
                }
            }
        } else if (m->err == ERR_PARTITION_EOF) {
            if (s != NULL) {
                s->touched = 1;
                s->have_eof = 1;
                s->eof = m->offset;
            }
        } else if (m->err == ERR_AUTO_OFFSET_RESET && s != NULL) {
            s->touched = 1;
            s->out_of_range = 1;
        } else if (m->err == ERR_GROUP_AUTHORIZATION_FAILED) {
            /* The group lookup of an assign-only consumer (see _rdkafka_consume.c). */
        } else {
            err_code = m->err;
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
    if (lookup_failed) goto done;
    if (kept > 0 && !err_code) {
        if (kd_fill_binary(msgs, kept, 0, &ko, &kd, &kv) < 0) goto done;
        if (kd_fill_binary(msgs, kept, 1, &vo, &vd, &vv) < 0) goto done;
        offs = PyBytes_FromStringAndSize(NULL, kept * 8);
        stamps = PyBytes_FromStringAndSize(NULL, kept * 8);
        types = PyBytes_FromStringAndSize(NULL, kept * 4);
        slots = PyBytes_FromStringAndSize((const char *)kept_slot, kept * 4);
        if (offs == NULL || stamps == NULL || types == NULL || slots == NULL) goto done;
        int64_t *o = (int64_t *)PyBytes_AS_STRING(offs);
        int64_t *ts = (int64_t *)PyBytes_AS_STRING(stamps);
        int32_t *tt = (int32_t *)PyBytes_AS_STRING(types);
        for (i = 0; i < kept; i++) {
            int type = 0;
            o[i] = msgs[i]->offset;
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
    news_list = PyList_New(0);
    if (news_list == NULL) goto done;
    for (i = 0; i < n_slots; i++) {
        slot_news_t *s = &news[i];
        if (!s->touched) continue;
        PyObject *item;
        if (s->out_of_range) {
            item = Py_BuildValue("nLOi", i, s->last, s->beyond ? Py_True : Py_False, -1);
        } else if (s->have_eof) {
            item = Py_BuildValue("nLOL", i, s->last, s->beyond ? Py_True : Py_False, s->eof);
        } else {
            item = Py_BuildValue("nLOO", i, s->last, s->beyond ? Py_True : Py_False, Py_None);
        }
        if (item == NULL || PyList_Append(news_list, item) < 0) {
            Py_XDECREF(item);
            goto done;
        }
        Py_DECREF(item);
    }
    {
        PyObject *error = err_code ? Py_BuildValue("iN", err_code, kd_text_n(err_reason, err_len))
                                   : Py_NewRef(Py_None);
        if (error != NULL) {
            result = Py_BuildValue("nOOOO", err_code ? (Py_ssize_t)0 : kept,
                                   columns ? columns : Py_None, slots ? slots : Py_None,
                                   news_list, error);
        }
        Py_XDECREF(error);
    }
done:
    for (i = 0; i < kept; i++) rk.message_destroy(msgs[i]);
    self->busy = 0;
    PyMem_Free(kept_slot);
    PyMem_Free(news);
    PyBuffer_Release(&bounds);
    Py_XDECREF(news_list);
    Py_XDECREF(columns);
    Py_XDECREF(slots);
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
