"""The HTTP service behind `alignmt serve RUN_DIR ...`: the transport over the answers
(alignmt.answers), which never imports training, experiments, the command line or
matplotlib.

    app.py      the FastAPI app: state, middleware, errors
    batcher.py  the decoding thread and dynamic batching
    guard.py    what every request passes first
    routes.py   every route, at module level
    server.py   uvicorn, with a deadline on reading headers

Nothing is imported here, so that importing a module of it pulls in only what that needs.
"""
