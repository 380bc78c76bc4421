package httpserver

// memwatch.go: memory taken in a spike is given back. The engine's buffers (a connection's
// output, HTTP/2 streams' pending data, WebSocket messages) live on Go's heap; after a spike
// (clients that stalled, a decompression bomb cut at its bound, a burst of large bodies)
// they are garbage, but an idle server allocates nothing, so no collection runs (Go forces
// one only every 2 minutes) and the pages stay resident, and Go's background scavenger
// returns what a collection freed only slowly. One goroutine per process looks every
// memCheck at two runtime/metrics figures (no stop of the world, nothing on a request's
// path): the heap Go holds from the system (objects, live or not, and free spans not
// returned). When it is memSlack over what the last collection left live, it collects and
// returns the free pages to the system at once (debug.FreeOSMemory); so does it every
// memCheck while what was left live is itself over memSlack (the spike's buffers, freed
// as its clients go). A steady small heap costs nothing more than the look.
// Memory outside Go's heap is the binding's to return: it sets a release (SetNativeRelease:
// malloc_trim when C's allocator holds more than memSlack free, the large Python objects
// of a burst of request bodies), called at every look.

import (
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

const (
	memCheck = 5 * time.Second
	memSlack = 32 << 20
)

var memWatchOnce sync.Once

// nativeRelease is SetNativeRelease's function.
var nativeRelease atomic.Pointer[func(slack int64)]

// SetNativeRelease sets what the memory watcher calls at every look (from its goroutine:
// no Python) to return memory held outside Go's heap when more than slack bytes of it
// are free.
func SetNativeRelease(f func(slack int64)) { nativeRelease.Store(&f) }

// startMemWatch starts the process' memory watcher (once; New calls it).
func startMemWatch() {
	memWatchOnce.Do(func() { go memWatch(memCheck, debug.FreeOSMemory) })
}

// memWatch is the watcher's loop: every period, free when heldHeap says so.
func memWatch(period time.Duration, free func()) {
	samples := []rtmetrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	var live uint64 // what the last release left live (objects right after its collection)
	for range time.Tick(period) {
		if f := nativeRelease.Load(); f != nil {
			(*f)(memSlack)
		}
		rtmetrics.Read(samples)
		held := samples[0].Value.Uint64() + samples[1].Value.Uint64()
		if held < live+memSlack && live < memSlack {
			continue
		}
		free()
		rtmetrics.Read(samples[:1])
		live = samples[0].Value.Uint64()
	}
}
