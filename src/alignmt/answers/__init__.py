"""What alignmt answers, whoever asks: the HTTP server (alignmt.serve), the explorer's
offline page (`alignmt explore`) and a notebook's widget all ask the same questions and get
the same JSON, computed here.

    inside.py          /v1/step, /v1/beam, /v1/snapshots
    limits.py          what an answerer accepts, and the error past a limit
    page.py            the explorer's page, served or written with its answers inlined
    registry.py        the models held, opened through the door, as /v1/models describes them
    schemas.py         every question and answer as a pydantic model
    site.py            an exported folder made a static site that runs the model in the browser
    translate.py       /v1/translate: many requests' sentences in one call
    web_tokenizers.py  which tokenizers a site's page runs, checked before `--web` writes; its
                       tokenizer.json files

Beside the modules, static/ holds what the browser runs: the explorer's page, style and
JavaScript (one explorer.js for every host), and web/, its Web Worker. Nothing is imported
here, so that `alignmt.answers.limits` does not pull in pydantic.
"""
