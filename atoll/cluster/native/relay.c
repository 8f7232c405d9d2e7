/* The cluster endpoint's relay for KServe v2 infer requests over HTTP/1.1 (atoll/cluster/relay.py):
 * a thread per client connection reads each request with blocking calls and no Python, sends it to
 * a node and writes the node's answer back. A best-effort request's first try goes where the
 * routing table Python publishes says (routes.h), with no Python; the rest (a request naming
 * "priority", a model the table lacks, every try after one that failed or was refused) is routed
 * by the endpoint's Python (`route`, `resume`, `answered`: calls under the GIL). Anything it does
 * not take whole (another route, a head or body that stalls, chunked or encoded bodies, a
 * restricted call without its header, a connection past its bound) is handed with the bytes read
 * so far to the endpoint's Python edge (`handoff`), which owns the connection from then on and
 * answers as it always did.
 *
 * Why native: the relay's work is a few system calls a request; in Python on asyncio it was ~335
 * calls of Python and 0.24 CPU-ms a request (docs/benchmarks.md, "the cluster endpoint").
 */
#include "http1.h"
#include "routes.h"

#include <netdb.h>
#include <stddef.h>
#include <sys/un.h>

#define POOL_MAX 64         /* kept-alive connections per node (as node_client.MAX_IDLE) */
#define ADDR_MAX NAME_MAX_
#define NAMES_MAX 32
#define KEEP_BODY (4 << 20)  /* a connection keeps its body buffer between requests up to this size */
#define SPLICE_MIN (64 * 1024)  /* a binary part at least this long goes through pipes, not memory */
#define CC_MAX 4            /* congestion controls to try on a node connection */

typedef struct Node {
    char addr[ADDR_MAX];
    int idle[POOL_MAX];
    int n_idle;
    struct Node *next;
} Node;

struct Relay;

typedef struct Conn {
    struct Relay *relay;
    int fd;
    int idle;     /* waiting for a request's first byte: stop may close it */
    int node_fd;  /* the node connection its request is on (-1: none): a forced stop shuts it */
    int keep[2], out[2];  /* pipes: a body's binary part as received, and its copy for one try (-1: none) */
    size_t pipe_cap, pipe_refused;  /* what they hold; the least the system refused them (0: none) */
    struct Conn *prev, *next;
} Conn;

typedef struct Relay {
    PyObject_HEAD
    int listen_fd;
    PyObject *route, *resume, *answered, *failed, *handoff;
    Routing *routing;            /* the counts and the table of first tries (routes.h) */
    char *hop[NAMES_MAX];        /* lower-case header names not passed on (either way) */
    int n_hop;
    char *rule_key, *rule_value; /* the header an infer call must carry (NULL: none) */
    long long max_body, budget, timeout_ms;
    int idle_ms, stall_ms, max_conns;
    atomic_llong held;           /* bytes of bodies in hand */
    atomic_llong requests, handed;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int live, accepting;
    atomic_int stopping, forced;
    Conn *conns;
    Node *nodes;
    int null_fd;  /* /dev/null, where a pipe's pages are dropped */
    char *cc[CC_MAX];  /* the node connections' congestion control: the first the kernel allows */
    int n_cc;
} Relay;

/* -- bodies through pipes ----------------------------------------------------------------------------
 * A request's binary part (past its JSON header) is moved from the client's socket into a pipe and
 * from there to the node's socket by splice(2): the kernel passes its pages on instead of copying
 * them into this process and out again (for a 600 KB tensor, ~30 % of the relay's CPU). `tee` gives
 * each try its own copy of the pages, so a refused request can go to another node. A pipe holds a
 * body whole (F_SETPIPE_SZ); where the system refuses that (fs.pipe-max-size, the per-user pipe
 * budget), the body is read into memory as any other. */

static void drop_pipe(const Relay *r, int rfd, size_t n) {
    while (n > 0) {
        ssize_t k = splice(rfd, NULL, r->null_fd, NULL, n, SPLICE_F_NONBLOCK);
        if (k <= 0) break;
        n -= (size_t)k;
    }
}

/* Whether the connection's pipes hold `n` bytes each, made or grown now. */
static int pipes_fit(Conn *c, size_t n) {
    if (c->pipe_cap >= n) return 1;
    if (n > INT_MAX || (c->pipe_refused && n >= c->pipe_refused)) return 0;
    for (int i = 0; i < 2; i++) {
        int *p = i ? c->out : c->keep;
        int got = p[0] >= 0 || pipe2(p, O_CLOEXEC) == 0 ? fcntl(p[1], F_SETPIPE_SZ, (int)n) : -1;
        if (got < 0 || (size_t)got < n) {
            c->pipe_refused = n;  /* (not asked again on this connection for as much) */
            return 0;
        }
    }
    c->pipe_cap = n;
    return 1;
}

/* Send the `n` bytes held in `c`'s keep pipe to `fd`, leaving them there for another try. 0, or
 * -1 with errno. */
static int send_kept(const Relay *r, Conn *c, int fd, size_t n) {
    size_t teed = 0, sent = 0;
    while (teed < n) {
        ssize_t k = tee(c->keep[0], c->out[1], n - teed, 0);
        if (k <= 0) return drop_pipe(r, c->out[0], teed), errno = k ? errno : EIO, -1;
        teed += (size_t)k;
    }
    while (sent < n) {
        ssize_t k = splice(c->out[0], NULL, fd, NULL, n - sent, SPLICE_F_MOVE);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k ? errno : EPIPE;
            drop_pipe(r, c->out[0], n - sent);
            errno = e;
            return -1;
        }
        sent += (size_t)k;
    }
    return 0;
}

/* -- heads ------------------------------------------------------------------------------------------ */

static int hop(const Relay *r, const Line *l) {
    for (int i = 0; i < r->n_hop; i++)
        if (named(l, r->hop[i])) return 1;
    return 0;
}

typedef struct Request {
    InferHead h;
    size_t spliced;  /* the body's last bytes, in the connection's `keep` pipe (0: all in memory) */
} Request;

/* -- the nodes' connections ------------------------------------------------------------------------- */

static Node *node_of(Relay *r, const char *addr) {
    for (Node *n = r->nodes; n; n = n->next)
        if (strcmp(n->addr, addr) == 0) return n;
    Node *n = calloc(1, sizeof *n);
    if (n == NULL) return NULL;
    snprintf(n->addr, sizeof n->addr, "%s", addr);
    n->next = r->nodes;
    r->nodes = n;
    return n;
}

static int kept(Relay *r, const char *addr) {
    int fd = -1;
    pthread_mutex_lock(&r->lock);
    Node *n = node_of(r, addr);
    if (n && n->n_idle) fd = n->idle[--n->n_idle];
    pthread_mutex_unlock(&r->lock);
    return fd;
}

static void keep(Relay *r, const char *addr, int fd) {
    pthread_mutex_lock(&r->lock);
    Node *n = node_of(r, addr);
    if (n && n->n_idle < POOL_MAX && !r->stopping) n->idle[n->n_idle++] = fd, fd = -1;
    pthread_mutex_unlock(&r->lock);
    if (fd >= 0) close(fd);
}

/* A node that stops reading holds a send on `fd` (or a connect to a local socket whose backlog is
 * full) no longer than a request may wait. */
static void bound_sends(const Relay *r, int fd) {
    struct timeval tv = {r->timeout_ms / 1000, (r->timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* A connection to the node's local socket, abstract name `name` (atoll/http/local_socket.py): its
 * descriptor, or -1 (GONE, `why` says why). */
static int connect_local(const Relay *r, const char *name, char *why, size_t why_len) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    if (n + 1 > sizeof a.sun_path) return snprintf(why, why_len, "cannot connect to @%s: name too long", name), -1;
    memcpy(a.sun_path + 1, name, n);  /* (sun_path[0] = 0: the abstract namespace) */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        bound_sends(r, fd);
        /* room for a large body at once (as TCP's autotuning gives), so the send does not wait for
         * the node to read in turns: up to net.core.wmem_max */
        int room = KEEP_BODY;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
    }
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n))) {
        snprintf(why, why_len, "cannot connect to @%s: %s", name, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

/* A TCP connection to the node at `addr` ("host:port", "[v6]:port") by `deadline`: its
 * descriptor, -1 (GONE, `why` says why) or -2 (TIMED_OUT). */
static int connect_tcp(const Relay *r, const char *addr, long long deadline, char *why, size_t why_len) {
    char host[ADDR_MAX];
    snprintf(host, sizeof host, "%s", addr);
    char *colon = strrchr(host, ':');
    if (colon == NULL) return snprintf(why, why_len, "cannot connect to %s: no port", addr), -1;
    *colon = 0;
    const char *port = colon + 1, *name = host;
    if (host[0] == '[' && colon[-1] == ']') colon[-1] = 0, name = host + 1;
    struct addrinfo hints = {0}, *found = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(name, port, &hints, &found);
    if (e) return snprintf(why, why_len, "cannot connect to %s: %s", addr, gai_strerror(e)), -1;
    int fd = -1;
    for (struct addrinfo *a = found; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        e = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
        if (e == EINPROGRESS) {  /* (a host that is down: bounded by the request's deadline, not TCP's minutes) */
            struct pollfd p = {fd, POLLOUT, 0};
            long long left = deadline - now_ms();
            int n = left > 0 ? poll(&p, 1, (int)(left > INT_MAX ? INT_MAX : left)) : 0;
            socklen_t size = sizeof e;
            if (n == 0) e = ETIMEDOUT;
            else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &size)) e = errno;
        }
        if (e) {
            snprintf(why, why_len, "cannot connect to %s: %s", addr, strerror(e));
            close(fd), fd = e == ETIMEDOUT && now_ms() >= deadline ? -2 : -1;
            if (fd == -2) break;
        }
    }
    freeaddrinfo(found);
    if (fd >= 0) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* (BBR, where it is the system's, paces each burst with a timer of its own without the fq
         * qdisc; a connection inside the cluster gains nothing by it: docs/cluster.md) */
        for (int i = 0; i < r->n_cc; i++)
            if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, r->cc[i], (socklen_t)strlen(r->cc[i])) == 0) break;
        bound_sends(r, fd);
    }
    return fd;
}

/* A connection to the node at `addr` (TCP's "host:port", or "@" and the name of the local socket
 * a node on this host gives out) by `deadline`: as `connect_tcp`. */
static int connect_to(const Relay *r, const char *addr, long long deadline, char *why, size_t why_len) {
    return addr[0] == '@' ? connect_local(r, addr + 1, why, why_len) : connect_tcp(r, addr, deadline, why, why_len);
}

typedef struct Answer {
    char head[HEAD_MAX];
    size_t head_len;   /* up to the blank line, without its CRLF */
    int status, close;
    char *body;
    size_t length;
} Answer;

enum { ANSWERED, GONE, TIMED_OUT, CLIENT_GONE };

/* Wait up to `ms` for the node's answer on `fd`: 1 readable, 0 not yet, -1 error, -2 the client
 * on `client` reset its connection meanwhile (as the edge does then, the request is given up; a
 * client that only shut its sending side still gets its answer). */
static int wait_answer(int fd, int client, long long ms) {
    struct pollfd p[2] = {{fd, POLLIN, 0}, {client, 0, 0}};
    for (;;) {
        int n = poll(p, 2, (int)(ms > INT_MAX ? INT_MAX : ms < 0 ? 0 : ms));
        if (n < 0 && errno == EINTR) continue;
        if (n > 0 && (p[1].revents & (POLLHUP | POLLERR)) && !p[0].revents) return -2;
        return n < 0 ? -1 : n > 0;
    }
}

/* Read the node's answer on `fd` by `deadline`; GONE with `why` if none can be read. `started`:
 * a byte of it came. */
static int read_answer(const Relay *r, int fd, int client, long long deadline, Answer *a, int *started, char *why,
                       size_t why_len) {
    size_t have = 0;
    char *blank = NULL;
    *started = 0;
    while (blank == NULL) {
        if (have == sizeof a->head) return snprintf(why, why_len, "unreadable answer: head too long"), GONE;
        long long left = deadline - now_ms();
        if (left <= 0) return TIMED_OUT;
        int w = wait_answer(fd, client, left);
        if (w == -2) return CLIENT_GONE;
        if (w == 0) return TIMED_OUT;
        ssize_t k = w < 0 ? -1 : recv(fd, a->head + have, sizeof a->head - have, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) {
            snprintf(why, why_len, "connection closed before the answer (%s)", k == 0 ? "end of stream" : strerror(errno));
            return GONE;
        }
        *started = 1;
        size_t from = have > 3 ? have - 3 : 0;
        have += (size_t)k;
        blank = memmem(a->head + from, have - from, "\r\n\r\n", 4);
    }
    a->head_len = (size_t)(blank - a->head);
    if (a->head_len < 12 || memcmp(a->head, "HTTP/1.", 7) ||
        (a->status = (int)digits(a->head + 9, 3)) < 100)
        return snprintf(why, why_len, "unreadable answer: bad status line"), GONE;
    Line lines[64];
    const char *eol = memchr(a->head, '\r', a->head_len + 2);
    int n = header_lines(eol + 2, a->head + a->head_len + 2, lines, 64);
    if (n < 0) return snprintf(why, why_len, "unreadable answer: bad header"), GONE;
    long long length = -1;
    a->close = a->head[7] == '0';
    for (int i = 0; i < n; i++) {
        if (named(&lines[i], "content-length")) length = digits(lines[i].value, lines[i].value_len);
        else if (named(&lines[i], "transfer-encoding")) length = -2;
        else if (named(&lines[i], "connection")) a->close |= has_token(lines[i].value, lines[i].value_len, "close");
    }
    if (length < 0) return snprintf(why, why_len, "unreadable answer: no Content-Length"), GONE;
    size_t at_hand = have - (a->head_len + 4);
    if (at_hand > (size_t)length) return snprintf(why, why_len, "unreadable answer: more than its length"), GONE;
    a->length = (size_t)length;
    a->body = malloc(a->length ? a->length : 1);
    if (a->body == NULL) return snprintf(why, why_len, "out of memory"), GONE;
    memcpy(a->body, a->head + a->head_len + 4, at_hand);
    int rc = take_exact(fd, a->body, -1, a->length, &at_hand, INT_MAX, deadline);  /* (the deadline bounds it) */
    if (rc == 1) return ANSWERED;
    free(a->body), a->body = NULL;
    if (rc == 0) return TIMED_OUT;
    snprintf(why, why_len, "connection closed before the answer (end of stream)");
    return GONE;
}

/* Send the request to the node at `addr` and read its answer: a kept-alive connection first (one
 * the node closed while idle is replaced, as node_client.NodeHttp does), else a new one. */
static int forward_to(Relay *r, Conn *c, const char *addr, const Request *q, const char *body, long long deadline,
                      Answer *a, char *why, size_t why_len) {
    char head[HEAD_MAX + 1024];  /* (the client's head, less its first line, plus ours: it fits) */
    int n = snprintf(head, sizeof head, "POST %.*s HTTP/1.1\r\nHost: %s\r\nContent-Length: %lld\r\n",
                     (int)q->h.target_len, q->h.target, addr[0] == '@' ? "localhost" : addr, q->h.length);
    for (int i = 0; i < q->h.n_lines; i++) {
        const Line *l = &q->h.lines[i];
        if (hop(r, l) || (size_t)n + l->whole_len + 4 >= sizeof head) continue;
        memcpy(head + n, l->whole, l->whole_len), n += (int)l->whole_len;
        head[n++] = '\r', head[n++] = '\n';
    }
    head[n++] = '\r', head[n++] = '\n';
    for (;;) {
        if (r->forced) return snprintf(why, why_len, "the endpoint is stopping"), GONE;
        int fd = kept(r, addr), reused = fd >= 0;
        if (fd < 0 && (fd = connect_to(r, addr, deadline, why, why_len)) < 0) return fd == -2 ? TIMED_OUT : GONE;
        pthread_mutex_lock(&r->lock);
        c->node_fd = fd;
        pthread_mutex_unlock(&r->lock);
        /* the head in a segment of its own, as node_client sends it: a node's edge that reads the
         * head alone has the kernel place the body, where head and body in one read go through its
         * parser (docs/http-edge.md). A binary part that follows by splice leaves in memory only its
         * JSON header, a few hundred bytes: that goes with the head, one call fewer. */
        size_t in_memory = (size_t)q->h.length - q->spliced;
        struct iovec iov[2] = {{head, (size_t)n}, {(void *)body, in_memory}};
        int started = 0, rc, with_head = q->spliced ? 2 : 1;
        if (send_all(fd, iov, with_head, 0) || (in_memory && with_head == 1 && send_all(fd, iov + 1, 1, 0)) ||
            (q->spliced && send_kept(r, c, fd, q->spliced))) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) rc = TIMED_OUT;  /* (SO_SNDTIMEO) */
            else snprintf(why, why_len, "connection closed before the answer (%s)", strerror(errno)), rc = GONE;
        } else {
            rc = read_answer(r, fd, c->fd, deadline, a, &started, why, why_len);
        }
        pthread_mutex_lock(&r->lock);
        c->node_fd = -1;
        pthread_mutex_unlock(&r->lock);
        if (rc == ANSWERED && !a->close) keep(r, addr, fd);
        else close(fd);
        if (rc == GONE && reused && !started) continue;
        return rc;
    }
}

/* -- Python's side ---------------------------------------------------------------------------------- */

static const char INTERNAL[] = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                               "Content-Length: 33\r\nConnection: close\r\n\r\n{\"error\":\"Internal Server Error\"}";

/* A target (attempts, name, address) into its parts; 0 if `t` is not one. */
static int target(PyObject *t, PyObject **attempts, PyObject **name, char *addr) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) return 0;
    const char *a = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 2));
    if (a == NULL) {
        PyErr_Clear();
        return 0;
    }
    snprintf(addr, ADDR_MAX, "%s", a);
    Py_XSETREF(*attempts, Py_NewRef(PyTuple_GET_ITEM(t, 0)));
    Py_XSETREF(*name, Py_NewRef(PyTuple_GET_ITEM(t, 1)));
    return 1;
}

/* Forward request `q` with `body`; write the answer (the node's, or an error's) to `fd`. 0, or -1
 * when the connection must close. */
static int serve(Relay *r, Conn *c, PyThreadState **ts, const Request *q, const char *body) {
    int fd = c->fd;
    /* the JSON part (a binary request's header, else the whole body) goes to Python only where it
     * names "priority" (else best-effort: no JSON read), as http_proxy.real_time_in reads it */
    const char *json = NULL;
    size_t json_len = q->h.json_length >= 0 ? (size_t)q->h.json_length : (size_t)q->h.length;
    if (q->h.json_length != -2 && json_len <= (size_t)q->h.length && memmem(body, json_len, "\"priority\"", 10))
        json = body;
    PyObject *attempts = NULL, *name = NULL, *reply = NULL, *t = NULL;
    char addr[ADDR_MAX], why[512];
    Answer *a = malloc(sizeof *a), *last = NULL;
    if (a == NULL) return -1;
    a->body = NULL;
    int ok = 0, settle = 0, timed_out = 0, gone = 0, broken = 0, outcome = GONE;
    long long deadline = now_ms() + r->timeout_ms;
    const char *version = q->h.has_version ? q->h.version : NULL;

    /* the first try, where the table names the model: chosen and sent here; Python hears of it only
     * if it fails or is refused */
    Slot *first = json == NULL ? pick(r->routing, q->h.model, version ? version : "", addr) : NULL;
    if (first != NULL) {
        outcome = forward_to(r, c, addr, q, body, deadline, a, why, sizeof why);
        ok = outcome == ANSWERED && a->status != 503;
        if (ok) atomic_fetch_sub(&first->total, 1);  /* answered: no longer out at the node; Python never hears of it */
    }
    if (!ok) {
        PyEval_RestoreThread(*ts);
        if (first != NULL) {  /* its outcome is handled below as any try's */
            t = call(r->resume, Py_BuildValue("(szss)", q->h.model, version, first->name, addr));
        } else {
            PyObject *length = q->h.json_length >= 0 ? PyLong_FromLongLong(q->h.json_length) : Py_NewRef(Py_None);
            t = call(r->route, Py_BuildValue("(szy#N)", q->h.model, version, json, (Py_ssize_t)(json ? json_len : 0),
                                             length));
        }
        int tried = first != NULL;
        while (t && t != Py_None && target(t, &attempts, &name, addr)) {
            Py_CLEAR(t);
            if (!tried) {
                *ts = PyEval_SaveThread();
                outcome = forward_to(r, c, addr, q, body, deadline, a, why, sizeof why);
                PyEval_RestoreThread(*ts);
            }
            tried = 0;
            if (outcome == CLIENT_GONE) {  /* nobody to answer: the connection closes */
                t = call(r->answered, Py_BuildValue("(OOOO)", attempts, name, Py_None, Py_False));
                gone = 1;
                break;
            }
            if (outcome == TIMED_OUT) {
                t = call(r->answered, Py_BuildValue("(OOOO)", attempts, name, Py_None, Py_False));
                timed_out = 1;
                break;
            }
            if (outcome == GONE) {
                t = call(r->answered, Py_BuildValue("(OOsO)", attempts, name, why, Py_True));
                continue;
            }
            if (a->status != 503) {  /* answered: Python hears of it once the client has the answer */
                ok = settle = 1;
                t = Py_NewRef(Py_None);
                break;
            }
            t = call(r->answered, Py_BuildValue("(OOOO)", attempts, name, Py_None, Py_True));
            if (last) free(last->body), free(last);
            last = a;
            a = malloc(sizeof *a);
            if (a == NULL) break;
            a->body = NULL;
        }
        if (t != NULL && !ok && !gone && (timed_out || last == NULL) && attempts != NULL) {
            Py_CLEAR(t);
            t = call(r->failed, Py_BuildValue("(OO)", attempts, timed_out ? Py_True : Py_False));
        }
        if (t != NULL && PyBytes_Check(t)) reply = Py_NewRef(t);  /* an error answered by Python */
        broken = t == NULL;
        Py_XDECREF(t);
        if (!settle) Py_XDECREF(attempts), Py_XDECREF(name);
        *ts = PyEval_SaveThread();
    }

    int rc = 0, closing = q->h.close || r->stopping;
    if (!ok && !reply && last && !broken && !gone) free(a ? a->body : NULL), free(a), a = last, last = NULL, ok = 1;
    if (gone) {
        rc = -1;
    } else if (ok) {
        char head[HEAD_MAX + 256];
        const char *eol = memchr(a->head, '\r', a->head_len + 2);
        size_t n = (size_t)(eol - a->head) + 2;
        memcpy(head, a->head, n);
        Line lines[64];
        int count = header_lines(eol + 2, a->head + a->head_len + 2, lines, 64), typed = 0;
        for (int i = 0; i < count; i++) {
            if (hop(r, &lines[i])) continue;
            typed |= named(&lines[i], "content-type");
            memcpy(head + n, lines[i].whole, lines[i].whole_len), n += lines[i].whole_len;
            head[n++] = '\r', head[n++] = '\n';
        }
        n += (size_t)snprintf(head + n, sizeof head - n, "%sContent-Length: %zu\r\n%s\r\n",
                              typed ? "" : "Content-Type: text/plain\r\n", a->length,
                              closing ? "Connection: close\r\n" : "");
        struct iovec iov[2] = {{head, n}, {a->body, a->length}};
        rc = send_all(fd, iov, a->length ? 2 : 1, r->stall_ms);
    } else if (reply) {
        struct iovec iov = {PyBytes_AS_STRING(reply), (size_t)PyBytes_GET_SIZE(reply)};
        rc = send_all(fd, &iov, 1, r->stall_ms);  /* (encoded kept-alive: a closing connection just closes after it) */
    } else {
        struct iovec iov = {(void *)INTERNAL, sizeof INTERNAL - 1};
        send_all(fd, &iov, 1, r->stall_ms);
        rc = -1;
    }
    if (reply || settle) {
        PyEval_RestoreThread(*ts);
        Py_XDECREF(reply);
        if (settle) {
            Py_XDECREF(call(r->answered, Py_BuildValue("(OOOO)", attempts, name, Py_None, Py_False)));
            Py_DECREF(attempts), Py_DECREF(name);
        }
        *ts = PyEval_SaveThread();
    }
    if (a) free(a->body), free(a);
    if (last) free(last->body), free(last);
    atomic_fetch_add(&r->requests, 1);
    return rc || closing ? -1 : 0;
}

/* -- a connection's thread -------------------------------------------------------------------------- */

static void *connection_main(void *arg) {
    Conn *c = arg;
    Relay *r = c->relay;
    int fd = c->fd, handed = 0;
    char *buf = malloc(HEAD_MAX);
    size_t have = 0;
    Request *q = malloc(sizeof *q);
    char *kept_body = NULL;
    size_t kept_cap = 0;
    client_options(fd);
    /* one Python thread state for the connection's life: made and dropped per call it costs more
     * than the call */
    PyGILState_STATE gil = PyGILState_Ensure();
    PyThreadState *ts = PyEval_SaveThread();
    Idle idle = {&r->lock, &c->idle, &r->stopping};
    while (buf && q) {
        size_t head_len;
        int head = read_head(fd, buf, &have, &head_len, r->idle_ms, r->stall_ms, idle);
        if (head == HEAD_CLOSE) goto done;
        if (head == HEAD_HAND) goto hand;
        if (!infer_head(buf, head_len, r->rule_key, r->rule_value, r->max_body, &q->h)) goto hand;
        size_t length = (size_t)q->h.length;
        if (atomic_fetch_add(&r->held, q->h.length) + q->h.length > r->budget) {
            atomic_fetch_sub(&r->held, q->h.length);
            goto hand;
        }
        size_t at_hand = have - (head_len + 4);
        size_t json = q->h.json_length >= 0 ? (size_t)q->h.json_length : length;
        q->spliced = json < length && length - json >= SPLICE_MIN && r->null_fd >= 0 && pipes_fit(c, length - json)
                         ? length - json : 0;
        size_t in_memory = length - q->spliced;
        if (in_memory > kept_cap || (kept_cap > KEEP_BODY && in_memory <= KEEP_BODY)) {
            free(kept_body);  /* (a buffer kept across requests: each new one is faulted in page by page) */
            kept_cap = (in_memory | 0xffff) + 1;  /* (rounded up to 64 KB: bodies of about one size fit again) */
            kept_body = malloc(kept_cap);
        }
        char *body = kept_body;
        size_t got = at_hand < in_memory ? at_hand : in_memory, piped = 0;
        if (body == NULL) {
            kept_cap = 0;
            atomic_fetch_sub(&r->held, q->h.length);
            goto hand;
        }
        memcpy(body, buf + head_len + 4, got);
        long long body_by = now_ms() + r->stall_ms;
        int rc = take_exact(fd, body, -1, in_memory, &got, r->stall_ms, body_by);
        if (rc == 1 && q->spliced) {
            /* what of the binary part came with the head's read */
            size_t extra = at_hand > in_memory ? (at_hand < length ? at_hand : length) - in_memory : 0;
            if (extra) {
                ssize_t k = write(c->keep[1], buf + head_len + 4 + in_memory, extra);  /* (the pipe holds it all) */
                rc = k == (ssize_t)extra ? 1 : -1;
                piped = k > 0 ? (size_t)k : 0;
            }
            if (rc == 1) rc = take_exact(fd, NULL, c->keep[1], q->spliced, &piped, r->stall_ms, body_by);
        }
        if (rc != 1) {
            /* stalled or cut short: the edge gets what came (it answers a stall as it would) */
            atomic_fetch_sub(&r->held, q->h.length);
            char *came = piped ? malloc(got + piped) : body;
            if (came != body && came != NULL) {  /* (the piped part back out of its pipe: a rare path) */
                memcpy(came, body, got);
                for (size_t off = 0; off < piped;) {
                    ssize_t k = read(c->keep[0], came + got + off, piped - off);
                    if (k <= 0) break;
                    off += (size_t)k;
                }
            }
            if (rc == 0 && came != NULL) {
                handed = 1;
                hand_off(r->handoff, &r->handed, &ts, fd, buf, head_len + 4, came, got + piped);
            }
            if (came != body) free(came);
            goto done;
        }
        rc = serve(r, c, &ts, q, body);
        if (q->spliced) drop_pipe(r, c->keep[0], q->spliced);
        atomic_fetch_sub(&r->held, q->h.length);
        size_t used = head_len + 4 + (at_hand < length ? at_hand : length);
        memmove(buf, buf + used, have - used);
        have -= used;
        if (rc) goto done;
    }
    goto done;
hand:
    handed = 1;
    hand_off(r->handoff, &r->handed, &ts, fd, buf, have, NULL, 0);
done:
    if (!handed) close(fd);
    for (int i = 0; i < 2; i++) {
        if (c->keep[i] >= 0) close(c->keep[i]);
        if (c->out[i] >= 0) close(c->out[i]);
    }
    PyEval_RestoreThread(ts);
    PyGILState_Release(gil);
    free(kept_body);
    free(buf);
    free(q);
    pthread_mutex_lock(&r->lock);
    if (c->prev) c->prev->next = c->next;
    else r->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    r->live--;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    free(c);
    return NULL;
}

/* A connection's thread for `fd`: 0, or -1 past the relay's bound (or out of memory). */
static int take_connection(void *owner, int fd) {
    Relay *r = owner;
    Conn *c = calloc(1, sizeof *c);
    pthread_mutex_lock(&r->lock);
    int room = c != NULL && r->live < r->max_conns;
    if (room) {
        c->relay = r, c->fd = fd, c->node_fd = -1, c->next = r->conns;
        c->keep[0] = c->keep[1] = c->out[0] = c->out[1] = -1;
        if (r->conns) r->conns->prev = c;
        r->conns = c;
        r->live++;
    }
    pthread_mutex_unlock(&r->lock);
    int started = room && start_detached(connection_main, c, STACK_BYTES) == 0;
    if (started) return 0;
    if (room) {
        pthread_mutex_lock(&r->lock);
        r->conns = c->next;
        if (c->next) c->next->prev = NULL;
        r->live--;
        pthread_mutex_unlock(&r->lock);
    }
    free(c);
    return -1;
}

static void *accept_main(void *arg) {
    Relay *r = arg;
    accept_loop(&r->listen_fd, 1, &r->lock, &r->stopping, take_connection, r, r->handoff, &r->handed);
    pthread_mutex_lock(&r->lock);
    r->accepting = 0;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* -- the Python type -------------------------------------------------------------------------------- */

/* The str items of `seq` (at most `max`) copied into `into`, `*n` counting them (the dealloc frees
 * them): 0, or -1 with an exception set. */
static int copy_names(PyObject *seq, const char *what, char **into, int max, int *n) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast) && *n < max; i++) {
        const char *s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fast, i));
        if (s == NULL) return Py_DECREF(fast), -1;
        into[(*n)++] = strdup(s);
    }
    Py_DECREF(fast);
    return 0;
}

static int Relay_init(Relay *r, PyObject *args, PyObject *kw) {
    static char *names[] = {"listen_fd", "routing", "route", "resume", "answered", "failed", "handoff", "hop", "rule",
                            "max_body", "budget", "idle_s", "stall_s", "timeout_s", "max_connections", "congestion",
                            NULL};
    PyObject *hop_names, *rule, *cc;
    double idle_s, stall_s, timeout_s;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iO!OOOOOOOLLdddiO", names, &r->listen_fd, &RoutingType, &r->routing,
                                     &r->route, &r->resume, &r->answered, &r->failed, &r->handoff, &hop_names, &rule,
                                     &r->max_body, &r->budget, &idle_s, &stall_s, &timeout_s, &r->max_conns, &cc))
        return -1;
    Py_INCREF(r->routing), Py_INCREF(r->route), Py_INCREF(r->resume), Py_INCREF(r->answered), Py_INCREF(r->failed);
    Py_INCREF(r->handoff);
    if (copy_names(hop_names, "hop: a sequence of header names", r->hop, NAMES_MAX, &r->n_hop) ||
        copy_names(cc, "congestion: a sequence of names", r->cc, CC_MAX, &r->n_cc))
        return -1;
    if (rule != Py_None) {
        const char *key, *value;
        if (!PyArg_ParseTuple(rule, "ss", &key, &value)) return -1;
        r->rule_key = strdup(key), r->rule_value = strdup(value);
    }
    r->idle_ms = (int)(idle_s * 1000), r->stall_ms = (int)(stall_s * 1000), r->timeout_ms = (long long)(timeout_s * 1000);
    r->null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);  /* (none: bodies through memory) */
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->changed, NULL);
    return 0;
}

static PyObject *Relay_start(Relay *r, PyObject *unused) {
    PyObject *out = start_accepting(&r->accepting, accept_main, r);
    if (out) Py_INCREF(r);  /* the threads' reference, given back by stop() once they are gone */
    return out;
}

/* Wait (GIL released) until no connection is live and accepting has ended, or `until`. */
static int wait_gone(Relay *r, long long until) {
    while ((r->live || r->accepting) && now_ms() < until) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 20 * 1000000;
        if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&r->changed, &r->lock, &t);
    }
    return r->live;
}

static PyObject *Relay_stop(Relay *r, PyObject *arg) {
    double drain_s = PyFloat_AsDouble(arg);
    if (drain_s < 0 && PyErr_Occurred()) return NULL;
    int was_started, left;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&r->lock);
    was_started = !r->stopping;
    r->stopping = 1;
    shutdown(r->listen_fd, SHUT_RDWR);  /* wakes accept() */
    for (Conn *c = r->conns; c; c = c->next)
        if (c->idle) shutdown(c->fd, SHUT_RDWR);
    left = wait_gone(r, now_ms() + (long long)(drain_s * 1000));
    r->forced = 1;  /* what is still in hand: its client's and its node's connections shut */
    for (Conn *c = r->conns; c; c = c->next) {
        shutdown(c->fd, SHUT_RDWR);
        if (c->node_fd >= 0) shutdown(c->node_fd, SHUT_RDWR);
    }
    left = wait_gone(r, now_ms() + 5000);
    for (Node *n = r->nodes; n; n = n->next)
        while (n->n_idle) close(n->idle[--n->n_idle]);
    pthread_mutex_unlock(&r->lock);
    Py_END_ALLOW_THREADS
    if (was_started && !left) Py_DECREF(r);  /* (a thread still live keeps the relay alive) */
    return PyLong_FromLong(left);
}

static PyObject *Relay_counts(Relay *r, PyObject *unused) {
    return Py_BuildValue("{sLsLsLsi}", "requests", (long long)atomic_load(&r->requests), "handed",
                         (long long)atomic_load(&r->handed), "held", (long long)atomic_load(&r->held), "live", r->live);
}

static void Relay_dealloc(Relay *r) {
    Py_XDECREF(r->routing), Py_XDECREF(r->route), Py_XDECREF(r->resume), Py_XDECREF(r->answered);
    Py_XDECREF(r->failed), Py_XDECREF(r->handoff);
    for (int i = 0; i < r->n_hop; i++) free(r->hop[i]);
    for (int i = 0; i < r->n_cc; i++) free(r->cc[i]);
    free(r->rule_key), free(r->rule_value);
    for (Node *n = r->nodes, *next; n; n = next) next = n->next, free(n);
    if (r->null_fd > 0) close(r->null_fd);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMethodDef Relay_methods[] = {
    {"start", (PyCFunction)Relay_start, METH_NOARGS, "Accept on the listening socket, a thread per connection."},
    {"stop", (PyCFunction)Relay_stop, METH_O,
     "Accept no more, close idle connections, answer what is in hand for up to `drain_s` seconds, then "
     "close the rest; blocks (the GIL released). Returns the connections still live (0 normally)."},
    {"counts", (PyCFunction)Relay_counts, METH_NOARGS, "Requests relayed, connections handed on, body bytes held."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RelayType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_relay.Relay",
    .tp_basicsize = sizeof(Relay),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Relay_init,
    .tp_dealloc = (destructor)Relay_dealloc,
    .tp_methods = Relay_methods,
    .tp_doc = "The endpoint's native infer relay (see relay.c).",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_relay", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__relay(void) {
    if (PyType_Ready(&RelayType) < 0 || PyType_Ready(&RoutingType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Relay", (PyObject *)&RelayType) < 0 ||
        PyModule_AddObjectRef(m, "Routing", (PyObject *)&RoutingType) < 0)
        return Py_DECREF(m), NULL;
    return m;
}
