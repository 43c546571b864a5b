"""What alignmt answers, whoever asks: the HTTP server (alignmt.serve), the explorer's
offline page (`alignmt explore`) and a notebook's widget all ask the same questions and get
the same JSON, computed here.

    schemas.py    the pydantic models of every question and answer; their rules
    limits.py     what an answerer accepts (each a server flag) and the errors past a limit
    registry.py   the models held, opened through the door (decoding/door.py), as /v1/models
                  describes them
    translate.py  /v1/translate: many requests' sentences in one call
    inside.py     /v1/step, /v1/beam, /v1/snapshots: one sentence's decoding from inside
    page.py       the explorer's page, served or written with its answers inlined
    static/       the explorer's HTML, CSS and JavaScript (one explorer.js for every host)

Nothing is imported here, so that `alignmt.answers.limits` does not pull in pydantic.
"""
