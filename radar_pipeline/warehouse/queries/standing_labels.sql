SELECT target, dbid, userid, queryid, toplevel, label, labelled_by, note, fixed_by FROM (
  SELECT DISTINCT ON (c.target, c.dbid, c.userid, c.queryid, c.toplevel) 1 AS rank,
  c.target, c.dbid, c.userid, c.queryid, c.toplevel, l.label, l.labelled_by, l.note,
  l.fixed_by FROM radar.label_cover c JOIN radar.label l USING (label_id) WHERE c.deploy_id = :d
  ORDER BY c.target, c.dbid, c.userid, c.queryid, c.toplevel, c.created_at DESC, c.label_id DESC
) own UNION ALL
SELECT c.target, c.dbid, c.userid, c.queryid, c.toplevel, l.label, l.labelled_by, l.note, l.fixed_by
FROM radar.regression_episode c
JOIN radar.label l ON l.label_id = c.intended_label WHERE c.opened_by = :d
