/* The checks of a user class's state (see _fingerprint/class_guards.py): the
 * class case of guard_kinds.c, the class check that object and tuple
 * specs of user classes carry, and the descriptor case. What a class holds is re-checked with the
 * guard dispatch, handed in (fits, valid), so this file calls no other. */
#include "match.h"

/* A class check (classes.class_check wrote it, from item at): the class,
 * its state (whose tag is the version tag its contents were last found
 * unchanged at), the state's holds, and deep: the specs of
 * what the tag cannot see, as (where, spec) pairs (where: an attribute's
 * name, a base's index, or None for the metaclass), None if some have no
 * C case, or False for a class met within its own contents. */
#define DEEP_MET 64

/* The deep specs of class tp, in a match of their own, as the walk of its
 * contents numbered them (the class first); no arrays. */
static int
deep_fits(RecordCall *g, PyTypeObject *tp, PyObject *deep, const struct Within *within,
          SjFits fits)
{
    PyObject *met[DEEP_MET];
    struct Within here = {(PyObject *)tp, within};
    Taken t = {NULL, 0, 0, met, 1, DEEP_MET, NULL, 0, &here, NULL};
    met[0] = (PyObject *)tp;
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(deep); i++) {
        PyObject *where = ITEM(ITEM(deep, i), 0), *v;
        if (where == Py_None)
            v = (PyObject *)Py_TYPE(tp);
        else if (PyLong_CheckExact(where)) {
            Py_ssize_t k = PyLong_AsSsize_t(where);
            if (k < 0 || k >= PyTuple_GET_SIZE(tp->tp_bases))
                return 0;
            v = ITEM(tp->tp_bases, k);
        }
        else {
            v = tp->tp_dict == NULL ? NULL : PyDict_GetItemWithError(tp->tp_dict, where);
            if (v == NULL) {
                PyErr_Clear();
                v = g->missing;
            }
        }
        Py_INCREF(v);
        ok = fits(g, v, ITEM(ITEM(deep, i), 1), &t);
        Py_DECREF(v);
    }
    return ok;
}

/* A user class's state still holding: where its tag is unchanged, by its
 * deep specs alone; else (or where they fail: what changed may have
 * changed back) the state's own holds(sinks), in Python, decides. */
int
sj_class_holds(RecordCall *g, PyObject *check, Py_ssize_t at, Taken *t, SjFits fits)
{
    PyTypeObject *tp = (PyTypeObject *)ITEM(check, at);
    PyObject *deep = ITEM(check, at + 3);
    if (t->held == ITEM(check, at + 1))
        return 1;
    if (deep == Py_False) {
        for (const struct Within *w = t->within; w != NULL; w = w->outer) {
            if (w->cls == (PyObject *)tp)
                return 1;
        }
    }
    else if (deep != Py_None) {
        static PyObject *tag_name = NULL;
        if (tag_name == NULL && (tag_name = PyUnicode_InternFromString("tag")) == NULL) {
            PyErr_Clear();
            return 0;
        }
        /* (Read each time: the state renews it when the contents are found unchanged.) */
        PyObject *held = PyObject_GetAttr(ITEM(check, at + 1), tag_name);
        unsigned long tag =
            held != NULL && PyLong_CheckExact(held) ? PyLong_AsUnsignedLong(held) : 0;
        Py_XDECREF(held);
        if (tag != 0 && tag == sj_tag_now(tp) && deep_fits(g, tp, deep, t->within, fits)) {
            t->held = ITEM(check, at + 1);
            return 1;
        }
        PyErr_Clear();
    }
    PyObject *r = PyObject_CallOneArg(ITEM(check, at + 2), g->sinks);
    if (r == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = r == Py_True;
    Py_DECREF(r);
    if (ok)
        t->held = ITEM(check, at + 1);
    return ok;
}

int
sj_valid_class_check(Shape *s, PyObject *check, Py_ssize_t at, SjValid valid)
{
    PyObject *deep = ITEM(check, at + 3);
    if (!PyType_Check(ITEM(check, at)) || !PyCallable_Check(ITEM(check, at + 2)) ||
        !(deep == Py_None || deep == Py_False || PyTuple_CheckExact(deep)))
        return sj_invalid("a class check's class, tag, holds or deep specs");
    if (!PyTuple_CheckExact(deep))
        return 1;
    /* Counted apart: a match of their own, whose numbers must fit DEEP_MET. */
    Shape own = {s->marks, s->any_array, 0, 1};
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(deep); i++) {
        PyObject *pair = ITEM(deep, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !valid(&own, ITEM(pair, 1), 0))
            return PyErr_Occurred() ? 0 : sj_invalid("a class's deep specs");
    }
    if (own.leaves != 0 || own.met > DEEP_MET)
        return sj_invalid("a class's deep specs take arrays, or number too much");
    return 1;
}

int
sj_valid_optional_class_check(Shape *s, PyObject *check, SjValid valid)
{
    if (check == Py_None)
        return 1;
    if (!PyTuple_CheckExact(check) || PyTuple_GET_SIZE(check) != 4)
        return sj_invalid("a class check is not None or a 4-tuple");
    return sj_valid_class_check(s, check, 0, valid);
}


/* -- descriptor: (mark, type, names, specs): DescriptorGuard ------------- */

int
sj_descriptor_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t, SjFits fits)
{
    PyObject *names = ITEM(spec, 2), *specs = ITEM(spec, 3);
    int ok = (PyObject *)Py_TYPE(v) == ITEM(spec, 1);
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(names); i++) {
        /* (The standard descriptors' own getters: no Python code runs.) */
        PyObject *x = PyObject_GetAttr(v, ITEM(names, i));
        ok = x != NULL && fits(g, x, ITEM(specs, i), t);
        Py_XDECREF(x);
    }
    PyErr_Clear();
    return ok;
}

int
sj_descriptor_valid(Shape *s, PyObject *spec, SjValid valid)
{
    PyObject *names = ITEM(spec, 2), *specs = ITEM(spec, 3);
    if (!PyType_Check(ITEM(spec, 1)) || !PyTuple_CheckExact(names) ||
        !PyTuple_CheckExact(specs) || PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(specs))
        return sj_invalid("a descriptor spec's type, names or specs");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(specs); i++) {
        if (!valid(s, ITEM(specs, i), 0))
            return 0;
    }
    return 1;
}
