/* The Guard and its checks, shared by guard.c (the type, the call) and
 * slots.c (what each kind of slot checks). */
#ifndef STABLEJIT_GUARD_H
#define STABLEJIT_GUARD_H

#include "speedups.h"

/* The kinds of slot written as a tuple (mark, ...), in the order of the
 * Guard's marks (see _runtime/hot.py, which writes them). */
enum {
    MARK_FUNCTION, /* (mark, code or a weakref to it, g_id, b_id, defaults, kwdefaults,
                      names, gslots, cslots): a function of that code whose own checks hold */
    MARK_DICT,     /* (mark, keys, item slots): a dict with those string keys */
    MARK_TUPLE,    /* (mark, type, item slots): a tuple of exactly that type */
    MARK_LIST,     /* (mark, item slots): a list */
    MARK_REF,      /* (mark, n): the object numbered n (a back reference) */
    MARK_OBJECT,   /* (mark, class, kind, dict slot): a plain object of that class and kind */
    MARK_LIFTED,   /* (mark, type): a number of that type, lifted to an input */
    N_MARKS
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    /* The objects it holds: GUARD_FIELDS of them, in the order of guard_held
     * (which is that of its keywords). */
    PyObject *top;        /* the record's own function slot (MARK_FUNCTION's, code held) */
    PyObject *sinks;      /* what SINKS must be (sj_sinks_now: the one published last) */
    PyObject *leaf_slot;  /* the slot meaning "an array of a lifted type" */
    PyObject *leaf_types; /* set of those types */
    PyObject *missing;    /* what an unbound name or an empty cell reads as */
    PyObject *marks;      /* tuple of N_MARKS sentinels, first items of the slots above */
    PyObject *table;      /* dict: class -> kind (an object's kind must not have changed) */
    PyObject *entries;    /* dict: options -> cache entry */
    PyObject *general;    /* general(fn, opts, *args, **kwargs) */
    PyObject *plainly;    /* plainly(fn, opts, error, args, kwargs) */
    PyObject *mismatch;   /* the exception type that plainly handles */
    PyObject *entry_type; /* the cache entries' class (a Counted), whose slot ready is read */
    Py_ssize_t ready_offset; /* where its instances keep it */
    Py_ssize_t max_leaves; /* the most arrays the slots can take (counted by sj_valid_slot) */
    Py_ssize_t max_met;    /* the most objects they number (functions, lists, dicts, objects) */
} Guard;

/* Where a match puts what it takes: the arrays (new references), and the
 * objects it numbers as the walk numbers them (borrowed, in order; one met
 * twice is a back reference there, so not a match here), with a hash set
 * of them once there are many. */
typedef struct {
    PyObject **leaves;
    Py_ssize_t n, cap;
    PyObject **met;
    Py_ssize_t n_met, cap_met;
    PyObject **set;
    size_t mask;
} Taken;

/* 1 if fn (a function) passes the checks of a MARK_FUNCTION slot, its
 * arrays taken and what it meets numbered in t; 0 if not (never an error
 * set: what fails goes to the general path, which decides afresh). */
int sj_function_fits(Guard *g, PyObject *fn, PyObject *slot, Taken *t);

/* What Guard() learns of its slots as it checks their shapes: the marks
 * and the leaf slot it reads them with, and how many arrays and numbered
 * objects (functions, lists, dicts, objects) a match can take. */
typedef struct {
    PyObject *marks, *leaf_slot;
    Py_ssize_t leaves, met;
} Shape;

/* 1 if slot is well formed (a function slot, if function), recursively, its
 * arrays and numbered objects added to s; 0 with a ValueError naming what is
 * not. Guard() checks its slots once, so that a match reads them unchecked
 * and its buffers are sized to them. */
int sj_valid_slot(Shape *s, PyObject *slot, int function);

#endif
