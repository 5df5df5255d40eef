-- bftrainer history and state. Read it with plain sqlite3; docs/history.md
-- documents every table and view.

-- Append-only history: every hook call, every node and Trainer change,
-- every solve, every action and every swallowed error. Rows are never
-- updated or deleted by bftrainer.
CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    at         TEXT    NOT NULL,            -- UTC, 2006-01-02T15:04:05.000000Z
    kind       TEXT    NOT NULL,            -- see docs/history.md
    source     TEXT    NOT NULL DEFAULT '', -- slurm, lsf, pbs, cli, reconciler, trainer
    context    TEXT    NOT NULL DEFAULT '', -- hook context (prolog_slurmctld, ...) or command
    job        TEXT    NOT NULL DEFAULT '', -- the scheduler's job id
    trainer    TEXT    NOT NULL DEFAULT '',
    user       TEXT    NOT NULL DEFAULT '', -- Unix user the request came from
    nodes      TEXT    NOT NULL DEFAULT '', -- space-separated node names
    node_count INTEGER NOT NULL DEFAULT 0,
    value      REAL,                        -- samples (progress, losses), objective (solve)
    ms         REAL,                        -- wall time of the hook, solve or action
    detail     TEXT    NOT NULL DEFAULT '', -- JSON
    error      TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX events_kind_at ON events (kind, at);
CREATE INDEX events_at ON events (at);
CREATE INDEX events_trainer ON events (trainer) WHERE trainer <> '';
CREATE INDEX events_job ON events (job) WHERE job <> '';

-- Current state, written only by the reconciler (one at a time).
CREATE TABLE nodes (
    name    TEXT PRIMARY KEY,
    state   TEXT NOT NULL,             -- idle, busy, pending
    since   TEXT NOT NULL,             -- when it entered that state
    ord     INTEGER NOT NULL DEFAULT 0,
    job     TEXT NOT NULL DEFAULT '',  -- job holding it (busy) or that released it (pending)
    trainer TEXT NOT NULL DEFAULT ''   -- Trainer running on it (idle)
) WITHOUT ROWID;

CREATE TABLE trainers (
    id           TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    status       TEXT NOT NULL,          -- queued, running, finished, cancelled, failed
    launcher     TEXT NOT NULL DEFAULT '',
    min_nodes    INTEGER NOT NULL,
    max_nodes    INTEGER NOT NULL,
    samples      REAL NOT NULL,          -- target; 0 = until it exits
    done         REAL NOT NULL DEFAULT 0,
    rate         REAL NOT NULL DEFAULT 0, -- samples/s now
    node_count   INTEGER NOT NULL DEFAULT 0,
    rescale_loss REAL NOT NULL DEFAULT 0,
    preempt_loss REAL NOT NULL DEFAULT 0,
    rescales     INTEGER NOT NULL DEFAULT 0,
    preemptions  INTEGER NOT NULL DEFAULT 0,
    node_seconds REAL NOT NULL DEFAULT 0,
    pending_cost REAL NOT NULL DEFAULT 0,
    submitted    TEXT NOT NULL,
    admitted     TEXT NOT NULL DEFAULT '',
    ended        TEXT NOT NULL DEFAULT '',
    seq          INTEGER NOT NULL,       -- admission / submission order
    spec         TEXT NOT NULL           -- JSON: curve, weight, costs, launch
) WITHOUT ROWID;

CREATE TABLE allocations (
    trainer TEXT NOT NULL REFERENCES trainers (id),
    node    TEXT NOT NULL REFERENCES nodes (name),
    pos     INTEGER NOT NULL,            -- order the Trainer took it
    PRIMARY KEY (node)
) WITHOUT ROWID;
CREATE INDEX allocations_trainer ON allocations (trainer, pos);

-- Small key/value state: the last event folded into the pool, the pool's
-- clock and counters.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- Node-seconds offered and used, per UTC day.
CREATE TABLE usage (
    day               TEXT PRIMARY KEY, -- YYYY-MM-DD
    idle_node_seconds REAL NOT NULL DEFAULT 0,
    used_node_seconds REAL NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE VIEW node_hours_daily AS
SELECT day,
       round(idle_node_seconds / 3600.0, 3) AS idle_node_hours,
       round(used_node_seconds / 3600.0, 3) AS used_node_hours,
       CASE WHEN idle_node_seconds > 0
            THEN round(used_node_seconds / idle_node_seconds, 4) END AS utilisation
FROM usage ORDER BY day;

CREATE VIEW trainer_progress AS
SELECT id, owner, status, launcher, node_count AS nodes, min_nodes, max_nodes,
       round(done) AS samples_done, samples AS samples_target,
       CASE WHEN samples > 0 THEN round(100.0 * done / samples, 2) END AS pct,
       round(rate, 3) AS samples_per_s,
       round(rescale_loss) AS rescale_loss_samples, rescales,
       round(preempt_loss) AS preempt_loss_samples, preemptions,
       round(node_seconds / 3600.0, 3) AS node_hours,
       submitted, admitted, ended
FROM trainers ORDER BY seq;

CREATE VIEW reclaims_per_job AS
SELECT job,
       min(at) AS first_at,
       sum(CASE WHEN kind = 'leave' THEN node_count ELSE 0 END) AS idle_nodes_taken,
       sum(CASE WHEN kind = 'preempt' THEN 1 ELSE 0 END) AS trainers_preempted,
       sum(CASE WHEN kind = 'preempt' THEN node_count ELSE 0 END) AS trainer_nodes_taken,
       round(sum(CASE WHEN kind = 'preempt' THEN value ELSE 0 END)) AS samples_lost
FROM events
WHERE job <> '' AND kind IN ('leave', 'preempt')
GROUP BY job;

CREATE VIEW solve_latency AS
SELECT id, at, json_extract(nullif(detail, ''), '$.solver') AS solver,
       json_extract(nullif(detail, ''), '$.trainers') AS trainers, node_count AS nodes,
       ms, value AS objective, json_extract(nullif(detail, ''), '$.status') AS status
FROM events WHERE kind = 'solve';

CREATE VIEW solve_latency_daily AS
SELECT substr(at, 1, 10) AS day, json_extract(nullif(detail, ''), '$.solver') AS solver,
       count(*) AS solves, round(avg(ms), 3) AS mean_ms, round(max(ms), 3) AS max_ms
FROM events WHERE kind = 'solve' GROUP BY day, solver;

CREATE VIEW hook_calls AS
SELECT id, at, source AS scheduler, context, job, node_count AS nodes, ms, error
FROM events WHERE kind = 'hook';

CREATE VIEW errors AS
SELECT id, at, kind, source, context, job, trainer, error
FROM events WHERE error <> '';
