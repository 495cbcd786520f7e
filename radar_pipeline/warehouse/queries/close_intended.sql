UPDATE radar.regression_episode e SET recovered_at = greatest(e.opened_at, i.change_at),
intended_label = l.label_id
FROM radar.intended_verdict i JOIN radar.label l USING (label_id)
WHERE i.label_id = :l AND e.target = i.target AND e.dbid = i.dbid AND e.userid = i.userid
AND e.toplevel = i.toplevel AND e.fingerprint = i.fingerprint AND e.recovered_at IS NULL
AND e.opened_at <= l.created_at
