/* Jitted: the base of StableJitted where the accelerator is built (see README.md here).
 *
 * A call function with the function and options it is called with, as
 * functools.partial(call, fn, opts) is on the pure path; but its call
 * reaches a RecordCall with no argument tuples built, and making one costs one
 * allocation (no argument tuple, no keywords dict).
 */
#include "speedups.h"

static PyObject *
jitted_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Jitted *j = (Jitted *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (Py_TYPE(j->call) == &sj_RecordCallType)
        return sj_record_call(j->call, j->fn, j->opts, args, nargs, kwnames);
    return sj_call_with(j->call, j->fn, j->opts, args, nargs, kwnames);
}

/* tp_call, for a subclass that does not take the vectorcall flag (a mutable
 * class before Python 3.12, unless adopt gave it). */
static PyObject *
jitted_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return PyVectorcall_Call(self, args, kwargs);
}

static const Py_ssize_t jitted_held[] = {offsetof(Jitted, call), offsetof(Jitted, fn),
                                         offsetof(Jitted, opts), offsetof(Jitted, dict), -1};
static const SjLayout jitted_layout = {jitted_held, offsetof(Jitted, weakrefs)};
SJ_GC(jitted, jitted_layout)

/* The class adopt adopted (StableJitted), and up to FREE_JITTED
 * of its instances' memory kept for reuse: one is made and dropped on every
 * call of a function that defines its jitted function inside. (Not where
 * threads run at once: the list has no lock.) */
static PyTypeObject *adopted;
#ifdef Py_GIL_DISABLED
#define FREE_JITTED 0
#else
#define FREE_JITTED 16
#endif
static PyObject *free_jitted[FREE_JITTED + 1];
static int n_free_jitted;

PyObject *
sj_jitted_new(PyTypeObject *type, PyObject *call, PyObject *fn, PyObject *opts)
{
    Jitted *j;
    if (type == adopted && n_free_jitted > 0) {
        /* As tp_alloc leaves it: every field NULL, a reference to its class. */
        j = (Jitted *)PyObject_Init(free_jitted[--n_free_jitted], type);
        PyObject_GC_Track(j);
    }
    else
        j = (Jitted *)type->tp_alloc(type, 0);
    if (j == NULL)
        return NULL;
    PyObject *held[3] = {call, fn, opts};
    sj_hold((PyObject *)j, &jitted_layout, held, 3);
    j->vectorcall = jitted_vectorcall;
    return (PyObject *)j;
}

static PyObject *
jitted_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *call, *fn, *opts;
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) ||
        !PyArg_UnpackTuple(args, type->tp_name, 3, 3, &call, &fn, &opts)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s(call, fn, opts) takes no keywords", type->tp_name);
        return NULL;
    }
    if (!PyCallable_Check(call)) {
        PyErr_Format(PyExc_TypeError, "%s: call must be callable", type->tp_name);
        return NULL;
    }
    return sj_jitted_new(type, call, fn, opts);
}

static PyMemberDef jitted_members[] = {
    {"_call", T_OBJECT, offsetof(Jitted, call), READONLY, "the call function"},
    {"_fun", T_OBJECT, offsetof(Jitted, fn), READONLY, "the function compiled"},
    {"_opts", T_OBJECT, offsetof(Jitted, opts), READONLY, "its options"},
    {NULL},
};

static PyGetSetDef jitted_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

PyTypeObject sj_JittedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stablejit._speedups.Jitted",
    .tp_basicsize = sizeof(Jitted),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_BASETYPE,
    .tp_vectorcall_offset = offsetof(Jitted, vectorcall),
    .tp_call = jitted_call,
    .tp_new = jitted_new,
    .tp_traverse = jitted_traverse,
    .tp_clear = jitted_clear,
    .tp_dealloc = jitted_dealloc,
    .tp_members = jitted_members,
    .tp_getset = jitted_getset,
    .tp_dictoffset = offsetof(Jitted, dict),
    .tp_weaklistoffset = offsetof(Jitted, weakrefs),
    .tp_doc = "Jitted(call, fn, opts): call(fn, opts, *args, **kwargs) when called.",
};

/* The adopted class's dealloc: released as a Jitted is (the class holds
 * nothing more, as adopt checked), kept for reuse or freed, then its
 * reference to its heap class dropped, as subtype_dealloc would. */
static void
adopted_dealloc(PyObject *o)
{
    PyTypeObject *type = Py_TYPE(o);
    sj_release(o, &jitted_layout); /* every field NULL, as a fresh one's are */
    if (type == adopted && n_free_jitted < FREE_JITTED)
        free_jitted[n_free_jitted++] = o;
    else
        type->tp_free(o);
    Py_DECREF(type);
}

/* adopt(cls): makes a class statement's subclass of Jitted (StableJitted)
 * as cheap to make, call and drop as Jitted itself:
 * - its call is Jitted's vectorcall, which Python before 3.12 gives only
 *   immutable classes (a class's later __call__ would not be seen, so cls
 *   must have none);
 * - its dealloc skips subtype_dealloc's general path (finalisers, slots of
 *   its own: cls must have none) and keeps the memory for the next one. */
PyObject *
sj_adopt(PyObject *module, PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &sj_JittedType) ||
        ((PyTypeObject *)cls)->tp_call != jitted_call ||
        ((PyTypeObject *)cls)->tp_basicsize != sj_JittedType.tp_basicsize ||
        ((PyTypeObject *)cls)->tp_finalize != NULL || ((PyTypeObject *)cls)->tp_del != NULL ||
        !(((PyTypeObject *)cls)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        PyErr_SetString(PyExc_TypeError,
                        "adopt: not a class statement's subclass of Jitted that "
                        "keeps its call and adds no slots and no finaliser");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    type->tp_dealloc = adopted_dealloc;
    adopted = type;
    type->tp_vectorcall_offset = offsetof(Jitted, vectorcall);
    type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    Py_RETURN_NONE;
}
