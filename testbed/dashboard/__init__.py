"""A live view of a run, read from its run directory only (docs/run-directory.md): the daemons are never asked.

reader.py reads JSON lines incrementally; state.py folds them into what the page shows (hosts, links and their
utilisation, queues, route changes, a timeline, phases); server.py serves that over HTTP with server-sent
events (`testbed dashboard RUN_DIR`, `testbed up --dashboard`, `testbed run --dashboard`).
"""
