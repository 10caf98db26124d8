/* kafka_direct's C extensions: a client's error events and log lines, and the configuration
 * that routes them. Runs in Spark executors (Python workers). Compiled into each extension (see
 * _rdkafka_abi.h).
 *
 * Log lines: left alone, librdkafka prints them to stderr from its own threads (a broker down
 * during a read gave `%3|...|FAIL|...` lines on a local Spark's console). A handle made by
 * kd_conf_new() has log.queue=true and a log_cb, and kd_route_logs() forwards its log queue to
 * the main queue: librdkafka then calls log_cb only where that queue is served (a consumer's
 * consume and close, a producer's poll, flush and close), with the GIL released. The lines are
 * kept here, bounded, and Python takes them after each call (kd_events_take) and hands them to
 * the Python logger every other client uses. Lines logged while the handle is destroyed are
 * dropped with its queues.
 *
 * Error events (error_cb) are kept the same way, the newest MAX_EVENTS of them.
 */
#include "_rdkafka_abi.h"

/* Called by librdkafka from whichever thread serves the queue (with the GIL released); never
 * touches Python. The opaque is the events, or a struct that starts with them. */
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
    atomic_store_explicit(&ev->pending, 1, memory_order_release);
    pthread_mutex_unlock(&ev->lock);
}

/* librdkafka's log_cb. With log.queue set it is called where the client's queue is served (see
 * above), but it is written for any thread all the same: the lock guards the lines, and it
 * never touches Python (malloc, not PyMem: no allocator hook may want the GIL here). A line
 * without a handle (librdkafka has none while it parses a config) has nowhere to go and is
 * dropped: it never reaches stderr either. */
static void on_log(const rd_kafka_t *handle, int level, const char *facility, const char *line) {
    events_t *ev = handle != NULL ? (events_t *)rk.opaque(handle) : NULL;
    if (ev == NULL) return;
    size_t len = line != NULL ? strlen(line) : 0;
    logline_t *l = malloc(sizeof(logline_t) + len + 1);
    if (l != NULL) {
        l->level = level;
        snprintf(l->facility, sizeof(l->facility), "%s", facility ? facility : "");
        memcpy(l->text, line != NULL ? line : "", len);
        l->text[len] = '\0';
    }
    logline_t *gone = NULL;
    pthread_mutex_lock(&ev->lock);
    if (l == NULL || ev->nlogs == MAX_LOGS) { /* keep the newest */
        int lost = l == NULL ? level : ev->logs[ev->first]->level;
        if (ev->dropped == 0 || lost < ev->dropped_worst) ev->dropped_worst = lost;
        ev->dropped++;
    }
    if (l != NULL) {
        if (ev->nlogs == MAX_LOGS) {
            gone = ev->logs[ev->first];
            ev->first = (ev->first + 1) % MAX_LOGS;
            ev->nlogs--;
        }
        ev->logs[(ev->first + ev->nlogs) % MAX_LOGS] = l;
        ev->nlogs++;
    }
    atomic_store_explicit(&ev->pending, 1, memory_order_release);
    pthread_mutex_unlock(&ev->lock);
    free(gone);
}

/* 0, or -1 with an exception. */
int kd_events_init(events_t *ev) {
    memset(ev, 0, sizeof(*ev));
    if (pthread_mutex_init(&ev->lock, NULL) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot create a mutex");
        return -1;
    }
    atomic_init(&ev->pending, 0);
    return 0;
}

/* Frees the lines not taken (the handle is gone, or going). No callback may run meanwhile. */
void kd_events_clear(events_t *ev) {
    for (int i = 0; i < ev->nlogs; i++) free(ev->logs[(ev->first + i) % MAX_LOGS]);
    ev->first = ev->nlogs = 0;
    ev->count = 0;
    ev->dropped = ev->dropped_worst = 0;
    atomic_store_explicit(&ev->pending, 0, memory_order_relaxed);
}

void kd_events_destroy(events_t *ev) {
    kd_events_clear(ev);
    pthread_mutex_destroy(&ev->lock);
}

/* What the callbacks left since the last take, taken under the lock and built outside it:
 * None if nothing (no allocation: it runs after every call), else
 *   (errors, logs, dropped, dropped_worst)
 * errors:  [(code, reason, fatal)] of error_cb;
 * logs:    [(level, facility, line)] of log_cb, oldest first, level as syslog's (0-7);
 * dropped: lines not kept (more than MAX_LOGS came between two takes), and dropped_worst the
 *          most severe (lowest) level among them.
 * The caller checks that it is not a forked child (the lock may have been held by one of the
 * parent's threads at fork time). */
PyObject *kd_events_take(events_t *ev) {
    event_t copy[MAX_EVENTS];
    logline_t *lines[MAX_LOGS];
    int n, nlines, worst;
    long dropped;
    if (ev == NULL || !atomic_load_explicit(&ev->pending, memory_order_acquire)) Py_RETURN_NONE;
    pthread_mutex_lock(&ev->lock);
    n = ev->count;
    nlines = ev->nlogs;
    dropped = ev->dropped;
    worst = ev->dropped_worst;
    atomic_store_explicit(&ev->pending, 0, memory_order_relaxed);
    if (n == 0 && nlines == 0 && dropped == 0) {
        pthread_mutex_unlock(&ev->lock);
        Py_RETURN_NONE;
    }
    memcpy(copy, ev->events, sizeof(event_t) * (size_t)n);
    for (int i = 0; i < nlines; i++) lines[i] = ev->logs[(ev->first + i) % MAX_LOGS];
    ev->count = 0;
    ev->first = ev->nlogs = 0;
    ev->dropped = ev->dropped_worst = 0;
    pthread_mutex_unlock(&ev->lock);

    PyObject *result = NULL;
    PyObject *errors = PyList_New(n);
    PyObject *logs = PyList_New(nlines);
    if (errors == NULL || logs == NULL) goto done;
    for (int i = 0; i < n; i++) {
        PyObject *item = Py_BuildValue("iNO", copy[i].code, kd_text(copy[i].reason),
                                       copy[i].fatal ? Py_True : Py_False);
        if (item == NULL) goto done;
        PyList_SET_ITEM(errors, i, item);
    }
    for (int i = 0; i < nlines; i++) {
        PyObject *item = Py_BuildValue("iNN", lines[i]->level, kd_text(lines[i]->facility),
                                       kd_text(lines[i]->text));
        if (item == NULL) goto done;
        PyList_SET_ITEM(logs, i, item);
    }
    result = Py_BuildValue("OOli", errors, logs, dropped, worst);
done:
    /* The lines are ours now, taken or not. */
    for (int i = 0; i < nlines; i++) free(lines[i]);
    Py_XDECREF(errors);
    Py_XDECREF(logs);
    return result;
}

static int conf_set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char errstr[512] = "";
    if (rk.conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        kd_fail(ERR_INVALID_ARG, errstr);
        return -1;
    }
    return 0;
}

/* A client configuration from `config` (librdkafka's settings, str: str) with the events'
 * callbacks: error_cb always, and log_cb with log.queue when routes_logs (the caller checked
 * kd_logs_routable()); without it, the fallback: log_level 0. The opaque is the events, or a
 * struct that starts with them. NULL with an exception if a setting is refused. */
rd_kafka_conf_t *kd_conf_new(PyObject *config, int routes_logs, void *opaque) {
    rd_kafka_conf_t *conf = rk.conf_new();
    if (conf == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    /* The fallback: with nowhere to send the lines, librdkafka would print them to stderr.
     * Level 0 leaves only a fatal error's line, which error_cb reports too. Set first, so
     * that a log_level (or debug) the user chose still wins: they asked for the output. */
    if (!routes_logs && conf_set(conf, "log_level", "0") < 0) goto fail;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(config, &pos, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyUnicode_Check(value)) {
            PyErr_Format(PyExc_TypeError,
                         "librdkafka settings must be str: str, got %.100s: %.100s",
                         Py_TYPE(key)->tp_name, Py_TYPE(value)->tp_name);
            goto fail;
        }
        const char *k = PyUnicode_AsUTF8(key);
        const char *v = k ? PyUnicode_AsUTF8(value) : NULL;
        if (k == NULL || v == NULL || conf_set(conf, k, v) < 0) goto fail;
    }
    /* Set after the user's settings: a log.queue=false of theirs would leave the lines
     * queued where nothing serves them. */
    if (routes_logs) {
        if (conf_set(conf, "log.queue", "true") < 0) goto fail;
        rk.conf_set_log_cb(conf, on_log);
    }
    rk.conf_set_opaque(conf, opaque);
    rk.conf_set_error_cb(conf, on_error);
    return conf;
fail:
    rk.conf_destroy(conf);
    return NULL;
}

/* After rd_kafka_new() of a kd_conf_new() config with routes_logs: the log lines, queued since,
 * follow the main queue (a consumer forwards it to its consumer queue). 0, or librdkafka's
 * error: the handle must not be used then, or the lines would pile up where nothing serves
 * them. */
int kd_route_logs(rd_kafka_t *handle) { return rk.set_log_queue(handle, NULL); }
