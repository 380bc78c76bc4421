package idtable

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAddGetDelReusesIDs(t *testing.T) {
	var tb Table[int]
	a, b := 1, 2
	ida, live := tb.Add(&a)
	require.Equal(t, 0, ida)
	require.Equal(t, 1, live)
	idb, live := tb.Add(&b)
	require.Equal(t, 1, idb)
	require.Equal(t, 2, live)
	require.Same(t, &a, tb.Get(ida))
	require.Same(t, &b, tb.Get(idb))

	tb.Del(ida)
	require.Nil(t, tb.Get(ida))
	tb.Del(ida) // a second Del of the same id changes nothing
	c := 3
	idc, live := tb.Add(&c)
	require.Equal(t, ida, idc, "a freed id is reused (free list), not a new one")
	require.Equal(t, 2, live)
	require.Same(t, &c, tb.Get(idc))
}

func TestGetOutOfRange(t *testing.T) {
	var tb Table[int]
	require.Nil(t, tb.Get(0))
	require.Nil(t, tb.Get(-1))
	x := 1
	tb.Add(&x)
	require.Nil(t, tb.Get(tableSize*3))
	tb.Del(-1)
	tb.Del(tableSize * 5)
}

func TestGrowsAcrossChunksAndKeepsEntries(t *testing.T) {
	var tb Table[int]
	vals := make([]int, 3*tableSize+7)
	ids := make([]int, len(vals))
	for i := range vals {
		vals[i] = i
		ids[i], _ = tb.Add(&vals[i])
	}
	for i, id := range ids {
		require.Equal(t, i, id)
		require.Equal(t, i, *tb.Get(id))
	}
}

// Lookups take no lock while other goroutines add and drop entries (the free-threaded
// case: loops in several threads); run with -race to check it.
func TestConcurrentAddGetDel(t *testing.T) {
	var tb Table[int]
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			mine := make([]int, 0, 500)
			vals := make([]int, 500)
			for i := range vals {
				vals[i] = g*1000 + i
				id, _ := tb.Add(&vals[i])
				mine = append(mine, id)
			}
			for i, id := range mine {
				require.Equal(t, g*1000+i, *tb.Get(id))
			}
			for _, id := range mine {
				tb.Del(id)
			}
		}(g)
	}
	wg.Wait()
	x := 0
	_, live := tb.Add(&x)
	require.Equal(t, 1, live)
}
