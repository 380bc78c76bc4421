package tests_go

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/goloop/goloop/goloop/sched"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// TimerHeap
// ---------------------------------------------------------------------------

// scRef is a reference timer: deadline plus a global insertion counter.
type scRef struct {
	when float64
	id   int
}

// scSortRef orders by (when, insertion id) which is what the heap promises.
func scSortRef(ref []scRef) {
	sort.SliceStable(ref, func(i, j int) bool {
		if ref[i].when != ref[j].when {
			return ref[i].when < ref[j].when
		}
		return ref[i].id < ref[j].id
	})
}

func scPopAll(t *testing.T, h *sched.TimerHeap[int]) []scRef {
	t.Helper()
	var out []scRef
	for h.Len() > 0 {
		tm, ok := h.Pop()
		require.True(t, ok)
		out = append(out, scRef{when: tm.When, id: tm.Item})
	}
	return out
}

func TestTimerHeapEmpty(t *testing.T) {
	var h sched.TimerHeap[int]
	assert.Equal(t, 0, h.Len())
	_, ok := h.Peek()
	assert.False(t, ok)
	_, ok = h.Pop()
	assert.False(t, ok)
	called := false
	h.Filter(func(int) bool { called = true; return false }, nil)
	assert.False(t, called)
	assert.Equal(t, 0, h.Len())
}

func TestTimerHeapOrderByWhen(t *testing.T) {
	var h sched.TimerHeap[int]
	whens := []float64{5, 1, 4, -2, 3, 0.5, 9, 2, 1e9, -1e9}
	for i, w := range whens {
		h.Push(w, i)
	}
	require.Equal(t, len(whens), h.Len())
	var got []float64
	for h.Len() > 0 {
		pk, ok := h.Peek()
		require.True(t, ok)
		tm, ok := h.Pop()
		require.True(t, ok)
		assert.Equal(t, pk, tm, "Peek and Pop must agree")
		assert.Equal(t, whens[tm.Item], tm.When, "item travels with its deadline")
		got = append(got, tm.When)
	}
	assert.True(t, slices.IsSorted(got), "got %v", got)
	_, ok := h.Pop()
	assert.False(t, ok)
}

func TestTimerHeapFIFOAmongEqualWhen(t *testing.T) {
	var h sched.TimerHeap[int]
	// Interleave three deadlines; within each deadline the items must come out in push order.
	for i := 0; i < 300; i++ {
		h.Push(float64(i%3), i)
	}
	prevWhen, prevItem := -1.0, -1
	for h.Len() > 0 {
		tm, _ := h.Pop()
		if tm.When == prevWhen {
			require.Greater(t, tm.Item, prevItem, "equal deadlines must pop FIFO")
		} else {
			require.Greater(t, tm.When, prevWhen)
		}
		prevWhen, prevItem = tm.When, tm.Item
	}

	// All equal.
	for i := 0; i < 1000; i++ {
		h.Push(42, i)
	}
	for i := 0; i < 1000; i++ {
		tm, ok := h.Pop()
		require.True(t, ok)
		require.Equal(t, i, tm.Item)
	}
}

// FIFO among equal deadlines must also hold for timers pushed after others were popped
// (the tie-breaker is a global insertion counter, not a position).
func TestTimerHeapFIFOAfterInterleavedPops(t *testing.T) {
	var h sched.TimerHeap[int]
	h.Push(1, 0)
	h.Push(1, 1)
	h.Push(0, 100)
	tm, _ := h.Pop()
	require.Equal(t, 100, tm.Item)
	h.Push(1, 2)
	h.Push(1, 3)
	for i := 0; i < 4; i++ {
		tm, ok := h.Pop()
		require.True(t, ok)
		require.Equal(t, i, tm.Item)
	}
}

func TestTimerHeapPeekDoesNotRemove(t *testing.T) {
	var h sched.TimerHeap[string]
	h.Push(2, "b")
	h.Push(1, "a")
	for i := 0; i < 3; i++ {
		tm, ok := h.Peek()
		require.True(t, ok)
		assert.Equal(t, "a", tm.Item)
		assert.Equal(t, 1.0, tm.When)
		assert.Equal(t, 2, h.Len())
	}
}

func TestTimerHeapFilter(t *testing.T) {
	var h sched.TimerHeap[int]
	for i := 0; i < 100; i++ {
		h.Push(float64(100-i), i) // descending deadlines: worst case for heap order
	}
	var dropped []int
	h.Filter(func(v int) bool { return v%3 != 0 }, func(v int) { dropped = append(dropped, v) })

	// drop is called exactly once for each removed item.
	sort.Ints(dropped)
	var wantDropped []int
	for i := 0; i < 100; i += 3 {
		wantDropped = append(wantDropped, i)
	}
	assert.Equal(t, wantDropped, dropped)
	assert.Equal(t, 100-len(wantDropped), h.Len())

	// Remaining items pop in deadline order.
	prev := -1.0
	n := 0
	for h.Len() > 0 {
		tm, _ := h.Pop()
		assert.NotZero(t, tm.Item%3, "filtered item %d came back", tm.Item)
		assert.Greater(t, tm.When, prev)
		prev = tm.When
		n++
	}
	assert.Equal(t, 100-len(wantDropped), n)
}

func TestTimerHeapFilterEdgeCases(t *testing.T) {
	t.Run("nil drop", func(t *testing.T) {
		var h sched.TimerHeap[int]
		for i := 0; i < 10; i++ {
			h.Push(float64(i), i)
		}
		h.Filter(func(v int) bool { return v >= 5 }, nil)
		assert.Equal(t, 5, h.Len())
		tm, _ := h.Peek()
		assert.Equal(t, 5, tm.Item)
	})
	t.Run("keep all", func(t *testing.T) {
		var h sched.TimerHeap[int]
		for i := 0; i < 10; i++ {
			h.Push(float64(9-i), i)
		}
		h.Filter(func(int) bool { return true }, func(int) { t.Fatal("drop called") })
		got := scPopAll(t, &h)
		require.Len(t, got, 10)
		for i, r := range got {
			assert.Equal(t, float64(i), r.when)
		}
	})
	t.Run("drop all", func(t *testing.T) {
		var h sched.TimerHeap[int]
		for i := 0; i < 10; i++ {
			h.Push(float64(i), i)
		}
		n := 0
		h.Filter(func(int) bool { return false }, func(int) { n++ })
		assert.Equal(t, 10, n)
		assert.Equal(t, 0, h.Len())
		_, ok := h.Peek()
		assert.False(t, ok)
		// Still usable afterwards and FIFO tie-breaking continues.
		h.Push(1, 1)
		h.Push(1, 2)
		tm, _ := h.Pop()
		assert.Equal(t, 1, tm.Item)
	})
	t.Run("keeps FIFO among equal deadlines", func(t *testing.T) {
		var h sched.TimerHeap[int]
		for i := 0; i < 200; i++ {
			h.Push(float64(i%4), i)
		}
		h.Filter(func(v int) bool { return v%5 != 0 }, nil)
		got := scPopAll(t, &h)
		var ref []scRef
		for i := 0; i < 200; i++ {
			if i%5 != 0 {
				ref = append(ref, scRef{when: float64(i % 4), id: i})
			}
		}
		scSortRef(ref)
		assert.Equal(t, ref, got)
	})
}

// Filter must not retain removed items (pointer slots past the new length are cleared).
// Checked indirectly: after dropping everything and pushing again, Pop returns only new
// items and Len is right.
func TestTimerHeapPopAfterFilterShrinks(t *testing.T) {
	var h sched.TimerHeap[*int]
	for i := 0; i < 8; i++ {
		v := i
		h.Push(float64(i), &v)
	}
	h.Filter(func(p *int) bool { return *p < 2 }, nil)
	require.Equal(t, 2, h.Len())
	x := 99
	h.Push(0.5, &x)
	var got []int
	for h.Len() > 0 {
		tm, _ := h.Pop()
		require.NotNil(t, tm.Item)
		got = append(got, *tm.Item)
	}
	assert.Equal(t, []int{0, 99, 1}, got)
}

// 10k random operations (Push with colliding deadlines, Pop, Peek, Filter) checked against
// a sorted reference with the same (When, insertion order) key.
func TestTimerHeapRandomizedAgainstSortedReference(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*7919))
		var h sched.TimerHeap[int]
		var ref []scRef // kept sorted
		id := 0
		for op := 0; op < 10_000; op++ {
			switch k := r.IntN(100); {
			case k < 55: // Push; small integer range so deadlines collide often
				var w float64
				if r.IntN(2) == 0 {
					w = float64(r.IntN(50))
				} else {
					w = r.Float64() * 50
				}
				h.Push(w, id)
				ref = append(ref, scRef{when: w, id: id})
				scSortRef(ref)
				id++
			case k < 85: // Pop
				tm, ok := h.Pop()
				if len(ref) == 0 {
					require.False(t, ok)
					break
				}
				require.True(t, ok)
				require.Equal(t, ref[0], scRef{when: tm.When, id: tm.Item}, "seed %d op %d", seed, op)
				ref = ref[1:]
			case k < 95: // Peek
				tm, ok := h.Peek()
				if len(ref) == 0 {
					require.False(t, ok)
					break
				}
				require.True(t, ok)
				require.Equal(t, ref[0], scRef{when: tm.When, id: tm.Item})
			default: // Filter a random subset
				mod := 2 + r.IntN(5)
				rem := r.IntN(mod)
				dropped := map[int]bool{}
				h.Filter(func(v int) bool { return v%mod != rem }, func(v int) {
					require.False(t, dropped[v], "drop called twice for %d", v)
					dropped[v] = true
				})
				kept := ref[:0:0]
				wantDropped := 0
				for _, e := range ref {
					if e.id%mod != rem {
						kept = append(kept, e)
					} else {
						wantDropped++
						require.True(t, dropped[e.id], "drop not called for %d", e.id)
					}
				}
				require.Len(t, dropped, wantDropped)
				ref = kept
			}
			require.Equal(t, len(ref), h.Len())
		}
		// Drain the rest: full order must match.
		got := scPopAll(t, &h)
		if len(ref) == 0 {
			require.Empty(t, got)
		} else {
			require.Equal(t, ref, got, "seed %d", seed)
		}
	}
}

func TestTimerHeapZeroAllocsSteadyState(t *testing.T) {
	var h sched.TimerHeap[int]
	for i := 0; i < 1024; i++ {
		h.Push(float64(i), i)
	}
	for h.Len() > 0 {
		h.Pop()
	}
	allocs := testing.AllocsPerRun(50, func() {
		for i := 0; i < 512; i++ {
			h.Push(float64(i*7919%512), i)
		}
		for h.Len() > 0 {
			h.Pop()
		}
	})
	assert.Zero(t, allocs)
}

// ---------------------------------------------------------------------------
// Benchmarks
// ---------------------------------------------------------------------------

// Hold model: a heap of 100k timers; each op pops the earliest and pushes a new one a
// random distance in the future.
func BenchmarkTimerHeapPushPop100k(b *testing.B) {
	const n = 100_000
	r := rand.New(rand.NewPCG(3, 4))
	var h sched.TimerHeap[int]
	for i := 0; i < n; i++ {
		h.Push(r.Float64()*1000, i)
	}
	incr := make([]float64, 4096)
	for i := range incr {
		incr[i] = r.Float64() * 1000
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tm, _ := h.Pop()
		h.Push(tm.When+incr[i&4095], tm.Item)
	}
}

// Fill a heap with 100k random timers then pop them all; reported per timer.
func BenchmarkTimerHeapFillDrain100k(b *testing.B) {
	const n = 100_000
	r := rand.New(rand.NewPCG(5, 6))
	whens := make([]float64, n)
	for i := range whens {
		whens[i] = r.Float64() * 1000
	}
	var h sched.TimerHeap[int]
	b.ReportAllocs()
	for b.Loop() {
		for i, w := range whens {
			h.Push(w, i)
		}
		for h.Len() > 0 {
			h.Pop()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/timer")
}

// Filter out ~10% (cancelled) of a 100k heap.
func BenchmarkTimerHeapFilter100k(b *testing.B) {
	const n = 100_000
	r := rand.New(rand.NewPCG(7, 8))
	var h sched.TimerHeap[int]
	for b.Loop() {
		b.StopTimer()
		for h.Len() > 0 {
			h.Pop()
		}
		for i := 0; i < n; i++ {
			h.Push(r.Float64()*1000, i)
		}
		b.StartTimer()
		h.Filter(func(v int) bool { return v%10 != 0 }, nil)
	}
}
