SELECT EXISTS (SELECT 1 FROM radar.label_cover c JOIN radar.label_cover o
ON o.deploy_id = c.deploy_id AND o.target = c.target AND o.dbid = c.dbid AND o.userid = c.userid
AND o.queryid = c.queryid
AND o.toplevel = c.toplevel WHERE c.label_id = :l AND o.label_id <> :l AND o.label = 'intended')
OR EXISTS (SELECT 1 FROM radar.label p JOIN radar.label n ON n.label_id = :l AND n.kind = p.kind
AND n.deploy_id IS NOT DISTINCT FROM p.deploy_id AND n.target IS NOT DISTINCT FROM p.target
AND n.dbid IS NOT DISTINCT FROM p.dbid AND n.userid IS NOT DISTINCT FROM p.userid
AND n.queryid IS NOT DISTINCT FROM p.queryid AND n.toplevel IS NOT DISTINCT FROM p.toplevel
AND n.group_id IS NOT DISTINCT FROM p.group_id AND n.release_id IS NOT DISTINCT FROM p.release_id
AND n.fingerprint IS NOT DISTINCT FROM p.fingerprint WHERE p.label_id < :l AND p.label = 'intended')
