// Package sched holds the event loop's timer heap: a 4-ary min-heap ordered by deadline, then
// by insertion order. It is generic over the item, so the binding stores handle pointers
// (goloop/binding/loop.go) and tests store plain values; it does not allocate per operation
// once grown. The loop's ready queue is not here: it is a ring of handles in C (GLLoop.ready
// in goloop/binding/gl.h), appended to by call_soon without a call into Go.
package sched

// Timer is one entry of a TimerHeap.
type Timer[T any] struct {
	When float64 // loop time, seconds
	seq  uint64  // insertion order breaks ties, so equal deadlines run FIFO
	Item T
}

// TimerHeap is a min-heap of timers ordered by (When, insertion order).
type TimerHeap[T any] struct {
	items []Timer[T]
	seq   uint64
}

// Len is the number of timers in the heap, cancelled ones included.
func (h *TimerHeap[T]) Len() int { return len(h.items) }

// Push adds item due at when.
func (h *TimerHeap[T]) Push(when float64, item T) {
	h.seq++
	h.items = append(h.items, Timer[T]{When: when, seq: h.seq, Item: item})
	h.up(len(h.items) - 1)
}

// Peek returns the earliest timer without removing it.
func (h *TimerHeap[T]) Peek() (t Timer[T], ok bool) {
	if len(h.items) == 0 {
		return t, false
	}
	return h.items[0], true
}

// Pop removes and returns the earliest timer.
func (h *TimerHeap[T]) Pop() (t Timer[T], ok bool) {
	n := len(h.items)
	if n == 0 {
		return t, false
	}
	t = h.items[0]
	h.items[0] = h.items[n-1]
	var zero Timer[T]
	h.items[n-1] = zero
	h.items = h.items[:n-1]
	if n > 1 {
		h.down(0)
	}
	return t, true
}

// Items is the heap's array, in heap order (a view: valid until the next change).
func (h *TimerHeap[T]) Items() []Timer[T] { return h.items }

// Filter keeps only the timers for which keep returns true, calling drop on the others,
// and restores the heap order (used to purge cancelled timers in one pass).
func (h *TimerHeap[T]) Filter(keep func(T) bool, drop func(T)) {
	j := 0
	for i := range h.items {
		if keep(h.items[i].Item) {
			h.items[j] = h.items[i]
			j++
		} else if drop != nil {
			drop(h.items[i].Item)
		}
	}
	var zero Timer[T]
	for i := j; i < len(h.items); i++ {
		h.items[i] = zero
	}
	h.items = h.items[:j]
	for i := (j - 2) / arity; j > 1 && i >= 0; i-- { // the last node with a child, up
		h.down(i)
	}
}

// The heap is 4-ary: half the levels of a binary heap, so a pop (the common operation:
// every timer is pushed once and popped once) moves an entry fewer times, and the four
// children of a node share a cache line or two.
const arity = 4

func (h *TimerHeap[T]) up(i int) {
	items := h.items
	t := items[i]
	for i > 0 {
		p := (i - 1) / arity
		if !earlier(&t, &items[p]) {
			break
		}
		items[i] = items[p]
		i = p
	}
	items[i] = t
}

func (h *TimerHeap[T]) down(i int) {
	items := h.items
	n := len(items)
	t := items[i]
	for {
		c := arity*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < c+arity && j < n; j++ {
			if earlier(&items[j], &items[m]) {
				m = j
			}
		}
		if !earlier(&items[m], &t) {
			break
		}
		items[i] = items[m]
		i = m
	}
	items[i] = t
}

// earlier orders timers by deadline, then by insertion.
func earlier[T any](a, b *Timer[T]) bool {
	if a.When != b.When {
		return a.When < b.When
	}
	return a.seq < b.seq
}
