/* A front end's intake of KServe v2 infer requests over HTTP/1.1 (atoll/front_end/intake.py): a
 * thread per client connection reads each request's head and body with blocking calls and no
 * Python and queues it for the front end's event loop. The loop is woken once for all that is
 * queued (an eventfd written only when the queue was empty) and takes the requests in one call;
 * it gives each answer in one call, which writes it to the socket at once where it fits and leaves
 * the thread asleep until the client's next request (it wakes the thread only for the rest of a
 * longer answer, a close, or pipelined requests). No socket, head or body of an infer request is
 * handled in Python. What the intake does not take whole (another route,
 * chunked or encoded bodies, a restricted call without its header, a stalled head or body, a
 * connection past INTAKE_CONNECTIONS, a body past the budget) goes with the bytes read so far to
 * the front end's Python edge (`handoff`), which answers it as it always did (http1.h). Each
 * connection is announced to Python when it is accepted and when its thread ends (`opened`,
 * `closed`), so that the edge's bound on connections (`HttpConnections`) covers the intake's too:
 * it asks a connection's state and may close one that holds no request (`connection`).
 *
 * Why native: on the asyncio edge a request's socket, parse and answer were ~30 % of the loop's
 * Python (docs/benchmarks.md, "a front end's native intake").
 */
#include "http1.h"

#include <sys/eventfd.h>
#include <sys/ioctl.h>

#define THREAD_NAME "atoll-fe-http"  /* counted as the front end's by `atoll bench serve`'s CPU account */
/* A JSON body longer than this goes to the edge, which reads it into place as it comes: here it
 * would be copied into bytes on the loop at once (60 MB: ~15 ms of the loop, measured by `atoll
 * bench robust`'s health probes beside such bodies). */
#define JSON_MAX (1 << 20)

/* -- a request's body, handed to Python without a copy ----------------------------------------------- */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t length;
} Body;

static int Body_getbuffer(Body *b, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)b, b->data, b->length, 1, flags);
}

static void Body_dealloc(Body *b) {
    free(b->data);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyBufferProcs Body_buffer = {(getbufferproc)Body_getbuffer, NULL};

static PyTypeObject BodyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_intake.Body",
    .tp_basicsize = sizeof(Body),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Body_dealloc,
    .tp_as_buffer = &Body_buffer,
    .tp_doc = "A request's body as read by the intake (read-only buffer).",
};

/* -- the intake ------------------------------------------------------------------------------------- */

typedef struct Job {   /* a request for the loop, or the notice that its client went away (body NULL) */
    int slot;
    unsigned long long serial;
    char model[NAME_MAX_], version[64];
    int has_version, close;
    long long json_length;
    char *body;
    size_t length;
    struct Job *next;
} Job;

struct Intake;

typedef struct Conn {
    struct Intake *intake;
    int fd, answer_fd;  /* the client's socket; an eventfd the loop writes where the thread must act on its answer */
    int idle;           /* waiting for a request's first byte: a stop may close it */
    int arriving;       /* its request's body is being read */
    int handed;         /* handed to the edge: its descriptor is no longer the intake's */
    int slot;
    unsigned long long id;      /* the connection's, with `slot` its name in Python */
    unsigned long long serial;  /* its request's, while the loop holds one (0: none) */
    char *answer;       /* what the loop could not write of its answer (NULL: it wrote it all, or none) */
    size_t answer_len;
    int answered, answer_close, answer_none;  /* the loop has answered; then the connection closes; no answer */
    int waiting;        /* the thread waits on `answer_fd` for the answer: the loop wakes it */
    long long answered_ms;  /* when the loop wrote the last answer: the idle timer runs from then */
} Conn;

typedef struct Intake {
    PyObject_HEAD
    int listen_fds[LISTEN_MAX], n_listen, wake_fd;
    PyObject *handoff, *opened, *closed;
    PyThreadState *accept_ts;  /* the accepting thread's */
    char *rule_key, *rule_value;  /* the header an infer call must carry (NULL: none) */
    long long max_body, budget;
    int idle_ms, stall_ms, max_conns;
    atomic_llong held, requests, handed;
    pthread_mutex_t lock;
    int live, accepting, started;
    atomic_int stopping;
    Conn **slots;
    int *free_slots, n_free;
    unsigned long long serials, ids;
    Job *first, *last;
    int signaled;  /* the loop was woken for what is queued */
} Intake;

/* Give `c`'s slot back (under the lock): from then on no call from Python reaches `c`. */
static void free_slot(Intake *in, const Conn *c) {
    in->slots[c->slot] = NULL;
    in->free_slots[in->n_free++] = c->slot;
}

static void set_flag(Intake *in, int *flag, int value) {
    pthread_mutex_lock(&in->lock);
    *flag = value;
    pthread_mutex_unlock(&in->lock);
}

/* Queue `j` for the loop, waking it if nothing was queued. */
static void push(Intake *in, Job *j) {
    pthread_mutex_lock(&in->lock);
    j->next = NULL;
    if (in->last) in->last->next = j;
    else in->first = j;
    in->last = j;
    int wake = !in->signaled;
    in->signaled = 1;
    pthread_mutex_unlock(&in->lock);
    if (wake) {
        uint64_t one = 1;
        while (write(in->wake_fd, &one, sizeof one) < 0 && errno == EINTR) {}
    }
}

/* Wait until the loop has answered `c`'s request. The loop writes an answer that fits the
 * socket's buffer itself and wakes the thread only where it must (the rest of a longer answer, no
 * answer, the connection to close, or a thread that asked: `waiting`), so a kept-alive
 * connection's thread usually wakes next for the client's next request. Where the client resets
 * its connection meanwhile, the loop is told (its request is given up, as the edge does); where it
 * sends more (pipelining; `more`: the next request's bytes are in hand already) or only shuts its
 * sending side, the thread waits for the answer first. 0: the connection goes on; -1: it closes. */
static int await_answer(Conn *c, int more) {
    Intake *in = c->intake;
    int waiting = more, gone = 0;
    short seen = 0;  /* what the last poll saw on the client's socket */
    for (;;) {
        pthread_mutex_lock(&in->lock);
        int answered = c->answered, closing = c->answer_none || c->answer_close || in->stopping;
        char *rest = c->answer;
        size_t rest_len = c->answer_len;
        long long since = c->answered_ms;
        c->answer = NULL;
        waiting |= seen && !answered;  /* the client sent more, or closed, before its answer */
        c->waiting = waiting && !answered;
        unsigned long long serial = c->serial;
        pthread_mutex_unlock(&in->lock);
        if (!answered && !gone && (seen & (POLLHUP | POLLERR))) {
            Job *j = calloc(1, sizeof *j);
            if (j != NULL) {  /* (else told nothing: the answer goes to a closed socket) */
                j->slot = c->slot, j->serial = serial;
                push(in, j);
            }
            gone = 1;
        }
        if (rest) {
            struct iovec iov = {rest, rest_len};
            int rc = send_all(c->fd, &iov, 1, in->stall_ms);
            free(rest);
            if (rc) return -1;
        }
        if (answered && (closing || gone)) return -1;
        if (answered && (waiting || rest || seen)) return 0;  /* read_head sees what came */
        long long ms = answered ? since + in->idle_ms - now_ms() : in->idle_ms;
        if (ms <= 0) return -1;  /* answered, then idle for idle_ms */
        struct pollfd p[2] = {{c->answer_fd, POLLIN, 0}, {c->fd, waiting ? 0 : POLLIN, 0}};
        int n = poll(p, gone ? 1 : 2, waiting ? -1 : (int)(ms > INT_MAX ? INT_MAX : ms));
        if (n < 0 && errno != EINTR) return -1;
        if (p[0].revents & POLLIN) {
            uint64_t count;
            while (read(c->answer_fd, &count, sizeof count) < 0 && errno == EINTR) {}
        }
        seen = n > 0 && !gone ? p[1].revents : 0;
    }
}

/* A whole request in `buf` (its head `head_len` bytes long, `at_hand` bytes of its body after it):
 * its body read, then queued and answered. 0: the connection goes on; -1: it closes; 1: stalled,
 * the body's bytes so far in `*body` / `*got` for the edge. */
static int serve(Conn *c, const InferHead *q, const char *at, size_t at_hand, char **body, size_t *got) {
    Intake *in = c->intake;
    size_t length = (size_t)q->length;
    *got = at_hand < length ? at_hand : length;
    *body = malloc(length ? length : 1);
    if (*body == NULL) return -1;
    memcpy(*body, at, *got);
    set_flag(in, &c->arriving, 1);
    int rc = take_exact(c->fd, *body, -1, length, got, in->stall_ms, now_ms() + in->stall_ms);
    if (rc != 1) return rc == 0 ? 1 : -1;
    Job *j = malloc(sizeof *j);
    if (j == NULL) return -1;
    memcpy(j->model, q->model, sizeof j->model);
    memcpy(j->version, q->version, sizeof j->version);
    j->has_version = q->has_version, j->close = q->close, j->json_length = q->json_length;
    j->body = *body, j->length = length;
    *body = NULL;  /* the loop's from now on */
    pthread_mutex_lock(&in->lock);
    j->slot = c->slot, j->serial = c->serial = ++in->serials;
    c->answered = c->answer_close = c->answer_none = 0, c->arriving = 0;
    pthread_mutex_unlock(&in->lock);
    push(in, j);
    rc = await_answer(c, at_hand > length);
    pthread_mutex_lock(&in->lock);
    c->serial = 0;  /* (a request is held until its answer is written: never evicted meanwhile) */
    pthread_mutex_unlock(&in->lock);
    atomic_fetch_add(&in->requests, 1);
    return rc;
}

/* Tell Python through `f(slot, id)`; holds the GIL. */
static void announce(PyObject *f, const Conn *c) {
    Py_XDECREF(call(f, Py_BuildValue("(iK)", c->slot, c->id)));
}

static void *connection_main(void *arg) {
    Conn *c = arg;
    Intake *in = c->intake;
    int fd = c->fd;
    pthread_setname_np(pthread_self(), THREAD_NAME);
    char *buf = malloc(HEAD_MAX);
    InferHead *q = malloc(sizeof *q);
    size_t have = 0, head_len = 0;
    client_options(fd);
    PyGILState_STATE gil = PyGILState_Ensure();  /* (its Python thread state: for a hand-off) */
    PyThreadState *ts = PyEval_SaveThread();
    Idle idle = {&in->lock, &c->idle, &in->stopping};
    while (buf && q) {
        int head = read_head(fd, buf, &have, &head_len, in->idle_ms, in->stall_ms, idle);
        if (head == HEAD_CLOSE) break;
        if (head == HEAD_HAND || !infer_head(buf, head_len, in->rule_key, in->rule_value, in->max_body, q) ||
            q->json_length == -2 || (q->json_length == -1 && q->length > JSON_MAX))
            goto hand;
        if (atomic_fetch_add(&in->held, q->length) + q->length > in->budget) {
            atomic_fetch_sub(&in->held, q->length);
            goto hand;  /* the edge's own budget answers it */
        }
        size_t at_hand = have - (head_len + 4), got = 0;
        char *body = NULL;
        int rc = serve(c, q, buf + head_len + 4, at_hand, &body, &got);
        atomic_fetch_sub(&in->held, q->length);
        if (rc == 1) {  /* stalled: the edge gets what came (it answers a stall as it would) */
            set_flag(in, &c->handed, 1);
            hand_off(in->handoff, &in->handed, &ts, fd, buf, head_len + 4, body, got);
        }
        free(body);
        if (rc) break;
        size_t used = head_len + 4 + (at_hand < (size_t)q->length ? at_hand : (size_t)q->length);
        memmove(buf, buf + used, have - used);
        have -= used;
    }
    goto done;
hand:
    set_flag(in, &c->handed, 1);
    hand_off(in->handoff, &in->handed, &ts, fd, buf, have, NULL, 0);
done:
    pthread_mutex_lock(&in->lock);  /* (no `connection` call shuts `fd` once it is closed and maybe reused) */
    free_slot(in, c);
    pthread_mutex_unlock(&in->lock);
    if (!c->handed) close(fd);
    close(c->answer_fd);
    PyEval_RestoreThread(ts);
    announce(in->closed, c);
    PyGILState_Release(gil);
    free(buf);
    free(q);
    pthread_mutex_lock(&in->lock);
    in->live--;
    pthread_mutex_unlock(&in->lock);
    free(c);
    return NULL;
}

/* Tell Python of `c` through `f`, from the accepting thread. */
static void tell(Intake *in, PyObject *f, const Conn *c) {
    PyEval_RestoreThread(in->accept_ts);
    announce(f, c);
    in->accept_ts = PyEval_SaveThread();
}

/* A connection's thread for `fd`: 0, or -1 past the intake's bound (or out of memory). */
static int take_connection(void *owner, int fd) {
    Intake *in = owner;
    Conn *c = calloc(1, sizeof *c);
    int answer_fd = c ? eventfd(0, EFD_CLOEXEC) : -1;
    pthread_mutex_lock(&in->lock);
    int room = answer_fd >= 0 && in->n_free > 0;
    if (room) {
        c->intake = in, c->fd = fd, c->answer_fd = answer_fd, c->slot = in->free_slots[--in->n_free];
        c->id = ++in->ids;
        in->slots[c->slot] = c;
        in->live++;
    }
    pthread_mutex_unlock(&in->lock);
    if (room) tell(in, in->opened, c);  /* (from this thread, before its own: listed in the order accepted) */
    int started = room && start_detached(connection_main, c, STACK_BYTES) == 0;
    if (started) return 0;
    if (room) tell(in, in->closed, c);
    if (room) {
        pthread_mutex_lock(&in->lock);
        free_slot(in, c);
        in->live--;
        pthread_mutex_unlock(&in->lock);
    }
    if (answer_fd >= 0) close(answer_fd);
    free(c);
    return -1;
}

static void *accept_main(void *arg) {
    Intake *in = arg;
    pthread_setname_np(pthread_self(), THREAD_NAME);
    PyGILState_STATE gil = PyGILState_Ensure();  /* (its Python thread state for its life: `tell`) */
    in->accept_ts = PyEval_SaveThread();
    accept_loop(in->listen_fds, in->n_listen, &in->lock, &in->stopping, take_connection, in, in->handoff, &in->handed);
    PyEval_RestoreThread(in->accept_ts);
    PyGILState_Release(gil);
    pthread_mutex_lock(&in->lock);
    in->accepting = 0;
    pthread_mutex_unlock(&in->lock);
    return NULL;
}

/* -- the Python type -------------------------------------------------------------------------------- */

static int Intake_init(Intake *in, PyObject *args, PyObject *kw) {
    static char *names[] = {"listen_fds", "wake_fd", "handoff", "opened", "closed", "rule", "max_body", "budget",
                            "idle_s", "stall_s", "max_connections", NULL};
    PyObject *rule, *listen;
    double idle_s, stall_s;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiOOOOLLddi", names, &listen, &in->wake_fd, &in->handoff,
                                     &in->opened, &in->closed, &rule, &in->max_body, &in->budget, &idle_s, &stall_s,
                                     &in->max_conns))
        return -1;
    PyObject *fds = PySequence_Fast(listen, "listen_fds: a sequence of descriptors");
    if (fds == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fds);
    for (Py_ssize_t i = 0; i < n && i < LISTEN_MAX; i++)
        in->listen_fds[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(fds, i));
    Py_DECREF(fds);
    if (PyErr_Occurred()) return -1;
    if (n < 1 || n > LISTEN_MAX)
        return PyErr_Format(PyExc_ValueError, "listen_fds: 1 to %d descriptors, got %zd", LISTEN_MAX, n), -1;
    in->n_listen = (int)n;
    if (in->max_conns < 1) return PyErr_SetString(PyExc_ValueError, "max_connections must be at least 1"), -1;
    Py_INCREF(in->handoff), Py_INCREF(in->opened), Py_INCREF(in->closed);
    if (rule != Py_None) {
        const char *key, *value;
        if (!PyArg_ParseTuple(rule, "ss", &key, &value)) return -1;
        in->rule_key = strdup(key), in->rule_value = strdup(value);
    }
    in->idle_ms = (int)(idle_s * 1000), in->stall_ms = (int)(stall_s * 1000);
    in->slots = calloc((size_t)in->max_conns, sizeof *in->slots);
    in->free_slots = malloc((size_t)in->max_conns * sizeof *in->free_slots);
    if (in->slots == NULL || in->free_slots == NULL) return PyErr_NoMemory(), -1;
    for (int i = 0; i < in->max_conns; i++) in->free_slots[i] = in->max_conns - 1 - i;
    in->n_free = in->max_conns;
    pthread_mutex_init(&in->lock, NULL);
    return 0;
}

static PyObject *Intake_start(Intake *in, PyObject *unused) {
    PyObject *out = start_accepting(&in->accepting, accept_main, in);
    if (out) in->started = 1, Py_INCREF(in);  /* the threads' reference, given back by close() once they are gone */
    return out;
}

/* A request's body for Python: its memory itself (a `Body`) where only a binary-extension header
 * is JSON without input data; else a copy as bytes, since JSON tensor data is read with bytes'
 * methods (json_tensors), and that parse costs far more than the copy. */
static PyObject *body_of(Job *j) {
    size_t json = j->json_length >= 0 ? (size_t)j->json_length : j->length;
    if (j->json_length < 0 || json > j->length || memmem(j->body, json, "\"data\"", 6))
        return PyBytes_FromStringAndSize(j->body, (Py_ssize_t)j->length);
    Body *b = PyObject_New(Body, &BodyType);
    if (b != NULL) b->data = j->body, b->length = (Py_ssize_t)j->length, j->body = NULL;
    return (PyObject *)b;
}

static PyObject *Intake_take(Intake *in, PyObject *unused) {
    uint64_t count;
    while (read(in->wake_fd, &count, sizeof count) < 0 && errno == EINTR) {}  /* (non-blocking: EAGAIN is fine) */
    pthread_mutex_lock(&in->lock);
    Job *j = in->first;
    in->first = in->last = NULL;
    in->signaled = 0;
    pthread_mutex_unlock(&in->lock);
    PyObject *out = PyList_New(0);
    while (j) {
        Job *next = j->next;
        PyObject *item = NULL;
        if (out != NULL && j->body == NULL) {
            item = Py_BuildValue("(iKOOOOO)", j->slot, j->serial, Py_None, Py_None, Py_None, Py_None, Py_False);
        } else if (out != NULL) {
            PyObject *body = body_of(j);
            PyObject *json = j->json_length >= 0 ? PyLong_FromLongLong(j->json_length) : Py_NewRef(Py_None);
            if (body != NULL)
                item = Py_BuildValue("(iKszNNO)", j->slot, j->serial, j->model, j->has_version ? j->version : NULL,
                                     json, body, j->close ? Py_True : Py_False);
            else
                Py_XDECREF(json);
        }
        if (item == NULL || PyList_Append(out, item) < 0) Py_CLEAR(out);
        Py_XDECREF(item);
        free(j->body);
        free(j);
        j = next;
    }
    return out;
}

/* The loop's answer: written at once where the socket takes it all (no wake of the thread), the
 * rest left to the thread. Under the lock, as the thread's wake: it closes its descriptors only
 * once its slot is cleared under it. */
static PyObject *Intake_answer(Intake *in, PyObject *args) {
    int slot, close_after;
    unsigned long long serial;
    Py_buffer answer = {0};
    PyObject *data;
    if (!PyArg_ParseTuple(args, "iKOp", &slot, &serial, &data, &close_after)) return NULL;
    if (data != Py_None && PyObject_GetBuffer(data, &answer, PyBUF_SIMPLE) < 0) return NULL;
    int ok = 0;
    pthread_mutex_lock(&in->lock);
    Conn *c = slot >= 0 && slot < in->max_conns ? in->slots[slot] : NULL;
    if (c && c->serial == serial && !c->answered) {
        ok = 1;
        int wake = c->waiting || close_after || data == Py_None;
        ssize_t k = data == Py_None ? 0 : send(c->fd, answer.buf, (size_t)answer.len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (data == Py_None) {
            c->answer_none = 1;
        } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            c->answer_none = 1, wake = 1;  /* (the client is gone: the connection closes) */
        } else if (k < answer.len) {
            size_t done = k > 0 ? (size_t)k : 0;
            c->answer_len = (size_t)answer.len - done;
            c->answer = malloc(c->answer_len);
            if (c->answer) memcpy(c->answer, (char *)answer.buf + done, c->answer_len);
            else c->answer_none = 1;
            wake = 1;
        } else {  /* written: no longer held (until the next request's first byte a stop may close it) */
            c->idle = 1, c->serial = 0;
        }
        c->answered = 1, c->answer_close = close_after, c->answered_ms = now_ms();
        uint64_t one = 1;
        while (wake && write(c->answer_fd, &one, sizeof one) < 0 && errno == EINTR) {}
    }
    pthread_mutex_unlock(&in->lock);
    if (data != Py_None) PyBuffer_Release(&answer);
    return PyBool_FromLong(ok);
}

/* The connection `slot`, `id` if it is still live, under the lock. */
static Conn *conn_of(Intake *in, int slot, unsigned long long id) {
    Conn *c = slot >= 0 && slot < in->max_conns ? in->slots[slot] : NULL;
    return c && c->id == id && !c->handed ? c : NULL;
}

static PyObject *Intake_connection(Intake *in, PyObject *args) {
    int slot, evict;
    unsigned long long id;
    if (!PyArg_ParseTuple(args, "iKp", &slot, &id, &evict)) return NULL;
    pthread_mutex_lock(&in->lock);
    Conn *c = conn_of(in, slot, id);
    int pending = 0;  /* (a request in the socket that its thread has not read yet: on its way, not idle) */
    if (c && c->idle) ioctl(c->fd, FIONREAD, &pending);
    const char *state = c == NULL ? "closed" : c->serial ? "holds" : c->idle && pending == 0 ? "open" : "arriving";
    if (evict && c && !c->serial) shutdown(c->fd, SHUT_RDWR);  /* (its thread sees it closed, and ends) */
    pthread_mutex_unlock(&in->lock);
    return PyUnicode_FromString(state);
}

static PyObject *Intake_stop_accepting(Intake *in, PyObject *unused) {
    pthread_mutex_lock(&in->lock);
    in->stopping = 1;
    for (int i = 0; i < in->n_listen; i++) shutdown(in->listen_fds[i], SHUT_RDWR);  /* wakes the accepting thread */
    for (int i = 0; i < in->max_conns; i++)
        if (in->slots[i] && in->slots[i]->idle && !in->slots[i]->handed) shutdown(in->slots[i]->fd, SHUT_RDWR);
    pthread_mutex_unlock(&in->lock);
    Py_RETURN_NONE;
}

static PyObject *Intake_force(Intake *in, PyObject *unused) {
    pthread_mutex_lock(&in->lock);
    for (int i = 0; i < in->max_conns; i++)
        if (in->slots[i] && !in->slots[i]->handed) shutdown(in->slots[i]->fd, SHUT_RDWR);
    pthread_mutex_unlock(&in->lock);
    Py_RETURN_NONE;
}

static PyObject *Intake_live(Intake *in, PyObject *unused) {
    pthread_mutex_lock(&in->lock);
    int live = in->live + in->accepting;
    pthread_mutex_unlock(&in->lock);
    return PyLong_FromLong(live);
}

static PyObject *Intake_close(Intake *in, PyObject *unused) {
    pthread_mutex_lock(&in->lock);
    int gone = in->started && !in->live && !in->accepting;
    if (gone) in->started = 0;
    pthread_mutex_unlock(&in->lock);
    if (gone) Py_DECREF(in);  /* (a thread still live keeps the intake alive) */
    return PyBool_FromLong(gone);
}

static PyObject *Intake_held(Intake *in, PyObject *unused) {
    return PyLong_FromLongLong((long long)atomic_load(&in->held));
}

static PyObject *Intake_counts(Intake *in, PyObject *unused) {
    return Py_BuildValue("{sLsLsLsi}", "requests", (long long)atomic_load(&in->requests), "handed",
                         (long long)atomic_load(&in->handed), "held", (long long)atomic_load(&in->held), "live",
                         in->live);
}

static void Intake_dealloc(Intake *in) {
    Py_XDECREF(in->handoff), Py_XDECREF(in->opened), Py_XDECREF(in->closed);
    free(in->rule_key), free(in->rule_value);
    free(in->slots), free(in->free_slots);
    for (Job *j = in->first, *next; j; j = next) next = j->next, free(j->body), free(j);
    Py_TYPE(in)->tp_free((PyObject *)in);
}

static PyMethodDef Intake_methods[] = {
    {"start", (PyCFunction)Intake_start, METH_NOARGS, "Accept on the listening socket, a thread per connection."},
    {"take", (PyCFunction)Intake_take, METH_NOARGS,
     "What is queued, in order: (slot, serial, model, version, json_length, body, close) per request, the "
     "body a read-only buffer (a binary request's) or bytes; (slot, serial, None, ...) where a request's "
     "client went away."},
    {"answer", (PyCFunction)Intake_answer, METH_VARARGS,
     "answer(slot, serial, data, close): the whole HTTP answer to a request taken (None: none, the "
     "connection closes); False where the request is no longer waiting."},
    {"connection", (PyCFunction)Intake_connection, METH_VARARGS,
     "connection(slot, id, evict): its state, 'open' (waiting for a request's first byte), 'arriving' (a "
     "request on its way: in the socket, or being read), 'holds' (a request with the loop, or its answer "
     "being written) or 'closed'; with `evict`, one that holds no request is closed."},
    {"stop_accepting", (PyCFunction)Intake_stop_accepting, METH_NOARGS,
     "Accept no more and close the idle connections; those with a request close once it is answered."},
    {"force", (PyCFunction)Intake_force, METH_NOARGS, "Shut every connection (their requests are given up)."},
    {"live", (PyCFunction)Intake_live, METH_NOARGS, "Threads still running (connections, and the accepting one)."},
    {"close", (PyCFunction)Intake_close, METH_NOARGS,
     "Once no thread runs, drop the threads' reference; whether none ran."},
    {"held", (PyCFunction)Intake_held, METH_NOARGS, "Bytes of bodies held now."},
    {"counts", (PyCFunction)Intake_counts, METH_NOARGS, "Requests answered, connections handed on, body bytes held."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IntakeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_intake.Intake",
    .tp_basicsize = sizeof(Intake),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Intake_init,
    .tp_dealloc = (destructor)Intake_dealloc,
    .tp_methods = Intake_methods,
    .tp_doc = "A front end's native intake of infer requests (see intake.c).",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_intake", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__intake(void) {
    if (PyType_Ready(&BodyType) < 0 || PyType_Ready(&IntakeType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&IntakeType);
    if (PyModule_AddObject(m, "Intake", (PyObject *)&IntakeType) < 0) return Py_DECREF(m), NULL;
    return m;
}
