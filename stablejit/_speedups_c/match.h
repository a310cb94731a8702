/* What a match takes and compares (see README.md here): the objects it
 * numbers, the arrays it takes, and the same atom. The C twins of the
 * fingerprint's guards.fresh, same_atom (whose float rule is kind.float_key)
 * and same_defaults; tests/test_agreement.py proves them to agree. Inline,
 * for the checks of guard_kinds.c and class_checks.c: a check calls them
 * for every item it meets. */
#ifndef STABLEJIT_MATCH_H
#define STABLEJIT_MATCH_H

#include "record_call.h"

#include <math.h>

#define ITEM(spec, i) PyTuple_GET_ITEM(spec, i)

/* A malformed guard spec: 0, with a ValueError naming what is wrong. */
static inline int
sj_invalid(const char *what)
{
    PyErr_Format(PyExc_ValueError, "RecordCall: malformed guard spec: %s", what);
    return 0;
}

/* v is of the type spec[1] names, for which the walk's table still holds the
 * kind spec[2] (one registered since keys it otherwise): the head of an
 * object's check and a pytree node's. */
static inline int
sj_same_kind(RecordCall *g, PyObject *v, PyObject *spec)
{
    if ((PyObject *)Py_TYPE(v) != ITEM(spec, 1))
        return 0;
    PyObject *kind = PyDict_GetItemWithError(g->table, ITEM(spec, 1));
    if (kind != ITEM(spec, 2)) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* -- numbering ------------------------------------------------------------ */

static inline size_t
bucket(PyObject *v, size_t mask)
{
    return ((size_t)(uintptr_t)v >> 4) & mask;
}

static inline int
met_before(Taken *t, PyObject *v)
{
    if (t->set == NULL) {
        for (Py_ssize_t i = 0; i < t->n_met; i++) {
            if (t->met[i] == v)
                return 1;
        }
        return 0;
    }
    for (size_t h = bucket(v, t->mask); t->set[h] != NULL; h = (h + 1) & t->mask) {
        if (t->set[h] == v)
            return 1;
    }
    return 0;
}

static inline int
sj_number(Taken *t, PyObject *v)
{
    if (t->n_met >= t->cap_met || met_before(t, v))
        return 0;
    t->met[t->n_met++] = v;
    if (t->set != NULL) {
        size_t h = bucket(v, t->mask);
        while (t->set[h] != NULL)
            h = (h + 1) & t->mask;
        t->set[h] = v;
    }
    return 1;
}

static inline int
sj_fresh(RecordCall *g, Taken *t, PyObject *v)
{
    if (PyDict_GET_SIZE(g->sinks) > 0) {
        PyObject *id = PyLong_FromVoidPtr(v);
        int in = id == NULL ? -1 : PyDict_Contains(g->sinks, id);
        Py_XDECREF(id);
        if (in != 0) {
            PyErr_Clear(); /* (an error: the general path meets it again) */
            return 0;
        }
    }
    return sj_number(t, v);
}

static inline int
sj_take(Taken *t, PyObject *v)
{
    if (t->n >= t->cap)
        return 0;
    Py_INCREF(v); /* the call may run code that drops its holder's reference */
    t->leaves[t->n++] = v;
    return 1;
}

/* -- atoms ---------------------------------------------------------------- */

/* kind.float_key's rule: equal as float.hex tells floats apart, so -0.0 is
 * not 0.0 and NaN is NaN. */
static inline int
same_double(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static inline int
sj_same_atom(PyObject *v, PyObject *expected)
{
    PyTypeObject *tp = Py_TYPE(expected);
    if (Py_TYPE(v) != tp)
        return 0;
    if (tp == &PyFloat_Type)
        return same_double(PyFloat_AS_DOUBLE(v), PyFloat_AS_DOUBLE(expected));
    if (tp == &PyComplex_Type) {
        Py_complex a = ((PyComplexObject *)v)->cval, b = ((PyComplexObject *)expected)->cval;
        return same_double(a.real, b.real) && same_double(a.imag, b.imag);
    }
    if (tp == &PyLong_Type || tp == &PyUnicode_Type || tp == &PyBytes_Type) {
        int eq = PyObject_RichCompareBool(v, expected, Py_EQ); /* exact types: no user code */
        if (eq < 0)
            PyErr_Clear();
        return eq == 1;
    }
    return 0; /* bool and None are singletons, met by identity */
}

static inline int
sj_same_defaults(PyObject *d, PyObject *expected)
{
    if (d == expected)
        return 1;
    if (Py_TYPE(d) != Py_TYPE(expected))
        return 0;
    if (PyTuple_CheckExact(d)) {
        Py_ssize_t n = PyTuple_GET_SIZE(d);
        if (n != PyTuple_GET_SIZE(expected))
            return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = PyTuple_GET_ITEM(d, i), *y = PyTuple_GET_ITEM(expected, i);
            if (x != y && !sj_same_atom(x, y))
                return 0;
        }
        return 1;
    }
    if (!PyDict_CheckExact(d) || PyDict_GET_SIZE(d) != PyDict_GET_SIZE(expected))
        return 0;
    Py_ssize_t pos = 0, pos_e = 0;
    PyObject *k, *v, *k_e, *v_e;
    /* Atoms and string keys only: no Python code runs to change either dict. */
    while (PyDict_Next(d, &pos, &k, &v) && PyDict_Next(expected, &pos_e, &k_e, &v_e)) {
        if ((k != k_e && !sj_same_atom(k, k_e)) || (v != v_e && !sj_same_atom(v, v_e)))
            return 0;
    }
    return 1;
}

#endif
