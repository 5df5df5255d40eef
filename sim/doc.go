// Package sim replays idle-node traces of a supercomputer with a workload of elastic
// Trainers, to measure what the idle pool would yield with the same pool and alloc code that
// runs live.
//
// The input side of the package reads and makes what a replay consumes:
//   - a [Trace], the history of which nodes are idle ([OpenTrace]): read from the Summit
//     node-state CSV, derived from a Standard Workload Format job log (its recorded
//     schedule, [SWFLog.RecordedTrace], or an FCFS + EASY-backfill re-simulation,
//     [SWFLog.EASYTrace]), or generated from a fitted model ([GenerateTrace]);
//   - a workload of [Job]s: read from the paper's CSV ([ReadWorkload]), or built in
//     ([DefaultWorkload]); the tests also draw them from the Philly trace.
//
// [Inputs] is the replay policy every caller shares (bftrainer replay, which only maps
// its flags to it, and the bench): which trace and workload when none is given, the
// event a replay starts at ([StartEvent]) and the window there; [Inputs.Resolve] gives
// a [Resolved], whose [Resolved.Replay] runs it (writing its files in a directory) and
// whose [Resolved.Warnings] say what the inputs could not line up.
//
// The replay side drives the pool and alloc packages over a trace and a workload in
// memory ([Replay]), with bftrainer's semantics or the reference replayer's
// ([Options.Semantics]), and reports what the pool yields: a [Summary] (makespan, job
// completion time, efficiency, utilisation, losses, solver time), per-Trainer results,
// the per-event step log (its columns are documented in output.go) and a timeline drawn as SVG
// ([WriteTimelineSVG]). docs/replay.md defines the metrics and compares them with the
// reference.
//
// Everything here is deterministic: the same input (and seed) gives the same trace,
// workload or replay (its timings aside).
package sim
