/* The endpoint's routing state as the relay's threads read it without the GIL (relay.c,
 * atoll/cluster/relay.py), one Python object, `_relay.Routing`:
 * - the requests out per node, total and real-time: the counts `routing.Router` chooses with while
 *   the relay runs (`Router.count_with`), so the relay's threads and the event loop's paths choose
 *   from one set of counts;
 * - each model's candidate nodes and their addresses, a table Python publishes whenever the cluster's
 *   view changes (`ClusterView.routes`).
 * A best-effort request whose model is in the table is sent by the relay's thread to the candidate
 * with the fewest requests out, ties in turn, as `Router.choose` picks, with no Python. Everything
 * else (a request naming "priority", a model the table lacks, a try that fails or is refused) goes
 * through Python's `Attempts` as before.
 *
 * Why: the two calls under the GIL a request were ~0.03 of the endpoint's 0.15-0.17 CPU-ms beside
 * a real node (docs/benchmarks.md, "Issue #41: first tries chosen in C").
 */
#ifndef ATOLL_ROUTES_H
#define ATOLL_ROUTES_H

#include "http1.h"

#define NODE_NAME_MAX 128
#define ROUTE_ADDR_MAX NAME_MAX_

typedef struct Slot {  /* one node's counts; kept while the object lives (a node's name may come back) */
    char name[NODE_NAME_MAX];
    atomic_int total, real_time;
    atomic_llong relayed;  /* first tries the relay chose and sent without Python */
    struct Slot *next;
} Slot;

typedef struct Candidate {
    Slot *slot;
    char addr[ROUTE_ADDR_MAX];
} Candidate;

typedef struct Route {
    char *model, *version;  /* version "": a request that names none */
    int n;
    Candidate *candidates;  /* in the view's order of nodes */
} Route;

typedef struct Routing {
    PyObject_HEAD
    pthread_mutex_t lock;  /* the slots' list and the table (the counts themselves are atomic) */
    Slot *slots;
    Route *routes;
    int n_routes;
    unsigned turn;  /* ties taken in turn (under `lock`) */
} Routing;

/* `name`'s slot, made where `make` (NULL: none, or out of memory). Holds `lock`. */
static Slot *slot_of(Routing *g, const char *name, int make) {
    for (Slot *s = g->slots; s; s = s->next)
        if (strcmp(s->name, name) == 0) return s;
    if (!make || strlen(name) >= NODE_NAME_MAX) return NULL;
    Slot *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->next = g->slots;
    g->slots = s;
    return s;
}

static void free_routes(Route *routes, int n) {
    for (int i = 0; i < n; i++) free(routes[i].model), free(routes[i].version), free(routes[i].candidates);
    free(routes);
}

/* The node for a best-effort request of `model` (`version`, "" for none), counted out and its
 * address in `addr`; NULL where the table names no candidate (Python routes it). The fewest out
 * wins; the scan starts one candidate further each time, so ties are taken in turn. */
static Slot *pick(Routing *g, const char *model, const char *version, char *addr) {
    Slot *chosen = NULL;
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < g->n_routes && chosen == NULL; i++) {
        const Route *t = &g->routes[i];
        if (t->n == 0 || strcmp(t->model, model) || strcmp(t->version, version)) continue;
        int best = INT_MAX, at = 0, start = (int)(g->turn++ % (unsigned)t->n);
        for (int j = 0; j < t->n; j++) {
            int k = (start + j) % t->n, out = atomic_load(&t->candidates[k].slot->total);
            if (out < best) best = out, at = k;
        }
        chosen = t->candidates[at].slot;
        memcpy(addr, t->candidates[at].addr, ROUTE_ADDR_MAX);
        atomic_fetch_add(&chosen->total, 1);
        atomic_fetch_add(&chosen->relayed, 1);
    }
    pthread_mutex_unlock(&g->lock);
    return chosen;
}

/* -- the Python type -------------------------------------------------------------------------------- */

static int Routing_init(Routing *g, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, ":Routing")) return -1;
    pthread_mutex_init(&g->lock, NULL);
    return 0;
}

static void Routing_dealloc(Routing *g) {
    free_routes(g->routes, g->n_routes);
    for (Slot *s = g->slots, *next; s; s = next) next = s->next, free(s);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *Routing_of(Routing *g, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL) return NULL;
    pthread_mutex_lock(&g->lock);
    Slot *s = slot_of(g, name, 0);
    int total = s ? atomic_load(&s->total) : 0, rt = s ? atomic_load(&s->real_time) : 0;
    pthread_mutex_unlock(&g->lock);
    return Py_BuildValue("(ii)", total, rt);
}

/* sent (`step` 1) or answered (-1): name, real_time */
static PyObject *count(Routing *g, PyObject *args, int step) {
    const char *name;
    int rt;
    if (!PyArg_ParseTuple(args, "sp", &name, &rt)) return NULL;
    pthread_mutex_lock(&g->lock);
    Slot *s = slot_of(g, name, 1);
    pthread_mutex_unlock(&g->lock);
    if (s == NULL) return PyErr_Format(PyExc_ValueError, "cannot count node '%s' (name too long, or no memory)", name);
    atomic_fetch_add(&s->total, step);
    if (rt) atomic_fetch_add(&s->real_time, step);
    Py_RETURN_NONE;
}

static PyObject *Routing_sent(Routing *g, PyObject *args) { return count(g, args, 1); }
static PyObject *Routing_answered(Routing *g, PyObject *args) { return count(g, args, -1); }

/* {name: (total, real_time)} of every node counted, or {name: relayed} of those the relay sent to */
static PyObject *per_node(Routing *g, int relayed) {
    PyObject *out = PyDict_New();
    pthread_mutex_lock(&g->lock);
    for (Slot *s = g->slots; s && out; s = s->next) {
        long long n = atomic_load(&s->relayed);
        if (relayed && n == 0) continue;
        PyObject *v = relayed ? PyLong_FromLongLong(n)
                              : Py_BuildValue("(ii)", atomic_load(&s->total), atomic_load(&s->real_time));
        if (v == NULL || PyDict_SetItemString(out, s->name, v)) Py_CLEAR(out);
        Py_XDECREF(v);
    }
    pthread_mutex_unlock(&g->lock);
    return out;
}

static PyObject *Routing_snapshot(Routing *g, PyObject *unused) { return per_node(g, 0); }
static PyObject *Routing_relayed(Routing *g, PyObject *unused) { return per_node(g, 1); }

/* publish([(model, version, [(name, address), ...]), ...]): the table, replacing the last one */
static PyObject *Routing_publish(Routing *g, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "publish: a sequence of (model, version, candidates)");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Route *routes = calloc(n ? (size_t)n : 1, sizeof *routes);  /* (zeroed: freed whole on an error) */
    int failed = routes == NULL ? (PyErr_NoMemory(), 1) : 0;
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        const char *model, *version;
        PyObject *nodes, *fast = NULL;
        Route *t = &routes[i];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ssO", &model, &version, &nodes) ||
            (fast = PySequence_Fast(nodes, "publish: candidates are a sequence of (name, address)")) == NULL) {
            failed = 1;
            break;
        }
        Py_ssize_t m = PySequence_Fast_GET_SIZE(fast);
        t->model = strdup(model), t->version = strdup(version);
        t->candidates = calloc((size_t)m + 1, sizeof *t->candidates);
        if (t->model == NULL || t->version == NULL || t->candidates == NULL) failed = (PyErr_NoMemory(), 1);
        for (Py_ssize_t j = 0; j < m && !failed; j++) {
            const char *name, *addr;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, j), "ss", &name, &addr)) {
                failed = 1;
                break;
            }
            pthread_mutex_lock(&g->lock);
            Slot *s = slot_of(g, name, 1);
            pthread_mutex_unlock(&g->lock);
            if (s == NULL || strlen(addr) >= ROUTE_ADDR_MAX) {
                PyErr_Format(PyExc_ValueError, "cannot route to node '%s' at '%s' (name or address too long)", name, addr);
                failed = 1;
                break;
            }
            t->candidates[t->n].slot = s;
            snprintf(t->candidates[t->n++].addr, ROUTE_ADDR_MAX, "%s", addr);
        }
        Py_DECREF(fast);
    }
    Py_DECREF(seq);
    if (failed) {
        if (routes) free_routes(routes, (int)n);
        return NULL;
    }
    pthread_mutex_lock(&g->lock);
    Route *old = g->routes;
    int old_n = g->n_routes;
    g->routes = routes, g->n_routes = (int)n;
    pthread_mutex_unlock(&g->lock);
    free_routes(old, old_n);
    Py_RETURN_NONE;
}

static PyMethodDef Routing_methods[] = {
    {"of", (PyCFunction)Routing_of, METH_O, "(total, real_time) requests out to node `name`."},
    {"sent", (PyCFunction)Routing_sent, METH_VARARGS, "sent(name, real_time): one more out to `name`."},
    {"answered", (PyCFunction)Routing_answered, METH_VARARGS, "answered(name, real_time): one fewer out."},
    {"snapshot", (PyCFunction)Routing_snapshot, METH_NOARGS, "{name: (total, real_time)} of every node counted."},
    {"relayed", (PyCFunction)Routing_relayed, METH_NOARGS,
     "{name: first tries the relay chose and sent without Python}, since the start."},
    {"publish", (PyCFunction)Routing_publish, METH_O,
     "publish([(model, version, [(name, address), ...]), ...]): the candidates the relay's threads "
     "choose among (version \"\": requests naming none), replacing the last table."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RoutingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_relay.Routing",
    .tp_basicsize = sizeof(Routing),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Routing_init,
    .tp_dealloc = (destructor)Routing_dealloc,
    .tp_methods = Routing_methods,
    .tp_doc = "The counts and candidates the relay's threads route with (see routes.h).",
};

#endif
