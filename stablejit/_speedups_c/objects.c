/* objects_fit: the guards' bulk check of plain objects (see README.md here). */
#include "speedups.h"

/* Numbers keys[0..n) in seen as the walk numbers what it meets first (see the
 * guards' all_fresh): 1 if all were fresh, 0 if not (seen may hold some). */
static int
number_fresh(PyObject **keys, Py_ssize_t n, PyObject *sinks, PyObject *seen)
{
    int check_sinks = sinks != Py_None && PyDict_Check(sinks) && PyDict_GET_SIZE(sinks) > 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int in = PyDict_Contains(seen, keys[k]);
        if (in == 0 && check_sinks)
            in = PyDict_Contains(sinks, keys[k]);
        if (in != 0)
            return in < 0 ? -1 : 0;
    }
    Py_ssize_t base = PyDict_GET_SIZE(seen);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *number = PyLong_FromSsize_t(PyDict_GET_SIZE(seen));
        if (number == NULL || PyDict_SetItem(seen, keys[k], number) < 0) {
            Py_XDECREF(number);
            return -1;
        }
        Py_DECREF(number);
    }
    return PyDict_GET_SIZE(seen) == base + n; /* else: one object twice */
}

/* The guards' _Objects.fit past its check of the classes' kinds: True, False
 * or None, as there. */
PyObject *
sj_objects_fit(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        !PyTuple_CheckExact(args[2]) || !PyTuple_CheckExact(args[3]) ||
        !PyTuple_CheckExact(args[4]) || !PyDict_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError, "objects_fit(objs: list, types: list, sizes: tuple, "
                                         "names: tuple, values: tuple, sinks, seen: dict)");
        return NULL;
    }
    PyObject *objs = args[0], *types = args[1], *sizes = args[2], *names = args[3],
             *values = args[4];
    Py_ssize_t n = PyList_GET_SIZE(objs), total = PyTuple_GET_SIZE(names), j = 0;
    if (n != PyList_GET_SIZE(types) || n != PyTuple_GET_SIZE(sizes) ||
        total != PyTuple_GET_SIZE(values))
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((PyObject *)Py_TYPE(PyList_GET_ITEM(objs, i)) != PyList_GET_ITEM(types, i))
            Py_RETURN_FALSE;
    }
    PyObject **keys = PyMem_Malloc((2 * n + 1) * sizeof(PyObject *));
    if (keys == NULL)
        return PyErr_NoMemory();
    Py_ssize_t nkeys = 0;
    PyObject *result = Py_None;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Re-read at each step: the last __dict__ read may have run code
         * that changed the list (None: the item-by-item check decides). */
        if (PyList_GET_SIZE(objs) != n ||
            (PyObject *)Py_TYPE(PyList_GET_ITEM(objs, i)) != PyList_GET_ITEM(types, i))
            goto done;
        PyObject *obj = PyList_GET_ITEM(objs, i);
        PyObject *d = sj_dict_of(obj);
        Py_ssize_t expected = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
        if (d == NULL || PyDict_GET_SIZE(d) != expected || j + expected > total) {
            Py_XDECREF(d);
            if (PyErr_Occurred())
                result = NULL;
            goto done;
        }
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(d, &pos, &k, &v)) {
            if (k != PyTuple_GET_ITEM(names, j) || v != PyTuple_GET_ITEM(values, j)) {
                Py_DECREF(d);
                goto done;
            }
            j++;
        }
        /* Each object, then its __dict__: the walk's order. (Only their
         * addresses are kept: the list holds them, unless a read changed
         * it, and then the next step's check fails.) */
        keys[nkeys] = PyLong_FromVoidPtr(obj);
        keys[nkeys + 1] = keys[nkeys] == NULL ? NULL : PyLong_FromVoidPtr(d);
        Py_DECREF(d);
        if (keys[nkeys + 1] == NULL) {
            Py_XDECREF(keys[nkeys]);
            result = NULL;
            goto done;
        }
        nkeys += 2;
    }
    switch (number_fresh(keys, nkeys, args[5], args[6])) {
    case 1:
        result = Py_True;
        break;
    case 0:
        result = Py_False;
        break;
    default:
        result = NULL;
    }
done:
    for (Py_ssize_t k = 0; k < nkeys; k++)
        Py_DECREF(keys[k]);
    PyMem_Free(keys);
    Py_XINCREF(result);
    return result;
}

