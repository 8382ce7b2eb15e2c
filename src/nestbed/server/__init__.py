"""The nestbed server (``nestbed serve``): one process that owns the store and the machine
of a shared testbed and offers them over an HTTP API (FastAPI on uvicorn, JSON everywhere,
its OpenAPI schema at ``/openapi.json``).

    app          the FastAPI application: its lifespan, error replies, the body-size limit
    auth         bearer tokens to users, and who may see which project (404 for the rest)
    accounts     the API of users, tokens and projects
    experiments  the API of a project's experiments, every change audited
    definitions  an uploaded experiment file parsed through the front ends' sandbox
    operations   long operations (swap in, swap out, run) in worker threads
    batches      the API of the batch queue
    loop         the one background loop (``Loop.tick``) and the reconciliation at start
    policies     admission, the batch queue and idle swap-out wired into requests and loop
    admission    whether an experiment fits on the machine (pure)
    batch        which queued experiment starts next (pure)
    idle         when an experiment is idle, and its warning and swap-out
    schemas      the pydantic models of requests and replies
    config       the server's settings
    client       the CLI's side: the API over urllib (no FastAPI, fast to import)

Importing this package imports nothing: the CLI's client mode loads only ``client``.
"""
