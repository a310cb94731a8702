/* RecordCall: a record's call function, its checks then its call (see README.md
 * here); and Counted, the cache entries' base, whose hits it counts. */
#include "record_call.h"

#define RECORD_CALL_FIELDS 12
static const Py_ssize_t record_call_held[RECORD_CALL_FIELDS + 1] = {
    offsetof(RecordCall, top),        offsetof(RecordCall, sinks),
    offsetof(RecordCall, any_array),  offsetof(RecordCall, leaf_types),
    offsetof(RecordCall, missing),    offsetof(RecordCall, kinds),
    offsetof(RecordCall, table),      offsetof(RecordCall, entries),
    offsetof(RecordCall, general),    offsetof(RecordCall, plainly),
    offsetof(RecordCall, mismatch),   offsetof(RecordCall, entry_type), -1,
};
static const SjLayout record_call_layout = {record_call_held, 0};
SJ_GC(record_call, record_call_layout)

/* Numbered objects past which a match looks them up in a hash set. */
#define LINEAR_MET 16

static PyObject *
call_plainly(RecordCall *g, PyObject *fn, PyObject *opts, PyObject *const *args, Py_ssize_t nargs,
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

/* Sizes t's buffers for a match of g (room for extra more leaves, the
 * call's arguments): on the C stack where they fit (small, small_met),
 * else allocated. 0 with MemoryError if that failed. */
static int
taken_init(RecordCall *g, Taken *t, PyObject **small, PyObject **small_met, Py_ssize_t extra)
{
    *t = (Taken){small, 0, g->max_leaves, small_met, 0, g->max_met, NULL, 0, NULL, NULL};
    if (t->cap + extra > SMALL_STACK)
        t->leaves = PyMem_Malloc(sizeof(PyObject *) * (t->cap + extra));
    if (t->cap_met > LINEAR_MET) {
        size_t size = 4 * LINEAR_MET;
        while (size < 2 * (size_t)t->cap_met)
            size *= 2;
        t->met = PyMem_Malloc(sizeof(PyObject *) * t->cap_met);
        t->set = PyMem_Calloc(size, sizeof(PyObject *));
        t->mask = size - 1;
    }
    if (t->leaves == NULL || t->met == NULL || (t->cap_met > LINEAR_MET && t->set == NULL)) {
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

/* Drops what t took and frees what taken_init allocated. */
static void
taken_free(Taken *t, PyObject **small, PyObject **small_met)
{
    if (t->leaves != NULL) {
        for (Py_ssize_t i = 0; i < t->n; i++)
            Py_DECREF(t->leaves[i]);
        if (t->leaves != small)
            PyMem_Free(t->leaves);
    }
    if (t->met != NULL && t->met != small_met)
        PyMem_Free(t->met);
    PyMem_Free(t->set);
}

/* The checks of fn against the record: 1 if they hold (the arrays taken into
 * t), 0 if not. A walk from fn numbers it first. */
static int
matches(RecordCall *g, PyObject *fn, Taken *t)
{
    if (g->sinks != sj_sinks_now || Py_TYPE(fn) != &PyFunction_Type)
        return 0;
    t->met[t->n_met++] = fn;
    return sj_function_fits(g, fn, g->top, t);
}

PyObject *
sj_record_call(PyObject *self, PyObject *fn, PyObject *opts, PyObject *const *args,
               Py_ssize_t nargs, PyObject *kwnames)
{
    RecordCall *g = (RecordCall *)self;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *small[SMALL_STACK];
    PyObject *small_met[LINEAR_MET];
    Taken t;
    PyObject *entry, *ready = NULL, *result = NULL;
    Py_ssize_t i;
    int matched;

    if (Py_TYPE(fn) != &PyFunction_Type)
        return sj_call_with(g->general, fn, opts, args, nargs, kwnames);
    if (!taken_init(g, &t, small, small_met, nargs + nkw))
        goto done;
    matched = matches(g, fn, &t);
    /* Looked up last: nothing between here and its use runs Python code, which
     * could drop the entry from the dict (a borrowed reference). */
    entry = matched ? PyDict_GetItemWithError(g->entries, opts) : NULL;
    /* Its members, read and written where the entry's class keeps them (an
     * attribute lookup and store cost more than the rest of the checks). */
    if (entry != NULL && Py_TYPE(entry) == (PyTypeObject *)g->entry_type)
        ready = *MEMBER(entry, g->ready_offset); /* (so entry is a Counted) */
    if (ready == NULL || ready == Py_None) {
        PyErr_Clear();
        result = sj_call_with(g->general, fn, opts, args, nargs, kwnames);
        ready = NULL;
        goto done;
    }
    Py_INCREF(ready);
    ((Counted *)entry)->hits++;

    Py_ssize_t n = t.n;
    for (i = 0; i < nargs + nkw; i++)
        t.leaves[n++] = args[i];
    /* Published by the entry, not by the frame it was called from: on 3.11+
     * PyEval_GetFrame makes the caller's frame object, which a redefined
     * closure's caller pays for on every call (see canonical.py's
     * current_callable). */
    PyObject *fn_before = sj_current_fn, *entry_before = sj_current_entry;
    Py_INCREF(entry);
    sj_current_fn = fn;
    sj_current_entry = entry;
    result = PyObject_Vectorcall(ready, t.leaves, n - nkw, kwnames);
    sj_current_fn = fn_before;
    sj_current_entry = entry_before;
    Py_DECREF(entry);
    if (result == NULL && PyErr_ExceptionMatches(g->mismatch))
        result = call_plainly(g, fn, opts, args, nargs, kwnames);
done:
    taken_free(&t, small, small_met);
    Py_XDECREF(ready);
    return result;
}

/* check(fn): the call's checks alone, for tests and config.check_records
 * (see _runtime/checks.py): (arrays taken, objects numbered) as lists, or
 * None where they do not hold. */
static PyObject *
record_call_check(PyObject *self, PyObject *fn)
{
    RecordCall *g = (RecordCall *)self;
    PyObject *small[SMALL_STACK];
    PyObject *small_met[LINEAR_MET];
    Taken t;
    PyObject *result = NULL;
    if (taken_init(g, &t, small, small_met, 0)) {
        if (!matches(g, fn, &t))
            result = Py_NewRef(Py_None);
        else {
            PyObject *leaves = PyList_New(t.n), *met = PyList_New(t.n_met);
            if (leaves != NULL && met != NULL) {
                for (Py_ssize_t i = 0; i < t.n; i++)
                    PyList_SET_ITEM(leaves, i, Py_NewRef(t.leaves[i]));
                for (Py_ssize_t i = 0; i < t.n_met; i++)
                    PyList_SET_ITEM(met, i, Py_NewRef(t.met[i]));
                result = PyTuple_Pack(2, leaves, met);
            }
            Py_XDECREF(leaves);
            Py_XDECREF(met);
        }
    }
    taken_free(&t, small, small_met);
    return result;
}

static PyMethodDef record_call_methods[] = {
    {"check", record_call_check, METH_O,
     "check(fn): (arrays, numbered objects) as this call function's checks take them "
     "from fn, or None where they do not hold; calls nothing."},
    {NULL},
};

/* Called as a call function, call(fn, opts, *args, **kwargs), as the pure
 * path's partials call it. */
static PyObject *
record_call_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 2)
        return PyObject_Vectorcall(((RecordCall *)self)->general, args, nargsf, kwnames);
    return sj_record_call(self, args[0], args[1], args + 2, nargs - 2, kwnames);
}

/* Fills g's marks from kinds, (name, mark) pairs: each of the table's kinds
 * must be there once by its name, and nothing else, so that the Python
 * kinds and the C cases cannot disagree on which is which. 0 with a
 * ValueError if they do. */
static int
match_kinds(PyObject **marks, PyObject *kinds)
{
    if (PyTuple_GET_SIZE(kinds) != sj_n_guard_kinds || sj_n_guard_kinds > MAX_GUARD_KINDS) {
        PyErr_Format(PyExc_ValueError, "RecordCall: kinds must hold the accelerator's %d kinds",
                     sj_n_guard_kinds);
        return 0;
    }
    for (int i = 0; i < sj_n_guard_kinds; i++) {
        marks[i] = NULL;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(kinds); j++) {
            PyObject *kind = PyTuple_GET_ITEM(kinds, j);
            if (!PyTuple_CheckExact(kind) || PyTuple_GET_SIZE(kind) != 2 ||
                !PyUnicode_Check(PyTuple_GET_ITEM(kind, 0))) {
                PyErr_SetString(PyExc_ValueError, "RecordCall: kinds are (name, mark) pairs");
                return 0;
            }
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kind, 0),
                                                 sj_guard_kinds[i].name) == 0)
                marks[i] = PyTuple_GET_ITEM(kind, 1);
        }
        if (marks[i] == NULL) {
            PyErr_Format(PyExc_ValueError, "RecordCall: no Python kind of guard is named %s",
                         sj_guard_kinds[i].name);
            return 0;
        }
        for (int k = 0; k < i; k++) {
            if (marks[k] == marks[i] || Py_TYPE(marks[k]) != Py_TYPE(marks[i])) {
                PyErr_SetString(PyExc_ValueError, "RecordCall: kinds' marks must be distinct "
                                                  "objects of one type");
                return 0;
            }
        }
    }
    return 1;
}

static PyObject *
record_call_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    /* The fields in record_call_held's order. */
    static char *kwlist[] = {"top",     "sinks",   "any_array", "leaf_types", "missing",
                             "kinds",   "table",   "entries",   "general",    "plainly",
                             "mismatch", "entry_type", NULL};
    PyObject *o[RECORD_CALL_FIELDS];
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "O!O!OO!OO!O!O!OOOO!", kwlist, &PyTuple_Type, &o[0], &PyDict_Type,
            &o[1], &o[2], &PySet_Type, &o[3], &o[4], &PyTuple_Type, &o[5], &PyDict_Type, &o[6],
            &PyDict_Type, &o[7], &o[8], &o[9], &o[10], &PyType_Type, &o[11]))
        return NULL;
    PyObject *marks[MAX_GUARD_KINDS];
    if (!match_kinds(marks, o[5]))
        return NULL;
    Shape shape = {marks, o[2], 0, 0};
    if (!sj_valid(&shape, o[0], 1))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)o[11], &sj_CountedType)) {
        PyErr_SetString(PyExc_TypeError, "RecordCall: entry_type must be a subclass of Counted");
        return NULL;
    }
    Py_ssize_t ready_offset = sj_member_offset(o[11], "ready");
    if (ready_offset < 0)
        return NULL;
    RecordCall *g = (RecordCall *)type->tp_alloc(type, 0);
    if (g == NULL)
        return NULL;
    sj_hold((PyObject *)g, &record_call_layout, o, RECORD_CALL_FIELDS);
    memcpy(g->marks, marks, sizeof(marks));
    g->max_leaves = shape.leaves;
    g->max_met = shape.met;
    g->ready_offset = ready_offset;
    g->vectorcall = record_call_vectorcall;
    return (PyObject *)g;
}

PyTypeObject sj_RecordCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stablejit._speedups.RecordCall",
    .tp_basicsize = sizeof(RecordCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(RecordCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = record_call_new,
    .tp_traverse = record_call_traverse,
    .tp_clear = record_call_clear,
    .tp_dealloc = record_call_dealloc,
    .tp_methods = record_call_methods,
    .tp_doc = "A record's call function: its guards' checks, its entry lookup and the call "
              "of the entry's jax.jit, in C.",
};

static PyMemberDef counted_members[] = {
    {"hits", T_PYSSIZET, offsetof(Counted, hits), 0, "calls served from this entry"},
    {NULL},
};

PyTypeObject sj_CountedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stablejit._speedups.Counted",
    .tp_basicsize = sizeof(Counted),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_members = counted_members,
    .tp_doc = "The base of the cache's entries: hits, an int a RecordCall counts in place.",
};
