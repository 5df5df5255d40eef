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

// sized returns s with length n, s's own array if it holds n, else a new
// one (its contents then undefined to the caller). Not slices.Grow: that
// appends n zeros, and runtime's append clears the new array in one call
// no goroutine switch can interrupt; at 17 MB of segments the collector's
// worker then spun on the other core, signalling, for the whole clear (a
// third of a cold solve's 190 ms at 100 × 10,624). make clears large
// arrays in preemptible chunks, and not at all when their pages come
// fresh from the system.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// zeros returns n zeros in *keep's array, grown (and kept there) if it is
// short.
func zeros(keep *[]float64, n int) []float64 {
	*keep = sized(*keep, n)
	clear(*keep)
	return *keep
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
	// gridPrune's sums and the DP's values (walkDP), up to 1 MB each a
	// solve at exascale size.
	psi, dp []float64
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

// nameSet is Validate's map of node names to their holders ("" free),
// kept for the next call (0.7 MB at 10,624 nodes, made for every solve
// before) up to namesKeepMax names; clear keeps a map's storage.
type nameSet struct {
	m map[string]string
	n int // the names it held
}

const namesKeepMax = 1 << 17

var namesKept kept[nameSet]

// empty returns the map, emptied, made for n names if there is none.
func (s *nameSet) empty(n int) map[string]string {
	if s.m == nil {
		s.m = make(map[string]string, n)
	}
	return s.m
}

// release empties the map and keeps it.
func (s *nameSet) release() {
	s.n = max(s.n, len(s.m))
	if s.n > namesKeepMax {
		return
	}
	clear(s.m)
	namesKept.give(s, func(s *nameSet) int { return s.n })
}

// keysKept keeps the node keys of Place's sort of the released nodes (32
// bytes a node) for the next sort.
var keysKept kept[[]nodeKey]

// modelBuf is an adaptive model's node ages and outlooks (72 bytes a
// node, 0.8 MB at 10,624), kept for the next solve's model up to
// modelKeepMax nodes; adaptiveModel.release gives it back.
type modelBuf struct {
	ages       []float64
	free, held []nodeOutlook
}

const modelKeepMax = 1 << 20

var modelsKept kept[modelBuf]

// release keeps m's arrays for the next model: m must no longer be used.
func (m *adaptiveModel) release() {
	b := m.buf
	if b == nil {
		return
	}
	m.buf = nil
	b.free, b.held = m.freeAdded, m.heldAll
	if size := cap(b.free) + cap(b.held); size <= modelKeepMax {
		modelsKept.give(b, func(b *modelBuf) int { return cap(b.free) + cap(b.held) })
	}
}
