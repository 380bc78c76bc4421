"""goloop.http: httptools' API on goloop's Go HTTP/1.1 parser.

    from goloop import http as httptools

    class Protocol:
        def on_url(self, url: bytes): ...
        def on_header(self, name: bytes, value: bytes): ...
        def on_message_complete(self): ...

    parser = httptools.HttpRequestParser(Protocol())
    parser.feed_data(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")

The parser types, URL and the exception classes are defined by the extension module
goloop._goloop (importing this module loads it, and so the Go runtime).
"""

from ._goloop import (  # type: ignore[attr-defined]
    URL,
    HttpParserCallbackError,
    HttpParserError,
    HttpParserInvalidMethodError,
    HttpParserInvalidStatusError,
    HttpParserInvalidURLError,
    HttpParserUpgrade,
    HttpRequestParser,
    HttpResponseParser,
    parse_url,
)

__all__ = (
    # parser
    "HttpRequestParser",
    "HttpResponseParser",
    # errors
    "HttpParserError",
    "HttpParserCallbackError",
    "HttpParserInvalidStatusError",
    "HttpParserInvalidMethodError",
    "HttpParserInvalidURLError",
    "HttpParserUpgrade",
    # url parser
    "parse_url",
    "URL",
)
