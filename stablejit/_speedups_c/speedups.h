/* What stablejit's optional accelerator's files share (see README.md here). */
#ifndef STABLEJIT_SPEEDUPS_H
#define STABLEJIT_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>

#if defined(_MSC_VER)
#define THREAD_LOCAL __declspec(thread)
#else
#define THREAD_LOCAL _Thread_local
#endif

/* The function a Guard is calling on this thread and the frame it was called
 * from (both borrowed: alive for as long as the call runs); module.c's
 * current() reads them. */
extern THREAD_LOCAL PyObject *sj_current_fn;
extern THREAD_LOCAL PyObject *sj_current_frame;

/* Interned attribute names and the int 1, made once by the module's init. */
extern PyObject *sj_str_ready, *sj_str_hits, *sj_str_sinks, *sj_str_fast, *sj_str_call,
    *sj_str_dict, *sj_one;

extern PyTypeObject sj_GuardType; /* guard.c */
extern PyTypeObject sj_MakerType; /* maker.c */

/* objects.c: the guards' _Objects.fit past its check of the classes' kinds. */
PyObject *sj_objects_fit(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
