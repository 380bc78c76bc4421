package httpparser

import "strconv"

// Kind classifies a parse error.
type Kind uint8

// Error kinds. They loosely follow llhttp's error codes.
const (
	KindOK Kind = iota
	KindInvalidMethod
	KindInvalidURL
	KindInvalidVersion
	KindInvalidStatus
	KindInvalidHeader
	KindInvalidContentLength
	KindUnexpectedContentLength // Content-Length together with Transfer-Encoding
	KindInvalidTransferEncoding
	KindInvalidChunkSize
	KindInvalidChunk // missing CRLF after chunk data
	KindCRExpected   // bare LF where CRLF is required
	KindLFExpected   // CR not followed by LF
	KindHeaderOverflow
	KindInvalidEOF
	KindClosedConnection // data after a message that closes the connection
	KindCallback
	KindPausedUpgrade // a 101 response without Upgrade headers (llhttp stops there)
)

var kindNames = [...]string{
	KindOK:                      "OK",
	KindInvalidMethod:           "InvalidMethod",
	KindInvalidURL:              "InvalidURL",
	KindInvalidVersion:          "InvalidVersion",
	KindInvalidStatus:           "InvalidStatus",
	KindInvalidHeader:           "InvalidHeader",
	KindInvalidContentLength:    "InvalidContentLength",
	KindUnexpectedContentLength: "UnexpectedContentLength",
	KindInvalidTransferEncoding: "InvalidTransferEncoding",
	KindInvalidChunkSize:        "InvalidChunkSize",
	KindInvalidChunk:            "InvalidChunk",
	KindCRExpected:              "CRExpected",
	KindLFExpected:              "LFExpected",
	KindHeaderOverflow:          "HeaderOverflow",
	KindInvalidEOF:              "InvalidEOF",
	KindClosedConnection:        "ClosedConnection",
	KindCallback:                "Callback",
	KindPausedUpgrade:           "PausedUpgrade",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Error is returned by Feed and FeedEOF when the input is not valid HTTP/1.x
// or when a Handler method returned an error (Kind == KindCallback, Err set).
type Error struct {
	Kind   Kind
	Msg    string
	Offset int   // offset in the data of the Feed call that failed (0 for FeedEOF)
	Err    error // the handler's error when Kind == KindCallback
}

// CallbackError is the same type as Error; a callback error is an *Error
// with Kind == KindCallback whose Err is the handler's error.
type CallbackError = Error

func (e *Error) Error() string {
	s := "httpparser: " + e.Kind.String() + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the handler's error for KindCallback errors.
func (e *Error) Unwrap() error { return e.Err }

// UpgradeError is returned by Feed when a request asked for a protocol
// upgrade (Upgrade + Connection: upgrade, or CONNECT) or a response is a
// 101 with Upgrade: the message is complete and the bytes from Offset on
// (in the data of that Feed call) belong to the new protocol. Later Feed
// calls return an UpgradeError with Offset 0. It is not an *Error.
type UpgradeError struct {
	Offset int
}

func (e *UpgradeError) Error() string {
	return "httpparser: upgrade at offset " + strconv.Itoa(e.Offset)
}
