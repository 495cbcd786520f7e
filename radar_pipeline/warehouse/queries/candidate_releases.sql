WITH last AS (SELECT DISTINCT ON (release_id) release_id, look, member_deploys, member_analysed_at,
decided_at FROM radar.release_look WHERE status = 'done' ORDER BY release_id, look DESC),
taken AS (SELECT release_id, max(look) AS taken FROM radar.release_look GROUP BY release_id)
SELECT l.release_id, t.taken AS looks_taken, l.look, l.member_deploys, l.member_analysed_at
FROM last l JOIN taken t USING (release_id) WHERE t.taken < :last AND l.decided_at >= :since
AND EXISTS (SELECT 1 FROM radar.release_verdict v WHERE v.release_id = l.release_id
AND v.status = 'final' AND v.verdict = 'inconclusive' AND v.family_weight > 0)
ORDER BY l.decided_at, l.release_id LIMIT :limit
