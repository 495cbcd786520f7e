UPDATE radar.verdict v SET group_regressed = CASE WHEN v.group_regressed IS NULL
THEN 'in a group that regressed: ' || :s ELSE v.group_regressed || '; ' || :s END
FROM unnest(CAST(:dbid AS oid[]), CAST(:userid AS oid[]), CAST(:queryid AS bigint[]),
CAST(:toplevel AS boolean[])) AS m (dbid, userid, queryid, toplevel)
WHERE v.deploy_id = :d AND v.target = :t AND v.dbid = m.dbid AND v.userid = m.userid
AND v.queryid = m.queryid AND v.toplevel = m.toplevel
AND strpos(coalesce(v.group_regressed, ''), :s) = 0
