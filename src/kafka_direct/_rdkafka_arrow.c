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
 * dlopen()s the librdkafka that confluent-kafka already loaded, given its path by Python, and
 * declares the few stable public-ABI types it uses below (librdkafka's rdkafka.h, unchanged
 * since 1.0). The handle is its own rd_kafka_t, not confluent-kafka's, so nothing depends on
 * confluent-kafka's private structures.
 *
 * A Consumer is used by one thread at a time (the consumer pool lends it exclusively); the GIL is
 * released while waiting for records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* --- librdkafka's public ABI (rdkafka.h) ------------------------------------------------------ */

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;

typedef struct {
    int err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

typedef struct {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    int err;
    void *_private;
} rd_kafka_topic_partition_t;

typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;

#define RD_KAFKA_CONSUMER 1
#define RD_KAFKA_CONF_OK 0
#define ERR_PARTITION_EOF (-191)
#define ERR_AUTO_OFFSET_RESET (-140)
#define ERR_FATAL (-150)
#define ERR_INVALID_ARG (-186)

static struct {
    rd_kafka_conf_t *(*conf_new)(void);
    int (*conf_set)(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
    void (*conf_destroy)(rd_kafka_conf_t *);
    void (*conf_set_opaque)(rd_kafka_conf_t *, void *);
    void (*conf_set_error_cb)(rd_kafka_conf_t *, void (*)(rd_kafka_t *, int, const char *, void *));
    rd_kafka_t *(*new_)(int, rd_kafka_conf_t *, char *, size_t);
    void (*destroy)(rd_kafka_t *);
    int (*consumer_close)(rd_kafka_t *);
    int (*poll_set_consumer)(rd_kafka_t *);
    rd_kafka_queue_t *(*queue_get_consumer)(rd_kafka_t *);
    void (*queue_destroy)(rd_kafka_queue_t *);
    rd_kafka_topic_partition_list_t *(*tpl_new)(int);
    rd_kafka_topic_partition_t *(*tpl_add)(rd_kafka_topic_partition_list_t *, const char *, int32_t);
    void (*tpl_destroy)(rd_kafka_topic_partition_list_t *);
    int (*assign)(rd_kafka_t *, const rd_kafka_topic_partition_list_t *);
    ssize_t (*consume_batch_queue)(rd_kafka_queue_t *, int, rd_kafka_message_t **, size_t);
    void (*message_destroy)(rd_kafka_message_t *);
    int64_t (*message_timestamp)(const rd_kafka_message_t *, int *);
    int (*message_headers)(const rd_kafka_message_t *, rd_kafka_headers_t **);
    size_t (*header_cnt)(const rd_kafka_headers_t *);
    int (*header_get_all)(const rd_kafka_headers_t *, size_t, const char **, const void **,
                          size_t *);
    int (*query_watermark_offsets)(rd_kafka_t *, const char *, int32_t, int64_t *, int64_t *, int);
    const char *(*err2str)(int);
    int (*fatal_error)(rd_kafka_t *, char *, size_t);
    const char *(*version_str)(void);
    int (*last_error)(void);
} rk;

static int rk_loaded = 0;

#define SYM(field, name)                                                   \
    do {                                                                   \
        *(void **)(&rk.field) = dlsym(lib, name);                          \
        if (rk.field == NULL) {                                            \
            PyErr_Format(PyExc_ImportError, "librdkafka at %s has no %s", path, name); \
            dlclose(lib);                                                  \
            return NULL;                                                   \
        }                                                                  \
    } while (0)

static PyObject *load(PyObject *Py_UNUSED(self), PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    /* Once loaded, the first library stays: handles already made point into it. */
    if (rk_loaded) return PyUnicode_FromString(rk.version_str());
    /* RTLD_NOLOAD first: normally confluent-kafka has loaded it already, and the same copy
     * must be used (one librdkafka per process). */
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (lib == NULL) lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        PyErr_Format(PyExc_ImportError, "cannot load librdkafka from %s: %s", path,
                     why ? why : "unknown error");
        return NULL;
    }
    SYM(conf_new, "rd_kafka_conf_new");
    SYM(conf_set, "rd_kafka_conf_set");
    SYM(conf_destroy, "rd_kafka_conf_destroy");
    SYM(conf_set_opaque, "rd_kafka_conf_set_opaque");
    SYM(conf_set_error_cb, "rd_kafka_conf_set_error_cb");
    SYM(new_, "rd_kafka_new");
    SYM(destroy, "rd_kafka_destroy");
    SYM(consumer_close, "rd_kafka_consumer_close");
    SYM(poll_set_consumer, "rd_kafka_poll_set_consumer");
    SYM(queue_get_consumer, "rd_kafka_queue_get_consumer");
    SYM(queue_destroy, "rd_kafka_queue_destroy");
    SYM(tpl_new, "rd_kafka_topic_partition_list_new");
    SYM(tpl_add, "rd_kafka_topic_partition_list_add");
    SYM(tpl_destroy, "rd_kafka_topic_partition_list_destroy");
    SYM(assign, "rd_kafka_assign");
    SYM(consume_batch_queue, "rd_kafka_consume_batch_queue");
    SYM(message_destroy, "rd_kafka_message_destroy");
    SYM(message_timestamp, "rd_kafka_message_timestamp");
    SYM(message_headers, "rd_kafka_message_headers");
    SYM(header_cnt, "rd_kafka_header_cnt");
    SYM(header_get_all, "rd_kafka_header_get_all");
    SYM(query_watermark_offsets, "rd_kafka_query_watermark_offsets");
    SYM(err2str, "rd_kafka_err2str");
    SYM(fatal_error, "rd_kafka_fatal_error");
    SYM(version_str, "rd_kafka_version_str");
    SYM(last_error, "rd_kafka_last_error");
    rk_loaded = 1;
    return PyUnicode_FromString(rk.version_str());
}

/* librdkafka's strings are not guaranteed UTF-8 (broker texts, and our own truncation may cut a
 * character in two): an error must never turn into a UnicodeDecodeError. */
static PyObject *text_n(const char *s, size_t len) {
    if (s == NULL) return PyUnicode_FromStringAndSize("", 0);
    if (len > PY_SSIZE_T_MAX) len = PY_SSIZE_T_MAX;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
}

static PyObject *text(const char *s) { return text_n(s, s ? strlen(s) : 0); }

/* --- error events (the client's error_cb) ----------------------------------------------------- */

#define MAX_EVENTS 16

typedef struct {
    int code;
    int fatal;
    char reason[512];
} event_t;

typedef struct {
    pthread_mutex_t lock;
    event_t events[MAX_EVENTS];
    int count;
} events_t;

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

/* --- the Consumer type ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue;
    events_t *events;
    rd_kafka_message_t **msgs;
    size_t msgs_cap;
    /* Set while a call uses the handle or msgs, across its GIL release: a second thread (or a
     * close()) then gets an error instead of freeing the handle or msgs under the first. */
    int busy;
    /* librdkafka's threads do not survive fork(): a child must not close the parent's handle. */
    pid_t pid;
} Consumer;

static PyObject *KafkaFailure; /* set by Python: raised as KafkaFailure(code, reason) */

static PyObject *fail(int code, const char *reason) {
    PyObject *msg = text(reason);
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
            fail(ERR_INVALID_ARG, errstr);
            return -1;
        }
    }
    rk.conf_set_opaque(conf, self->events);
    rk.conf_set_error_cb(conf, on_error);
    /* On success rd_kafka_new owns conf; on failure it is still ours. */
    rd_kafka_t *handle = rk.new_(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (handle == NULL) {
        rk.conf_destroy(conf);
        fail(ERR_INVALID_ARG, errstr);
        return -1;
    }
    self->rk = handle;
    /* Error events then arrive on the consumer queue, served by consume(). Both need a
     * consumer group (group.id): without one there is no consumer queue to read. */
    int err = rk.poll_set_consumer(handle);
    if (err == 0) self->queue = rk.queue_get_consumer(handle);
    if (self->queue == NULL) {
        Consumer_release(self);
        fail(err ? err : ERR_INVALID_ARG, "the consumer has no queue: is group.id set?");
        return -1;
    }
    return 0;
}

/* Marks the consumer busy for a call that releases the GIL; 0 with an exception if it cannot. */
static int enter(Consumer *self) {
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
    if (!enter(self)) return NULL;
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
    if (err != 0) return fail(err, rk.err2str(err));
    Py_RETURN_NONE;
}

static PyObject *Consumer_watermarks(Consumer *self, PyObject *args) {
    const char *topic;
    int partition, timeout_ms;
    int64_t low = -1, high = -1;
    if (!PyArg_ParseTuple(args, "sii", &topic, &partition, &timeout_ms)) return NULL;
    if (!enter(self)) return NULL;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = rk.query_watermark_offsets(self->rk, topic, partition, &low, &high, timeout_ms);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (err != 0) return fail(err, rk.err2str(err));
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
        PyObject *item = Py_BuildValue("iNO", copy[i].code, text(copy[i].reason),
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

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Fill a binary column's buffers from the kept records: int32 offsets, data, and a validity
 * bitmap only when some value is null (a record without a key, a tombstone). */
static int fill_binary(rd_kafka_message_t **rows, Py_ssize_t n, int which, PyObject **offsets_out,
                       PyObject **data_out, PyObject **validity_out) {
    int64_t total = 0;
    Py_ssize_t nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const void *p = which ? rows[i]->payload : rows[i]->key;
        if (p == NULL) nulls++;
        else total += (int64_t)(which ? rows[i]->len : rows[i]->key_len);
    }
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of data in one Arrow batch");
        return -1;
    }
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    PyObject *validity = NULL;
    if (nulls) {
        validity = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        if (validity) memset(PyBytes_AS_STRING(validity), 0, (size_t)((n + 7) / 8));
    }
    if (offsets == NULL || data == NULL || (nulls && validity == NULL)) {
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        Py_XDECREF(validity);
        return -1;
    }
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    char *dst = PyBytes_AS_STRING(data);
    uint8_t *bits = validity ? (uint8_t *)PyBytes_AS_STRING(validity) : NULL;
    int32_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const void *p = which ? rows[i]->payload : rows[i]->key;
        size_t len = which ? rows[i]->len : rows[i]->key_len;
        off[i] = at;
        if (p != NULL) {
            memcpy(dst + at, p, len);
            at += (int32_t)len;
            if (bits) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
        }
    }
    off[n] = at;
    *offsets_out = offsets;
    *data_out = data;
    *validity_out = validity ? validity : Py_NewRef(Py_None);
    return 0;
}

/* The records' headers as the buffers of Spark's headers column, an Arrow
 * list<struct<key: string, value: binary>>: (list_validity, list_offsets, key_offsets, key_data,
 * value_offsets, value_data, value_validity, count). As Spark's KafkaRecordToRowConverter does, a
 * record without headers gets a null list, not an empty one; a header may have a null value.
 * Validity bitmaps are None when nothing is null. */
static PyObject *fill_headers(rd_kafka_message_t **rows, Py_ssize_t n) {
    int64_t count = 0, key_bytes = 0, value_bytes = 0;
    Py_ssize_t null_lists = 0, null_values = 0, i;
    size_t j, c;
    const char *name;
    const void *value;
    size_t size;
    for (i = 0; i < n; i++) {
        rd_kafka_headers_t *hdrs = NULL;
        if (rk.message_headers(rows[i], &hdrs) != 0 || hdrs == NULL ||
            (c = rk.header_cnt(hdrs)) == 0) {
            null_lists++;
            continue;
        }
        for (j = 0; j < c; j++) {
            if (rk.header_get_all(hdrs, j, &name, &value, &size) != 0) continue;
            key_bytes += (int64_t)strlen(name);
            if (value == NULL) null_values++;
            else value_bytes += (int64_t)size;
            count++;
        }
    }
    if (count > INT32_MAX || key_bytes > INT32_MAX || value_bytes > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of headers in one Arrow batch");
        return NULL;
    }
    PyObject *lv = null_lists ? PyBytes_FromStringAndSize(NULL, (n + 7) / 8) : Py_NewRef(Py_None);
    PyObject *lo = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *ko = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count + 1) * 4);
    PyObject *kd = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)key_bytes);
    PyObject *vo = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count + 1) * 4);
    PyObject *vd = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)value_bytes);
    PyObject *vv = null_values ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count + 7) / 8)
                               : Py_NewRef(Py_None);
    PyObject *result = NULL;
    if (lv == NULL || lo == NULL || ko == NULL || kd == NULL || vo == NULL || vd == NULL ||
        vv == NULL)
        goto done;
    uint8_t *list_bits = lv == Py_None ? NULL : (uint8_t *)PyBytes_AS_STRING(lv);
    uint8_t *value_bits = vv == Py_None ? NULL : (uint8_t *)PyBytes_AS_STRING(vv);
    if (list_bits) memset(list_bits, 0, (size_t)((n + 7) / 8));
    if (value_bits) memset(value_bits, 0, (size_t)((count + 7) / 8));
    int32_t *list_off = (int32_t *)PyBytes_AS_STRING(lo);
    int32_t *key_off = (int32_t *)PyBytes_AS_STRING(ko);
    int32_t *value_off = (int32_t *)PyBytes_AS_STRING(vo);
    char *key_data = PyBytes_AS_STRING(kd), *value_data = PyBytes_AS_STRING(vd);
    int32_t h = 0, key_at = 0, value_at = 0;
    for (i = 0; i < n; i++) {
        rd_kafka_headers_t *hdrs = NULL;
        list_off[i] = h;
        if (rk.message_headers(rows[i], &hdrs) != 0 || hdrs == NULL ||
            (c = rk.header_cnt(hdrs)) == 0)
            continue;
        if (list_bits) list_bits[i >> 3] |= (uint8_t)(1u << (i & 7));
        for (j = 0; j < c; j++) {
            if (rk.header_get_all(hdrs, j, &name, &value, &size) != 0) continue;
            size_t name_len = strlen(name);
            key_off[h] = key_at;
            memcpy(key_data + key_at, name, name_len);
            key_at += (int32_t)name_len;
            value_off[h] = value_at;
            if (value != NULL) {
                memcpy(value_data + value_at, value, size);
                value_at += (int32_t)size;
                if (value_bits) value_bits[h >> 3] |= (uint8_t)(1u << (h & 7));
            }
            h++;
        }
    }
    list_off[n] = h;
    key_off[h] = key_at;
    value_off[h] = value_at;
    result = Py_BuildValue("OOOOOOOL", lv, lo, ko, kd, vo, vd, vv, (long long)count);
done:
    Py_XDECREF(lv);
    Py_XDECREF(lo);
    Py_XDECREF(ko);
    Py_XDECREF(kd);
    Py_XDECREF(vo);
    Py_XDECREF(vd);
    Py_XDECREF(vv);
    return result;
}

/* consume(partition, nxt, until, max_messages, timeout_s, max_bytes[, headers])
 *
 * One read of the consumer queue, the counterpart of confluent-kafka's consume(n, timeout) plus
 * fetch._split_events and the range filter: waits until max_messages records or events came,
 * max_bytes of data came, or timeout_s passed. Returns None if nothing came, else a tuple
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
static PyObject *Consumer_consume(Consumer *self, PyObject *args) {
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
    if (!enter(self)) return NULL;
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
    int64_t bytes = 0;
    int event_seen = 0, failed = 0;
    double deadline = now_s() + timeout_s;
    Py_BEGIN_ALLOW_THREADS
    /* In chunks, so that a batch of large records stops near max_bytes (one Arrow batch's
     * int32 offsets hold 2 GiB): the first chunk is small (16 records of even 100 MB fit),
     * and later ones are sized from the mean record size so far. Each waits what is left of
     * the deadline. */
    while (got < max_messages && bytes < max_bytes && !event_seen) {
        double left = deadline - now_s();
        int wait_ms = left > 0 ? (int)(left * 1000.0 + 0.5) : 0;
        Py_ssize_t chunk = max_messages - got;
        Py_ssize_t cap = 16;
        if (got > 0) {
            int64_t mean = bytes / got + 1;
            int64_t fits = (max_bytes - bytes) / mean + 1;
            cap = fits < 4096 ? (Py_ssize_t)fits : 4096;
        }
        if (chunk > cap) chunk = cap;
        ssize_t n = rk.consume_batch_queue(self->queue, wait_ms, msgs + got, (size_t)chunk);
        if (n < 0) {
            /* As confluent-kafka's consume() does: the call itself failed. */
            failed = rk.last_error();
            break;
        }
        if (n == 0) break;
        for (Py_ssize_t i = got; i < got + n; i++) {
            if (msgs[i]->err) event_seen = 1;
            else bytes += (int64_t)msgs[i]->len + (int64_t)msgs[i]->key_len;
        }
        got += n;
        if (wait_ms == 0 && n < chunk) break;
    }
    Py_END_ALLOW_THREADS
    if (got == 0) {
        self->busy = 0;
        if (failed) return fail(failed, rk.err2str(failed));
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
        if (fill_binary(msgs, kept, 0, &ko, &kd, &kv) < 0) goto done;
        if (fill_binary(msgs, kept, 1, &vo, &vd, &vv) < 0) goto done;
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
            hdrs = fill_headers(msgs, kept);
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
        PyObject *error = err_code ? Py_BuildValue("iN", err_code, text_n(err_reason, err_len))
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

static PyMethodDef Consumer_methods[] = {
    {"assign", (PyCFunction)Consumer_assign, METH_VARARGS,
     "assign(topic, partition, offset): assign exactly this partition from this offset."},
    {"consume", (PyCFunction)Consumer_consume, METH_VARARGS,
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
    /* fail() raises cls(code, reason): anything but an exception class would raise a
     * SystemError in its place. */
    if (!PyExceptionClass_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "set_failure() takes an exception class");
        return NULL;
    }
    Py_XSETREF(KafkaFailure, Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"load", load, METH_VARARGS, "load(path) -> version: resolve librdkafka's functions."},
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
