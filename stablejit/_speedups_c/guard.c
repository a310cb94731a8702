/* The Guard: a fast-path record's call function (see README.md here). */
#include "guard.h"

#define GUARD_FIELDS 12
static const Py_ssize_t guard_held[GUARD_FIELDS + 1] = {
    offsetof(Guard, top),      offsetof(Guard, sinks),
    offsetof(Guard, leaf_slot), offsetof(Guard, leaf_types), offsetof(Guard, missing),
    offsetof(Guard, marks),    offsetof(Guard, table),    offsetof(Guard, entries),
    offsetof(Guard, general),  offsetof(Guard, plainly),  offsetof(Guard, mismatch),
    offsetof(Guard, entry_type), -1,
};
static const SjLayout guard_layout = {guard_held, 0};
SJ_GC(guard, guard_layout)

/* Numbered objects past which a match looks them up in a hash set. */
#define LINEAR_MET 16

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
 * t), 0 if not. A walk from fn numbers it first. */
static int
matches(Guard *g, PyObject *fn, Taken *t)
{
    if (g->sinks != sj_sinks_now)
        return 0;
    t->met[t->n_met++] = fn;
    return sj_function_fits(g, fn, g->top, t);
}

PyObject *
sj_guard_call(PyObject *self, PyObject *fn, PyObject *opts, PyObject *const *args,
              Py_ssize_t nargs, PyObject *kwnames)
{
    Guard *g = (Guard *)self;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *small[SMALL_STACK];
    PyObject *small_met[LINEAR_MET];
    Taken t = {small, 0, g->max_leaves, small_met, 0, g->max_met, NULL, 0};
    PyObject *entry, *ready = NULL, *result = NULL;
    Py_ssize_t i;
    int matched;

    if (Py_TYPE(fn) != &PyFunction_Type)
        return sj_call_with(g->general, fn, opts, args, nargs, kwnames);
    if (t.cap + nargs + nkw > SMALL_STACK)
        t.leaves = PyMem_Malloc(sizeof(PyObject *) * (t.cap + nargs + nkw));
    if (t.cap_met > LINEAR_MET) {
        size_t size = 4 * LINEAR_MET;
        while (size < 2 * (size_t)t.cap_met)
            size *= 2;
        t.met = PyMem_Malloc(sizeof(PyObject *) * t.cap_met);
        t.set = PyMem_Calloc(size, sizeof(PyObject *));
        t.mask = size - 1;
    }
    if (t.leaves == NULL || t.met == NULL || (t.cap_met > LINEAR_MET && t.set == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    matched = matches(g, fn, &t);
    /* Looked up last: nothing between here and its use runs Python code, which
     * could drop the entry from the dict (a borrowed reference). */
    entry = matched ? PyDict_GetItemWithError(g->entries, opts) : NULL;
    /* Its slots, read and written where the entry's class keeps them (an
     * attribute lookup and store cost more than the rest of the checks). */
    if (entry != NULL && Py_TYPE(entry) == (PyTypeObject *)g->entry_type)
        ready = *SLOT(entry, g->ready_offset); /* (so entry is a Counted) */
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
    if (t.leaves != NULL) {
        for (i = 0; i < t.n; i++)
            Py_DECREF(t.leaves[i]);
        if (t.leaves != small)
            PyMem_Free(t.leaves);
    }
    if (t.met != NULL && t.met != small_met)
        PyMem_Free(t.met);
    PyMem_Free(t.set);
    Py_XDECREF(ready);
    return result;
}

/* Called as a call function, call(fn, opts, *args, **kwargs), as the pure
 * path's partials call it. */
static PyObject *
guard_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 2)
        return PyObject_Vectorcall(((Guard *)self)->general, args, nargsf, kwnames);
    return sj_guard_call(self, args[0], args[1], args + 2, nargs - 2, kwnames);
}

static PyObject *
guard_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    /* The fields in guard_held's order. */
    static char *kwlist[] = {"top",     "sinks",   "leaf_slot", "leaf_types", "missing",
                             "marks",   "table",   "entries",   "general",    "plainly",
                             "mismatch", "entry_type", NULL};
    PyObject *o[GUARD_FIELDS];
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "O!O!OO!OO!O!O!OOOO!", kwlist, &PyTuple_Type, &o[0], &PyDict_Type,
            &o[1], &o[2], &PySet_Type, &o[3], &o[4], &PyTuple_Type, &o[5], &PyDict_Type, &o[6],
            &PyDict_Type, &o[7], &o[8], &o[9], &o[10], &PyType_Type, &o[11]))
        return NULL;
    if (PyTuple_GET_SIZE(o[5]) != N_MARKS) {
        PyErr_Format(PyExc_ValueError, "Guard: marks must hold %d marks", N_MARKS);
        return NULL;
    }
    Shape shape = {o[5], o[2], 0, 0};
    if (!sj_valid_slot(&shape, o[0], 1))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)o[11], &sj_CountedType)) {
        PyErr_SetString(PyExc_TypeError, "Guard: entry_type must be a subclass of Counted");
        return NULL;
    }
    Py_ssize_t ready_offset = sj_slot_offset(o[11], "ready");
    if (ready_offset < 0)
        return NULL;
    Guard *g = (Guard *)type->tp_alloc(type, 0);
    if (g == NULL)
        return NULL;
    sj_hold((PyObject *)g, &guard_layout, o, GUARD_FIELDS);
    g->max_leaves = shape.leaves;
    g->max_met = shape.met;
    g->ready_offset = ready_offset;
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
    .tp_traverse = guard_traverse,
    .tp_clear = guard_clear,
    .tp_dealloc = guard_dealloc,
    .tp_doc = "A fast-path record's call function: its identity checks, its entry lookup "
              "and the call of the entry's jax.jit, in C.",
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
    .tp_doc = "The base of the cache's entries: hits, an int a Guard counts in place.",
};
