"""The takeover room: who this master is to its fleet (instance id and fencing epoch) and its promotion.

A promotion raises the epoch by one; from the next request on every agent command carries it, each
agent keeps the new epoch and refuses the master it replaced (``fenced``). ``mirbad up --recover``
raises the epoch in the same way when it restores a lost master (docs/takeover.md has the procedure).
"""
