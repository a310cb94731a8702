/* What each kind of slot checks, in C (see README.md here): the checks of
 * _fingerprint/guards.py's slots, which a Guard must make exactly as they
 * do. Any failure fails the whole match, so their order does not matter. */
#include "guard.h"

#include <math.h>

static int fits(Guard *g, PyObject *v, PyObject *slot, Taken *t);

/* -- numbering ------------------------------------------------------------ */

static size_t
slot_of(PyObject *v, size_t mask)
{
    return ((size_t)(uintptr_t)v >> 4) & mask;
}

static int
met_before(Taken *t, PyObject *v)
{
    if (t->set == NULL) {
        for (Py_ssize_t i = 0; i < t->n_met; i++) {
            if (t->met[i] == v)
                return 1;
        }
        return 0;
    }
    for (size_t h = slot_of(v, t->mask); t->set[h] != NULL; h = (h + 1) & t->mask) {
        if (t->set[h] == v)
            return 1;
    }
    return 0;
}

/* Numbers v (the next number): 0 if it was met before or there is no room. */
static int
number(Taken *t, PyObject *v)
{
    if (t->n_met >= t->cap_met || met_before(t, v))
        return 0;
    t->met[t->n_met++] = v;
    if (t->set != NULL) {
        size_t h = slot_of(v, t->mask);
        while (t->set[h] != NULL)
            h = (h + 1) & t->mask;
        t->set[h] = v;
    }
    return 1;
}

/* guards.fresh: numbers a list, dict or object's dict, which must not be a
 * side channel either. */
static int
fresh(Guard *g, Taken *t, PyObject *v)
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
    return number(t, v);
}

static int
take(Taken *t, PyObject *v)
{
    if (t->n >= t->cap)
        return 0;
    Py_INCREF(v); /* the call may run code that drops its holder's reference */
    t->leaves[t->n++] = v;
    return 1;
}

/* -- atoms: guards.same_atom ---------------------------------------------- */

/* Equal as repr tells floats apart: -0.0 is not 0.0, and NaN is NaN. */
static int
same_double(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static int
same_atom(PyObject *v, PyObject *expected)
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

/* guards.same_defaults: a function's __defaults__ or __kwdefaults__ d has the
 * key of expected, one of atoms (a def builds them anew: equal atoms, other
 * objects). */
static int
same_defaults(PyObject *d, PyObject *expected)
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
            if (x != y && !same_atom(x, y))
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
        if ((k != k_e && !same_atom(k, k_e)) || (v != v_e && !same_atom(v, v_e)))
            return 0;
    }
    return 1;
}

/* -- containers ----------------------------------------------------------- */

/* The items of v (a tuple, or a list re-read at each step: an object's
 * __dict__, read below, may run code that changes it) against slots. */
static int
items_fit(Guard *g, PyObject *v, PyObject *slots, Taken *t)
{
    Py_ssize_t n = PyTuple_GET_SIZE(slots);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_Check(v) && PyList_GET_SIZE(v) != n)
            return 0;
        PyObject *item = PyList_Check(v) ? PyList_GET_ITEM(v, i) : PyTuple_GET_ITEM(v, i);
        Py_INCREF(item);
        int ok = fits(g, item, PyTuple_GET_ITEM(slots, i), t);
        Py_DECREF(item);
        if (!ok)
            return 0;
    }
    return 1;
}

/* DictSlot: a dict (fresh) with the slot's keys, in order, whose values fit. */
static int
dict_fits(Guard *g, PyObject *v, PyObject *slot, Taken *t)
{
    PyObject *keys = PyTuple_GET_ITEM(slot, 1), *items = PyTuple_GET_ITEM(slot, 2);
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(keys) ||
        !fresh(g, t, v))
        return 0;
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

/* ObjectSlot: an object of the class, its kind unchanged, numbered, whose
 * __dict__ (as object.__getattribute__ reads it) fits the dict slot. */
static int
object_fits(Guard *g, PyObject *v, PyObject *slot, Taken *t)
{
    if ((PyObject *)Py_TYPE(v) != PyTuple_GET_ITEM(slot, 1))
        return 0;
    PyObject *kind = PyDict_GetItemWithError(g->table, PyTuple_GET_ITEM(slot, 1));
    if (kind != PyTuple_GET_ITEM(slot, 2) || !number(t, v)) {
        PyErr_Clear();
        return 0;
    }
    /* Held while it is numbered (met before compares addresses). */
    Py_INCREF(v);
    PyObject *d = sj_dict_of(v);
    int ok = d != NULL && dict_fits(g, d, PyTuple_GET_ITEM(slot, 3), t);
    if (d == NULL)
        PyErr_Clear();
    Py_XDECREF(d);
    Py_DECREF(v);
    return ok;
}

/* -- slots ---------------------------------------------------------------- */

/* 1: v fits slot (arrays taken, objects numbered), 0: it does not. */
static int
fits(Guard *g, PyObject *v, PyObject *slot, Taken *t)
{
    if (v == slot)
        return 1;
    if (slot == g->leaf_slot) {
        int in = PySet_Contains(g->leaf_types, (PyObject *)Py_TYPE(v));
        if (in < 0)
            PyErr_Clear();
        return in > 0 && take(t, v);
    }
    if (!PyTuple_CheckExact(slot) || PyTuple_GET_SIZE(slot) < 2 ||
        Py_TYPE(PyTuple_GET_ITEM(slot, 0)) != Py_TYPE(PyTuple_GET_ITEM(g->marks, 0)))
        return same_atom(v, slot);
    PyObject *mark = PyTuple_GET_ITEM(slot, 0);
    if (mark == PyTuple_GET_ITEM(g->marks, MARK_DICT))
        return dict_fits(g, v, slot, t);
    if (mark == PyTuple_GET_ITEM(g->marks, MARK_FUNCTION))
        return Py_TYPE(v) == &PyFunction_Type && number(t, v) &&
               sj_function_fits(g, v, slot, t);
    if (mark == PyTuple_GET_ITEM(g->marks, MARK_TUPLE)) {
        PyObject *items = PyTuple_GET_ITEM(slot, 2);
        return (PyObject *)Py_TYPE(v) == PyTuple_GET_ITEM(slot, 1) &&
               PyTuple_GET_SIZE(v) == PyTuple_GET_SIZE(items) &&
               items_fit(g, v, items, t);
    }
    if (mark == PyTuple_GET_ITEM(g->marks, MARK_LIST)) {
        PyObject *items = PyTuple_GET_ITEM(slot, 1);
        return PyList_CheckExact(v) && PyList_GET_SIZE(v) == PyTuple_GET_SIZE(items) &&
               fresh(g, t, v) && items_fit(g, v, items, t);
    }
    if (mark == PyTuple_GET_ITEM(g->marks, MARK_REF)) {
        Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(slot, 1));
        return n >= 0 && n < t->n_met && t->met[n] == v;
    }
    if (mark == PyTuple_GET_ITEM(g->marks, MARK_OBJECT))
        return object_fits(g, v, slot, t);
    if (mark == PyTuple_GET_ITEM(g->marks, MARK_LIFTED))
        return (PyObject *)Py_TYPE(v) == PyTuple_GET_ITEM(slot, 1) && take(t, v);
    return 0;
}

/* A function slot's code: the very code, or (for a nested function's, held
 * weakly) the code its weakref names, or None once that is dead. Borrowed:
 * only compared. */
static PyObject *
code_of(PyObject *held)
{
    if (!PyWeakref_CheckRef(held))
        return held;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *code;
    if (PyWeakref_GetRef(held, &code) <= 0) {
        PyErr_Clear();
        return Py_None;
    }
    Py_DECREF(code); /* only compared: a function of this code holds it */
    return code;
#else
    return PyWeakref_GET_OBJECT(held);
#endif
}

/* What an unbound name reads as: the globals', else the builtins', else missing. */
static PyObject *
read_global(Guard *g, PyFunctionObject *f, PyObject *name)
{
    PyObject *v = PyDict_GetItemWithError(f->func_globals, name);
    if (v == NULL && !PyErr_Occurred())
        v = PyDict_GetItemWithError(f->func_builtins, name);
    if (v == NULL && !PyErr_Occurred())
        v = g->missing;
    return v;
}

int
sj_function_fits(Guard *g, PyObject *fn, PyObject *slot, Taken *t)
{
    PyFunctionObject *f = (PyFunctionObject *)fn;
    if (f->func_code != code_of(PyTuple_GET_ITEM(slot, 1)) ||
        (void *)f->func_globals != PyLong_AsVoidPtr(PyTuple_GET_ITEM(slot, 2)) ||
        (void *)f->func_builtins != PyLong_AsVoidPtr(PyTuple_GET_ITEM(slot, 3)) ||
        !same_defaults(f->func_defaults ? f->func_defaults : Py_None, PyTuple_GET_ITEM(slot, 4)) ||
        !same_defaults(f->func_kwdefaults ? f->func_kwdefaults : Py_None,
                       PyTuple_GET_ITEM(slot, 5)) ||
        (f->func_dict != NULL && PyDict_GET_SIZE(f->func_dict) != 0) ||
        !PyDict_CheckExact(f->func_globals) || !PyDict_CheckExact(f->func_builtins))
        return 0;
    PyObject *names = PyTuple_GET_ITEM(slot, 6), *gslots = PyTuple_GET_ITEM(slot, 7),
             *cslots = PyTuple_GET_ITEM(slot, 8);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *v = read_global(g, f, PyTuple_GET_ITEM(names, i));
        if (v == NULL) {
            PyErr_Clear();
            return 0;
        }
        if (!fits(g, v, PyTuple_GET_ITEM(gslots, i), t))
            return 0;
    }
    Py_ssize_t n_cells = PyTuple_GET_SIZE(cslots);
    if (n_cells) {
        PyObject *closure = f->func_closure;
        if (closure == NULL || PyTuple_GET_SIZE(closure) < n_cells)
            return 0;
        for (Py_ssize_t i = 0; i < n_cells; i++) {
            PyObject *v = PyCell_GET(PyTuple_GET_ITEM(closure, i));
            if (!fits(g, v == NULL ? g->missing : v, PyTuple_GET_ITEM(cslots, i), t))
                return 0;
        }
    }
    return 1;
}
