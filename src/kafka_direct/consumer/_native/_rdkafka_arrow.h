/* kafka_direct.consumer._rdkafka_arrow: what its C units share. See _rdkafka_arrow.c for what
 * the extension is and why it exists.
 *
 * Units: _arrow_columns.c (Arrow buffers from librdkafka messages), _rdkafka_consume.c
 * (Consumer.consume), _rdkafka_consume_many.c (the
 * reads of a packed task: Consumer.assign_many, Consumer.consume_many), _rdkafka_arrow.c (the rest of the Consumer type and the module), and the
 * units shared with the producer's extension, in src/kafka_direct/_native/ (librdkafka resolved
 * at run time, error events and log lines: _rdkafka_abi.h).
 * All run in Spark executors (Python workers). Compiled with -fvisibility=hidden: only the
 * module's init function is exported.
 */
#ifndef KAFKA_DIRECT_RDKAFKA_ARROW_H
#define KAFKA_DIRECT_RDKAFKA_ARROW_H

#include "_rdkafka_abi.h"

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
    /* Whether the handle's log lines come to take_events() (else it runs with log_level 0). */
    int routes_logs;
} Consumer;

/* _rdkafka_arrow.c */
int kd_enter(Consumer *self);

/* _rdkafka_consume.c */
Py_ssize_t kd_take(rd_kafka_queue_t *queue, rd_kafka_message_t **msgs, Py_ssize_t max_messages,
                   Py_ssize_t max_bytes, double timeout_s, int headers, int *failed);
PyObject *kd_consume(Consumer *self, PyObject *args);

/* _rdkafka_consume_many.c */
PyObject *kd_assign_many(Consumer *self, PyObject *args);
PyObject *kd_consume_many(Consumer *self, PyObject *args);

/* _arrow_columns.c */
int kd_fill_binary(rd_kafka_message_t **rows, Py_ssize_t n, int which, PyObject **offsets_out,
                   PyObject **data_out, PyObject **validity_out);
PyObject *kd_fill_headers(rd_kafka_message_t **rows, Py_ssize_t n);

#endif
