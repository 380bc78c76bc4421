"""A Flask application as people write them, served unchanged by test_serve_wsgi_flask.py:
routes with converters, JSON in and out, form posts, file uploads, a streamed response,
send_file, an error that becomes a 500 (its traceback in the server's log), and the WSGI
environ as Flask sees it."""
import hashlib
import os

from flask import Flask, Response, abort, jsonify, request, send_file, stream_with_context

app = Flask(__name__)
app.config["MAX_CONTENT_LENGTH"] = 16 * 1024 * 1024

# the file send_file serves: made by the test fixture in a temporary folder
DATA_FILE = os.environ.get("FLASK_APP_DATA_FILE", os.devnull)
BOOM = "flask-app-boom-7f3a"  # the marker the 500 test looks for in the server's log


@app.get("/")
def hello():
    return "Hello, World!"


@app.get("/users/<int:uid>")
def user(uid):
    if uid == 0:
        abort(404)
    return jsonify(id=uid, name=f"user{uid}", q=request.args.get("q"))


@app.post("/json")
def post_json():
    data = request.get_json()
    return jsonify(got=data, total=sum(data.get("numbers", []))), 201


@app.post("/form")
def post_form():
    return jsonify(name=request.form["name"], tags=request.form.getlist("tag"),
                   content_type=request.mimetype)


@app.post("/upload")
def upload():
    out = {}
    for field, f in request.files.items(multi=True):
        data = f.read()
        out[field] = {"filename": f.filename, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "mimetype": f.mimetype}
    return jsonify(files=out, note=request.form.get("note"))


@app.get("/stream/<int:n>")
def stream(n):
    path = request.path  # the request context stays alive while the generator runs

    @stream_with_context
    def gen():
        for i in range(n):
            yield f"{path} chunk {i}\n"
    return Response(gen(), mimetype="text/plain")


CLOSED = []  # the endless streams whose generator was closed (the server called close())


@app.get("/endless/<tag>")
def endless(tag):
    def gen():
        try:
            while True:
                yield b"x" * 16384
        finally:
            CLOSED.append(tag)
    return Response(gen(), mimetype="application/octet-stream")


@app.get("/closed")
def closed():
    return jsonify(CLOSED)


@app.get("/file")
def file():
    return send_file(DATA_FILE, mimetype="application/octet-stream", conditional=True)


@app.get("/download")
def download():
    return send_file(DATA_FILE, as_attachment=True, download_name="data.bin")


@app.get("/boom")
def boom():
    raise RuntimeError(BOOM)


@app.route("/environ", methods=["GET", "POST"])
@app.route("/environ/<path:rest>")
def environ(rest=None):
    env = request.environ
    keys = ["REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "SERVER_PROTOCOL",
            "SERVER_NAME", "SERVER_PORT", "REMOTE_ADDR", "HTTP_HOST", "CONTENT_TYPE", "CONTENT_LENGTH",
            "HTTP_X_MANY", "wsgi.url_scheme", "wsgi.multithread", "wsgi.multiprocess", "wsgi.run_once"]
    out = {k: env.get(k) for k in keys}
    out["wsgi.version"] = list(env["wsgi.version"])
    out["has_input"] = hasattr(env["wsgi.input"], "read")
    out["has_errors"] = hasattr(env["wsgi.errors"], "write")
    out["REMOTE_PORT"] = env.get("REMOTE_PORT")
    out["url"] = request.url
    out["path"] = request.path
    out["args"] = request.args.to_dict(flat=False)
    out["remote_addr"] = request.remote_addr
    out["is_secure"] = request.is_secure
    out["body_len"] = len(request.get_data())
    return jsonify(out)
