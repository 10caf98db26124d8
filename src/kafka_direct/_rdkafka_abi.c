/* kafka_direct._rdkafka_arrow: librdkafka resolved at run time. Runs in Spark executors.
 *
 * librdkafka is not linked at build time (no headers or import library are needed): kd_load()
 * dlopen()s the librdkafka that confluent-kafka already loaded, given its path by Python, and
 * fills the function table declared in _rdkafka_arrow.h.
 */
#include "_rdkafka_arrow.h"

struct rk_api rk;
int rk_loaded = 0;

#define SYM(field, name)                                                   \
    do {                                                                   \
        *(void **)(&rk.field) = dlsym(lib, name);                          \
        if (rk.field == NULL) {                                            \
            PyErr_Format(PyExc_ImportError, "librdkafka at %s has no %s", path, name); \
            dlclose(lib);                                                  \
            return NULL;                                                   \
        }                                                                  \
    } while (0)

PyObject *kd_load(PyObject *Py_UNUSED(self), PyObject *args) {
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
PyObject *kd_text_n(const char *s, size_t len) {
    if (s == NULL) return PyUnicode_FromStringAndSize("", 0);
    if (len > PY_SSIZE_T_MAX) len = PY_SSIZE_T_MAX;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
}

PyObject *kd_text(const char *s) { return kd_text_n(s, s ? strlen(s) : 0); }
