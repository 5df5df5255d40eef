-- Progress counts only what ran: a Trainer's samples are measured (its
-- progress reports, or readings of its progress log) or modelled (the
-- pool's curve over the time it held nodes, when it measured nothing).
-- trainer_progress says which, and gives the measured samples apart;
-- samples_done stays the pool's figure (a measurement, or the model).
DROP VIEW trainer_progress;
CREATE VIEW trainer_progress AS
SELECT id, owner, status, launcher, node_count AS nodes, min_nodes, max_nodes,
       round(done) AS samples_done,
       CASE WHEN coalesce(json_extract(spec, '$.learn.reports'), 0) > 0
              OR coalesce(json_extract(spec, '$.learn.readings'), 0) > 0
            THEN 'measured' ELSE 'modelled' END AS progress,
       round(CASE WHEN coalesce(json_extract(spec, '$.learn.reports'), 0) > 0
                  THEN coalesce(json_extract(spec, '$.learn.report_done'), 0)
                  ELSE coalesce(json_extract(spec, '$.learn.read_done'), 0) END) AS samples_measured,
       samples AS samples_target,
       CASE WHEN samples > 0 THEN round(100.0 * done / samples, 2) END AS pct,
       round(rate, 3) AS samples_per_s,
       round(rescale_loss) AS rescale_loss_samples, rescales,
       round(preempt_loss) AS preempt_loss_samples, preemptions,
       round(node_seconds / 3600.0, 3) AS node_hours,
       submitted, admitted, ended
FROM trainers ORDER BY seq;
