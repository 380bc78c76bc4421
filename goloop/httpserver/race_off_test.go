//go:build !race

package httpserver

// raceOn: built with -race (sync.Pool then drops some of what it is given, on purpose).
const raceOn = false
