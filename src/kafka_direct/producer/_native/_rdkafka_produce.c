/* kafka_direct.producer._rdkafka_produce: Arrow buffers straight into librdkafka.
 *
 * Runs in Spark executors (Python workers). Optional: when it is not built, or librdkafka cannot
 * be found, kafka_direct writes through confluent-kafka's Producer instead (same records:
 * kafka_direct.producer.batch_producer is the reference implementation).
 *
 * Why it exists: confluent-kafka's produce() takes one Python call per record, with its
 * arguments parsed from Python objects (topic, value, key, partition, headers), and the sink's
 * Python path first turns each Arrow column into a list of Python objects. On 100-byte records
 * that is most of a writer's CPU. Here the rows of a whole Arrow batch go to librdkafka in one
 * call: keys, values, topics, partitions and headers are read from the batch's buffers
 * (_produce_loop.c), with no Python object per record.
 *
 * librdkafka is not linked at build time: like the consumer's extension, this one resolves the
 * librdkafka that confluent-kafka loaded at run time, with the same code (src/kafka_direct/
 * _native/, _rdkafka_abi.h). The handle is its own rd_kafka_t.
 *
 * This unit holds the Producer type (all but produce, in _produce_loop.c) and the module:
 *
 * - Delivery reports: delivery.report.only.error=true, so a record that was delivered costs no
 *   report at all; a failed one reaches on_delivery(), which counts it and keeps the first
 *   (topic, partition, error), for Python to raise (delivery_error()).
 * - Error events and log lines: the shared callbacks (_client_events.c). The handle's log queue
 *   is forwarded to the main queue, which poll(), flush() and the produce loop serve (with the
 *   GIL released), so librdkafka's lines reach Python logging, never the worker's stderr.
 * - Fatal errors (an idempotent producer whose sequence the broker lost): fatal_error() says
 *   so, and Python never uses the producer again.
 * - A Producer is used by one thread at a time (the producer pool lends it exclusively): a second
 *   thread gets an error. In a forked child, the parent's handle is never used nor destroyed.
 */
#include "_rdkafka_produce.h"

/* librdkafka's dr_msg_cb: called where the main queue is served (poll, flush, the produce
 * loop), with the GIL released; never touches Python. With delivery.report.only.error only
 * failures come. */
static void on_delivery(rd_kafka_t *Py_UNUSED(handle), const rd_kafka_message_t *m,
                        void *opaque) {
    if (m->err == 0) return;
    pstate_t *st = (pstate_t *)opaque;
    pthread_mutex_lock(&st->events.lock);
    if (st->dr_failed++ == 0) {
        const char *topic = m->rkt != NULL ? rk.topic_name(m->rkt) : NULL;
        const char *reason = rk.err2str(m->err);
        st->dr_code = m->err;
        st->dr_partition = m->partition;
        snprintf(st->dr_topic, sizeof(st->dr_topic), "%s", topic ? topic : "");
        snprintf(st->dr_reason, sizeof(st->dr_reason), "%s", reason ? reason : "");
        atomic_store_explicit(&st->dr_failed_any, 1, memory_order_release);
    }
    pthread_mutex_unlock(&st->events.lock);
}

/* Whether a delivery failed or the producer hit a fatal error: the produce loop stops then.
 * Needs no GIL. */
int kd_delivery_failed(Producer *self) {
    return atomic_load_explicit(&self->state->dr_failed_any, memory_order_acquire) ||
           rk.fatal_error(self->rk, NULL, 0) != 0;
}

static void drop_topics(Producer *self) {
    for (int i = 0; i < self->ntopics; i++) {
        rk.topic_destroy(self->topics[i].rkt);
        PyMem_RawFree(self->topics[i].name);
    }
    self->ntopics = 0;
}

/* The handle of topic `name` (len bytes, not NUL-terminated), made once and kept. NULL with
 * *err set if librdkafka refuses the name. Needs no GIL (PyMem_Raw is thread-safe). */
rd_kafka_topic_t *kd_topic(Producer *self, const char *name, size_t len, int *err) {
    for (int i = 0; i < self->ntopics; i++) {
        topic_entry_t *t = &self->topics[i];
        if (t->len == len && memcmp(t->name, name, len) == 0) return t->rkt;
    }
    if (memchr(name, '\0', len) != NULL) {
        *err = ERR_INVALID_ARG;
        return NULL;
    }
    /* Beyond MAX_TOPICS distinct topics, start over: a handle only holds librdkafka's
     * reference for us; queued records hold their own. */
    if (self->ntopics == MAX_TOPICS) drop_topics(self);
    char *copy = PyMem_RawMalloc(len + 1);
    if (copy == NULL) {
        *err = -1; /* no memory */
        return NULL;
    }
    memcpy(copy, name, len);
    copy[len] = '\0';
    rd_kafka_topic_t *rkt = rk.topic_new(self->rk, copy, NULL);
    if (rkt == NULL) {
        *err = rk.last_error();
        if (*err == 0) *err = ERR_INVALID_ARG;
        PyMem_RawFree(copy);
        return NULL;
    }
    self->topics[self->ntopics++] = (topic_entry_t){copy, len, rkt};
    return rkt;
}

static void Producer_release(Producer *self) {
    if (self->rk == NULL) return;
    rd_kafka_t *handle = self->rk;
    self->rk = NULL;
    /* In a forked child the handle is the parent's: destroying it would wait for threads that
     * do not exist here, so it is left alone (the memory is the child's to lose). */
    if (self->pid != getpid()) {
        self->ntopics = 0;
        return;
    }
    drop_topics(self);
    /* Records still queued are failed (and their reports dropped) by the destroy: callers
     * flush or purge first. */
    Py_BEGIN_ALLOW_THREADS
    rk.destroy(handle);
    Py_END_ALLOW_THREADS
}

static void Producer_dealloc(Producer *self) {
    /* Never busy here: a running method holds a reference to self. */
    Producer_release(self);
    /* In a forked child the parent's librdkafka threads may have held the lock at fork time:
     * the state is left with the handle. */
    if (self->state != NULL && self->pid == getpid()) {
        kd_events_destroy(&self->state->events);
        PyMem_RawFree(self->state);
    }
    PyMem_RawFree(self->msgs);
    PyMem_RawFree(self->rows);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Producer(config, route_logs=True): config is librdkafka's settings, str: str. The producer
 * owns delivery.report.only.error (true) and the dr_msg_cb. route_logs false (or a librdkafka
 * without the log queue API) gives the fallback: log_level 0. */
static int Producer_init(Producer *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"config", "route_logs", NULL};
    PyObject *config;
    int route_logs = 1;
    char errstr[512] = "";
    if (!rk_loaded) {
        PyErr_SetString(PyExc_RuntimeError, "librdkafka is not loaded: call load() first");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|p", kwlist, &PyDict_Type, &config,
                                     &route_logs))
        return -1;
    if (self->rk != NULL || self->busy || self->state != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Producer already initialised");
        return -1;
    }
    self->pid = getpid();
    self->msgs = PyMem_RawCalloc(PRODUCE_RUN, sizeof(rd_kafka_message_t));
    self->rows = PyMem_RawCalloc(PRODUCE_RUN, sizeof(Py_ssize_t));
    pstate_t *state = PyMem_RawCalloc(1, sizeof(pstate_t));
    if (self->msgs == NULL || self->rows == NULL || state == NULL) {
        PyMem_RawFree(state);
        PyErr_NoMemory();
        return -1;
    }
    if (kd_events_init(&state->events) < 0) {
        PyMem_RawFree(state);
        return -1;
    }
    atomic_init(&state->dr_failed_any, 0);
    self->state = state;
    self->routes_logs = route_logs && kd_logs_routable();
    rd_kafka_conf_t *conf = kd_conf_new(config, self->routes_logs, state);
    if (conf == NULL) return -1;
    /* After the user's settings: the sink owns delivery reports (config/sink.py refuses the
     * option), and only failures need one. */
    if (rk.conf_set(conf, "delivery.report.only.error", "true", errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
        rk.conf_destroy(conf);
        kd_fail(ERR_INVALID_ARG, errstr);
        return -1;
    }
    rk.conf_set_dr_msg_cb(conf, on_delivery);
    /* On success rd_kafka_new owns conf; on failure it is still ours. */
    rd_kafka_t *handle = rk.new_(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (handle == NULL) {
        rk.conf_destroy(conf);
        kd_fail(ERR_INVALID_ARG, errstr);
        return -1;
    }
    self->rk = handle;
    /* Log lines, queued since rd_kafka_new, then follow the main queue, which poll() serves.
     * Failing here would leave them queued where nothing serves them, growing. */
    int err;
    if (self->routes_logs && (err = kd_route_logs(handle)) != 0) {
        Producer_release(self);
        kd_fail(err, "cannot send librdkafka's log lines to the main queue");
        return -1;
    }
    return 0;
}

/* Marks the producer busy for a call that releases the GIL; 0 with an exception if it cannot. */
int kd_producer_enter(Producer *self) {
    if (self->rk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the producer is closed");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the producer is in use by another thread");
        return 0;
    }
    if (self->pid != getpid()) {
        PyErr_SetString(PyExc_RuntimeError, "the producer was created before fork()");
        return 0;
    }
    self->busy = 1;
    return 1;
}

/* Milliseconds for librdkafka from seconds: (int) of a double beyond INT_MAX is undefined, and
 * a day is as good as forever here. */
static int to_ms(double timeout_s) {
    if (!(timeout_s > 0)) return 0;
    if (timeout_s > 86400.0) timeout_s = 86400.0;
    return (int)(timeout_s * 1000.0 + 0.5);
}

/* poll(timeout_s) -> events served: delivery reports, error events and log lines. */
static PyObject *Producer_poll(Producer *self, PyObject *args) {
    double timeout_s;
    if (!PyArg_ParseTuple(args, "d", &timeout_s)) return NULL;
    if (!kd_producer_enter(self)) return NULL;
    int ms = to_ms(timeout_s), served;
    Py_BEGIN_ALLOW_THREADS
    served = rk.poll(self->rk, ms);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return PyLong_FromLong(served);
}

/* flush(timeout_s) -> records not yet delivered (0 when every record was acknowledged or
 * failed, its failure then reported). */
static PyObject *Producer_flush(Producer *self, PyObject *args) {
    double timeout_s;
    if (!PyArg_ParseTuple(args, "d", &timeout_s)) return NULL;
    if (!kd_producer_enter(self)) return NULL;
    int ms = to_ms(timeout_s), left;
    Py_BEGIN_ALLOW_THREADS
    rk.flush(self->rk, ms);
    left = rk.outq_len(self->rk);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return PyLong_FromLong(left);
}

/* purge(): drop the records not yet delivered, queued or in flight; each gets a failed
 * delivery report (served by the next poll or flush). Waits only for librdkafka's threads to
 * drop them, never for the broker. */
static PyObject *Producer_purge(Producer *self, PyObject *Py_UNUSED(unused)) {
    if (!kd_producer_enter(self)) return NULL;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = rk.purge(self->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (err != 0) return kd_fail(err, rk.err2str(err));
    Py_RETURN_NONE;
}

static PyObject *Producer_outq_len(Producer *self, PyObject *Py_UNUSED(unused)) {
    if (self->rk == NULL || self->pid != getpid()) return PyLong_FromLong(0);
    return PyLong_FromLong(rk.outq_len(self->rk));
}

/* None, or (failed, code, reason, topic, partition): how many records failed, and the first
 * failure (partition -1: none was assigned yet). */
static PyObject *Producer_delivery_error(Producer *self, PyObject *Py_UNUSED(unused)) {
    pstate_t *st = self->state;
    if (st == NULL || !atomic_load_explicit(&st->dr_failed_any, memory_order_acquire) ||
        self->pid != getpid())
        Py_RETURN_NONE;
    long failed;
    int code;
    int32_t partition;
    char topic[sizeof(st->dr_topic)], reason[sizeof(st->dr_reason)];
    pthread_mutex_lock(&st->events.lock);
    failed = st->dr_failed;
    code = st->dr_code;
    partition = st->dr_partition;
    memcpy(topic, st->dr_topic, sizeof(topic));
    memcpy(reason, st->dr_reason, sizeof(reason));
    pthread_mutex_unlock(&st->events.lock);
    return Py_BuildValue("liNNi", failed, code, kd_text(reason), kd_text(topic), (int)partition);
}

/* None, or (code, reason) of the fatal error that made the producer unusable. */
static PyObject *Producer_fatal_error(Producer *self, PyObject *Py_UNUSED(unused)) {
    char reason[512] = "";
    if (self->rk == NULL || self->pid != getpid()) Py_RETURN_NONE;
    int code = rk.fatal_error(self->rk, reason, sizeof(reason));
    if (code == 0) Py_RETURN_NONE;
    return Py_BuildValue("iN", code, kd_text(reason));
}

/* What the callbacks left since the last call: see kd_events_take(). None in a forked child,
 * where the lock may have been held by one of the parent's threads at fork time. */
static PyObject *Producer_take_events(Producer *self, PyObject *Py_UNUSED(unused)) {
    if (self->state == NULL || self->pid != getpid()) Py_RETURN_NONE;
    return kd_events_take(&self->state->events);
}

static PyObject *Producer_close(Producer *self, PyObject *Py_UNUSED(unused)) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the producer is in use by another thread");
        return NULL;
    }
    Producer_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef Producer_methods[] = {
    {"produce", (PyCFunction)kd_produce, METH_VARARGS,
     "produce(rows, value, key, topic, topic_column, partition, headers, poll_every): hand "
     "the rows of an Arrow batch to librdkafka; see _produce_loop.c."},
    {"poll", (PyCFunction)Producer_poll, METH_VARARGS,
     "poll(timeout_s) -> events served (delivery reports, error events, log lines)."},
    {"flush", (PyCFunction)Producer_flush, METH_VARARGS,
     "flush(timeout_s) -> records not yet delivered."},
    {"purge", (PyCFunction)Producer_purge, METH_NOARGS,
     "Drop the records not yet delivered, queued or in flight."},
    {"outq_len", (PyCFunction)Producer_outq_len, METH_NOARGS,
     "Records (and requests) not yet delivered."},
    {"delivery_error", (PyCFunction)Producer_delivery_error, METH_NOARGS,
     "None, or (failed, code, reason, topic, partition): failed records and the first."},
    {"fatal_error", (PyCFunction)Producer_fatal_error, METH_NOARGS,
     "None, or (code, reason) of the fatal error that made the producer unusable."},
    {"take_events", (PyCFunction)Producer_take_events, METH_NOARGS,
     "None if nothing came since the last call, else (errors, logs, dropped, dropped_worst): "
     "[(code, reason, fatal)], [(level, facility, line)], lines not kept and their worst "
     "level."},
    {"close", (PyCFunction)Producer_close, METH_NOARGS,
     "Destroy the producer (idempotent; refused while another thread uses it); records still "
     "queued are dropped: flush or purge first."},
    {NULL, NULL, 0, NULL},
};

static PyObject *Producer_routes_logs(Producer *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->routes_logs);
}

static PyObject *Producer_full_waits(Producer *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLong(atomic_load_explicit(&self->full_waits, memory_order_relaxed));
}

static PyGetSetDef Producer_getset[] = {
    {"routes_logs", (getter)Producer_routes_logs, NULL,
     "Whether log lines come to take_events() (else the handle runs with log_level 0).", NULL},
    {"full_waits", (getter)Producer_full_waits, NULL,
     "How often produce() found librdkafka's queue full and waited for room.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ProducerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_direct.producer._rdkafka_produce.Producer",
    .tp_basicsize = sizeof(Producer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A librdkafka producer fed straight from the buffers of Arrow batches.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Producer_init,
    .tp_dealloc = (destructor)Producer_dealloc,
    .tp_methods = Producer_methods,
    .tp_getset = Producer_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_rdkafka_produce",
    .m_doc = "Arrow buffers straight into librdkafka (see kafka_direct.producer.native).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__rdkafka_produce(void) {
    return kd_module_new(&module, &ProducerType, "Producer", KD_NEED_PRODUCER);
}
