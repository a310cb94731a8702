/* The Maker: stable_jit(fun)'s common case (see README.md here). */
#include "speedups.h"

/* Maker: stable_jit(fun)'s common case, a function whose code's fast path
 * has a call function: the StableJitted of (call, fun, options). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *info; /* dict: id(code) -> CodeInfo (whose .fast.call is read) */
    PyObject *cls;  /* StableJitted (a subclass of Jitted) */
    PyObject *opts; /* the default options */
} Maker;

static PyObject *
maker_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Maker *m = (Maker *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "Maker takes one function");
        return NULL;
    }
    PyObject *fun = args[0];
    if (Py_TYPE(fun) != &PyFunction_Type)
        Py_RETURN_NONE;
    PyObject *key = PyLong_FromVoidPtr(((PyFunctionObject *)fun)->func_code);
    if (key == NULL)
        return NULL;
    PyObject *info = PyDict_GetItemWithError(m->info, key); /* borrowed */
    Py_DECREF(key);
    if (info == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *fast = PyObject_GetAttr(info, sj_str_fast);
    if (fast == NULL)
        return NULL;
    PyObject *call = PyObject_GetAttr(fast, sj_str_call);
    Py_DECREF(fast);
    if (call == NULL)
        return NULL;
    if (call == Py_None)
        return call;
    PyObject *made = sj_jitted_new((PyTypeObject *)m->cls, call, fun, m->opts);
    Py_DECREF(call);
    return made;
}

static int
maker_traverse(Maker *m, visitproc visit, void *arg)
{
    Py_VISIT(m->info);
    Py_VISIT(m->cls);
    Py_VISIT(m->opts);
    return 0;
}

static int
maker_clear(Maker *m)
{
    Py_CLEAR(m->info);
    Py_CLEAR(m->cls);
    Py_CLEAR(m->opts);
    return 0;
}

static void
maker_dealloc(Maker *m)
{
    PyObject_GC_UnTrack(m);
    maker_clear(m);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *
maker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"info", "cls", "opts", NULL};
    PyObject *info, *cls, *opts;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O", kwlist, &PyDict_Type, &info,
                                     &PyType_Type, &cls, &opts))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)cls, &sj_JittedType)) {
        PyErr_SetString(PyExc_TypeError, "Maker: cls must be a subclass of Jitted");
        return NULL;
    }
    Maker *m = (Maker *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    Py_INCREF(info);
    Py_INCREF(cls);
    Py_INCREF(opts);
    m->info = info;
    m->cls = cls;
    m->opts = opts;
    m->vectorcall = maker_vectorcall;
    return (PyObject *)m;
}

PyTypeObject sj_MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stablejit._speedups.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = maker_new,
    .tp_traverse = (traverseproc)maker_traverse,
    .tp_clear = (inquiry)maker_clear,
    .tp_dealloc = (destructor)maker_dealloc,
    .tp_doc = "maker(fun): cls(fun's code's fast call function, fun, opts), or None where "
              "fun is not a function or its code has no call function.",
};

