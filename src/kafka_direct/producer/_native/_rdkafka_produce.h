/* kafka_direct.producer._rdkafka_produce: what its C units share. See _rdkafka_produce.c for
 * what the extension is and why it exists.
 *
 * Units: _rdkafka_produce.c (the Producer type: creation, delivery reports, poll, flush, purge,
 * close; and the module), _produce_loop.c (Producer.produce: the rows of an Arrow batch into
 * librdkafka), and the units shared with the consumer's extension, in src/kafka_direct/_native/
 * (librdkafka resolved at run time, error events and log lines: _rdkafka_abi.h).
 * All run in Spark executors (Python workers). Compiled with -fvisibility=hidden: only the
 * module's init function is exported.
 */
#ifndef KAFKA_DIRECT_RDKAFKA_PRODUCE_H
#define KAFKA_DIRECT_RDKAFKA_PRODUCE_H

#include "_rdkafka_abi.h"

/* The client's opaque: error events and log lines first (the shared callbacks read the opaque
 * as events_t), then the delivery reports, which dr_msg_cb writes under events.lock. */
typedef struct {
    events_t events;
    /* Set once the first failed delivery is recorded: delivery_error() then takes the lock. */
    atomic_int dr_failed_any;
    long dr_failed;        /* records whose delivery failed, since the producer was made */
    int dr_code;           /* the first failure: librdkafka's error code, */
    int32_t dr_partition;  /* its partition (-1: none was assigned yet), */
    char dr_topic[256];    /* its topic, */
    char dr_reason[256];   /* and the error's text */
} pstate_t;

/* Topic handles by name, for the 'topic' option and a 'topic' column: rd_kafka_topic_new()
 * looks a name up under a lock, once per distinct topic here instead of once per record. */
#define MAX_TOPICS 64

typedef struct {
    char *name; /* NUL-terminated copy */
    size_t len;
    rd_kafka_topic_t *rkt;
} topic_entry_t;

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
    pstate_t *state;
    topic_entry_t topics[MAX_TOPICS];
    int ntopics;
    /* produce_batch()'s messages and their rows, reused from call to call. */
    rd_kafka_message_t *msgs;
    Py_ssize_t *rows;
    /* Set while a call uses the handle, the topics or msgs, across its GIL release: a second
     * thread (or a close()) then gets an error instead of using or freeing them under the
     * first. */
    int busy;
    /* librdkafka's threads do not survive fork(): a child must not use the parent's handle. */
    pid_t pid;
    /* Whether the handle's log lines come to take_events() (else it runs with log_level 0). */
    int routes_logs;
    /* How often produce() found the queue full and waited for room (for tests and users). */
    atomic_long full_waits;
} Producer;

/* Messages handed to produce_batch() at once (the size of msgs and rows). */
#define PRODUCE_RUN 1024

/* How long one wait for room in a full queue lasts before the records are offered again, as
 * the Python path's FULL_QUEUE_WAIT_S. */
#define FULL_QUEUE_WAIT_MS 2

/* _rdkafka_produce.c */
int kd_producer_enter(Producer *self);
rd_kafka_topic_t *kd_topic(Producer *self, const char *name, size_t len, int *err);
int kd_delivery_failed(Producer *self);

/* _produce_loop.c */
PyObject *kd_produce(Producer *self, PyObject *args);

#endif
