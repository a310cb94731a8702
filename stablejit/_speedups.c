/* stablejit's optional accelerator: a fast-path record's call function in C.
 *
 * A redefined closure's record (stablejit/_fingerprint/fastpath.py) says what
 * each child of the last function of its code was. Once its checks have been
 * compiled, the record gets a call function (stablejit/_runtime/hot.py). For a
 * record whose every check is an identity test or "an array of a lifted type"
 * (the seed's nested function, a loop body over parameters), this module's
 * Guard is that call function: the same checks, the entry lookup and the call
 * of the entry's jax.jit, with no Python frame between the user's call and
 * JAX's C++ dispatch. Whatever a Guard cannot vouch for goes to the general
 * call function, which decides afresh: a Guard never has to be right about
 * more than the identity tests it was given.
 *
 * Its Maker is stable_jit(fun)'s common case, the wrapper of a redefined
 * closure whose code has such a call function, made without Python bytecode.
 *
 * A trace started below a Guard (new shapes) finds the function being called
 * through current(): the Guard publishes it, with the Python frame it was
 * called from, for the duration of the call.
 *
 * Built where a C compiler is present; without it stablejit runs the same
 * checks as generated Python (STABLEJIT_PURE_PYTHON=1 forces that).
 */
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
 * from (both borrowed: alive for as long as the call runs). */
static THREAD_LOCAL PyObject *current_fn = NULL;
static THREAD_LOCAL PyObject *current_frame = NULL;

static PyObject *str_ready, *str_hits, *str_sinks, *one;

#define SMALL_STACK 16

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *code;       /* what fn.__code__ must be */
    PyObject *g_id;       /* id() of fn.__globals__, fn.__builtins__ (ints) */
    PyObject *b_id;
    PyObject *sinks_ns;   /* the dict holding SINKS (the sinks module's) */
    PyObject *sinks;      /* what SINKS must be */
    PyObject *defaults;   /* what fn.__defaults__, __kwdefaults__ must be */
    PyObject *kwdefaults;
    PyObject *names;      /* tuple of the globals read, in check order */
    PyObject *gslots;     /* tuple: what each of them must be */
    PyObject *cslots;     /* tuple: what each closure cell must hold */
    PyObject *leaf_slot;  /* the slot meaning "an array of a lifted type" */
    PyObject *leaf_types; /* set of those types */
    PyObject *missing;    /* what an unbound name or an empty cell reads as */
    PyObject *entries;    /* dict: options -> cache entry */
    PyObject *general;    /* general(fn, opts, *args, **kwargs) */
    PyObject *plainly;    /* plainly(fn, opts, error, args, kwargs) */
    PyObject *mismatch;   /* the exception type that plainly handles */
    void *globals_ptr, *builtins_ptr;
} Guard;

/* 1: v fits slot (an array appended to leaves), 0: it does not. */
static inline int
fits(Guard *g, PyObject *v, PyObject *slot, PyObject **leaves, Py_ssize_t *n, Py_ssize_t cap)
{
    if (v == slot)
        return 1;
    if (slot != g->leaf_slot || *n >= cap)
        return 0;
    int in = PySet_Contains(g->leaf_types, (PyObject *)Py_TYPE(v));
    if (in <= 0) {
        if (in < 0)
            PyErr_Clear();
        return 0;
    }
    Py_INCREF(v); /* the call below may run code that drops its holder's reference */
    leaves[(*n)++] = v;
    return 1;
}

static PyObject *
call_plainly(Guard *g, PyObject *fn, PyObject *opts, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *result = NULL, *pargs = NULL, *kwargs = NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    pargs = PyTuple_New(nargs);
    kwargs = PyDict_New();
    if (pargs == NULL || kwargs == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(pargs, i, args[i]);
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0)
            goto done;
    }
    result = PyObject_CallFunctionObjArgs(g->plainly, fn, opts, value, pargs, kwargs, NULL);
done:
    Py_XDECREF(pargs);
    Py_XDECREF(kwargs);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return result;
}

static PyObject *
guard_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Guard *g = (Guard *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *small[SMALL_STACK];
    PyObject **stack = small;
    Py_ssize_t n = 0, cap, i;
    PyObject *entry, *ready = NULL, *result;

    if (nargs < 2 || Py_TYPE(args[0]) != &PyFunction_Type)
        goto general;
    PyObject *fn = args[0], *opts = args[1];
    PyFunctionObject *f = (PyFunctionObject *)fn;
    if (f->func_code != g->code || (void *)f->func_globals != g->globals_ptr ||
        (void *)f->func_builtins != g->builtins_ptr ||
        (f->func_defaults ? f->func_defaults : Py_None) != g->defaults ||
        (f->func_kwdefaults ? f->func_kwdefaults : Py_None) != g->kwdefaults ||
        (f->func_dict != NULL && PyDict_GET_SIZE(f->func_dict) != 0) ||
        !PyDict_CheckExact(f->func_globals) || !PyDict_CheckExact(f->func_builtins))
        goto general;
    if (PyDict_GetItemWithError(g->sinks_ns, str_sinks) != g->sinks) {
        PyErr_Clear();
        goto general;
    }

    Py_ssize_t n_globals = PyTuple_GET_SIZE(g->names);
    Py_ssize_t n_cells = PyTuple_GET_SIZE(g->cslots);
    cap = n_globals + n_cells; /* at most one leaf per check */
    if (cap + nargs - 2 + nkw > SMALL_STACK) {
        stack = PyMem_Malloc(sizeof(PyObject *) * (cap + nargs - 2 + nkw));
        if (stack == NULL)
            return PyErr_NoMemory();
    }
    for (i = 0; i < n_globals; i++) {
        PyObject *name = PyTuple_GET_ITEM(g->names, i);
        PyObject *v = PyDict_GetItemWithError(f->func_globals, name);
        if (v == NULL) {
            if (PyErr_Occurred())
                goto fail;
            v = PyDict_GetItemWithError(f->func_builtins, name);
            if (v == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                v = g->missing;
            }
        }
        if (!fits(g, v, PyTuple_GET_ITEM(g->gslots, i), stack, &n, cap))
            goto fail;
    }
    if (n_cells) {
        PyObject *closure = f->func_closure;
        if (closure == NULL || PyTuple_GET_SIZE(closure) < n_cells)
            goto fail;
        for (i = 0; i < n_cells; i++) {
            PyObject *v = PyCell_GET(PyTuple_GET_ITEM(closure, i));
            if (!fits(g, v == NULL ? g->missing : v, PyTuple_GET_ITEM(g->cslots, i), stack, &n,
                      cap))
                goto fail;
        }
    }
    /* Looked up last: nothing between here and its use runs Python code, which
     * could drop the entry from the dict (a borrowed reference). */
    entry = PyDict_GetItemWithError(g->entries, opts);
    if (entry == NULL)
        goto fail;
    ready = PyObject_GetAttr(entry, str_ready);
    if (ready == NULL || ready == Py_None) {
        PyErr_Clear();
        goto fail;
    }
    /* entry.hits += 1 */
    PyObject *hits = PyObject_GetAttr(entry, str_hits);
    if (hits == NULL)
        goto error;
    PyObject *more = PyNumber_Add(hits, one);
    Py_DECREF(hits);
    if (more == NULL)
        goto error;
    int set = PyObject_SetAttr(entry, str_hits, more);
    Py_DECREF(more);
    if (set < 0)
        goto error;

    Py_ssize_t n_leaves = n;
    for (i = 2; i < nargs + nkw; i++)
        stack[n++] = args[i];
    PyObject *fn_before = current_fn, *frame_before = current_frame;
    current_fn = fn;
    current_frame = (PyObject *)PyEval_GetFrame();
    result = PyObject_Vectorcall(ready, stack, n - nkw, kwnames);
    current_fn = fn_before;
    current_frame = frame_before;
    if (result == NULL && PyErr_ExceptionMatches(g->mismatch))
        result = call_plainly(g, fn, opts, args + 2, nargs - 2, kwnames);
    for (i = 0; i < n_leaves; i++)
        Py_DECREF(stack[i]);
    Py_DECREF(ready);
    if (stack != small)
        PyMem_Free(stack);
    return result;

error:
    for (i = 0; i < n; i++)
        Py_DECREF(stack[i]);
    Py_XDECREF(ready);
    if (stack != small)
        PyMem_Free(stack);
    return NULL;

fail:
    PyErr_Clear();
    for (i = 0; i < n; i++)
        Py_DECREF(stack[i]);
    Py_XDECREF(ready);
    if (stack != small)
        PyMem_Free(stack);
general:
    return PyObject_Vectorcall(g->general, args, nargsf, kwnames);
}

static int
guard_traverse(Guard *g, visitproc visit, void *arg)
{
    Py_VISIT(g->code);
    Py_VISIT(g->g_id);
    Py_VISIT(g->b_id);
    Py_VISIT(g->sinks_ns);
    Py_VISIT(g->sinks);
    Py_VISIT(g->defaults);
    Py_VISIT(g->kwdefaults);
    Py_VISIT(g->names);
    Py_VISIT(g->gslots);
    Py_VISIT(g->cslots);
    Py_VISIT(g->leaf_slot);
    Py_VISIT(g->leaf_types);
    Py_VISIT(g->missing);
    Py_VISIT(g->entries);
    Py_VISIT(g->general);
    Py_VISIT(g->plainly);
    Py_VISIT(g->mismatch);
    return 0;
}

static int
guard_clear(Guard *g)
{
    Py_CLEAR(g->code);
    Py_CLEAR(g->g_id);
    Py_CLEAR(g->b_id);
    Py_CLEAR(g->sinks_ns);
    Py_CLEAR(g->sinks);
    Py_CLEAR(g->defaults);
    Py_CLEAR(g->kwdefaults);
    Py_CLEAR(g->names);
    Py_CLEAR(g->gslots);
    Py_CLEAR(g->cslots);
    Py_CLEAR(g->leaf_slot);
    Py_CLEAR(g->leaf_types);
    Py_CLEAR(g->missing);
    Py_CLEAR(g->entries);
    Py_CLEAR(g->general);
    Py_CLEAR(g->plainly);
    Py_CLEAR(g->mismatch);
    return 0;
}

static void
guard_dealloc(Guard *g)
{
    PyObject_GC_UnTrack(g);
    guard_clear(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *
guard_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"code", "g_id", "b_id", "sinks_ns", "sinks", "defaults",
                             "kwdefaults", "names", "gslots", "cslots", "leaf_slot",
                             "leaf_types", "missing", "entries", "general", "plainly",
                             "mismatch", NULL};
    PyObject *o[17];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O!O!OOOO!O!O!OO!OO!OOO", kwlist, &o[0],
                                     &PyLong_Type, &o[1], &PyLong_Type, &o[2], &PyDict_Type,
                                     &o[3], &o[4], &o[5], &o[6], &PyTuple_Type, &o[7],
                                     &PyTuple_Type, &o[8], &PyTuple_Type, &o[9], &o[10],
                                     &PySet_Type, &o[11], &o[12], &PyDict_Type, &o[13], &o[14],
                                     &o[15], &o[16]))
        return NULL;
    if (PyTuple_GET_SIZE(o[7]) != PyTuple_GET_SIZE(o[8])) {
        PyErr_SetString(PyExc_ValueError, "Guard: names and gslots differ in length");
        return NULL;
    }
    Guard *g = (Guard *)type->tp_alloc(type, 0);
    if (g == NULL)
        return NULL;
    PyObject **fields[] = {&g->code,     &g->g_id,       &g->b_id,     &g->sinks_ns, &g->sinks,
                           &g->defaults, &g->kwdefaults, &g->names,    &g->gslots,   &g->cslots,
                           &g->leaf_slot, &g->leaf_types, &g->missing, &g->entries,  &g->general,
                           &g->plainly,  &g->mismatch};
    for (int i = 0; i < 17; i++) {
        Py_INCREF(o[i]);
        *fields[i] = o[i];
    }
    g->globals_ptr = PyLong_AsVoidPtr(o[1]);
    g->builtins_ptr = PyLong_AsVoidPtr(o[2]);
    if (PyErr_Occurred()) {
        Py_DECREF(g);
        return NULL;
    }
    g->vectorcall = guard_vectorcall;
    return (PyObject *)g;
}

static PyTypeObject GuardType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stablejit._speedups.Guard",
    .tp_basicsize = sizeof(Guard),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Guard, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = guard_new,
    .tp_traverse = (traverseproc)guard_traverse,
    .tp_clear = (inquiry)guard_clear,
    .tp_dealloc = (destructor)guard_dealloc,
    .tp_doc = "A fast-path record's call function: its identity checks, its entry lookup "
              "and the call of the entry's jax.jit, in C.",
};

/* Maker: stable_jit(fun)'s common case, a function whose code's fast path
 * has a call function: the StableJitted partial of (call, fun, options). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *info; /* dict: id(code) -> CodeInfo (whose .fast.call is read) */
    PyObject *cls;  /* StableJitted */
    PyObject *opts; /* the default options */
} Maker;

static PyObject *str_fast, *str_call;

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
    PyObject *fast = PyObject_GetAttr(info, str_fast);
    if (fast == NULL)
        return NULL;
    PyObject *call = PyObject_GetAttr(fast, str_call);
    Py_DECREF(fast);
    if (call == NULL)
        return NULL;
    if (call == Py_None)
        return call;
    PyObject *parts[3] = {call, fun, m->opts};
    PyObject *made = PyObject_Vectorcall(m->cls, parts, 3, NULL);
    Py_DECREF(call);
    if (made == NULL)
        return NULL;
    /* A partial without a __dict__ of its own is unwrapped by a partial
     * made of it (see the runtime's jitted.partial_of). */
    PyObject *d = PyObject_GenericGetDict(made, NULL);
    if (d == NULL) {
        Py_DECREF(made);
        return NULL;
    }
    Py_DECREF(d);
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

static PyTypeObject MakerType = {
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

static PyObject *
current(PyObject *module, PyObject *unused)
{
    if (current_fn == NULL)
        return Py_BuildValue("(OO)", Py_None, Py_None);
    return Py_BuildValue("(OO)", current_fn, current_frame ? current_frame : Py_None);
}

static PyObject *str_dict;

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
static PyObject *
objects_fit(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
        PyObject *obj = PyList_GET_ITEM(objs, i);
        /* object.__getattribute__(obj, "__dict__"), as the walk reads it */
        PyObject *d = PyObject_GenericGetAttr(obj, str_dict);
        if (d == NULL) {
            result = NULL;
            goto done;
        }
        Py_ssize_t expected = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
        if (!PyDict_CheckExact(d) || PyDict_GET_SIZE(d) != expected ||
            j + expected > total) {
            Py_DECREF(d);
            if (PyErr_Occurred())
                result = NULL;
            goto done; /* None: the item-by-item check decides */
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
        /* Each object, then its __dict__: the walk's order. */
        keys[nkeys] = PyLong_FromVoidPtr(obj);
        keys[nkeys + 1] = keys[nkeys] == NULL ? NULL : PyLong_FromVoidPtr(d);
        Py_DECREF(d); /* obj holds it */
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

static PyMethodDef methods[] = {
    {"current", current, METH_NOARGS,
     "(function, frame): what the innermost Guard running on this thread is calling, and "
     "the Python frame that called it; (None, None) if none is."},
    {"objects_fit", (PyCFunction)(void (*)(void))objects_fit, METH_FASTCALL,
     "objects_fit(objs, types, sizes, names, values, sinks, seen): the guards' "
     "_Objects.fit past its check of kinds (True, False or None), in one C pass."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "stablejit._speedups",
    "stablejit's optional C accelerator (see _speedups.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    str_ready = PyUnicode_InternFromString("ready");
    str_hits = PyUnicode_InternFromString("hits");
    str_sinks = PyUnicode_InternFromString("SINKS");
    str_fast = PyUnicode_InternFromString("fast");
    str_call = PyUnicode_InternFromString("call");
    str_dict = PyUnicode_InternFromString("__dict__");
    one = PyLong_FromLong(1);
    if (str_ready == NULL || str_hits == NULL || str_sinks == NULL || one == NULL ||
        str_fast == NULL || str_call == NULL || str_dict == NULL)
        return NULL;
    if (PyType_Ready(&GuardType) < 0 || PyType_Ready(&MakerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&GuardType);
    if (PyModule_AddObject(m, "Guard", (PyObject *)&GuardType) < 0) {
        Py_DECREF(&GuardType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&MakerType);
    if (PyModule_AddObject(m, "Maker", (PyObject *)&MakerType) < 0) {
        Py_DECREF(&MakerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
