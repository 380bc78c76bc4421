# run: goloop serve --interface wsgi flask_app:app
# check: GET /?name=goloop -> 200 {"hello": "goloop"}
# needs: flask
from flask import Flask, request

app = Flask(__name__)


@app.route("/")
def hello():
    return {"hello": request.args.get("name", "world")}
