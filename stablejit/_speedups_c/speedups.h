/* What stablejit's optional accelerator's files share (see README.md here). */
#ifndef STABLEJIT_SPEEDUPS_H
#define STABLEJIT_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <structmember.h>

#if defined(_MSC_VER)
#define THREAD_LOCAL __declspec(thread)
#else
#define THREAD_LOCAL _Thread_local
#endif

/* shared.c: the function a RecordCall is calling on this thread (borrowed:
 * alive for as long as the call runs) and the cache entry whose jax.jit it
 * calls (a reference the RecordCall holds for as long); module.c's
 * current() reads them. */
extern THREAD_LOCAL PyObject *sj_current_fn;
extern THREAD_LOCAL PyObject *sj_current_entry;

/* An interned attribute name, made once by the module's init. */
extern PyObject *sj_str_dict;

/* The side channels' table (_fingerprint/sinks.py's SINKS) as published last
 * by publish_sinks (a strong reference; NULL before the first): a record's
 * checks hold only while it is the one they were made under. Compared by
 * pointer, as SINKS is replaced, never mutated. */
extern PyObject *sj_sinks_now;

/* A type's layout for its GC plumbing: the offsets of the objects it holds
 * (-1 ends them) and of its weak references (0: none). */
typedef struct {
    const Py_ssize_t *held;
    Py_ssize_t weakrefs;
} SjLayout;

int sj_traverse(PyObject *o, const SjLayout *layout, visitproc visit, void *arg);
int sj_clear(PyObject *o, const SjLayout *layout);
/* Untracks o, clears its weak references and its held objects: a dealloc's
 * work before the memory is freed (or kept for reuse). */
void sj_release(PyObject *o, const SjLayout *layout);
void sj_dealloc(PyObject *o, const SjLayout *layout);
/* Sets o's first n held objects to (new references to) values. */
void sj_hold(PyObject *o, const SjLayout *layout, PyObject *const *values, int n);

/* prefix_traverse, prefix_clear and prefix_dealloc of a type with that layout. */
#define SJ_GC(prefix, layout)                                                                     \
    static int prefix##_traverse(PyObject *o, visitproc visit, void *arg)                         \
    {                                                                                             \
        return sj_traverse(o, &(layout), visit, arg);                                             \
    }                                                                                             \
    static int prefix##_clear(PyObject *o) { return sj_clear(o, &(layout)); }                     \
    static void prefix##_dealloc(PyObject *o) { sj_dealloc(o, &(layout)); }

/* Arguments a call keeps on the C stack before it allocates. */
#define SMALL_STACK 16

extern PyTypeObject sj_RecordCallType; /* record_call.c */
extern PyTypeObject sj_CountedType;    /* record_call.c */
extern PyTypeObject sj_FrontType;  /* front.c */
extern PyTypeObject sj_JittedType; /* jitted.c */

/* record_call.c: the cache entries' base, whose hits a RecordCall counts
 * without making an int per call. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t hits;
} Counted;

/* jitted.c: StableJitted's base, a call function with its fn and options. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *call; /* the call function: a RecordCall, or Python's call(fn, opts, *args, **kw) */
    PyObject *fn;
    PyObject *opts;
    PyObject *dict;
    PyObject *weakrefs;
} Jitted;

/* shared.c: call(fn, opts, *args, **kwargs), args as a vectorcall's
 * (kwnames' values after them). */
PyObject *sj_call_with(PyObject *call, PyObject *fn, PyObject *opts, PyObject *const *args,
                       Py_ssize_t nargs, PyObject *kwnames);

/* The object field of o at offset (a __slots__ member, or a field a layout holds). */
#define MEMBER(o, offset) ((PyObject **)((char *)(o) + (offset)))

/* shared.c: the offset of cls's writable __slots__ member name, or -1 with a TypeError. */
Py_ssize_t sj_member_offset(PyObject *cls, const char *name);

/* A new instance of type (Jitted or a subclass) of call, fn and opts. */
PyObject *sj_jitted_new(PyTypeObject *type, PyObject *call, PyObject *fn, PyObject *opts);

/* adopt(cls), a function of the module (see jitted.c). */
PyObject *sj_adopt(PyObject *module, PyObject *cls);

/* record_call.c: a RecordCall's call of fn with opts, as sj_call_with(it, ...) would make it. */
PyObject *sj_record_call(PyObject *call, PyObject *fn, PyObject *opts, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames);

/* shared.c: an object's __dict__ as the walk reads it (object.__getattribute__(o,
 * "__dict__")), o held across the read, which runs its class's descriptor:
 * code that may drop o's last other reference. A new reference to an exact
 * dict; else NULL, with an error set if the read raised one. */
PyObject *sj_dict_of(PyObject *o);

/* CPython's version tag of tp as it stands: 0 if it has none (CPython
 * clears it whenever tp or a base is assigned an attribute). Before 3.13 a
 * flag says whether it is valid; from 3.13 the flag is unused and a cleared
 * tag is 0. */
static inline unsigned int
sj_tag_now(PyTypeObject *tp)
{
#if PY_VERSION_HEX < 0x030D0000
    if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
#endif
    return tp->tp_version_tag;
}

/* objects.c: the guards' _Objects.fit past its check of the classes' kinds. */
PyObject *sj_objects_fit(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
