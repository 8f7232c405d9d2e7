/* HTTP/1.1 over blocking C threads, shared by the native paths that take KServe v2 infer requests
 * off an event loop: the cluster endpoint's relay (atoll/cluster/native/relay.c) and a front end's
 * intake (atoll/front_end/native/intake.c). Each connection is a thread that reads a request's head
 * and body with no Python; what such a thread does not take whole (another route, an encoded or
 * chunked body, a restricted call without its header, a stalled head or body) it hands, with the
 * bytes read so far, to the process's Python edge (`HttpServer.adopt`), which answers as it always
 * did. Header-only: each extension includes it (gpu_runtime.native hashes it with the sources).
 */
#ifndef ATOLL_HTTP1_H
#define ATOLL_HTTP1_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define LISTEN_MAX 4        /* listening sockets one accepting thread serves */
#define HEAD_MAX 16384      /* a request's or an answer's head; a longer one goes to the Python edge */
#define NAME_MAX_ 256       /* a model name in a path */
#define LOWAT_CHECK_MS 200  /* a body awaited with SO_RCVLOWAT is looked at this often all the same */
#define STACK_BYTES (256 * 1024)

/* -- time and sockets ------------------------------------------------------------------------------ */

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* 1: readable (as SO_RCVLOWAT counts), 0: `ms` passed, -1: error */
static int wait_in(int fd, long long ms) {
    struct pollfd p = {fd, POLLIN, 0};
    if (ms < 0) ms = 0;
    for (;;) {
        int n = poll(&p, 1, (int)(ms > INT_MAX ? INT_MAX : ms));
        if (n < 0 && errno == EINTR) continue;
        return n < 0 ? -1 : n;
    }
}

static void set_lowat(int fd, long long n) {
    int v = n > (1 << 30) ? (1 << 30) : (int)n;
    setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v);
}

/* Take `n` bytes from socket `fd` into `dst` or, where `pipe_w` is a pipe (not -1), into that pipe
 * (splice: the kernel's pages passed on, not copied); *got counts them. 1: whole; 0: nothing came
 * for `stall_ms` or the deadline (0: none) passed; -1: the peer closed or failed. The first read
 * does not wait: a body sent with its head is mostly whole in the socket by the time the head is
 * read, and taking it at once spares the wait's three calls (strace of the relay: set the mark,
 * poll, take, reset the mark). What is still on its way the thread waits for once (SO_RCVLOWAT), not
 * at every segment; it also looks every LOWAT_CHECK_MS, and its reads never block: where the kernel
 * holds fewer bytes than the bound and its wake-up does not come (the window closed under memory
 * pressure), the sender could send no more and both would wait. */
static int take_exact(int fd, char *dst, int pipe_w, size_t n, size_t *got, int stall_ms, long long deadline) {
    int rc = 1, raised = 0, wait = 0;
    long long quiet_until = now_ms() + stall_ms;
    while (*got < n) {
        if (wait) {
            if (!raised && *got + 1 < n) set_lowat(fd, n - *got), raised = 1;
            long long now = now_ms(), ms = quiet_until - now;
            if (deadline && deadline - now < ms) ms = deadline - now;
            if (ms <= 0) { rc = 0; break; }
            if (raised && ms > LOWAT_CHECK_MS) ms = LOWAT_CHECK_MS;
            if (wait_in(fd, ms) < 0) { rc = -1; break; }
        }
        wait = 1;
        ssize_t k = pipe_w >= 0 ? splice(fd, NULL, pipe_w, NULL, n - *got, SPLICE_F_MOVE | SPLICE_F_NONBLOCK)
                                : recv(fd, dst + *got, n - *got, MSG_DONTWAIT);
        if (k == 0) { rc = -1; break; }
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            rc = -1;
            break;
        }
        *got += (size_t)k;
        quiet_until = now_ms() + stall_ms;
        if (raised && *got < n) set_lowat(fd, n - *got), raised = n - *got > 1;
    }
    if (raised) set_lowat(fd, 1);
    return rc;
}

/* Write all of `iov`. A client's socket is non-blocking (splice(2) from a blocking one would wait
 * in the kernel): where it is full, wait up to `wait_ms` for room (0: a node's blocking socket,
 * bounded by its SO_SNDTIMEO). 0, or -1 with errno (EAGAIN: no room in time). */
static int send_all(int fd, struct iovec *iov, int n, int wait_ms) {
    while (n > 0) {
        ssize_t k = writev(fd, iov, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait_ms > 0) {
                struct pollfd p = {fd, POLLOUT, 0};
                int w = poll(&p, 1, wait_ms);
                if (w > 0 || (w < 0 && errno == EINTR)) continue;
                errno = w == 0 ? EAGAIN : errno;
            }
            return -1;
        }
        while (n > 0 && (size_t)k >= iov->iov_len) {
            k -= (ssize_t)iov->iov_len;
            iov++, n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + k;
            iov->iov_len -= (size_t)k;
        }
    }
    return 0;
}

static void client_options(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);  /* (send_all) */
}

/* -- heads ------------------------------------------------------------------------------------------ */

typedef struct Line {
    const char *name, *value;
    size_t name_len, value_len, whole_len; /* whole: the line without its CRLF */
    const char *whole;
} Line;

/* The header lines of a head (after its first line) up to the blank line at `end`; -1 if one is
 * malformed or there are too many (the caller hands such a request on). */
static int header_lines(const char *p, const char *end, Line *lines, int cap) {
    int n = 0;
    while (p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        if (eol == NULL || eol[1] != '\n' || n == cap) return -1;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon == NULL || colon == p) return -1;
        for (const char *c = p; c < colon; c++)
            if (*c <= ' ' || *c >= 127) return -1;  /* also rejects obs-fold (a line starting with space) */
        const char *v = colon + 1, *ve = eol;
        while (v < ve && (*v == ' ' || *v == '\t')) v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        for (const char *c = v; c < ve; c++)
            if ((unsigned char)*c < ' ' && *c != '\t') return -1;
        lines[n].name = p, lines[n].name_len = (size_t)(colon - p);
        lines[n].value = v, lines[n].value_len = (size_t)(ve - v);
        lines[n].whole = p, lines[n].whole_len = (size_t)(eol - p);
        n++;
        p = eol + 2;
    }
    return n;
}

static int named(const Line *l, const char *name) {
    return l->name_len == strlen(name) && strncasecmp(l->name, name, l->name_len) == 0;
}

/* A decimal value of at most 18 digits, else -1. */
static long long digits(const char *v, size_t n) {
    if (n == 0 || n > 18) return -1;
    long long x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

static int has_token(const char *v, size_t n, const char *token) {
    size_t t = strlen(token);
    for (size_t i = 0; i + t <= n; i++)
        if (strncasecmp(v + i, token, t) == 0 && (i == 0 || v[i - 1] == ',' || v[i - 1] == ' ') &&
            (i + t == n || v[i + t] == ',' || v[i + t] == ' '))
            return 1;
    return 0;
}

/* One path segment of a model name or version: visible ASCII, no '/', '?', '%' or '#' (a
 * percent-encoded name goes to the Python edge, which decodes it). */
static size_t segment(const char *p, const char *end) {
    const char *s = p;
    while (s < end && *s > ' ' && *s < 127 && *s != '/' && *s != '?' && *s != '%' && *s != '#') s++;
    return (size_t)(s - p);
}

typedef struct InferHead {
    const char *target;
    size_t target_len;
    char model[NAME_MAX_], version[64];
    int has_version;
    long long length, json_length;  /* json_length: -1 none (a JSON body), -2 unreadable */
    int close;
    Line lines[64];
    int n_lines;
} InferHead;

/* Whether the head (`head`, `head_len` bytes up to and without its blank line's CRLF) is an infer
 * request (POST /v2/models/<model>[/versions/<version>]/infer, HTTP/1.1, a Content-Length of at
 * most `max_body`, no transfer or content encoding, no Expect or Upgrade) that carries the header
 * `rule_key: rule_value` where one is given; fills `q`. */
static int infer_head(const char *head, size_t head_len, const char *rule_key, const char *rule_value,
                      long long max_body, InferHead *q) {
    const char *end = head + head_len, *eol = memchr(head, '\r', head_len);
    static const char method[] = "POST ", prefix[] = "/v2/models/", version[] = " HTTP/1.1";
    if (eol == NULL || (size_t)(eol - head) < sizeof method - 1 + sizeof prefix - 1 + sizeof version - 1)
        return 0;
    if (memcmp(head, method, sizeof method - 1) || memcmp(eol - (sizeof version - 1), version, sizeof version - 1))
        return 0;
    q->target = head + sizeof method - 1;
    const char *target_end = eol - (sizeof version - 1);
    q->target_len = (size_t)(target_end - q->target);
    if (memcmp(q->target, prefix, sizeof prefix - 1)) return 0;
    const char *p = q->target + sizeof prefix - 1;
    size_t n = segment(p, target_end);
    if (n == 0 || n >= sizeof q->model) return 0;
    memcpy(q->model, p, n), q->model[n] = 0, p += n;
    q->has_version = 0;
    if ((size_t)(target_end - p) > 10 && memcmp(p, "/versions/", 10) == 0) {
        p += 10;
        n = segment(p, target_end);
        if (n == 0 || n >= sizeof q->version) return 0;
        memcpy(q->version, p, n), q->version[n] = 0, p += n, q->has_version = 1;
    }
    if ((size_t)(target_end - p) != 6 || memcmp(p, "/infer", 6)) return 0;
    q->n_lines = header_lines(eol + 2, end + 2, q->lines, 64);
    if (q->n_lines < 0) return 0;
    q->length = q->json_length = -1;
    q->close = 0;
    int rule_met = rule_key == NULL;
    for (int i = 0; i < q->n_lines; i++) {
        const Line *l = &q->lines[i];
        if (named(l, "content-length")) {
            if (q->length >= 0) return 0;
            q->length = digits(l->value, l->value_len);
            if (q->length < 0) return 0;
        } else if (named(l, "transfer-encoding") || named(l, "content-encoding") || named(l, "expect") ||
                   named(l, "upgrade")) {
            return 0;
        } else if (named(l, "connection")) {
            if (has_token(l->value, l->value_len, "upgrade")) return 0;
            q->close |= has_token(l->value, l->value_len, "close");
        } else if (named(l, "inference-header-content-length")) {
            q->json_length = l->value_len ? digits(l->value, l->value_len) : -1;
            if (q->json_length == -1 && l->value_len) q->json_length = -2;  /* unreadable */
        }
        if (rule_key && named(l, rule_key) && l->value_len == strlen(rule_value) &&
            memcmp(l->value, rule_value, l->value_len) == 0)
            rule_met = 1;
    }
    return rule_met && q->length >= 0 && q->length <= max_body;
}

/* -- a connection's head ------------------------------------------------------------------------------ */

enum { HEAD_READ, HEAD_CLOSE, HEAD_HAND };

/* Where a connection thread says whether it waits for a request's first byte (`*idle`, under
 * `lock`: a stop may then close it) and learns of a stop (`*stopping`). */
typedef struct Idle {
    pthread_mutex_t *lock;
    int *idle;
    atomic_int *stopping;
} Idle;

static void set_idle(Idle w, int idle) {
    pthread_mutex_lock(w.lock);
    *w.idle = idle;
    pthread_mutex_unlock(w.lock);
}

/* Read until `buf` (HEAD_MAX bytes, `*have` of them read already) holds a whole head; its length
 * without the blank line's CRLF in `*head_len`. HEAD_READ; HEAD_CLOSE: nothing came within
 * `idle_ms`, the peer closed or failed between requests, or the server stops; HEAD_HAND: the head
 * is too long, stalled past `stall_ms` from its first byte, or cut short (the edge answers it). */
static int read_head(int fd, char *buf, size_t *have, size_t *head_len, int idle_ms, int stall_ms, Idle w) {
    char *blank = *have >= 4 ? memmem(buf, *have, "\r\n\r\n", 4) : NULL;
    long long head_by = *have ? now_ms() + stall_ms : 0;  /* a head's first byte to its end */
    while (blank == NULL) {
        if (*have == 0) {
            pthread_mutex_lock(w.lock);
            int stopping = *w.stopping;
            *w.idle = !stopping;
            pthread_mutex_unlock(w.lock);
            if (stopping) return HEAD_CLOSE;
        }
        if (*have == HEAD_MAX) return HEAD_HAND;
        int got = wait_in(fd, *have ? head_by - now_ms() : idle_ms);
        if (got < 0 || (got == 0 && *have == 0)) return HEAD_CLOSE;
        if (got == 0) return HEAD_HAND;
        ssize_t k = recv(fd, buf + *have, HEAD_MAX - *have, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return *have ? HEAD_HAND : HEAD_CLOSE;  /* half-closed after part of a request: the edge answers */
        if (*have == 0) set_idle(w, 0), head_by = now_ms() + stall_ms;
        size_t from = *have > 3 ? *have - 3 : 0;
        *have += (size_t)k;
        blank = memmem(buf + from, *have - from, "\r\n\r\n", 4);
    }
    *head_len = (size_t)(blank - buf);
    return HEAD_READ;
}

/* -- Python's side ---------------------------------------------------------------------------------- */

/* A callback's result; on an exception (a bug) it is logged and NULL returned. Holds the GIL. */
static PyObject *call(PyObject *f, PyObject *args) {
    if (args == NULL) {
        PyErr_WriteUnraisable(f);
        return NULL;
    }
    PyObject *out = PyObject_CallObject(f, args);
    Py_DECREF(args);
    if (out == NULL) PyErr_WriteUnraisable(f);
    return out;
}

/* Give `fd` to the Python edge through `handoff(fd, prefix)` with the bytes read of it (`a`, then
 * `b`); `ts`: the calling thread's Python thread state (NULL: it has none). */
static void hand_off(PyObject *handoff, atomic_llong *handed, PyThreadState **ts, int fd, const char *a, size_t a_len,
                     const char *b, size_t b_len) {
    atomic_fetch_add(handed, 1);
    PyGILState_STATE gil = PyGILState_UNLOCKED;
    if (ts) PyEval_RestoreThread(*ts);
    else gil = PyGILState_Ensure();
    PyObject *prefix = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(a_len + b_len));
    if (prefix) {
        memcpy(PyBytes_AS_STRING(prefix), a, a_len);
        if (b_len) memcpy(PyBytes_AS_STRING(prefix) + a_len, b, b_len);
    }
    PyObject *out = prefix ? call(handoff, Py_BuildValue("(iN)", fd, prefix)) : NULL;
    if (out == NULL) close(fd);  /* (the callback owns `fd` once called) */
    Py_XDECREF(out);
    if (ts) *ts = PyEval_SaveThread();
    else PyGILState_Release(gil);
}

/* -- threads and accepting -------------------------------------------------------------------------- */

/* Start `main(arg)` on a detached thread (`stack` bytes of stack; 0: the default): 0, or an errno. */
static int start_detached(void *(*main)(void *), void *arg, size_t stack) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stack) pthread_attr_setstacksize(&attr, stack);
    int e = pthread_create(&t, &attr, main, arg);
    pthread_attr_destroy(&attr);
    return e;
}

/* Start `main(owner)` as the accepting thread, `*accepting` set while it runs: None, or NULL with
 * OSError raised. */
static PyObject *start_accepting(int *accepting, void *(*main)(void *), void *owner) {
    *accepting = 1;
    int e = start_detached(main, owner, 0);
    if (e) {
        *accepting = 0;
        errno = e;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* Accept on the `n` listening sockets `fds` until `*stopping` (read under `lock`), or until each is
 * shut: `take(owner, fd)` starts a connection's thread (0) or declines (-1: past its bound, or out
 * of memory), and the connection then goes to the Python edge, whose own bound applies. A listener
 * others share (a server's local socket, local_socket.py: non-blocking, as each process polls it)
 * may be shut by another process's stop: it leaves the poll, not the loop. */
static void accept_loop(const int *fds, int n, pthread_mutex_t *lock, atomic_int *stopping, int (*take)(void *, int),
                        void *owner, PyObject *handoff, atomic_llong *handed) {
    struct pollfd p[LISTEN_MAX];
    int open = n < LISTEN_MAX ? n : LISTEN_MAX, turn = 0;
    for (int i = 0; i < open; i++) p[i] = (struct pollfd){fds[i], POLLIN, 0};
    while (open > 0) {
        int ready = poll(p, (nfds_t)open, -1), at = turn % open, fd = -1, e = errno;
        if (ready > 0) {
            while (!p[at].revents) at = (at + 1) % open;  /* (from the one after the last served: none starves) */
            turn = at + 1;
            if (!(p[at].revents & POLLIN)) {  /* shut (by a stop, here or in another process) or broken */
                p[at] = p[--open];
                continue;
            }
            fd = accept4(p[at].fd, NULL, NULL, SOCK_CLOEXEC);
            e = errno;
        }
        pthread_mutex_lock(lock);
        int stop = *stopping;
        pthread_mutex_unlock(lock);
        if (stop) {
            if (fd >= 0) close(fd);
            return;
        }
        if (fd >= 0) {
            if (take(owner, fd)) hand_off(handoff, handed, NULL, fd, "", 0, NULL, 0);
        } else if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
            usleep(10000);
        } else if (ready > 0 && e != EAGAIN && e != EINTR && e != ECONNABORTED) {
            p[at] = p[--open];  /* (shut, where it still polls readable: its accept fails) */
        }
    }
}

#endif
