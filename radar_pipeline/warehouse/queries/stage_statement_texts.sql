UPDATE radar_snapshot_stage s SET query = t.query FROM unnest(%(dbid)s::oid[], %(userid)s::oid[],
%(queryid)s::bigint[], %(toplevel)s::boolean[], %(query)s::text[]) AS t(dbid, userid, queryid,
toplevel, query) WHERE (s.dbid, s.userid, s.queryid, s.toplevel) = (t.dbid, t.userid, t.queryid,
t.toplevel)
