/* What kafka_direct's C extensions share: librdkafka's public ABI, resolved at run time, and the
 * client plumbing both need (error events, log lines, the configuration, errors for Python).
 *
 * Two extensions are built from these sources, each with its own copy (setup.py lists the
 * shared .c files in both; -fvisibility=hidden keeps each copy private to its extension):
 *   kafka_direct.consumer._rdkafka_arrow   librdkafka straight into Arrow buffers (reads)
 *   kafka_direct.producer._rdkafka_produce Arrow buffers straight into librdkafka (writes)
 * Both run in Spark executors (Python workers).
 *
 * Units here: _rdkafka_abi.c (librdkafka resolved at run time, text helpers, the exception
 * class), _client_events.c (error_cb and log_cb into a bounded buffer, taken by Python after
 * each call; the client configuration that routes them).
 *
 * The ABI below is librdkafka's (rdkafka.h), declared by hand so that no librdkafka headers or
 * import library are needed at build time: only what the extensions use, all of it stable since
 * librdkafka 1.x and checked against 2.x.
 */
#ifndef KAFKA_DIRECT_RDKAFKA_ABI_H
#define KAFKA_DIRECT_RDKAFKA_ABI_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* --- librdkafka's public ABI (rdkafka.h) ------------------------------------------------------ */

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;

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

/* rd_kafka_produceva()'s argument: a vtype and its value (rd_kafka_vtype_t, rd_kafka_vu_t). */
enum {
    RD_KAFKA_VTYPE_END = 0,
    RD_KAFKA_VTYPE_TOPIC = 1,
    RD_KAFKA_VTYPE_RKT = 2,
    RD_KAFKA_VTYPE_PARTITION = 3,
    RD_KAFKA_VTYPE_VALUE = 4,
    RD_KAFKA_VTYPE_KEY = 5,
    RD_KAFKA_VTYPE_OPAQUE = 6,
    RD_KAFKA_VTYPE_MSGFLAGS = 7,
    RD_KAFKA_VTYPE_TIMESTAMP = 8,
    RD_KAFKA_VTYPE_HEADER = 9,
    RD_KAFKA_VTYPE_HEADERS = 10,
};

typedef struct {
    int vtype; /* an enum in rdkafka.h: int-sized */
    union {
        const char *cstr;
        rd_kafka_topic_t *rkt;
        int i;
        int32_t i32;
        int64_t i64;
        struct {
            void *ptr;
            size_t size;
        } mem;
        struct {
            const char *name;
            const void *val;
            ssize_t size;
        } header;
        rd_kafka_headers_t *headers;
        void *ptr;
        char _pad[64];
    } u;
} rd_kafka_vu_t;

#define RD_KAFKA_PRODUCER 0
#define RD_KAFKA_CONSUMER 1
#define RD_KAFKA_CONF_OK 0
#define RD_KAFKA_PARTITION_UA (-1)
#define RD_KAFKA_MSG_F_COPY 0x2
#define RD_KAFKA_MSG_F_PARTITION 0x8
#define RD_KAFKA_PURGE_F_QUEUE 0x1
#define RD_KAFKA_PURGE_F_INFLIGHT 0x2

#define ERR_PARTITION_EOF (-191)
#define ERR_TIMED_OUT (-185)
#define ERR_QUEUE_FULL (-184)
#define ERR_INVALID_ARG (-186)
#define ERR_FATAL (-150)
#define ERR_AUTO_OFFSET_RESET (-140)
/* Kafka's GROUP_AUTHORIZATION_FAILED: see kd_group_refusal in the consume loops. */
#define ERR_GROUP_AUTHORIZATION_FAILED 30

typedef void (*rk_error_cb_t)(rd_kafka_t *, int, const char *, void *);
typedef void (*rk_log_cb_t)(const rd_kafka_t *, int, const char *, const char *);
typedef void (*rk_dr_msg_cb_t)(rd_kafka_t *, const rd_kafka_message_t *, void *);

/* librdkafka's functions, resolved by kd_load_api() from the library confluent-kafka loaded.
 * Each group is required by one extension only (KD_NEED_*): the other leaves it NULL if this
 * librdkafka lacks it. */
struct rk_api {
    /* Both extensions. */
    rd_kafka_conf_t *(*conf_new)(void);
    int (*conf_set)(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
    void (*conf_destroy)(rd_kafka_conf_t *);
    void (*conf_set_opaque)(rd_kafka_conf_t *, void *);
    void (*conf_set_error_cb)(rd_kafka_conf_t *, rk_error_cb_t);
    rd_kafka_t *(*new_)(int, rd_kafka_conf_t *, char *, size_t);
    void (*destroy)(rd_kafka_t *);
    const char *(*err2str)(int);
    int (*fatal_error)(rd_kafka_t *, char *, size_t);
    const char *(*version_str)(void);
    int (*last_error)(void);
    /* Reads (KD_NEED_CONSUMER). */
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
    /* Writes (KD_NEED_PRODUCER). */
    void (*conf_set_dr_msg_cb)(rd_kafka_conf_t *, rk_dr_msg_cb_t);
    rd_kafka_topic_t *(*topic_new)(rd_kafka_t *, const char *, rd_kafka_topic_conf_t *);
    void (*topic_destroy)(rd_kafka_topic_t *);
    const char *(*topic_name)(const rd_kafka_topic_t *);
    int (*produce_batch)(rd_kafka_topic_t *, int32_t, int, rd_kafka_message_t *, int);
    rd_kafka_error_t *(*produceva)(rd_kafka_t *, const rd_kafka_vu_t *, size_t);
    int (*error_code)(const rd_kafka_error_t *);
    const char *(*error_string)(const rd_kafka_error_t *);
    void (*error_destroy)(rd_kafka_error_t *);
    rd_kafka_headers_t *(*headers_new)(size_t);
    int (*header_add)(rd_kafka_headers_t *, const char *, ssize_t, const void *, ssize_t);
    void (*headers_destroy)(rd_kafka_headers_t *);
    int (*poll)(rd_kafka_t *, int);
    int (*flush)(rd_kafka_t *, int);
    int (*purge)(rd_kafka_t *, int);
    int (*outq_len)(rd_kafka_t *);
    /* Optional for both: NULL when this librdkafka lacks them (kd_logs_routable() says whether
     * all are there). Together they bring the client's log lines to the thread that serves the
     * client's queue instead of librdkafka's default, a print to stderr. */
    void (*conf_set_log_cb)(rd_kafka_conf_t *, rk_log_cb_t);
    int (*set_log_queue)(rd_kafka_t *, rd_kafka_queue_t *);
    void *(*opaque)(const rd_kafka_t *);
};

extern struct rk_api rk;
extern int rk_loaded;

#define KD_NEED_CONSUMER 1
#define KD_NEED_PRODUCER 2

/* _rdkafka_abi.c */
PyObject *kd_load_api(const char *path, int needs);
int kd_logs_routable(void);
PyObject *kd_text_n(const char *s, size_t len);
PyObject *kd_text(const char *s);
extern PyObject *KafkaFailure;
PyObject *kd_fail(int code, const char *reason);
PyObject *kd_set_failure(PyObject *cls);
/* The module each extension is: load(path), logs_routable() and set_failure(cls), what
 * kafka_direct._native.loader calls on both, and the extension's one client type. `needs` says
 * which of librdkafka's functions load() requires (KD_NEED_*). */
PyObject *kd_module_new(struct PyModuleDef *def, PyTypeObject *type, const char *type_name,
                        int needs);

/* --- error events (the client's error_cb) and log lines (its log_cb) --------------------------- */

#define MAX_EVENTS 16
/* Log lines kept between two calls; older ones are dropped (and counted) past this. Normally a
 * call brings none or a few (a broker down: one FAIL line per reconnect attempt); only a
 * client with librdkafka's `debug` set comes near it. */
#define MAX_LOGS 256

typedef struct {
    int code;
    int fatal;
    char reason[512];
} event_t;

typedef struct {
    int level; /* syslog level, as librdkafka gives it */
    char facility[32];
    char text[]; /* NUL-terminated */
} logline_t;

/* Filled by librdkafka's callbacks, emptied by kd_events_take(); lock guards all but pending.
 * It is the client's opaque (rd_kafka_opaque()), or its first member. */
typedef struct {
    /* Whether anything is there, set and cleared under the lock, read without it: the common
     * take, with nothing to take, then costs neither the lock nor getpid() (a system call),
     * and reading it is safe in a forked child too. */
    atomic_int pending;
    pthread_mutex_t lock;
    event_t events[MAX_EVENTS];
    int count;
    logline_t *logs[MAX_LOGS]; /* a ring: the i-th oldest is logs[(first + i) % MAX_LOGS] */
    int first, nlogs;
    long dropped;      /* lines dropped since the last take */
    int dropped_worst; /* the most severe (lowest) level among them */
} events_t;

/* _client_events.c */
int kd_events_init(events_t *ev);
void kd_events_clear(events_t *ev);
void kd_events_destroy(events_t *ev);
PyObject *kd_events_take(events_t *ev);
rd_kafka_conf_t *kd_conf_new(PyObject *config, int routes_logs, void *opaque);
int kd_route_logs(rd_kafka_t *handle);

#endif
