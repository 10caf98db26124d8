"""Executor-side reads: the consumer pool, the fetch loop, Arrow rows, the C fast path. Runs in
Spark executors (Python workers).
"""
