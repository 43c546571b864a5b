"""The HTTP service behind `alignmt serve RUN_DIR ...`: the transport over the answers
(alignmt.answers), which never imports training, experiments, the command line or
matplotlib.

    server.py    run_server: uvicorn, with a deadline on reading each request's headers
    app.py       the FastAPI app: routes, guard, static files and decoding thread; errors as JSON
    routes.py    the routes and their dependencies (models, limits, the decoding thread)
    guard.py     what every request passes first: body size, read deadline, HEAD; its log
    batcher.py   the decoding thread and its queue: dynamic batching

Nothing is imported here, so that importing a module of it pulls in only what that needs.
"""
