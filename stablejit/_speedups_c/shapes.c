/* The slots' shapes, checked once by Guard() (see README.md here): a match
 * reads them unchecked, with buffers sized from what they can take. */
#include "guard.h"

static int
invalid(const char *what)
{
    PyErr_Format(PyExc_ValueError, "Guard: malformed slot: %s", what);
    return 0;
}

static int
valid_items(Shape *s, PyObject *items)
{
    if (!PyTuple_CheckExact(items))
        return invalid("item slots are not a tuple");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        if (!sj_valid_slot(s, PyTuple_GET_ITEM(items, i), 0))
            return 0;
    }
    return 1;
}

static int
is_mark(PyObject *marks, PyObject *slot, int which, Py_ssize_t size)
{
    return PyTuple_GET_ITEM(slot, 0) == PyTuple_GET_ITEM(marks, which) &&
           PyTuple_GET_SIZE(slot) == size;
}

int
sj_valid_slot(Shape *s, PyObject *slot, int function)
{
    if (Py_EnterRecursiveCall(" in Guard's slot check"))
        return 0;
    int ok = 1;
    PyObject *marks = s->marks;
    int marked = PyTuple_CheckExact(slot) && PyTuple_GET_SIZE(slot) >= 2 &&
                 Py_TYPE(PyTuple_GET_ITEM(slot, 0)) == Py_TYPE(PyTuple_GET_ITEM(marks, 0));
    if (function && !(marked && is_mark(marks, slot, MARK_FUNCTION, 9)))
        ok = invalid("not a function slot of 9 items");
    else if (!marked)
        s->leaves += slot == s->leaf_slot; /* else the very object or an atom */
    else if (is_mark(marks, slot, MARK_FUNCTION, 9)) {
        s->met++;
        ok = PyLong_CheckExact(PyTuple_GET_ITEM(slot, 2)) &&
             PyLong_CheckExact(PyTuple_GET_ITEM(slot, 3)) &&
             PyTuple_CheckExact(PyTuple_GET_ITEM(slot, 6)) &&
             PyTuple_CheckExact(PyTuple_GET_ITEM(slot, 7)) &&
             PyTuple_GET_SIZE(PyTuple_GET_ITEM(slot, 6)) ==
                 PyTuple_GET_SIZE(PyTuple_GET_ITEM(slot, 7));
        ok = ok ? valid_items(s, PyTuple_GET_ITEM(slot, 7)) &&
                      valid_items(s, PyTuple_GET_ITEM(slot, 8))
                : invalid("a function slot's ids, names or global slots");
    }
    else if (is_mark(marks, slot, MARK_DICT, 3)) {
        PyObject *keys = PyTuple_GET_ITEM(slot, 1), *items = PyTuple_GET_ITEM(slot, 2);
        s->met++;
        ok = PyTuple_CheckExact(keys) && PyTuple_CheckExact(items) &&
                     PyTuple_GET_SIZE(keys) == PyTuple_GET_SIZE(items)
                 ? valid_items(s, items)
                 : invalid("a dict slot's keys and items");
    }
    else if (is_mark(marks, slot, MARK_TUPLE, 3)) { /* a tuple is not numbered */
        PyObject *tp = PyTuple_GET_ITEM(slot, 1);
        ok = PyType_Check(tp) && PyType_IsSubtype((PyTypeObject *)tp, &PyTuple_Type)
                 ? valid_items(s, PyTuple_GET_ITEM(slot, 2))
                 : invalid("a tuple slot's type is no tuple type");
    }
    else if (is_mark(marks, slot, MARK_LIST, 2)) {
        s->met++;
        ok = valid_items(s, PyTuple_GET_ITEM(slot, 1));
    }
    else if (is_mark(marks, slot, MARK_REF, 2))
        ok = PyLong_CheckExact(PyTuple_GET_ITEM(slot, 1)) || invalid("a back reference's number");
    else if (is_mark(marks, slot, MARK_OBJECT, 4)) {
        PyObject *dict_slot = PyTuple_GET_ITEM(slot, 3);
        s->met++; /* and its __dict__, as a dict slot */
        ok = PyType_Check(PyTuple_GET_ITEM(slot, 1)) && PyTuple_CheckExact(dict_slot) &&
                     PyTuple_GET_SIZE(dict_slot) == 3 &&
                     PyTuple_GET_ITEM(dict_slot, 0) == PyTuple_GET_ITEM(marks, MARK_DICT)
                 ? sj_valid_slot(s, dict_slot, 0)
                 : invalid("an object slot's class or dict slot");
    }
    else if (is_mark(marks, slot, MARK_LIFTED, 2)) {
        s->leaves++;
        ok = PyType_Check(PyTuple_GET_ITEM(slot, 1)) || invalid("a lifted slot's type");
    }
    else
        ok = invalid("an unknown mark, or the wrong number of items");
    Py_LeaveRecursiveCall();
    return ok;
}
