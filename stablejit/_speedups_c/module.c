/* The module stablejit._speedups: its functions and init. It depends on every
 * other file; none depends on it. */
#include "speedups.h"

/* Built other than by setup.py: a digest that matches no sources, so that such a build is
 * loaded only where no sources lie beside it to compare with. */
#ifndef SJ_SOURCE_DIGEST
#define SJ_SOURCE_DIGEST ""
#endif

static PyObject *
current(PyObject *module, PyObject *unused)
{
    if (sj_current_fn == NULL)
        return Py_BuildValue("(OO)", Py_None, Py_None);
    return Py_BuildValue("(OO)", sj_current_fn, sj_current_entry);
}

static PyObject *
publish_sinks(PyObject *module, PyObject *sinks)
{
    if (!PyDict_CheckExact(sinks)) {
        PyErr_SetString(PyExc_TypeError, "publish_sinks: sinks must be a dict");
        return NULL;
    }
    Py_INCREF(sinks);
    Py_XSETREF(sj_sinks_now, sinks);
    Py_RETURN_NONE;
}

static PyObject *
type_tag(PyObject *module, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "type_tag: not a class");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)cls;
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Type_AssignVersionTag(tp))
        return PyLong_FromLong(0);
#else
    /* A lookup through the type cache assigns a tag where none is. */
    static PyObject *name = NULL;
    if (name == NULL && (name = PyUnicode_InternFromString("__stablejit_tag__")) == NULL)
        return NULL;
    (void)_PyType_Lookup(tp, name);
#endif
    return PyLong_FromUnsignedLong(sj_tag_now(tp));
}

static PyMethodDef methods[] = {
    {"type_tag", type_tag, METH_O,
     "type_tag(cls): cls's version tag, assigned if it had none (0 if none can be): equal "
     "tags mean neither cls nor a base was assigned an attribute in between."},
    {"current", current, METH_NOARGS,
     "(function, entry): what the innermost RecordCall running on this thread is calling, and "
     "the cache entry whose jax.jit it calls; (None, None) if none is."},
    {"publish_sinks", publish_sinks, METH_O,
     "publish_sinks(sinks): the side channels' table that RecordCalls' checks hold under from now "
     "on (sinks.py calls it each time it replaces SINKS)."},
    {"objects_fit", (PyCFunction)(void (*)(void))sj_objects_fit, METH_FASTCALL,
     "objects_fit(objs, types, sizes, names, values, sinks, seen): the guards' "
     "_Objects.fit past its check of kinds (True, False or None), in one C pass."},
    {"adopt", sj_adopt, METH_O,
     "adopt(cls): a class statement's subclass of Jitted without a __call__, slots or a "
     "finaliser of its own is called through Jitted's vectorcall (which Python gives only "
     "immutable classes before 3.12) and made and dropped as cheaply as Jitted."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "stablejit._speedups",
    "stablejit's optional C accelerator (see stablejit/_speedups_c/README.md).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    sj_str_dict = PyUnicode_InternFromString("__dict__");
    if (sj_str_dict == NULL)
        return NULL;
    PyTypeObject *types[] = {&sj_RecordCallType, &sj_FrontType, &sj_JittedType, &sj_CountedType};
    const char *names[] = {"RecordCall", "Front", "Jitted", "Counted"};
    for (int i = 0; i < 4; i++) {
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* setup.py's digest of these sources: _native.py loads no build older than its sources. */
    if (PyModule_AddStringConstant(m, "SOURCE_DIGEST", SJ_SOURCE_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
