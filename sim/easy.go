package sim

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"time"
)

// EASYStats counts what the EASY re-simulation did and how the schedule performed.
type EASYStats struct {
	Jobs                int           // jobs scheduled
	TooLarge            int           // jobs left out: they ask for more nodes than the machine has
	ZeroLength          int           // scheduled jobs with run time 0 (they hold no node)
	NoEstimate          int           // jobs without a requested time: their run time was the estimate
	Overran             int           // jobs whose run time exceeds their requested time
	Backfilled          int           // jobs started by backfill, ahead of the queue head
	MeanWait            time.Duration // mean of start − submit
	MaxWait             time.Duration // largest start − submit
	MeanBoundedSlowdown float64       // mean of max(1, (wait + run) / max(run, 10 s))
	BusyNodeHours       float64       // node-hours held by jobs
	Utilisation         float64       // BusyNodeHours / (nodes × trace span)
}

// bslThreshold is the usual 10 s floor of the bounded slowdown.
const bslThreshold = 10

// EASYTrace re-schedules the log's jobs on a machine of the given size with FCFS and EASY
// backfilling, from their submit times, requested nodes (allocated ones when unknown) and
// requested wall times, and returns the idle-node trace of that schedule (nodes assigned
// and the trace built exactly as in SWFLog.Recorded, starting at the first submit with
// an empty machine).
//
// Jobs run their recorded run time, not their request: the scheduler plans with the
// request, the job holds its nodes until it really ends, sooner or later. The rules:
//   - the queue is in submit order (ties: file order); jobs asking for more nodes than
//     the machine are left out and counted; a job with no requested time (-1 or 0) uses
//     its run time as the request;
//   - a scheduling pass runs at every instant where a job is submitted or ends, after all
//     ends and submits of that instant: start queue heads in order while they fit; then
//     compute the head's reservation and backfill the rest of the queue in order: a job
//     starts if it fits in the free nodes now and either its request ends by the
//     reservation's shadow time, or it needs no more than the extra nodes (the nodes left
//     over at the shadow time beyond the head's need, which it then uses up);
//   - the reservation is never stored: every pass recomputes it from the running jobs'
//     expected ends, start + request, walked in that order until the head fits. A job that
//     has outrun its request is expected to end now (its expected end is clamped to the
//     current time): the head's shadow time is then now, so only jobs that fit in the
//     extra nodes backfill, and none can take nodes the head is waiting for. The head is
//     thus never delayed by a backfill decision made at the current instant; it can still
//     be delayed by jobs (backfilled or not) that outrun their requests, as on a real
//     machine that does not kill them.
//
// Every pass is O(running + queue) with early exits, running jobs are kept sorted by
// expected end, so a year of Theta re-simulates in well under a second.
func (l *SWFLog) EASYTrace(nodes int) (*Trace, EASYStats, error) {
	return l.easyTrace(nodes, 0, 0)
}

// easyTrace is EASYTrace, with the plan recorded when planScale > 0, for
// the head and up to depth−1 queued jobs after it.
func (l *SWFLog) easyTrace(nodes int, planScale float64, depth int) (*Trace, EASYStats, error) {
	s, st, err := l.easySchedule(nodes, planScale, depth)
	if err != nil {
		return nil, st, fmt.Errorf("easy trace: %w", err)
	}
	var spans []jobSpan
	var of []int32 // span → job
	for k, j := range s.jobs {
		if j.run > 0 {
			spans = append(spans, jobSpan{start: j.start, end: j.start + j.run, nodes: j.size, submit: j.submit, order: j.order})
			of = append(of, int32(k))
		}
	}
	var starts []TraceStart
	var onStart func(int32, []int32)
	if planScale > 0 {
		onStart = func(sp int32, ns []int32) {
			j := &s.jobs[of[sp]]
			ts := TraceStart{At: l.Time(j.start), Nodes: ns, How: j.how}
			if j.how == StartAsHead && j.planned > 0 {
				ts.Planned = l.Time(j.planned)
			}
			starts = append(starts, ts)
		}
	}
	t, bs := buildSpanTrace(l, s.jobs[0].submit, nodes, spans, s.plans, onStart)
	t.Starts = starts
	st.BusyNodeHours = bs.busyNodeSeconds / 3600
	st.Utilisation = bs.utilisation(nodes)
	if bs.truncated > 0 {
		// The scheduler never over-commits; this would be a bug in easySim.
		return nil, st, fmt.Errorf("easy trace: %d jobs over-committed", bs.truncated)
	}
	t.Source = fmt.Sprintf("swf easy re-simulation (%d jobs, %d nodes, %d events)", st.Jobs, nodes, len(t.Events))
	return t, st, nil
}

// easySchedule runs the re-simulation and returns the scheduler, whose jobs (sorted by
// submit, each with its start and its position in the log) are the schedule.
func (l *SWFLog) easySchedule(nodes int, planScale float64, depth int) (*easySim, EASYStats, error) {
	var st EASYStats
	if nodes <= 0 || nodes > maxTraceNodes {
		return nil, st, fmt.Errorf("node count %d out of range", nodes)
	}
	s := &easySim{free: nodes, planScale: planScale, planDepth: depth}
	for i, j := range l.Jobs {
		size := j.ReqNodes
		if size <= 0 {
			size = j.Nodes
		}
		if size > nodes {
			st.TooLarge++
			continue
		}
		req := j.ReqTime
		if req <= 0 {
			req = j.Run
			st.NoEstimate++
		}
		if j.Run > req {
			st.Overran++
		}
		s.jobs = append(s.jobs, easyJob{size: size, submit: j.Submit, req: req, run: j.Run, order: i, start: -1})
	}
	if len(s.jobs) == 0 {
		return nil, st, fmt.Errorf("no job fits %d nodes", nodes)
	}
	slices.SortStableFunc(s.jobs, func(a, b easyJob) int { return cmp.Compare(a.submit, b.submit) })
	s.run()

	var wait, bsld float64
	for _, j := range s.jobs {
		w := j.start - j.submit
		wait += float64(w)
		st.MaxWait = max(st.MaxWait, time.Duration(w)*time.Second)
		bsld += math.Max(1, float64(w+j.run)/float64(max(j.run, bslThreshold)))
		if j.run == 0 {
			st.ZeroLength++
		}
	}
	st.Jobs = len(s.jobs)
	st.Backfilled = s.backfilled
	st.MeanWait = time.Duration(wait / float64(st.Jobs) * float64(time.Second))
	st.MeanBoundedSlowdown = bsld / float64(st.Jobs)
	return s, st, nil
}

// easyJob is one job of the re-simulation; times in seconds from the log's origin.
type easyJob struct {
	size             int
	submit, req, run int64
	order            int   // position in the log
	start            int64 // -1 until started
	estEnd, end      int64 // start + req, start + run
	how              StartKind
	planned          int64 // the head's shadow time at the last pass that planned it with nodes free (0: none)
}

// easySim is the FCFS + EASY event loop. Indices are into jobs (sorted by submit).
type easySim struct {
	jobs       []easyJob
	free       int
	queue      []int32
	running    []int32 // sorted by (estEnd, index)
	ends       endHeap
	backfilled int
	planScale  float64    // > 0: record the head's reservation after each pass
	plans      []easyPlan // by time
	prevHead   int32      // the queue's head after the previous pass, -1 if none
	planDepth  int        // queued jobs planned: 1 the head only, more a backfill pass's plan
}

func (s *easySim) run() {
	s.ends.jobs = s.jobs
	s.prevHead = -1
	next := 0
	for next < len(s.jobs) || s.ends.Len() > 0 {
		now := int64(math.MaxInt64)
		if next < len(s.jobs) {
			now = s.jobs[next].submit
		}
		if s.ends.Len() > 0 {
			now = min(now, s.jobs[s.ends.idx[0]].end)
		}
		for s.ends.Len() > 0 && s.jobs[s.ends.idx[0]].end == now {
			k := heap.Pop(&s.ends).(int32)
			s.free += s.jobs[k].size
			s.removeRunning(k)
		}
		for next < len(s.jobs) && s.jobs[next].submit == now {
			s.queue = append(s.queue, int32(next))
			next++
		}
		s.schedule(now)
		if s.planScale > 0 {
			s.recordPlan(now)
		}
		s.prevHead = -1
		if len(s.queue) > 0 {
			s.prevHead = s.queue[0]
		}
	}
}

// schedule is one pass: FCFS starts, then EASY backfill around the head's reservation.
func (s *easySim) schedule(now int64) {
	for len(s.queue) > 0 && s.jobs[s.queue[0]].size <= s.free {
		k, how := s.queue[0], StartBehindHead
		if k == s.prevHead {
			how = StartAsHead
		}
		s.start(k, now, cmp.Or(s.atSubmit(k, now), how))
		s.queue = s.queue[1:]
	}
	if len(s.queue) < 2 || s.free == 0 {
		return
	}
	shadow, extra := s.reservation(now, s.jobs[s.queue[0]].size)
	kept := s.queue[:1]
	for i := 1; i < len(s.queue); i++ {
		if s.free == 0 {
			kept = append(kept, s.queue[i:]...)
			break
		}
		k := s.queue[i]
		j := &s.jobs[k]
		endsInTime := now+j.req <= shadow
		if j.size <= s.free && (endsInTime || j.size <= extra) {
			if !endsInTime {
				extra -= j.size
			}
			s.start(k, now, cmp.Or(s.atSubmit(k, now), StartBackfill))
			s.backfilled++
			continue
		}
		kept = append(kept, k)
	}
	s.queue = kept
}

// reservation returns the head's shadow time (when enough nodes are expected free for
// it) and the extra nodes free then beyond its need. Expected ends in the past (jobs
// that outran their request) count as now.
func (s *easySim) reservation(now int64, need int) (shadow int64, extra int) {
	avail := s.free
	for _, k := range s.running {
		avail += s.jobs[k].size
		if avail >= need {
			return max(s.jobs[k].estEnd, now), avail - need
		}
	}
	// Unreachable: need ≤ machine size, and all nodes are free or running.
	return math.MaxInt64, 0
}

// atSubmit is StartAtSubmit for a job submitted at now (it started in the
// pass of its submit), else 0.
func (s *easySim) atSubmit(k int32, now int64) StartKind {
	if s.jobs[k].submit == now {
		return StartAtSubmit
	}
	return 0
}

func (s *easySim) start(k int32, now int64, how StartKind) {
	j := &s.jobs[k]
	j.start, j.estEnd, j.end, j.how = now, now+j.req, now+j.run, how
	s.free -= j.size
	i, _ := slices.BinarySearchFunc(s.running, k, s.runningCmp)
	s.running = slices.Insert(s.running, i, k)
	heap.Push(&s.ends, k)
}

func (s *easySim) removeRunning(k int32) {
	if i, ok := slices.BinarySearchFunc(s.running, k, s.runningCmp); ok {
		s.running = slices.Delete(s.running, i, i+1)
	}
}

func (s *easySim) runningCmp(a, b int32) int {
	return cmp.Or(cmp.Compare(s.jobs[a].estEnd, s.jobs[b].estEnd), cmp.Compare(a, b))
}

// endHeap orders running jobs by actual end, then index.
type endHeap struct {
	jobs []easyJob
	idx  []int32
}

func (h *endHeap) Len() int { return len(h.idx) }
func (h *endHeap) Less(a, b int) bool {
	x, y := h.idx[a], h.idx[b]
	return cmp.Or(cmp.Compare(h.jobs[x].end, h.jobs[y].end), cmp.Compare(x, y)) < 0
}
func (h *endHeap) Swap(a, b int) { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *endHeap) Push(x any)    { h.idx = append(h.idx, x.(int32)) }
func (h *endHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}
