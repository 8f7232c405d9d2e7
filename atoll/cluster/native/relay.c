/* The cluster endpoint's relay for KServe v2 infer requests over HTTP/1.1 (atoll/cluster/relay.py):
 * a thread per client connection reads each request with blocking calls and no Python, sends it to
 * the node the endpoint's Python picks (two calls under the GIL a request: `route` and
 * `answered`), and writes the node's answer back. Anything it does not take whole (another route,
 * a head or body that stalls, chunked or encoded bodies, a restricted call without its header, a
 * connection past its bound) is handed with the bytes read so far to the endpoint's Python edge
 * (`handoff`), which owns the connection from then on and answers as it always did.
 *
 * Why native: the relay's work is a few system calls a request; in Python on asyncio it was ~335
 * calls of Python and 0.24 CPU-ms a request (docs/benchmarks.md, "the cluster endpoint").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
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

#define HEAD_MAX 16384      /* a request's or an answer's head; a longer one goes to the Python edge */
#define POOL_MAX 64         /* kept-alive connections per node (as node_client.MAX_IDLE) */
#define ADDR_MAX 256
#define NAMES_MAX 32
#define STACK_BYTES (256 * 1024)
#define KEEP_BODY (4 << 20)
#define SPLICE_MIN (64 * 1024)  /* a binary part at least this long goes through pipes, not memory */
#define LOWAT_CHECK_MS 200  /* a body awaited with SO_RCVLOWAT is looked at this often all the same */  /* a connection keeps its body buffer between requests up to this size */

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
    PyObject *route, *answered, *failed, *handoff;
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
} Relay;

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
 * for `stall_ms` or the deadline (0: none) passed; -1: the peer closed or failed. The thread is
 * woken once they are all there (SO_RCVLOWAT), not at every segment; it also looks every
 * LOWAT_CHECK_MS, and its reads never block: where the kernel holds fewer bytes than the bound and
 * its wake-up does not come (the window closed under memory pressure), the sender could send no
 * more and both would wait. */
static int take_exact(int fd, char *dst, int pipe_w, size_t n, size_t *got, int stall_ms, long long deadline) {
    int rc = 1, raised = *got + 1 < n;
    long long quiet_until = now_ms() + stall_ms;
    if (raised) set_lowat(fd, n - *got);
    while (*got < n) {
        long long now = now_ms(), ms = quiet_until - now;
        if (deadline && deadline - now < ms) ms = deadline - now;
        if (ms <= 0) { rc = 0; break; }
        if (raised && ms > LOWAT_CHECK_MS) ms = LOWAT_CHECK_MS;
        if (wait_in(fd, ms) < 0) { rc = -1; break; }
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
        if (*got + 1 < n || (raised && *got < n)) set_lowat(fd, n - *got), raised = n - *got > 1;
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

static int hop(const Relay *r, const Line *l) {
    for (int i = 0; i < r->n_hop; i++)
        if (named(l, r->hop[i])) return 1;
    return 0;
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

typedef struct Request {
    const char *target;
    size_t target_len;
    char model[ADDR_MAX], version[64];
    int has_version;
    long long length, json_length;
    size_t spliced;  /* the body's last bytes, in the connection's `keep` pipe (0: all in memory) */
    int close;
    Line lines[64];
    int n_lines;
} Request;

/* Whether the head (`head`, `head_len` bytes up to and without its blank line's CRLF) is an infer
 * request this relay forwards whole; fills `q`. */
static int infer_request(const Relay *r, const char *head, size_t head_len, Request *q) {
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
    int rule_met = r->rule_key == NULL;
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
            if (q->json_length == -1 && l->value_len) q->json_length = -2;  /* unreadable: best-effort */
        }
        if (r->rule_key && named(l, r->rule_key) && l->value_len == strlen(r->rule_value) &&
            memcmp(l->value, r->rule_value, l->value_len) == 0)
            rule_met = 1;
    }
    return rule_met && q->length >= 0 && q->length <= r->max_body;
}

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

/* A connection to the node at `addr` ("host:port", "[v6]:port") by `deadline`: its descriptor,
 * -1 (GONE, `why` says why) or -2 (TIMED_OUT). */
static int connect_to(const Relay *r, const char *addr, long long deadline, char *why, size_t why_len) {
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
        /* a node that stops reading holds a send no longer than the request may wait */
        struct timeval tv = {r->timeout_ms / 1000, (r->timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    return fd;
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
                     (int)q->target_len, q->target, addr, q->length);
    for (int i = 0; i < q->n_lines; i++) {
        const Line *l = &q->lines[i];
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
         * parser (docs/http-edge.md) */
        size_t in_memory = (size_t)q->length - q->spliced;
        struct iovec iov[2] = {{head, (size_t)n}, {(void *)body, in_memory}};
        int started = 0, rc;
        if (send_all(fd, iov, 1, 0) || (in_memory && send_all(fd, iov + 1, 1, 0)) ||
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
    size_t json_len = q->json_length >= 0 ? (size_t)q->json_length : (size_t)q->length;
    if (q->json_length != -2 && json_len <= (size_t)q->length && memmem(body, json_len, "\"priority\"", 10))
        json = body;
    PyObject *attempts = NULL, *name = NULL, *reply = NULL;
    char addr[ADDR_MAX], why[512];
    Answer *a = malloc(sizeof *a), *last = NULL;
    if (a == NULL) return -1;
    a->body = NULL;
    int ok = 0, settle = 0, timed_out = 0, gone = 0;
    long long deadline = now_ms() + r->timeout_ms;

    PyEval_RestoreThread(*ts);
    PyObject *length = q->json_length >= 0 ? PyLong_FromLongLong(q->json_length) : Py_NewRef(Py_None);
    PyObject *t = call(r->route, Py_BuildValue("(szy#N)", q->model, q->has_version ? q->version : NULL,
                                               json, (Py_ssize_t)(json ? json_len : 0), length));
    while (t && t != Py_None && target(t, &attempts, &name, addr)) {
        Py_CLEAR(t);
        *ts = PyEval_SaveThread();
        int rc = forward_to(r, c, addr, q, body, deadline, a, why, sizeof why);
        PyEval_RestoreThread(*ts);
        if (rc == CLIENT_GONE) {  /* nobody to answer: the connection closes */
            t = call(r->answered, Py_BuildValue("(OOOO)", attempts, name, Py_None, Py_False));
            gone = 1;
            break;
        }
        if (rc == TIMED_OUT) {
            t = call(r->answered, Py_BuildValue("(OOOO)", attempts, name, Py_None, Py_False));
            timed_out = 1;
            break;
        }
        if (rc == GONE) {
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
    int broken = t == NULL;
    Py_XDECREF(t);
    if (!settle) Py_XDECREF(attempts), Py_XDECREF(name);
    *ts = PyEval_SaveThread();

    int rc = 0, closing = q->close || r->stopping;
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

/* Give `fd` to the Python edge with the bytes read of it (`a`, then `b`); `ts`: the calling
 * thread's Python thread state (NULL: it has none). */
static void hand_off(Relay *r, PyThreadState **ts, int fd, const char *a, size_t a_len, const char *b, size_t b_len) {
    atomic_fetch_add(&r->handed, 1);
    PyGILState_STATE gil = PyGILState_UNLOCKED;
    if (ts) PyEval_RestoreThread(*ts);
    else gil = PyGILState_Ensure();
    PyObject *prefix = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(a_len + b_len));
    if (prefix) {
        memcpy(PyBytes_AS_STRING(prefix), a, a_len);
        if (b_len) memcpy(PyBytes_AS_STRING(prefix) + a_len, b, b_len);
    }
    PyObject *out = prefix ? call(r->handoff, Py_BuildValue("(iN)", fd, prefix)) : NULL;
    if (out == NULL) close(fd);  /* (the callback owns `fd` once called) */
    Py_XDECREF(out);
    if (ts) *ts = PyEval_SaveThread();
    else PyGILState_Release(gil);
}

/* -- a connection's thread -------------------------------------------------------------------------- */

static void set_idle(Conn *c, int idle) {
    pthread_mutex_lock(&c->relay->lock);
    c->idle = idle;
    pthread_mutex_unlock(&c->relay->lock);
}

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
    while (buf && q) {
        char *blank = have >= 4 ? memmem(buf, have, "\r\n\r\n", 4) : NULL;
        long long head_by = have ? now_ms() + r->stall_ms : 0;  /* a head's first byte to its end */
        while (blank == NULL) {
            if (have == 0) {
                pthread_mutex_lock(&r->lock);
                int stopping = r->stopping;
                c->idle = !stopping;
                pthread_mutex_unlock(&r->lock);
                if (stopping) goto done;
            }
            if (have == HEAD_MAX) goto hand;
            int w = wait_in(fd, have ? head_by - now_ms() : r->idle_ms);
            if (w < 0 || (w == 0 && have == 0)) goto done;
            if (w == 0) goto hand;
            ssize_t k = recv(fd, buf + have, HEAD_MAX - have, MSG_DONTWAIT);
            if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (k <= 0) {
                if (have) goto hand;  /* half-closed after part of a request: the edge answers as it does */
                goto done;
            }
            if (have == 0) set_idle(c, 0), head_by = now_ms() + r->stall_ms;
            size_t from = have > 3 ? have - 3 : 0;
            have += (size_t)k;
            blank = memmem(buf + from, have - from, "\r\n\r\n", 4);
        }
        size_t head_len = (size_t)(blank - buf);
        if (!infer_request(r, buf, head_len, q)) goto hand;
        size_t length = (size_t)q->length;
        if (atomic_fetch_add(&r->held, q->length) + q->length > r->budget) {
            atomic_fetch_sub(&r->held, q->length);
            goto hand;
        }
        size_t at_hand = have - (head_len + 4);
        size_t json = q->json_length >= 0 ? (size_t)q->json_length : length;
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
            atomic_fetch_sub(&r->held, q->length);
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
            atomic_fetch_sub(&r->held, q->length);
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
                hand_off(r, &ts, fd, buf, head_len + 4, came, got + piped);
            }
            if (came != body) free(came);
            goto done;
        }
        rc = serve(r, c, &ts, q, body);
        if (q->spliced) drop_pipe(r, c->keep[0], q->spliced);
        atomic_fetch_sub(&r->held, q->length);
        size_t used = head_len + 4 + (at_hand < length ? at_hand : length);
        memmove(buf, buf + used, have - used);
        have -= used;
        if (rc) goto done;
    }
    goto done;
hand:
    handed = 1;
    hand_off(r, &ts, fd, buf, have, NULL, 0);
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

static void *accept_main(void *arg) {
    Relay *r = arg;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, STACK_BYTES);
    for (;;) {
        int fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        pthread_mutex_lock(&r->lock);
        int stopping = r->stopping;
        pthread_mutex_unlock(&r->lock);
        if (stopping) {
            if (fd >= 0) close(fd);
            break;
        }
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) usleep(10000);
            continue;
        }
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
        pthread_t t;
        if (room && pthread_create(&t, &attr, connection_main, c) == 0) continue;
        if (room) {
            pthread_mutex_lock(&r->lock);
            r->conns = c->next;
            if (c->next) c->next->prev = NULL;
            r->live--;
            pthread_mutex_unlock(&r->lock);
        }
        free(c);
        hand_off(r, NULL, fd, "", 0, NULL, 0);  /* past the relay's bound: the edge's own bound applies */
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&r->lock);
    r->accepting = 0;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* -- the Python type -------------------------------------------------------------------------------- */

static int Relay_init(Relay *r, PyObject *args, PyObject *kw) {
    static char *names[] = {"listen_fd", "route", "answered", "failed", "handoff", "hop", "rule", "max_body",
                            "budget", "idle_s", "stall_s", "timeout_s", "max_connections", NULL};
    PyObject *hop_names, *rule;
    double idle_s, stall_s, timeout_s;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iOOOOOOLLdddi", names, &r->listen_fd, &r->route, &r->answered,
                                     &r->failed, &r->handoff, &hop_names, &rule, &r->max_body, &r->budget, &idle_s,
                                     &stall_s, &timeout_s, &r->max_conns))
        return -1;
    Py_INCREF(r->route), Py_INCREF(r->answered), Py_INCREF(r->failed), Py_INCREF(r->handoff);
    PyObject *seq = PySequence_Fast(hop_names, "hop: a sequence of header names");
    if (seq == NULL) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && r->n_hop < NAMES_MAX; i++) {
        const char *s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (s == NULL) return Py_DECREF(seq), -1;
        r->hop[r->n_hop++] = strdup(s);
    }
    Py_DECREF(seq);
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
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    r->accepting = 1;
    int e = pthread_create(&t, &attr, accept_main, r);
    pthread_attr_destroy(&attr);
    if (e) {
        r->accepting = 0;
        errno = e;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_INCREF(r);  /* the threads' reference, given back by stop() once they are gone */
    Py_RETURN_NONE;
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
    Py_XDECREF(r->route), Py_XDECREF(r->answered), Py_XDECREF(r->failed), Py_XDECREF(r->handoff);
    for (int i = 0; i < r->n_hop; i++) free(r->hop[i]);
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
    if (PyType_Ready(&RelayType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&RelayType);
    if (PyModule_AddObject(m, "Relay", (PyObject *)&RelayType) < 0) return Py_DECREF(m), NULL;
    return m;
}
