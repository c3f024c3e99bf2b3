"""Benchmark workloads run by `tracekit capture`, one small module each (stdlib + torch, Python 3.9).

The registry and the module protocol are in `tracekit/capture/workload.py`.
"""
