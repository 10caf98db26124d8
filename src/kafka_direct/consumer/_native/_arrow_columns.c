/* kafka_direct._rdkafka_arrow: Arrow buffers from librdkafka messages. Runs in Spark executors.
 *
 * Each function turns the records of one consume call into the buffers of one Arrow column,
 * as bytes objects that pyarrow wraps without copying (kafka_direct.consumer.native._record_batch).
 */
#include "_rdkafka_arrow.h"

/* Fill a binary column's buffers from the kept records: int32 offsets, data, and a validity
 * bitmap only when some value is null (a record without a key, a tombstone). */
int kd_fill_binary(rd_kafka_message_t **rows, Py_ssize_t n, int which, PyObject **offsets_out,
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
PyObject *kd_fill_headers(rd_kafka_message_t **rows, Py_ssize_t n) {
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
