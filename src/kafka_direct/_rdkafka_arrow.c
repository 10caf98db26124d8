/* kafka_direct._rdkafka_arrow: consume one partition from librdkafka straight into Arrow buffers.
 *
 * Runs in Spark executors (Python workers). Optional: when it is not built, or librdkafka cannot
 * be found, kafka_direct reads through confluent-kafka's Python messages instead (same results).
 *
 * Why it exists: confluent-kafka creates one Python Message object (plus key and value bytes and
 * a topic string) per record. On 100-byte records that costs about 1 us per record in the
 * reading thread, three times what librdkafka's own fetch thread spends, and more than Spark
 * spends on the row afterwards. Here a batch of records becomes a handful of contiguous buffers
 * (Arrow binary offsets + data, int64 offsets and timestamps, int32 timestamp types) that pyarrow
 * wraps without copying.
 *
 * librdkafka is not linked at build time (no headers or import library are needed): the module
 * dlopen()s the librdkafka that confluent-kafka already loaded, given its path by Python
 * (_rdkafka_abi.c), and declares the few stable public-ABI types it uses (_rdkafka_arrow.h,
 * from librdkafka's rdkafka.h, unchanged since 1.0). The handle is its own rd_kafka_t, not
 * confluent-kafka's, so nothing depends on confluent-kafka's private structures.
 *
 * This unit holds the Consumer type (all but consume, in _rdkafka_consume.c), its error events
 * and the module.
 *
 * A Consumer is used by one thread at a time (the consumer pool lends it exclusively); the GIL is
 * released while waiting for records.
 */
#include "_rdkafka_arrow.h"

/* Called by librdkafka from whichever thread serves the queue (consume() or close(), both with
 * the GIL released); never touches Python. */
static void on_error(rd_kafka_t *handle, int err, const char *reason, void *opaque) {
    events_t *ev = (events_t *)opaque;
    event_t e;
    char buf[512];
    e.code = err;
    e.fatal = 0;
    if (err == ERR_FATAL) {
        /* The event only says "fatal"; the underlying error is kept by the handle. */
        buf[0] = '\0';
        int code = rk.fatal_error(handle, buf, sizeof(buf));
        if (code != 0) {
            e.code = code;
            reason = buf;
        }
        e.fatal = 1;
    }
    snprintf(e.reason, sizeof(e.reason), "%s", reason ? reason : "");
    pthread_mutex_lock(&ev->lock);
    if (ev->count == MAX_EVENTS) { /* keep the newest */
        memmove(&ev->events[0], &ev->events[1], sizeof(event_t) * (MAX_EVENTS - 1));
        ev->count--;
    }
    ev->events[ev->count++] = e;
    pthread_mutex_unlock(&ev->lock);
}


PyObject *KafkaFailure; /* set by Python: raised as KafkaFailure(code, reason) */

PyObject *kd_fail(int code, const char *reason) {
    PyObject *msg = kd_text(reason);
    if (msg == NULL) return NULL;
    if (KafkaFailure == NULL) {
        PyErr_Format(PyExc_RuntimeError, "librdkafka error %d: %U", code, msg);
        Py_DECREF(msg);
        return NULL;
    }
    PyObject *exc = PyObject_CallFunction(KafkaFailure, "iN", code, msg);
    if (exc != NULL) {
        PyErr_SetObject(KafkaFailure, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static void Consumer_release(Consumer *self) {
    if (self->queue != NULL) {
        if (self->pid == getpid()) rk.queue_destroy(self->queue);
        self->queue = NULL;
    }
    if (self->rk != NULL) {
        rd_kafka_t *handle = self->rk;
        self->rk = NULL;
        /* In a forked child the handle is the parent's: closing it would wait for threads
         * that do not exist here, so it is left alone (the memory is the child's to lose). */
        if (self->pid == getpid()) {
            Py_BEGIN_ALLOW_THREADS
            rk.consumer_close(handle);
            rk.destroy(handle);
            Py_END_ALLOW_THREADS
        }
    }
}

static void Consumer_dealloc(Consumer *self) {
    /* Never busy here: a running method holds a reference to self. */
    Consumer_release(self);
    /* In a forked child the parent's librdkafka threads may have held the lock at fork time:
     * the events are left with the handle. */
    if (self->events != NULL && self->pid == getpid()) {
        pthread_mutex_destroy(&self->events->lock);
        PyMem_RawFree(self->events);
    }
    PyMem_RawFree(self->msgs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Consumer_init(Consumer *self, PyObject *args, PyObject *Py_UNUSED(kwds)) {
    PyObject *config;
    char errstr[512] = "";
    if (!rk_loaded) {
        PyErr_SetString(PyExc_RuntimeError, "librdkafka is not loaded: call load() first");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &config)) return -1;
    if (self->rk != NULL || self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Consumer already initialised");
        return -1;
    }
    self->pid = getpid();
    /* A second __init__ (after close() or a failed first one) reuses the events: a handle
     * destroyed since no longer refers to them. */
    if (self->events == NULL) {
        events_t *events = PyMem_RawCalloc(1, sizeof(events_t));
        if (events == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (pthread_mutex_init(&events->lock, NULL) != 0) {
            PyMem_RawFree(events);
            PyErr_SetString(PyExc_OSError, "cannot create a mutex");
            return -1;
        }
        self->events = events;
    }
    rd_kafka_conf_t *conf = rk.conf_new();
    if (conf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(config, &pos, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyUnicode_Check(value)) {
            rk.conf_destroy(conf);
            PyErr_Format(PyExc_TypeError,
                         "librdkafka settings must be str: str, got %.100s: %.100s",
                         Py_TYPE(key)->tp_name, Py_TYPE(value)->tp_name);
            return -1;
        }
        const char *k = PyUnicode_AsUTF8(key);
        const char *v = k ? PyUnicode_AsUTF8(value) : NULL;
        if (k == NULL || v == NULL) {
            rk.conf_destroy(conf);
            return -1;
        }
        if (rk.conf_set(conf, k, v, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
            rk.conf_destroy(conf);
            kd_fail(ERR_INVALID_ARG, errstr);
            return -1;
        }
    }
    rk.conf_set_opaque(conf, self->events);
    rk.conf_set_error_cb(conf, on_error);
    /* On success rd_kafka_new owns conf; on failure it is still ours. */
    rd_kafka_t *handle = rk.new_(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (handle == NULL) {
        rk.conf_destroy(conf);
        kd_fail(ERR_INVALID_ARG, errstr);
        return -1;
    }
    self->rk = handle;
    /* Error events then arrive on the consumer queue, served by consume(). Both need a
     * consumer group (group.id): without one there is no consumer queue to read. */
    int err = rk.poll_set_consumer(handle);
    if (err == 0) self->queue = rk.queue_get_consumer(handle);
    if (self->queue == NULL) {
        Consumer_release(self);
        kd_fail(err ? err : ERR_INVALID_ARG, "the consumer has no queue: is group.id set?");
        return -1;
    }
    return 0;
}

/* Marks the consumer busy for a call that releases the GIL; 0 with an exception if it cannot. */
int kd_enter(Consumer *self) {
    if (self->rk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer is closed");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer is in use by another thread");
        return 0;
    }
    if (self->pid != getpid()) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer was created before fork()");
        return 0;
    }
    self->busy = 1;
    return 1;
}

static PyObject *Consumer_assign(Consumer *self, PyObject *args) {
    const char *topic;
    int partition;
    long long offset;
    if (!PyArg_ParseTuple(args, "siL", &topic, &partition, &offset)) return NULL;
    if (!kd_enter(self)) return NULL;
    rd_kafka_topic_partition_list_t *list = rk.tpl_new(1);
    rd_kafka_topic_partition_t *tp = list ? rk.tpl_add(list, topic, partition) : NULL;
    if (tp == NULL) {
        if (list) rk.tpl_destroy(list);
        self->busy = 0;
        return PyErr_NoMemory();
    }
    tp->offset = offset;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = rk.assign(self->rk, list);
    Py_END_ALLOW_THREADS
    rk.tpl_destroy(list);
    self->busy = 0;
    if (err != 0) return kd_fail(err, rk.err2str(err));
    Py_RETURN_NONE;
}

static PyObject *Consumer_watermarks(Consumer *self, PyObject *args) {
    const char *topic;
    int partition, timeout_ms;
    int64_t low = -1, high = -1;
    if (!PyArg_ParseTuple(args, "sii", &topic, &partition, &timeout_ms)) return NULL;
    if (!kd_enter(self)) return NULL;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = rk.query_watermark_offsets(self->rk, topic, partition, &low, &high, timeout_ms);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (err != 0) return kd_fail(err, rk.err2str(err));
    return Py_BuildValue("LL", (long long)low, (long long)high);
}

static PyObject *Consumer_take_events(Consumer *self, PyObject *Py_UNUSED(unused)) {
    event_t copy[MAX_EVENTS];
    int n;
    /* None before __init__ allocated them; none in a forked child, where the lock may have been
     * held by one of the parent's threads at fork time. */
    if (self->events == NULL || self->pid != getpid()) return PyList_New(0);
    pthread_mutex_lock(&self->events->lock);
    n = self->events->count;
    memcpy(copy, self->events->events, sizeof(event_t) * (size_t)n);
    self->events->count = 0;
    pthread_mutex_unlock(&self->events->lock);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *item = Py_BuildValue("iNO", copy[i].code, kd_text(copy[i].reason),
                                       copy[i].fatal ? Py_True : Py_False);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

static PyObject *Consumer_close(Consumer *self, PyObject *Py_UNUSED(unused)) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer is in use by another thread");
        return NULL;
    }
    Consumer_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef Consumer_methods[] = {
    {"assign", (PyCFunction)Consumer_assign, METH_VARARGS,
     "assign(topic, partition, offset): assign exactly this partition from this offset."},
    {"consume", (PyCFunction)kd_consume, METH_VARARGS,
     "consume(partition, nxt, until, max_messages, timeout_s, max_bytes[, headers]): see the C "
     "source."},
    {"watermarks", (PyCFunction)Consumer_watermarks, METH_VARARGS,
     "watermarks(topic, partition, timeout_ms) -> (low, high), asked of the broker."},
    {"take_events", (PyCFunction)Consumer_take_events, METH_NOARGS,
     "The error events reported since the last call: [(code, reason, fatal)]."},
    {"close", (PyCFunction)Consumer_close, METH_NOARGS,
     "Close the consumer (idempotent; refused while another thread uses it)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ConsumerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_direct._rdkafka_arrow.Consumer",
    .tp_basicsize = sizeof(Consumer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A librdkafka consumer of one assigned partition that reads into Arrow buffers.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Consumer_init,
    .tp_dealloc = (destructor)Consumer_dealloc,
    .tp_methods = Consumer_methods,
};

static PyObject *set_failure(PyObject *Py_UNUSED(self), PyObject *cls) {
    /* kd_fail() raises cls(code, reason): anything but an exception class would raise a
     * SystemError in its place. */
    if (!PyExceptionClass_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "set_failure() takes an exception class");
        return NULL;
    }
    Py_XSETREF(KafkaFailure, Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"load", kd_load, METH_VARARGS, "load(path) -> version: resolve librdkafka's functions."},
    {"set_failure", set_failure, METH_O, "The exception class raised as cls(code, reason)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_rdkafka_arrow",
    .m_doc = "librdkafka straight into Arrow buffers (see kafka_direct.native).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__rdkafka_arrow(void) {
    if (PyType_Ready(&ConsumerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&ConsumerType);
    if (PyModule_AddObject(m, "Consumer", (PyObject *)&ConsumerType) < 0) {
        Py_DECREF(&ConsumerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
