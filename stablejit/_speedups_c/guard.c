/* The Guard: a fast-path record's call function (see README.md here). */
#include "speedups.h"

#define SMALL_STACK 16

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    /* The objects it holds: GUARD_FIELDS of them, in the order of guard_offsets
     * (which is that of its keywords). */
    PyObject *code;       /* what fn.__code__ must be */
    PyObject *sinks_ns;   /* the dict holding SINKS (the sinks module's) */
    PyObject *sinks;      /* what SINKS must be */
    PyObject *defaults;   /* what fn.__defaults__, __kwdefaults__ must be */
    PyObject *kwdefaults;
    PyObject *names;      /* tuple of the globals read, in check order */
    PyObject *gslots;     /* tuple: what each of them must be */
    PyObject *cslots;     /* tuple: what each closure cell must hold */
    PyObject *leaf_slot;  /* the slot meaning "an array of a lifted type" */
    PyObject *leaf_types; /* set of those types */
    PyObject *missing;    /* what an unbound name or an empty cell reads as */
    PyObject *dict_mark;  /* first item of a dict's slot: (dict_mark, keys, item slots) */
    PyObject *entries;    /* dict: options -> cache entry */
    PyObject *general;    /* general(fn, opts, *args, **kwargs) */
    PyObject *plainly;    /* plainly(fn, opts, error, args, kwargs) */
    PyObject *mismatch;   /* the exception type that plainly handles */
    void *globals_ptr, *builtins_ptr; /* what fn.__globals__, __builtins__ must be */
    Py_ssize_t max_leaves; /* the most arrays the slots can take */
    Py_ssize_t max_dicts;  /* the number of dict slots (each dict met is numbered) */
} Guard;

#define GUARD_FIELDS 16
static const Py_ssize_t guard_offsets[GUARD_FIELDS] = {
    offsetof(Guard, code),      offsetof(Guard, sinks_ns),   offsetof(Guard, sinks),
    offsetof(Guard, defaults),  offsetof(Guard, kwdefaults), offsetof(Guard, names),
    offsetof(Guard, gslots),    offsetof(Guard, cslots),     offsetof(Guard, leaf_slot),
    offsetof(Guard, leaf_types), offsetof(Guard, missing),   offsetof(Guard, dict_mark),
    offsetof(Guard, entries),   offsetof(Guard, general),    offsetof(Guard, plainly),
    offsetof(Guard, mismatch),
};
#define GUARD_FIELD(g, i) ((PyObject **)((char *)(g) + guard_offsets[i]))

/* Where a match puts what it takes: the arrays (new references) and the dicts
 * it met (borrowed), which the walk numbers: one met twice is a back
 * reference there, so not a match here. */
typedef struct {
    PyObject **leaves;
    Py_ssize_t n, cap;
    PyObject **dicts;
    Py_ssize_t n_dicts, cap_dicts;
} Taken;

static int fits(Guard *g, PyObject *v, PyObject *slot, Taken *t);

/* 1: v is a dict (not a side channel, not met before) with the slot's keys,
 * in order, whose values fit its item slots; 0: it is not. */
static int
dict_fits(Guard *g, PyObject *v, PyObject *slot, Taken *t)
{
    PyObject *keys = PyTuple_GET_ITEM(slot, 1), *items = PyTuple_GET_ITEM(slot, 2);
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(keys) ||
        t->n_dicts >= t->cap_dicts)
        return 0;
    for (Py_ssize_t i = 0; i < t->n_dicts; i++) {
        if (t->dicts[i] == v)
            return 0;
    }
    if (PyDict_GET_SIZE(g->sinks) > 0) {
        PyObject *id = PyLong_FromVoidPtr(v);
        int in = id == NULL ? -1 : PyDict_Contains(g->sinks, id);
        Py_XDECREF(id);
        if (in != 0)
            return 0; /* (an error: the general path meets it again) */
    }
    t->dicts[t->n_dicts++] = v;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *value;
    while (PyDict_Next(v, &pos, &k, &value)) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        /* Literal and attribute names are interned: the very strings come
         * back; equal strings built anew are compared as such. */
        if (k != key && !(PyUnicode_CheckExact(k) && PyUnicode_CheckExact(key) &&
                          PyUnicode_Compare(k, key) == 0))
            return 0;
        if (!fits(g, value, PyTuple_GET_ITEM(items, i), t))
            return 0;
        i++;
    }
    return 1;
}

/* 1: v fits slot (arrays appended to t's leaves), 0: it does not. */
static int
fits(Guard *g, PyObject *v, PyObject *slot, Taken *t)
{
    if (v == slot)
        return 1;
    if (slot == g->leaf_slot) {
        if (t->n >= t->cap)
            return 0;
        int in = PySet_Contains(g->leaf_types, (PyObject *)Py_TYPE(v));
        if (in <= 0) {
            if (in < 0)
                PyErr_Clear();
            return 0;
        }
        Py_INCREF(v); /* the call below may run code that drops its holder's reference */
        t->leaves[t->n++] = v;
        return 1;
    }
    if (PyTuple_CheckExact(slot) && PyTuple_GET_SIZE(slot) == 3 &&
        PyTuple_GET_ITEM(slot, 0) == g->dict_mark)
        return dict_fits(g, v, slot, t);
    return 0;
}

static PyObject *
call_plainly(Guard *g, PyObject *fn, PyObject *opts, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *result = NULL, *pargs = NULL, *kwargs = NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    pargs = PyTuple_New(nargs);
    kwargs = PyDict_New();
    if (pargs == NULL || kwargs == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(pargs, i, args[i]);
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0)
            goto done;
    }
    result = PyObject_CallFunctionObjArgs(g->plainly, fn, opts, value, pargs, kwargs, NULL);
done:
    Py_XDECREF(pargs);
    Py_XDECREF(kwargs);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return result;
}

/* The checks of fn against the record: 1 if they hold (the arrays taken into
 * t), 0 if not. */
static int
matches(Guard *g, PyFunctionObject *f, Taken *t)
{
    if (f->func_code != g->code || (void *)f->func_globals != g->globals_ptr ||
        (void *)f->func_builtins != g->builtins_ptr ||
        (f->func_defaults ? f->func_defaults : Py_None) != g->defaults ||
        (f->func_kwdefaults ? f->func_kwdefaults : Py_None) != g->kwdefaults ||
        (f->func_dict != NULL && PyDict_GET_SIZE(f->func_dict) != 0) ||
        !PyDict_CheckExact(f->func_globals) || !PyDict_CheckExact(f->func_builtins))
        return 0;
    if (PyDict_GetItemWithError(g->sinks_ns, sj_str_sinks) != g->sinks)
        return 0;
    Py_ssize_t n_globals = PyTuple_GET_SIZE(g->names), n_cells = PyTuple_GET_SIZE(g->cslots);
    for (Py_ssize_t i = 0; i < n_globals; i++) {
        PyObject *name = PyTuple_GET_ITEM(g->names, i);
        PyObject *v = PyDict_GetItemWithError(f->func_globals, name);
        if (v == NULL) {
            if (PyErr_Occurred())
                return 0;
            v = PyDict_GetItemWithError(f->func_builtins, name);
            if (v == NULL) {
                if (PyErr_Occurred())
                    return 0;
                v = g->missing;
            }
        }
        if (!fits(g, v, PyTuple_GET_ITEM(g->gslots, i), t))
            return 0;
    }
    if (n_cells) {
        PyObject *closure = f->func_closure;
        if (closure == NULL || PyTuple_GET_SIZE(closure) < n_cells)
            return 0;
        for (Py_ssize_t i = 0; i < n_cells; i++) {
            PyObject *v = PyCell_GET(PyTuple_GET_ITEM(closure, i));
            if (!fits(g, v == NULL ? g->missing : v, PyTuple_GET_ITEM(g->cslots, i), t))
                return 0;
        }
    }
    return 1;
}

static PyObject *
guard_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Guard *g = (Guard *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *small[SMALL_STACK];
    PyObject *small_dicts[SMALL_STACK];
    Taken t = {small, 0, g->max_leaves, small_dicts, 0, g->max_dicts};
    PyObject *entry, *ready = NULL, *result = NULL;
    Py_ssize_t i;
    int matched;

    if (nargs < 2 || Py_TYPE(args[0]) != &PyFunction_Type)
        return PyObject_Vectorcall(g->general, args, nargsf, kwnames);
    PyObject *fn = args[0], *opts = args[1];
    if (t.cap + nargs - 2 + nkw > SMALL_STACK)
        t.leaves = PyMem_Malloc(sizeof(PyObject *) * (t.cap + nargs - 2 + nkw));
    if (t.cap_dicts > SMALL_STACK)
        t.dicts = PyMem_Malloc(sizeof(PyObject *) * t.cap_dicts);
    if (t.leaves == NULL || t.dicts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    matched = matches(g, (PyFunctionObject *)fn, &t);
    /* Looked up last: nothing between here and its use runs Python code, which
     * could drop the entry from the dict (a borrowed reference). */
    entry = matched ? PyDict_GetItemWithError(g->entries, opts) : NULL;
    ready = entry == NULL ? NULL : PyObject_GetAttr(entry, sj_str_ready);
    if (ready == NULL || ready == Py_None) {
        PyErr_Clear();
        result = PyObject_Vectorcall(g->general, args, nargsf, kwnames);
        goto done;
    }
    /* entry.hits += 1 */
    PyObject *hits = PyObject_GetAttr(entry, sj_str_hits);
    PyObject *more = hits == NULL ? NULL : PyNumber_Add(hits, sj_one);
    Py_XDECREF(hits);
    int set = more == NULL ? -1 : PyObject_SetAttr(entry, sj_str_hits, more);
    Py_XDECREF(more);
    if (set < 0)
        goto done;

    Py_ssize_t n = t.n;
    for (i = 2; i < nargs + nkw; i++)
        t.leaves[n++] = args[i];
    PyObject *fn_before = sj_current_fn, *frame_before = sj_current_frame;
    sj_current_fn = fn;
    sj_current_frame = (PyObject *)PyEval_GetFrame();
    result = PyObject_Vectorcall(ready, t.leaves, n - nkw, kwnames);
    sj_current_fn = fn_before;
    sj_current_frame = frame_before;
    if (result == NULL && PyErr_ExceptionMatches(g->mismatch))
        result = call_plainly(g, fn, opts, args + 2, nargs - 2, kwnames);
done:
    if (t.leaves != NULL) {
        for (i = 0; i < t.n; i++)
            Py_DECREF(t.leaves[i]);
        if (t.leaves != small)
            PyMem_Free(t.leaves);
    }
    if (t.dicts != NULL && t.dicts != small_dicts)
        PyMem_Free(t.dicts);
    Py_XDECREF(ready);
    return result;
}

static int
guard_traverse(Guard *g, visitproc visit, void *arg)
{
    for (int i = 0; i < GUARD_FIELDS; i++)
        Py_VISIT(*GUARD_FIELD(g, i));
    return 0;
}

static int
guard_clear(Guard *g)
{
    for (int i = 0; i < GUARD_FIELDS; i++)
        Py_CLEAR(*GUARD_FIELD(g, i));
    return 0;
}

static void
guard_dealloc(Guard *g)
{
    PyObject_GC_UnTrack(g);
    guard_clear(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *
guard_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    /* The fields in guard_offsets' order, then what is not held. */
    static char *kwlist[] = {"code",       "sinks_ns", "sinks",   "defaults", "kwdefaults",
                             "names",      "gslots",   "cslots",  "leaf_slot", "leaf_types",
                             "missing",    "dict_mark", "entries", "general",  "plainly",
                             "mismatch",   "g_id",     "b_id",    "max_leaves", "max_dicts",
                             NULL};
    PyObject *o[GUARD_FIELDS], *g_id, *b_id;
    Py_ssize_t max_leaves, max_dicts;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "OO!OOOO!O!O!OO!OOO!OOOO!O!nn", kwlist, &o[0], &PyDict_Type, &o[1],
            &o[2], &o[3], &o[4], &PyTuple_Type, &o[5], &PyTuple_Type, &o[6], &PyTuple_Type,
            &o[7], &o[8], &PySet_Type, &o[9], &o[10], &o[11], &PyDict_Type, &o[12], &o[13],
            &o[14], &o[15], &PyLong_Type, &g_id, &PyLong_Type, &b_id, &max_leaves, &max_dicts))
        return NULL;
    if (PyTuple_GET_SIZE(o[5]) != PyTuple_GET_SIZE(o[6]) || !PyDict_CheckExact(o[2]) ||
        max_leaves < 0 || max_dicts < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "Guard: names and gslots differ in length, sinks is not a dict, or a "
                        "maximum is negative");
        return NULL;
    }
    void *globals_ptr = PyLong_AsVoidPtr(g_id), *builtins_ptr = PyLong_AsVoidPtr(b_id);
    if (PyErr_Occurred())
        return NULL;
    Guard *g = (Guard *)type->tp_alloc(type, 0);
    if (g == NULL)
        return NULL;
    for (int i = 0; i < GUARD_FIELDS; i++) {
        Py_INCREF(o[i]);
        *GUARD_FIELD(g, i) = o[i];
    }
    g->globals_ptr = globals_ptr;
    g->builtins_ptr = builtins_ptr;
    g->max_leaves = max_leaves;
    g->max_dicts = max_dicts;
    g->vectorcall = guard_vectorcall;
    return (PyObject *)g;
}

PyTypeObject sj_GuardType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stablejit._speedups.Guard",
    .tp_basicsize = sizeof(Guard),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Guard, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = guard_new,
    .tp_traverse = (traverseproc)guard_traverse,
    .tp_clear = (inquiry)guard_clear,
    .tp_dealloc = (destructor)guard_dealloc,
    .tp_doc = "A fast-path record's call function: its identity checks, its entry lookup "
              "and the call of the entry's jax.jit, in C.",
};

