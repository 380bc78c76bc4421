/* goloop.http: the HTTP/1.1 parser's Python types (httptools' API). */
#include "gl.h"

int gl_init_http(PyObject *module) { return 0; }
