/* What the accelerator's files share (declared in speedups.h): the thread's
 * current call, the GC plumbing of its types, and the small helpers every
 * file may call. It calls none of the others. */
#include "speedups.h"

THREAD_LOCAL PyObject *sj_current_fn = NULL;
THREAD_LOCAL PyObject *sj_current_entry = NULL;
PyObject *sj_str_dict;
PyObject *sj_sinks_now = NULL;

int
sj_traverse(PyObject *o, const SjLayout *layout, visitproc visit, void *arg)
{
    for (const Py_ssize_t *at = layout->held; *at >= 0; at++)
        Py_VISIT(*MEMBER(o, *at));
    return 0;
}

int
sj_clear(PyObject *o, const SjLayout *layout)
{
    for (const Py_ssize_t *at = layout->held; *at >= 0; at++)
        Py_CLEAR(*MEMBER(o, *at));
    return 0;
}

/* (A Python subclass's instances hold their class: its own dealloc and
 * traverse, Python's, see to that, then call these.) */
void
sj_release(PyObject *o, const SjLayout *layout)
{
    PyObject_GC_UnTrack(o);
    if (layout->weakrefs && *MEMBER(o, layout->weakrefs) != NULL)
        PyObject_ClearWeakRefs(o);
    sj_clear(o, layout);
}

void
sj_dealloc(PyObject *o, const SjLayout *layout)
{
    sj_release(o, layout);
    Py_TYPE(o)->tp_free(o);
}

void
sj_hold(PyObject *o, const SjLayout *layout, PyObject *const *values, int n)
{
    for (int i = 0; i < n; i++) {
        Py_INCREF(values[i]);
        *MEMBER(o, layout->held[i]) = values[i];
    }
}

PyObject *
sj_dict_of(PyObject *o)
{
    Py_INCREF(o);
    PyObject *d = PyObject_GenericGetAttr(o, sj_str_dict);
    Py_DECREF(o);
    if (d != NULL && !PyDict_CheckExact(d))
        Py_CLEAR(d);
    return d;
}

PyObject *
sj_call_with(PyObject *call, PyObject *fn, PyObject *opts, PyObject *const *args,
             Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    PyObject *small[SMALL_STACK], **stack = small;
    if (total + 2 > SMALL_STACK) {
        stack = PyMem_Malloc(sizeof(PyObject *) * (total + 2));
        if (stack == NULL)
            return PyErr_NoMemory();
    }
    stack[0] = fn;
    stack[1] = opts;
    for (Py_ssize_t i = 0; i < total; i++)
        stack[i + 2] = args[i];
    PyObject *result = PyObject_Vectorcall(call, stack, nargs + 2, kwnames);
    if (stack != small)
        PyMem_Free(stack);
    return result;
}

Py_ssize_t
sj_member_offset(PyObject *cls, const char *name)
{
    PyObject *descr = PyObject_GetAttrString(cls, name);
    Py_ssize_t offset = -1;
    if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
            offset = m->offset;
    }
    Py_XDECREF(descr);
    if (offset < 0)
        PyErr_Format(PyExc_TypeError, "%s's %s is not a writable __slots__ member", ((PyTypeObject *)cls)->tp_name, name);
    return offset;
}

