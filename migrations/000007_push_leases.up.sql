-- Push leases (jobs/push.go): the Ferry instance that delivers a push
-- target holds its lease, renewed by a heartbeat every second or so while
-- it delivers, and deleted when it stops. A lease that has expired may be
-- taken over by any instance: an instance killed with its targets is
-- replaced within seconds, and a target is never delivered by two
-- instances at once (its max_in_flight, rate limit and ordered delivery
-- hold across the cluster). owner is the holding instance's id, made at
-- its start.
CREATE TABLE ferry.push_leases (
    queue_id   bigint      PRIMARY KEY REFERENCES ferry.queues (id) ON DELETE CASCADE,
    owner      uuid        NOT NULL,
    expires_at timestamptz NOT NULL
) WITH (fillfactor = 50); -- every heartbeat rewrites each row: keep it HOT

-- Push was delivered by River jobs before (kinds ferry_push and
-- ferry_push_sweep); this version registers no worker for them, and River
-- would fail every leftover row of an unknown kind again and again. On a
-- new database River's tables are made after this migration (they do not
-- exist yet here).
DO $$
BEGIN
    IF to_regclass('river_job') IS NOT NULL THEN
        DELETE FROM river_job WHERE kind IN ('ferry_push', 'ferry_push_sweep');
    END IF;
END
$$;
