/* kafka_direct._rdkafka_arrow: what its C units share. See _rdkafka_arrow.c for what the
 * extension is and why it exists.
 *
 * Units: _rdkafka_abi.c (librdkafka resolved at run time), _arrow_columns.c (Arrow buffers
 * from librdkafka messages), _rdkafka_consume.c (Consumer.consume), _rdkafka_arrow.c (the rest
 * of the Consumer type, its error events and the module).
 * All run in Spark executors (Python workers). Compiled with -fvisibility=hidden: only the
 * module's init function is exported.
 */
#ifndef KAFKA_DIRECT_RDKAFKA_ARROW_H
#define KAFKA_DIRECT_RDKAFKA_ARROW_H

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

/* librdkafka's functions, resolved by kd_load() from the library confluent-kafka loaded. */
struct rk_api {
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
};

extern struct rk_api rk;
extern int rk_loaded;

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

/* _rdkafka_arrow.c */
extern PyObject *KafkaFailure;
PyObject *kd_fail(int code, const char *reason);
int kd_enter(Consumer *self);

/* _rdkafka_consume.c */
PyObject *kd_consume(Consumer *self, PyObject *args);

/* _rdkafka_abi.c */
PyObject *kd_load(PyObject *self, PyObject *args);
PyObject *kd_text_n(const char *s, size_t len);
PyObject *kd_text(const char *s);

/* _arrow_columns.c */
int kd_fill_binary(rd_kafka_message_t **rows, Py_ssize_t n, int which, PyObject **offsets_out,
                   PyObject **data_out, PyObject **validity_out);
PyObject *kd_fill_headers(rd_kafka_message_t **rows, Py_ssize_t n);

#endif
