/* kafka_direct._rdkafka_arrow: consume one partition from librdkafka straight into Arrow buffers.
 *
 * Runs in Spark executors (Python workers). Optional: when it is not built, or librdkafka cannot
 * be found, kafka_direct reads through confluent-kafka's Python messages instead (same results).
 *
 * Why it exists: confluent-kafka creates one Python Message object (plus key and value bytes and
 * a topic string) per record. On small records that costs more CPU in the reading thread than
 * librdkafka's own fetch thread spends, and more than Spark spends on the row afterwards (the
 * numbers are in docs/performance.md). Here a batch of records becomes a handful of contiguous
 * buffers (Arrow binary offsets + data, int64 offsets and timestamps, int32 timestamp types) that
 * pyarrow wraps without copying.
 *
 * librdkafka is not linked at build time (no headers or import library are needed): the module
 * dlopen()s the librdkafka that confluent-kafka already loaded, given its path by Python, and
 * declares the few stable public-ABI types it uses. That code, and the error events and log
 * lines, are shared with the producer's extension (src/kafka_direct/_native/, _rdkafka_abi.h).
 * The handle is its own rd_kafka_t, not confluent-kafka's, so nothing depends on
 * confluent-kafka's private structures.
 *
 * This unit holds the Consumer type (all but consume, in _rdkafka_consume.c) and the module.
 *
 * Log lines: the handle's log queue is forwarded to the main queue, which poll_set_consumer()
 * forwards to the consumer queue: librdkafka then calls log_cb only where that queue is served,
 * in consume() and close(), with the GIL released (assign() and watermarks() wait on reply
 * queues of their own). native.py hands the lines to the Python logger every other client uses
 * (kafka_direct.librdkafka) after each call (_client_events.c).
 *
 * A Consumer is used by one thread at a time (the consumer pool lends it exclusively); the GIL is
 * released while waiting for records.
 */
#include "_rdkafka_arrow.h"

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
        kd_events_destroy(self->events);
        PyMem_RawFree(self->events);
    }
    PyMem_RawFree(self->msgs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Consumer(config, route_logs=True): config is librdkafka's settings, str: str. route_logs
 * false (or a librdkafka without the log queue API) gives the fallback: log_level 0. */
static int Consumer_init(Consumer *self, PyObject *args, PyObject *kwds) {
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
    if (self->rk != NULL || self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Consumer already initialised");
        return -1;
    }
    self->pid = getpid();
    /* A second __init__ (after close() or a failed first one) reuses the events: a handle
     * destroyed since no longer refers to them. */
    if (self->events == NULL) {
        events_t *events = PyMem_RawMalloc(sizeof(events_t));
        if (events == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (kd_events_init(events) < 0) {
            PyMem_RawFree(events);
            return -1;
        }
        self->events = events;
    }
    self->routes_logs = route_logs && kd_logs_routable();
    rd_kafka_conf_t *conf = kd_conf_new(config, self->routes_logs, self->events);
    if (conf == NULL) return -1;
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
    /* Log lines, queued since rd_kafka_new, then follow the main queue to the consumer queue.
     * Failing here would leave them queued where nothing serves them, growing. */
    if (self->routes_logs && (err = kd_route_logs(handle)) != 0) {
        Consumer_release(self);
        kd_fail(err, "cannot send librdkafka's log lines to the consumer queue");
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

/* What the callbacks left since the last call: see kd_events_take(). None in a forked child,
 * where the lock may have been held by one of the parent's threads at fork time. */
static PyObject *Consumer_take_events(Consumer *self, PyObject *Py_UNUSED(unused)) {
    if (self->events == NULL || self->pid != getpid()) Py_RETURN_NONE;
    return kd_events_take(self->events);
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
    {"assign_many", (PyCFunction)kd_assign_many, METH_VARARGS,
     "assign_many([(topic, partition, offset)]): assign exactly these partitions."},
    {"consume_many", (PyCFunction)kd_consume_many, METH_VARARGS,
     "consume_many(index, bounds, max_messages, timeout_s, max_bytes[, headers]): see "
     "_rdkafka_consume_many.c."},
    {"watermarks", (PyCFunction)Consumer_watermarks, METH_VARARGS,
     "watermarks(topic, partition, timeout_ms) -> (low, high), asked of the broker."},
    {"take_events", (PyCFunction)Consumer_take_events, METH_NOARGS,
     "None if nothing came since the last call, else (errors, logs, dropped, dropped_worst): "
     "[(code, reason, fatal)], [(level, facility, line)], lines not kept and their worst "
     "level."},
    {"close", (PyCFunction)Consumer_close, METH_NOARGS,
     "Close the consumer (idempotent; refused while another thread uses it)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *Consumer_routes_logs(Consumer *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->routes_logs);
}

static PyGetSetDef Consumer_getset[] = {
    {"routes_logs", (getter)Consumer_routes_logs, NULL,
     "Whether log lines come to take_events() (else the handle runs with log_level 0).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ConsumerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_direct.consumer._rdkafka_arrow.Consumer",
    .tp_basicsize = sizeof(Consumer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A librdkafka consumer of one assigned partition that reads into Arrow buffers.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Consumer_init,
    .tp_dealloc = (destructor)Consumer_dealloc,
    .tp_methods = Consumer_methods,
    .tp_getset = Consumer_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_rdkafka_arrow",
    .m_doc = "librdkafka straight into Arrow buffers (see kafka_direct.consumer.native).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__rdkafka_arrow(void) {
    return kd_module_new(&module, &ConsumerType, "Consumer", KD_NEED_CONSUMER);
}
