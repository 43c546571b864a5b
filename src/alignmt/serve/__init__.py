"""The HTTP service behind `alignmt serve RUN_DIR ...`: a layer of its own over checkpoint,
search, trace and translate, which never imports training, experiments, the command line
or matplotlib.

    server.py    run_server: uvicorn, with a deadline on reading each request's headers
    app.py       the FastAPI app: routes, guard, static files and decoding thread; errors as JSON
    routes.py    the routes and their dependencies (models, limits, the decoding thread)
    guard.py     what every request passes first: body size, read deadline, HEAD; its log
    schemas.py   the pydantic models of every request and response body; request rules
    limits.py    what a server accepts (each a flag) and the errors past a limit
    batcher.py   the decoding thread and its queue: dynamic batching
    decoding.py  the work behind each endpoint, on the decoding thread
    registry.py  the models served, loaded from their run folders

Nothing is imported here, so that `alignmt.serve.limits` does not pull in FastAPI.
"""
