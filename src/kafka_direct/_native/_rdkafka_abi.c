/* kafka_direct's C extensions: librdkafka resolved at run time, and errors for Python. Runs in
 * Spark executors (Python workers). Compiled into each extension (see _rdkafka_abi.h).
 *
 * librdkafka is not linked at build time (no headers or import library are needed):
 * kd_load_api() dlopen()s the librdkafka that confluent-kafka already loaded, given its path by
 * Python, and fills the function table declared in _rdkafka_abi.h. A missing function that the
 * extension needs refuses the load (Python then reads or writes through confluent-kafka); a
 * missing optional one only leaves its entry NULL, and the feature that needs it off.
 */
#include "_rdkafka_abi.h"

struct rk_api rk;
int rk_loaded = 0;

/* Resolves one function; a required one that is missing fails the load. */
#define SYM(field, name, required)                                                         \
    do {                                                                                   \
        *(void **)(&rk.field) = dlsym(lib, name);                                          \
        if (rk.field == NULL && (required)) {                                              \
            PyErr_Format(PyExc_ImportError, "librdkafka at %s has no %s", path, name);     \
            memset(&rk, 0, sizeof(rk));                                                    \
            dlclose(lib);                                                                  \
            return NULL;                                                                   \
        }                                                                                  \
    } while (0)

/* load(path) -> version: the functions `needs` (KD_NEED_*) names must all be there. */
PyObject *kd_load_api(const char *path, int needs) {
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
    int reads = (needs & KD_NEED_CONSUMER) != 0;
    int writes = (needs & KD_NEED_PRODUCER) != 0;
    SYM(conf_new, "rd_kafka_conf_new", 1);
    SYM(conf_set, "rd_kafka_conf_set", 1);
    SYM(conf_destroy, "rd_kafka_conf_destroy", 1);
    SYM(conf_set_opaque, "rd_kafka_conf_set_opaque", 1);
    SYM(conf_set_error_cb, "rd_kafka_conf_set_error_cb", 1);
    SYM(new_, "rd_kafka_new", 1);
    SYM(destroy, "rd_kafka_destroy", 1);
    SYM(err2str, "rd_kafka_err2str", 1);
    SYM(fatal_error, "rd_kafka_fatal_error", 1);
    SYM(version_str, "rd_kafka_version_str", 1);
    SYM(last_error, "rd_kafka_last_error", 1);

    SYM(consumer_close, "rd_kafka_consumer_close", reads);
    SYM(poll_set_consumer, "rd_kafka_poll_set_consumer", reads);
    SYM(queue_get_consumer, "rd_kafka_queue_get_consumer", reads);
    SYM(queue_destroy, "rd_kafka_queue_destroy", reads);
    SYM(tpl_new, "rd_kafka_topic_partition_list_new", reads);
    SYM(tpl_add, "rd_kafka_topic_partition_list_add", reads);
    SYM(tpl_destroy, "rd_kafka_topic_partition_list_destroy", reads);
    SYM(assign, "rd_kafka_assign", reads);
    SYM(consume_batch_queue, "rd_kafka_consume_batch_queue", reads);
    SYM(message_destroy, "rd_kafka_message_destroy", reads);
    SYM(message_timestamp, "rd_kafka_message_timestamp", reads);
    SYM(message_headers, "rd_kafka_message_headers", reads);
    SYM(header_cnt, "rd_kafka_header_cnt", reads);
    SYM(header_get_all, "rd_kafka_header_get_all", reads);
    SYM(query_watermark_offsets, "rd_kafka_query_watermark_offsets", reads);

    SYM(conf_set_dr_msg_cb, "rd_kafka_conf_set_dr_msg_cb", writes);
    SYM(topic_new, "rd_kafka_topic_new", writes);
    SYM(topic_destroy, "rd_kafka_topic_destroy", writes);
    SYM(topic_name, "rd_kafka_topic_name", writes);
    SYM(produce_batch, "rd_kafka_produce_batch", writes);
    SYM(produceva, "rd_kafka_produceva", writes); /* librdkafka >= 1.6 */
    SYM(error_code, "rd_kafka_error_code", writes);
    SYM(error_string, "rd_kafka_error_string", writes);
    SYM(error_destroy, "rd_kafka_error_destroy", writes);
    SYM(headers_new, "rd_kafka_headers_new", writes);
    SYM(header_add, "rd_kafka_header_add", writes);
    SYM(headers_destroy, "rd_kafka_headers_destroy", writes);
    SYM(poll, "rd_kafka_poll", writes);
    SYM(flush, "rd_kafka_flush", writes);
    SYM(purge, "rd_kafka_purge", writes);
    SYM(outq_len, "rd_kafka_outq_len", writes);

    /* All three have been in librdkafka since 0.9; optional all the same, because without
     * them the extensions still work correctly (they only have to keep the logs quiet). */
    SYM(conf_set_log_cb, "rd_kafka_conf_set_log_cb", 0);
    SYM(set_log_queue, "rd_kafka_set_log_queue", 0);
    SYM(opaque, "rd_kafka_opaque", 0);
    rk_loaded = 1;
    return PyUnicode_FromString(rk.version_str());
}

/* Whether the loaded librdkafka can bring log lines to the thread that serves the client. */
int kd_logs_routable(void) {
    return rk_loaded && rk.conf_set_log_cb != NULL && rk.set_log_queue != NULL &&
           rk.opaque != NULL;
}

/* librdkafka's strings are not guaranteed UTF-8 (broker texts, and our own truncation may cut a
 * character in two): an error must never turn into a UnicodeDecodeError. */
PyObject *kd_text_n(const char *s, size_t len) {
    if (s == NULL) return PyUnicode_FromStringAndSize("", 0);
    if (len > PY_SSIZE_T_MAX) len = PY_SSIZE_T_MAX;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
}

PyObject *kd_text(const char *s) { return kd_text_n(s, s ? strlen(s) : 0); }

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

/* The module function set_failure(cls). */
PyObject *kd_set_failure(PyObject *cls) {
    /* kd_fail() raises cls(code, reason): anything but an exception class would raise a
     * SystemError in its place. */
    if (!PyExceptionClass_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "set_failure() takes an exception class");
        return NULL;
    }
    Py_XSETREF(KafkaFailure, Py_NewRef(cls));
    Py_RETURN_NONE;
}

/* --- the module: what kafka_direct._native.loader calls on either extension ------------------ */

/* Which of librdkafka's functions this extension's load() requires (each extension has its own
 * copy of this file's statics). */
static int module_needs;

static PyObject *module_load(PyObject *Py_UNUSED(self), PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    return kd_load_api(path, module_needs);
}

static PyObject *module_set_failure(PyObject *Py_UNUSED(self), PyObject *cls) {
    return kd_set_failure(cls);
}

static PyObject *module_logs_routable(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(unused)) {
    return PyBool_FromLong(kd_logs_routable());
}

static PyMethodDef module_methods[] = {
    {"load", module_load, METH_VARARGS, "load(path) -> version: resolve librdkafka's functions."},
    {"logs_routable", module_logs_routable, METH_NOARGS,
     "Whether the loaded librdkafka can send log lines to take_events() (else: log_level 0)."},
    {"set_failure", module_set_failure, METH_O,
     "The exception class raised as cls(code, reason)."},
    {NULL, NULL, 0, NULL},
};

PyObject *kd_module_new(struct PyModuleDef *def, PyTypeObject *type, const char *type_name,
                        int needs) {
    module_needs = needs;
    def->m_methods = module_methods;
    if (PyType_Ready(type) < 0) return NULL;
    PyObject *m = PyModule_Create(def);
    if (m == NULL) return NULL;
    Py_INCREF(type);
    if (PyModule_AddObject(m, type_name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
