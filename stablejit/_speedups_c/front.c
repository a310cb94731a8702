/* Front: stable_jit itself where the accelerator is built (see README.md here). */
#include "speedups.h"

/* stable_jit(fun)'s common call, made on every call of a function that
 * defines its jitted function inside: a function whose code's fast path has
 * a call function gets the StableJitted of (call, fun, default options)
 * without a Python frame. Every other call is impl's, the complete
 * stable_jit in Python, which the Front also wears (__wrapped__, __doc__,
 * __signature__, ... in its __dict__). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *impl;         /* stable_jit in Python */
    PyObject *info;         /* dict: id(code) -> CodeInfo, whose fast is a FastRecords */
    PyObject *info_type;    /* CodeInfo, a NamedTuple: fast is its item fast_index */
    PyObject *records_type; /* FastRecords: call is its member at call_offset */
    PyObject *cls;          /* StableJitted (a subclass of Jitted) */
    PyObject *opts;         /* the default options */
    PyObject *dict;
    PyObject *last_code;    /* the code last looked up (held, so its address is not reused) */
    PyObject *last_fast;    /* and its FastRecords; both NULL after forget() */
    PyObject *weakrefs;
    Py_ssize_t fast_index, call_offset;
} Front;

/* The StableJitted of fun with the default options if fun's code has a call
 * function: a new reference, or NULL (no error set) if not. */
static PyObject *
made_fast(Front *m, PyObject *fun)
{
    if (Py_TYPE(fun) != &PyFunction_Type)
        return NULL;
    PyObject *code = ((PyFunctionObject *)fun)->func_code, *fast = m->last_fast;
    if (code != m->last_code) {
        PyObject *key = PyLong_FromVoidPtr(code);
        PyObject *info = key == NULL ? NULL : PyDict_GetItemWithError(m->info, key); /* borrowed */
        Py_XDECREF(key);
        if (info == NULL || (PyObject *)Py_TYPE(info) != m->info_type) {
            PyErr_Clear();
            return NULL;
        }
        fast = PyTuple_GET_ITEM(info, m->fast_index);
        if ((PyObject *)Py_TYPE(fast) != m->records_type)
            return NULL;
        Py_INCREF(code);
        Py_INCREF(fast);
        Py_XSETREF(m->last_code, code);
        Py_XSETREF(m->last_fast, fast);
    }
    PyObject *call = *MEMBER(fast, m->call_offset);
    if (call == NULL || call == Py_None)
        return NULL;
    return sj_jitted_new((PyTypeObject *)m->cls, call, fun, m->opts);
}

static PyObject *
front_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Front *m = (Front *)self;
    if (PyVectorcall_NARGS(nargsf) == 1 && kwnames == NULL) {
        PyObject *made = made_fast(m, args[0]);
        if (made != NULL || PyErr_Occurred())
            return made;
    }
    return PyObject_Vectorcall(m->impl, args, nargsf, kwnames);
}

/* Bound like the function it stands for: a class attribute is a method. */
static PyObject *
front_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

/* Pickled by reference, as a function is: by its module and name. */
static PyObject *
front_reduce(PyObject *self, PyObject *unused)
{
    return PyObject_GetAttrString(self, "__qualname__");
}

/* Drops the memo of the last code's records (stablejit.clear_cache() makes
 * new ones). */
static PyObject *
front_forget(PyObject *self, PyObject *unused)
{
    Front *m = (Front *)self;
    Py_CLEAR(m->last_code);
    Py_CLEAR(m->last_fast);
    Py_RETURN_NONE;
}

static PyMethodDef front_methods[] = {
    {"__reduce__", front_reduce, METH_NOARGS, NULL},
    {"forget", front_forget, METH_NOARGS, "forget(): drops the memo of the last code's records"},
    {NULL},
};

static PyGetSetDef front_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static const Py_ssize_t front_held[] = {
    offsetof(Front, impl), offsetof(Front, info), offsetof(Front, info_type),
    offsetof(Front, records_type), offsetof(Front, cls), offsetof(Front, opts),
    offsetof(Front, dict), offsetof(Front, last_code), offsetof(Front, last_fast), -1};
static const SjLayout front_layout = {front_held, offsetof(Front, weakrefs)};
SJ_GC(front, front_layout)

static PyObject *
front_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"impl", "info", "info_type", "fast_index", "records_type",
                             "cls",  "opts", NULL};
    PyObject *impl, *info, *info_type, *records_type, *cls, *opts;
    Py_ssize_t fast_index;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O!nO!O!O", kwlist, &impl, &PyDict_Type,
                                     &info, &PyType_Type, &info_type, &fast_index, &PyType_Type,
                                     &records_type, &PyType_Type, &cls, &opts))
        return NULL;
    if (!PyCallable_Check(impl) ||
        !PyType_IsSubtype((PyTypeObject *)info_type, &PyTuple_Type) || fast_index < 0 ||
        !PyType_IsSubtype((PyTypeObject *)cls, &sj_JittedType)) {
        PyErr_SetString(PyExc_TypeError, "Front: impl must be callable, info_type a tuple "
                                         "type, fast_index >= 0 and cls a subclass of Jitted");
        return NULL;
    }
    Py_ssize_t call_offset = sj_member_offset(records_type, "call");
    if (call_offset < 0)
        return NULL;
    Front *m = (Front *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    PyObject *held[6] = {impl, info, info_type, records_type, cls, opts};
    sj_hold((PyObject *)m, &front_layout, held, 6);
    m->fast_index = fast_index;
    m->call_offset = call_offset;
    m->vectorcall = front_vectorcall;
    return (PyObject *)m;
}

PyTypeObject sj_FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stablejit._speedups.Front",
    .tp_basicsize = sizeof(Front),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Front, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = front_new,
    .tp_traverse = front_traverse,
    .tp_clear = front_clear,
    .tp_dealloc = front_dealloc,
    .tp_descr_get = front_get,
    .tp_methods = front_methods,
    .tp_getset = front_getset,
    .tp_dictoffset = offsetof(Front, dict),
    .tp_weaklistoffset = offsetof(Front, weakrefs),
    .tp_doc = "Front(impl, ...)(fun): stable_jit(fun)'s common call in C, every other "
              "call impl's.",
};
