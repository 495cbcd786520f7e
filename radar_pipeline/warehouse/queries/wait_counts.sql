WITH k AS (SELECT * FROM unnest(CAST(:row AS int[]), CAST(:dbid AS oid[]), CAST(:userid AS oid[]),
CAST(:queryid AS bigint[]), CAST(:split AS timestamptz[])) AS k(row, dbid, userid, queryid, split)),
caps AS (SELECT k.row, c.captured_at > k.split AS after, count(*) AS captures FROM k
JOIN radar.wait_capture c ON c.target = :t AND c.captured_at > :lo AND c.captured_at <= :hi
GROUP BY 1, 2),
seen AS (SELECT k.row, s.captured_at > k.split AS after, s.wait_event_type,
mode() WITHIN GROUP (ORDER BY s.wait_event) AS wait_event, count(DISTINCT s.captured_at) AS seen,
sum(s.sessions) AS sessions,
mode() WITHIN GROUP (ORDER BY s.blocker_queryid) AS blocker_queryid,
mode() WITHIN GROUP (ORDER BY s.blocker_userid) AS blocker_userid FROM k
JOIN radar.wait_sample s ON s.target = :t AND s.dbid = k.dbid AND s.userid = k.userid
AND s.queryid = k.queryid AND s.captured_at > :lo AND s.captured_at <= :hi
WHERE s.wait_event_type IS NOT NULL GROUP BY 1, 2, 3)
SELECT seen.row, seen.after, seen.wait_event_type, seen.wait_event, seen.seen, seen.sessions,
caps.captures, seen.blocker_queryid, seen.blocker_userid FROM seen JOIN caps USING (row, after)
ORDER BY 1, 2, 3
