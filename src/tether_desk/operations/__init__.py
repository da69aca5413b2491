"""Operating the desk: checks on what a command is given, one writer per SQLite log,
workers' liveness, the operator's view of runs, upgrades, healing and metrics.

Each submodule is imported where it is used; importing this package does nothing.
"""
