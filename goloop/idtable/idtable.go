// Package idtable maps small integer ids to Go values, for the C objects of goloop's
// binding that carry an id (loops, transports, HTTP parsers, goloop serve's servers and
// requests). It is pure Go (no cgo), so its tests run with plain `go test`; they are
// white-box (idtable_test.go, beside it).
package idtable

import (
	"sync"
	"sync/atomic"
)

// Table maps small integer ids to *T for the C objects that carry an id (loops, transports,
// HTTP parsers). On a free-threaded Python several loop threads create, look up and drop
// entries at once, so a plain slice (append reallocating under a reader) would not do:
// lookups take no lock (two atomic loads: the chunk directory and the entry; plain loads on
// x86-64, load-acquire (LDAR) on arm64), add and del take a mutex. Chunks never move once
// made, so a reader holding an old directory still finds every entry it may look up.
// Memory order (what weakly ordered arm64 needs, Go's sync/atomic being sequentially
// consistent): Add fills a new chunk before it publishes the directory with an atomic Store
// and stores the entry atomically after the value was built, so a reader whose Load sees a
// pointer also sees everything written before it was stored; a reader that misses a
// concurrent Add gets nil, as if it had looked just before.
type Table[T any] struct {
	mu   sync.Mutex
	dir  atomic.Pointer[[]*tableChunk[T]] // grows copy-on-write under mu
	free []int                            // ids to reuse, under mu
	next int                              // ids handed out so far, under mu
	live int                              // entries present, under mu
}

const (
	tableShift = 8
	tableSize  = 1 << tableShift
)

type tableChunk[T any] [tableSize]atomic.Pointer[T]

// Get returns the entry of id, or nil.
func (t *Table[T]) Get(id int) *T {
	d := t.dir.Load()
	if d == nil || id < 0 {
		return nil
	}
	c := id >> tableShift
	if c >= len(*d) {
		return nil
	}
	return (*d)[c][id&(tableSize-1)].Load()
}

// Add stores v under a free id and returns it, with the number of entries now present.
func (t *Table[T]) Add(v *T) (id, live int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		id = t.next
		t.next++
		var dir []*tableChunk[T]
		if d := t.dir.Load(); d != nil {
			dir = *d
		}
		if c := id >> tableShift; c >= len(dir) {
			nd := make([]*tableChunk[T], c+1)
			copy(nd, dir)
			nd[c] = new(tableChunk[T])
			t.dir.Store(&nd)
		}
	}
	(*t.dir.Load())[id>>tableShift][id&(tableSize-1)].Store(v)
	t.live++
	return id, t.live
}

// Del forgets id (nothing happens if it holds no entry).
func (t *Table[T]) Del(id int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.dir.Load()
	if d == nil || id < 0 || id>>tableShift >= len(*d) {
		return
	}
	if (*d)[id>>tableShift][id&(tableSize-1)].Swap(nil) != nil {
		t.free = append(t.free, id)
		t.live--
	}
}
