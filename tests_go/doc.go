// Package tests_go holds goloop's black-box Go tests, benchmarks and fuzz targets: tests of
// the pure Go packages (poller, sched, httpparser) through their exported API only. They run
// without Python: go test ./tests_go/... (make fuzz runs the fuzz targets).
//
// Where a Go test goes: a test that uses only a package's exported API goes here, in a file
// named after the package (httpparser_test.go, httpparser_fuzz_test.go ...); a white-box test,
// one that needs the package's unexported names, goes beside the package as package-internal
// _test.go files (goloop/httpserver's and goloop/idtable's tests). A new parser test that feeds
// bytes and checks the callbacks goes in tests_go/httpparser_test.go.
package tests_go
