"""Flask (Werkzeug's router) under gunicorn: an upstream of the differential path test
(crates/idemgate-gateway/tests/integration/differential.rs).

POST /charges and POST /a/charges each count one execution under the rule Flask routed the
request to. Every POST that reaches the application, routed or not, is recorded first as an
arrival with its request target as received (gunicorn's RAW_URI). GET /counts returns both
and the framework versions.

    python -m gunicorn --no-control-socket --workers 1 --bind 127.0.0.1:PORT flask_app:app

One worker, so the counts live in one process.
"""

import threading
from importlib.metadata import version

from flask import Flask, jsonify, request

app = Flask(__name__)
lock = threading.Lock()
executions = {}
arrivals = []


def execute():
    rule = request.url_rule.rule
    with lock:
        executions[rule] = executions.get(rule, 0) + 1
    return jsonify(executed=rule), 201


app.add_url_rule("/charges", "charges", execute, methods=["POST"])
app.add_url_rule("/a/charges", "a_charges", execute, methods=["POST"])


@app.get("/counts")
def counts():
    with lock:
        return jsonify(
            executions=executions,
            arrivals=arrivals,
            server=f"Flask {version('flask')}, Werkzeug {version('werkzeug')}, "
            f"gunicorn {version('gunicorn')}",
        )


class RecordArrivals:
    """WSGI middleware: records each POST before Flask routes it."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        if environ["REQUEST_METHOD"] == "POST":
            with lock:
                arrivals.append(environ.get("RAW_URI", environ.get("PATH_INFO", "")))
        return self.wsgi_app(environ, start_response)


app.wsgi_app = RecordArrivals(app.wsgi_app)
