/* The kinds of guard, in C (see README.md here): each kind's case beside the
 * check of its spec's shape, then the table of kinds, then the dispatch.
 * Each case makes exactly the check of the Python kind of the same name
 * (`native`) in _fingerprint/guards.py or container_guards.py, whose `spec`
 * writes what it reads; tests/test_agreement.py proves the two to agree.
 * Any failure fails the whole match, so the order of checks does not matter.
 *
 * A new kind is its two functions here and its line in the table. */
#include "match.h"

/* Places in the table below: a RecordCall's top spec is a function's, and
 * an object's __dict__ spec a dict's. */
#define DICT_KIND 0
#define FUNCTION_KIND 1

/* The items of v (a tuple, or a list re-read at each step: an object's
 * __dict__, read below, may run code that changes it) against specs. */
static int
items_fit(RecordCall *g, PyObject *v, PyObject *specs, Taken *t)
{
    Py_ssize_t n = PyTuple_GET_SIZE(specs);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_Check(v) && PyList_GET_SIZE(v) != n)
            return 0;
        PyObject *item = PyList_Check(v) ? PyList_GET_ITEM(v, i) : PyTuple_GET_ITEM(v, i);
        Py_INCREF(item);
        int ok = sj_fits(g, item, ITEM(specs, i), t);
        Py_DECREF(item);
        if (!ok)
            return 0;
    }
    return 1;
}

static int
valid_items(Shape *s, PyObject *items)
{
    if (!PyTuple_CheckExact(items))
        return sj_invalid("item specs are not a tuple");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        if (!sj_valid(s, ITEM(items, i), 0))
            return 0;
    }
    return 1;
}

/* -- function: (mark, code or a weakref to it, g_id, b_id, defaults,
 *    kwdefaults, names, global specs, cell specs, __dict__ spec or None):
 *    FunctionGuard ------------------------------------------------------- */

/* A spec's code: the very code, or (for a nested function's, held weakly)
 * the code its weakref names, or None once that is dead. Borrowed: only
 * compared. */
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
read_global(RecordCall *g, PyFunctionObject *f, PyObject *name)
{
    PyObject *v = PyDict_GetItemWithError(f->func_globals, name);
    if (v == NULL && !PyErr_Occurred())
        v = PyDict_GetItemWithError(f->func_builtins, name);
    if (v == NULL && !PyErr_Occurred())
        v = g->missing;
    return v;
}

int
sj_function_fits(RecordCall *g, PyObject *fn, PyObject *spec, Taken *t)
{
    PyFunctionObject *f = (PyFunctionObject *)fn;
    PyObject *aspec = ITEM(spec, 9); /* its attributes' spec; None: it must have none */
    if (f->func_code != code_of(ITEM(spec, 1)) ||
        (void *)f->func_globals != PyLong_AsVoidPtr(ITEM(spec, 2)) ||
        (void *)f->func_builtins != PyLong_AsVoidPtr(ITEM(spec, 3)) ||
        !sj_same_defaults(f->func_defaults ? f->func_defaults : Py_None, ITEM(spec, 4)) ||
        !sj_same_defaults(f->func_kwdefaults ? f->func_kwdefaults : Py_None, ITEM(spec, 5)) ||
        (aspec == Py_None && f->func_dict != NULL && PyDict_GET_SIZE(f->func_dict) != 0) ||
        !PyDict_CheckExact(f->func_globals) || !PyDict_CheckExact(f->func_builtins))
        return 0;
    /* Keyword defaults are a dict, which the walk numbers right after the function. */
    if (f->func_kwdefaults != NULL && !sj_fresh(g, t, f->func_kwdefaults))
        return 0;
    PyObject *names = ITEM(spec, 6), *gspecs = ITEM(spec, 7), *cspecs = ITEM(spec, 8);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *v = read_global(g, f, ITEM(names, i));
        if (v == NULL) {
            PyErr_Clear();
            return 0;
        }
        if (!sj_fits(g, v, ITEM(gspecs, i), t))
            return 0;
    }
    Py_ssize_t n_cells = PyTuple_GET_SIZE(cspecs);
    if (n_cells) {
        PyObject *closure = f->func_closure;
        if (closure == NULL || PyTuple_GET_SIZE(closure) < n_cells)
            return 0;
        for (Py_ssize_t i = 0; i < n_cells; i++) {
            PyObject *v = PyCell_GET(ITEM(closure, i));
            if (!sj_fits(g, v == NULL ? g->missing : v, ITEM(cspecs, i), t))
                return 0;
        }
    }
    /* Its attributes (functools.wraps's __wrapped__), after the cells: the walk's order. */
    if (aspec != Py_None && (f->func_dict == NULL || !sj_fits(g, f->func_dict, aspec, t)))
        return 0;
    return 1;
}

static int
function_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    return Py_TYPE(v) == &PyFunction_Type && sj_number(t, v) && sj_function_fits(g, v, spec, t);
}

static int
function_valid(Shape *s, PyObject *spec)
{
    s->met += 1 + (ITEM(spec, 5) != Py_None); /* and its keyword defaults */
    PyObject *names = ITEM(spec, 6), *gspecs = ITEM(spec, 7);
    if (!PyLong_CheckExact(ITEM(spec, 2)) || !PyLong_CheckExact(ITEM(spec, 3)) ||
        !PyTuple_CheckExact(names) || !PyTuple_CheckExact(gspecs) ||
        PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(gspecs))
        return sj_invalid("a function spec's ids, names or global specs");
    return valid_items(s, gspecs) && valid_items(s, ITEM(spec, 8)) &&
           (ITEM(spec, 9) == Py_None || sj_valid(s, ITEM(spec, 9), 0));
}

/* -- dict: (mark, keys, item specs): DictGuard ---------------------------- */

static int
dict_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    PyObject *keys = ITEM(spec, 1), *items = ITEM(spec, 2);
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(keys) ||
        !sj_fresh(g, t, v))
        return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *value;
    while (PyDict_Next(v, &pos, &k, &value)) {
        PyObject *key = ITEM(keys, i);
        /* Literal and attribute names are interned: the very strings come
         * back; equal strings built anew are compared as such. */
        if (k != key && !(PyUnicode_CheckExact(k) && PyUnicode_CheckExact(key) &&
                          PyUnicode_Compare(k, key) == 0))
            return 0;
        if (!sj_fits(g, value, ITEM(items, i), t))
            return 0;
        i++;
    }
    return 1;
}

static int
dict_valid(Shape *s, PyObject *spec)
{
    PyObject *keys = ITEM(spec, 1), *items = ITEM(spec, 2);
    s->met++;
    if (!PyTuple_CheckExact(keys) || !PyTuple_CheckExact(items) ||
        PyTuple_GET_SIZE(keys) != PyTuple_GET_SIZE(items))
        return sj_invalid("a dict spec's keys and items");
    return valid_items(s, items);
}

/* -- tuple: (mark, type, item specs, class check): TupleGuard (a tuple is
 *    not numbered) ---------------------------------------------------------- */

static int
tuple_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    PyObject *items = ITEM(spec, 2), *check = ITEM(spec, 3);
    return (PyObject *)Py_TYPE(v) == ITEM(spec, 1) &&
           PyTuple_GET_SIZE(v) == PyTuple_GET_SIZE(items) &&
           (check == Py_None || sj_class_holds(g, check, 0, t, sj_fits)) &&
           items_fit(g, v, items, t);
}

static int
tuple_valid(Shape *s, PyObject *spec)
{
    PyObject *tp = ITEM(spec, 1);
    if (!PyType_Check(tp) || !PyType_IsSubtype((PyTypeObject *)tp, &PyTuple_Type))
        return sj_invalid("a tuple spec's type is no tuple type");
    return sj_valid_optional_class_check(s, ITEM(spec, 3), sj_valid) &&
           valid_items(s, ITEM(spec, 2));
}

/* -- list: (mark, item specs): ListGuard ---------------------------------- */

static int
list_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    PyObject *items = ITEM(spec, 1);
    return PyList_CheckExact(v) && PyList_GET_SIZE(v) == PyTuple_GET_SIZE(items) &&
           sj_fresh(g, t, v) && items_fit(g, v, items, t);
}

static int
list_valid(Shape *s, PyObject *spec)
{
    s->met++;
    return valid_items(s, ITEM(spec, 1));
}

/* -- back reference: (mark, n): RefGuard ---------------------------------- */

static int
ref_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    Py_ssize_t n = PyLong_AsSsize_t(ITEM(spec, 1));
    return n >= 0 && n < t->n_met && t->met[n] == v;
}

static int
ref_valid(Shape *s, PyObject *spec)
{
    return PyLong_CheckExact(ITEM(spec, 1)) || sj_invalid("a back reference's number");
}

/* -- class: (mark, class, state, holds, deep): ClassGuard, class_checks.c */

static int
class_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    return v == ITEM(spec, 1) && sj_class_holds(g, spec, 1, t, sj_fits);
}

static int
class_valid(Shape *s, PyObject *spec)
{
    return sj_valid_class_check(s, spec, 1, sj_valid);
}

/* -- descriptor: (mark, type, names, specs): DescriptorGuard, and fields:
 *    (mark, type, kind, class check, names, plan): FieldsGuard: their cases
 *    in class_checks.c and node_kinds.c, handed the dispatch -------------- */

static int
descriptor_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    return sj_descriptor_fits(g, v, spec, t, sj_fits);
}

static int
descriptor_valid(Shape *s, PyObject *spec)
{
    return sj_descriptor_valid(s, spec, sj_valid);
}

static int
fields_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    return sj_fields_fits(g, v, spec, t, sj_fits);
}

static int
fields_valid(Shape *s, PyObject *spec)
{
    return sj_fields_valid(s, spec, sj_valid);
}

/* -- object: (mark, class, kind, dict spec, class check): ObjectGuard ----- */

/* An object of the class, its kind unchanged, numbered, whose __dict__ (as
 * object.__getattribute__ reads it) fits the dict spec. */
static int
object_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    if (!sj_same_kind(g, v, spec))
        return 0;
    PyObject *check = ITEM(spec, 4);
    if ((check != Py_None && !sj_class_holds(g, check, 0, t, sj_fits)) || !sj_number(t, v))
        return 0;
    /* Held while it is numbered (met before compares addresses). */
    Py_INCREF(v);
    PyObject *d = sj_dict_of(v);
    int ok = d != NULL && dict_fits(g, d, ITEM(spec, 3), t); /* (valid: a dict spec) */
    if (d == NULL)
        PyErr_Clear();
    Py_XDECREF(d);
    Py_DECREF(v);
    return ok;
}

static int
object_valid(Shape *s, PyObject *spec)
{
    PyObject *d = ITEM(spec, 3);
    s->met++; /* and its __dict__, as a dict spec */
    if (!PyType_Check(ITEM(spec, 1)) || !PyTuple_CheckExact(d) || PyTuple_GET_SIZE(d) != 3 ||
        ITEM(d, 0) != s->marks[DICT_KIND])
        return sj_invalid("an object spec's class or dict spec");
    return sj_valid_optional_class_check(s, ITEM(spec, 4), sj_valid) && sj_valid(s, d, 0);
}

/* -- lifted: (mark, type): LiftedGuard ------------------------------------ */

static int
lifted_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    return (PyObject *)Py_TYPE(v) == ITEM(spec, 1) && sj_take(t, v);
}

static int
lifted_valid(Shape *s, PyObject *spec)
{
    s->leaves++;
    return PyType_Check(ITEM(spec, 1)) || sj_invalid("a lifted spec's type");
}

/* -- the table ------------------------------------------------------------ */

const GuardKind sj_guard_kinds[] = {
    {"dict", 3, dict_fits, dict_valid}, /* first: the commonest, met first by the dispatch */
    {"function", 10, function_fits, function_valid},
    {"tuple", 4, tuple_fits, tuple_valid},
    {"list", 2, list_fits, list_valid},
    {"back reference", 2, ref_fits, ref_valid},
    {"object", 5, object_fits, object_valid},
    {"lifted", 2, lifted_fits, lifted_valid},
    {"class", 5, class_fits, class_valid},
    {"descriptor", 4, descriptor_fits, descriptor_valid},
    {"fields", 6, fields_fits, fields_valid},
    {"items", 3, sj_items_fits, sj_items_valid},
};
const int sj_n_guard_kinds = sizeof(sj_guard_kinds) / sizeof(sj_guard_kinds[0]);

/* -- the dispatch --------------------------------------------------------- */

/* Whether spec is a kind's (a tuple led by a mark), not a plain guard. */
static int
marked(PyObject *spec, PyObject *a_mark)
{
    return PyTuple_CheckExact(spec) && PyTuple_GET_SIZE(spec) >= 2 &&
           Py_TYPE(ITEM(spec, 0)) == Py_TYPE(a_mark);
}

int
sj_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t)
{
    if (v == spec)
        return 1;
    if (spec == g->any_array) {
        int in = PySet_Contains(g->leaf_types, (PyObject *)Py_TYPE(v));
        if (in < 0)
            PyErr_Clear();
        return in > 0 && sj_take(t, v);
    }
    if (!marked(spec, g->marks[0]))
        return sj_same_atom(v, spec);
    PyObject *mark = ITEM(spec, 0);
    for (int i = 0; i < sj_n_guard_kinds; i++) {
        if (mark == g->marks[i])
            return sj_guard_kinds[i].fits(g, v, spec, t);
    }
    return 0;
}

int
sj_valid(Shape *s, PyObject *spec, int function)
{
    if (!marked(spec, s->marks[0])) {
        if (function)
            return sj_invalid("the top is not a function spec");
        s->leaves += spec == s->any_array; /* else the very object or an atom */
        return 1;
    }
    int i = 0;
    while (i < sj_n_guard_kinds && ITEM(spec, 0) != s->marks[i])
        i++;
    if (i == sj_n_guard_kinds)
        return sj_invalid("an unknown mark");
    if (function && i != FUNCTION_KIND)
        return sj_invalid("the top is not a function spec");
    if (PyTuple_GET_SIZE(spec) != sj_guard_kinds[i].size)
        return sj_invalid("the wrong number of items for its kind");
    if (Py_EnterRecursiveCall(" in RecordCall's guard spec check"))
        return 0;
    int ok = sj_guard_kinds[i].valid(s, spec);
    Py_LeaveRecursiveCall();
    return ok;
}
