// Package sched holds goloop's scheduling structures: a FIFO ready queue and a timer heap.
// They are generic over the item so they carry Python handles in the binding and plain
// values in tests; neither allocates per operation once grown.
package sched

// Queue is a growable ring buffer used as the loop's FIFO ready queue.
type Queue[T any] struct {
	buf  []T
	head int
	n    int
}

// Len is the number of queued items.
func (q *Queue[T]) Len() int { return q.n }

// Push appends v at the tail.
func (q *Queue[T]) Push(v T) {
	if q.n == len(q.buf) {
		q.grow()
	}
	i := q.head + q.n
	if i >= len(q.buf) {
		i -= len(q.buf)
	}
	q.buf[i] = v
	q.n++
}

func (q *Queue[T]) grow() {
	size := len(q.buf) * 2
	if size == 0 {
		size = 64
	}
	nb := make([]T, size)
	k := copy(nb, q.buf[q.head:])
	copy(nb[k:], q.buf[:q.head])
	q.buf = nb
	q.head = 0
}

// Pop removes and returns the head; ok is false when the queue is empty.
func (q *Queue[T]) Pop() (v T, ok bool) {
	if q.n == 0 {
		return v, false
	}
	var zero T
	v = q.buf[q.head]
	q.buf[q.head] = zero
	q.head++
	if q.head == len(q.buf) {
		q.head = 0
	}
	q.n--
	return v, true
}

// Each calls f on every queued item, oldest first, until f returns false.
func (q *Queue[T]) Each(f func(T) bool) {
	for i := 0; i < q.n; i++ {
		j := q.head + i
		if j >= len(q.buf) {
			j -= len(q.buf)
		}
		if !f(q.buf[j]) {
			return
		}
	}
}

// Drain pops every item, oldest first, passing each to f.
func (q *Queue[T]) Drain(f func(T)) {
	for q.n > 0 {
		v, _ := q.Pop()
		f(v)
	}
}

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

// Each calls f on every timer, in heap (not deadline) order, until f returns false.
func (h *TimerHeap[T]) Each(f func(Timer[T]) bool) {
	for _, t := range h.items {
		if !f(t) {
			return
		}
	}
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
