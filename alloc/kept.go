package alloc

import (
	"sync"
	"sync/atomic"
)

// Buffers kept from one solve to the next (issue 23). At exascale size a
// solve fills tens of megabytes of tables and segments; made fresh each
// time, their zeroing and the first touch of their pages cost as much as
// the arithmetic that fills them. A sync.Pool does not keep them: the
// collector empties it within two cycles, and a solve of that size starts
// one or two. So one of each is kept here, handed to one solve at a time
// (a solve running beside it makes its own), with a cap on what is kept.
// Nothing in them outlives the solve that filled them, so the package's
// output stays a function of the Problem alone.

// kept is one buffer of type T kept between solves.
type kept[T any] struct {
	sync.Mutex
	v *T
}

// take returns the kept buffer, or a new one if another solve has it.
func (k *kept[T]) take() *T {
	k.Lock()
	defer k.Unlock()
	v := k.v
	k.v = nil
	if v == nil {
		v = new(T)
	}
	return v
}

// give keeps v unless the one kept already is larger (size).
func (k *kept[T]) give(v *T, size func(*T) int) {
	k.Lock()
	defer k.Unlock()
	if k.v == nil || size(k.v) < size(v) {
		k.v = v
	}
}

// segBuf holds a solve's envelope segments, their running lengths and a
// copy for crossingSlope, for the next solve. Made fresh for every solve,
// their pages (17 MB of segments and lengths at 100 × 10,624, where every
// count is a vertex) cost more than the hull that fills them. It holds
// what the largest recent solve needed, up to segKeepMax segments;
// relaxation.release gives it back.
type segBuf struct {
	segs []seg
	lens []int
	all  []seg // every segment in one slice, for crossingSlope
}

const segKeepMax = 1 << 21 // 32 MB of segments, 16 MB of lengths

var segKept kept[segBuf]

// release gives the segments' buffer back: r's per must no longer be read.
func (r *relaxation) release() {
	if r.buf == nil {
		return
	}
	if cap(r.buf.segs) <= segKeepMax {
		segKept.give(r.buf, func(b *segBuf) int { return cap(b.segs) })
	}
	r.buf, r.per = nil, nil
}

// tableSlab is the storage of a solve's tables of values (10⁶ counts, 8.5
// MB, at 100 × 10,624), kept for the next solve as segBuf is: made fresh,
// their zeroing and first touch of the pages cost a tenth of the solve.
// The one kept is sized to what the last solve that gave it back used, up
// to tableKeepMax values.
type tableSlab struct {
	buf        []float64
	used, need atomic.Int64
}

const tableKeepMax = 1 << 22 // 32 MB

var tablesKept kept[tableSlab]

// takeTableSlab returns the kept slab, emptied, or a new one, of at least
// size values when that is within tableKeepMax: made here, not at the
// first solve's release, its pages are first touched by the solve that
// fills them.
func takeTableSlab(size int) *tableSlab {
	s := tablesKept.take()
	if size > len(s.buf) && size <= tableKeepMax {
		s.buf = make([]float64, size)
	}
	s.used.Store(0)
	s.need.Store(0)
	return s
}

// take returns n values of the slab (not zeroed), or n made if it is full.
func (s *tableSlab) take(n int) []float64 {
	s.need.Add(int64(n))
	if end := s.used.Add(int64(n)); end <= int64(len(s.buf)) {
		return s.buf[end-int64(n) : end : end]
	}
	return make([]float64, n)
}

// release keeps s for the next solve, grown to what this one needed.
func (s *tableSlab) release() {
	if need := s.need.Load(); need > int64(len(s.buf)) {
		if need > tableKeepMax {
			return
		}
		s.buf = make([]float64, need)
	}
	tablesKept.give(s, func(t *tableSlab) int { return len(t.buf) })
}
