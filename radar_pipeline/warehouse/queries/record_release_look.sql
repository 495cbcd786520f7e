INSERT INTO radar.release_look (release_id, look, member_deploys, member_analysed_at, kind, status,
opened, detected, cleared, after_span, run_id) VALUES (:r, :l, :m, :a, :kind, 'done', :opened,
:detected, :cleared, :after_span, :run_id) ON CONFLICT (release_id, look) DO UPDATE SET
member_deploys = EXCLUDED.member_deploys, member_analysed_at = EXCLUDED.member_analysed_at,
kind = EXCLUDED.kind, status = 'done', opened = EXCLUDED.opened, detected = EXCLUDED.detected,
cleared = EXCLUDED.cleared, after_span = EXCLUDED.after_span, run_id = EXCLUDED.run_id,
decided_at = now() WHERE radar.release_look.status = 'failed'
