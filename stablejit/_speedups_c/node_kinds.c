/* The checks of a pytree node whose flatten only reads its fields (see
 * _fingerprint/pure_nodes.py): the fields and items cases of guard_kinds.c.
 * What the fields hold is checked with the guard dispatch, handed in (fits,
 * valid), so this file calls only class_checks.c. */
#include "match.h"

/* -- fields: (mark, type, kind, class check, names, plan): FieldsGuard ---- */

/* The most __dict__ values a fields check holds on its stack (past that, on the heap). */
#define STACK_FIELDS 32

/* A node of the type, its kind unchanged (not numbered: the walk does not
 * number a pytree node), whose __dict__ has these names, in order (None:
 * not read), and whose fields fit the plan's specs, in the plan's order:
 * each field a place in the __dict__ (its values held for the check, which
 * may run code) or a slot's descriptor. */
int
sj_fields_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t, SjFits fits)
{
    if (!sj_same_kind(g, v, spec))
        return 0;
    PyObject *check = ITEM(spec, 3), *names = ITEM(spec, 4), *plan = ITEM(spec, 5);
    if (check != Py_None && !sj_class_holds(g, check, 0, t, fits))
        return 0;
    PyObject *stack[STACK_FIELDS], **values = stack;
    Py_ssize_t n = names == Py_None ? 0 : PyTuple_GET_SIZE(names), got = 0;
    if (n > STACK_FIELDS && (values = PyMem_Malloc(n * sizeof(PyObject *))) == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_INCREF(v); /* (a check may run code that drops its holder's reference) */
    int ok = 1;
    if (names != Py_None) {
        PyObject *d = sj_dict_of(v), *k, *value;
        Py_ssize_t pos = 0;
        ok = d != NULL && PyDict_GET_SIZE(d) == n;
        while (ok && PyDict_Next(d, &pos, &k, &value)) {
            PyObject *name = ITEM(names, got);
            ok = k == name || (PyUnicode_CheckExact(k) && PyUnicode_Compare(k, name) == 0);
            Py_INCREF(value);
            values[got++] = value;
        }
        Py_XDECREF(d);
    }
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(plan); i++) {
        PyObject *where = ITEM(ITEM(plan, i), 0), *x;
        if (PyLong_CheckExact(where)) { /* (valid: a place below n) */
            x = values[PyLong_AsSsize_t(where)];
            Py_INCREF(x);
        }
        else /* (valid: a member descriptor, whose getter runs no Python code) */
            x = Py_TYPE(where)->tp_descr_get(where, v, (PyObject *)Py_TYPE(v));
        ok = x != NULL && fits(g, x, ITEM(ITEM(plan, i), 1), t);
        Py_XDECREF(x);
    }
    PyErr_Clear();
    while (got > 0)
        Py_DECREF(values[--got]);
    if (values != stack)
        PyMem_Free(values);
    Py_DECREF(v);
    return ok;
}

int
sj_fields_valid(Shape *s, PyObject *spec, SjValid valid)
{
    PyObject *names = ITEM(spec, 4), *plan = ITEM(spec, 5);
    if (!PyType_Check(ITEM(spec, 1)) || !(names == Py_None || PyTuple_CheckExact(names)) ||
        !PyTuple_CheckExact(plan))
        return sj_invalid("a fields spec's type, names or plan");
    for (Py_ssize_t i = 0; names != Py_None && i < PyTuple_GET_SIZE(names); i++) {
        if (!PyUnicode_CheckExact(ITEM(names, i)))
            return sj_invalid("a fields spec's names");
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plan); i++) {
        PyObject *pair = ITEM(plan, i), *where;
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            return sj_invalid("a fields spec's plan");
        where = ITEM(pair, 0);
        if (PyLong_CheckExact(where)
                ? names == Py_None || PyLong_AsSsize_t(where) < 0 ||
                      PyLong_AsSsize_t(where) >= PyTuple_GET_SIZE(names)
                : !PyObject_TypeCheck(where, &PyMemberDescr_Type))
            return sj_invalid("a field is neither a place in its __dict__ nor a slot");
        if (!valid(s, ITEM(pair, 1), 0))
            return 0;
    }
    return sj_valid_optional_class_check(s, ITEM(spec, 3), valid);
}

/* -- items: (mark, keys, values): ItemsGuard (not numbered) --------------- */

/* A dict of these very keys and values, in order: atoms, or tuples of them
 * kept by identity. */
int
sj_items_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    PyObject *keys = ITEM(spec, 1), *values = ITEM(spec, 2);
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(keys))
        return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *x;
    /* Atoms and string keys only: no Python code runs to change the dict. */
    while (PyDict_Next(v, &pos, &k, &x)) {
        PyObject *key = ITEM(keys, i), *e = ITEM(values, i);
        i++;
        if (k != key && !(PyUnicode_CheckExact(k) && PyUnicode_Compare(k, key) == 0))
            return 0;
        if (x != e && !sj_same_atom(x, e))
            return 0;
    }
    PyErr_Clear();
    return 1;
}

int
sj_items_valid(Shape *s, PyObject *spec)
{
    PyObject *keys = ITEM(spec, 1), *values = ITEM(spec, 2);
    if (!PyTuple_CheckExact(keys) || !PyTuple_CheckExact(values) ||
        PyTuple_GET_SIZE(keys) != PyTuple_GET_SIZE(values))
        return sj_invalid("an items spec's keys and values");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
        if (!PyUnicode_CheckExact(ITEM(keys, i)))
            return sj_invalid("an items spec's keys");
    }
    return 1;
}
