-- The message ring (store/doc.go, # Held snapshots): the partition of a
-- ferry.messages row, and the rotator's steps.
--
-- The ring's shape is written here, once: 16 slots (partitions 0..15;
-- their number is the migration's, 000019), a slot is a window of 5
-- seconds of visible_at, and rows due more than 40 seconds ahead (the
-- horizon) go to FAR (17). COLD (16) takes the rows the rotator forwards
-- out of a slot about to be reused. The width and the horizon may be
-- tuned here (a new generation); the rotator reads them from
-- ferry.ring_shape.

-- The partition of a row due at visible_at, written at the time at: the
-- slot of the window of greatest(visible_at, at), or FAR beyond the
-- horizon. Inlined where it is called (SQL, IMMUTABLE), unless an argument
-- is volatile (the claim's clock_timestamp()): the clock is an argument.
-- Its arithmetic is on UTC timestamps, whose + interval and extract are
-- IMMUTABLE (on timestamptz they are STABLE, and PostgreSQL inlines no
-- IMMUTABLE function whose body is less: it ran as a statement of its own
-- per row, 50,000 in a seek of 50,000 events); the same partitions, for
-- every time zone and infinity.
CREATE OR REPLACE FUNCTION ferry.message_part(visible_at timestamptz, at timestamptz) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT (CASE WHEN ($1 AT TIME ZONE 'UTC') < ($2 AT TIME ZONE 'UTC') + interval '40 seconds'
    THEN (floor(extract(epoch FROM greatest($1, $2) AT TIME ZONE 'UTC') / 5)::bigint % 16) ELSE 17 END)::smallint $$;

-- The ring's shape, for the rotator: slots, the width of a slot's window
-- and the horizon, in seconds (as ferry.message_part uses them).
CREATE OR REPLACE FUNCTION ferry.ring_shape(OUT slots integer, OUT width_s integer, OUT horizon_s integer)
    LANGUAGE sql IMMUTABLE AS
$$ SELECT 16, 5, 40 $$;

-- Rotator, step 1: truncates ring slot p_slot if it holds no live row;
-- reports 'truncated', 'live' (a live row: left) or 'busy' (another
-- transaction still reads or writes the slot, whose locks any statement
-- on ferry.messages takes, and held it past p_wait: left for a later
-- pass). The live row is looked for first without the lock, so a slot in
-- use is not locked at all, then again under it. While the lock is
-- awaited every later statement on ferry.messages queues behind it, so
-- p_wait is kept short (20 ms to 1 s; the rotator lengthens it only
-- while claims are slow, store.RingRotate). Truncating an empty slot
-- loses nothing: what a later statement writes there is written after it.
CREATE OR REPLACE FUNCTION ferry.ring_truncate_within(p_slot integer, p_wait interval) RETURNS text
    LANGUAGE plpgsql AS $$
DECLARE
    v_rel text := format('ferry.messages_%s', lpad(p_slot::text, 2, '0'));
    v_live boolean;
BEGIN
    IF p_slot NOT BETWEEN 0 AND (SELECT slots FROM ferry.ring_shape()) - 1 THEN
        RAISE EXCEPTION 'ring slot % does not exist', p_slot;
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_rel) INTO v_live;
    IF v_live THEN
        RETURN 'live';
    END IF;
    PERFORM set_config('lock_timeout',
        (extract(epoch FROM least(greatest(p_wait, interval '20 milliseconds'), interval '1 second')) * 1000)::int || 'ms', true);
    BEGIN
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_rel);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'busy';
    END;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_rel) INTO v_live;
    IF v_live THEN
        RETURN 'live';
    END IF;
    EXECUTE format('TRUNCATE %s', v_rel);
    RETURN 'truncated';
END $$;
REVOKE ALL ON FUNCTION ferry.ring_truncate_within(integer, interval) FROM PUBLIC;

-- What an older binary calls: the truncation with a wait of 20 ms, and
-- whether it truncated.
CREATE OR REPLACE FUNCTION ferry.ring_truncate(p_slot integer) RETURNS boolean LANGUAGE sql AS $$
    SELECT ferry.ring_truncate_within(p_slot, interval '20 milliseconds') = 'truncated'
$$;
REVOKE ALL ON FUNCTION ferry.ring_truncate(integer) FROM PUBLIC;

-- Rotator, step 2: moves up to p_limit rows of ring slot p_slot due
-- before p_before (the rows of the windows before the one the slot is
-- about to take) to COLD, keeping everything else of them; returns how
-- many it moved. Newest first: the oldest are a backlog's head, which
-- claims are taking meanwhile, and a claim that meets a row moved under
-- it fails (40001) and runs again; behind a held snapshot, consumers
-- that had fallen behind met it on every run and a receive gave up. Rows another transaction holds are skipped (SKIP
-- LOCKED), and so are rows of a group whose lock another transaction
-- holds (tried, never awaited: that transaction may be promoting in the
-- group, and would meet its row moved): a later pass takes them.
CREATE OR REPLACE FUNCTION ferry.ring_forward(p_slot integer, p_before timestamptz, p_limit integer) RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    WITH /* ferry:ring_forward */ c AS MATERIALIZED (
        SELECT m.ctid, m.queue_id, m.grp FROM ferry.messages m
        WHERE m.part = p_slot AND m.visible_at < p_before
        ORDER BY m.visible_at DESC
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    ok AS MATERIALIZED (
        SELECT c.ctid FROM c WHERE c.grp IS NULL OR pg_try_advisory_xact_lock(ferry.group_lock_key(c.queue_id, c.grp))
    ),
    moved AS (
        UPDATE ferry.messages m SET part = 16 FROM ok WHERE m.part = p_slot AND m.ctid = ok.ctid
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM moved;
    RETURN v_n;
END $$;
REVOKE ALL ON FUNCTION ferry.ring_forward(integer, timestamptz, integer) FROM PUBLIC;

-- Rotator, step 3: moves up to p_limit rows of FAR due before p_until
-- (the horizon less a window from now) into their ring slot, oldest
-- first, with the same skips as ring_forward; returns how many it moved.
CREATE OR REPLACE FUNCTION ferry.ring_sweep(p_until timestamptz, p_limit integer) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
    v_at timestamptz := clock_timestamp();
BEGIN
    WITH /* ferry:ring_sweep */ c AS MATERIALIZED (
        SELECT m.ctid, m.queue_id, m.grp FROM ferry.messages m
        WHERE m.part = 17 AND m.visible_at < p_until
        ORDER BY m.visible_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    ok AS MATERIALIZED (
        SELECT c.ctid FROM c WHERE c.grp IS NULL OR pg_try_advisory_xact_lock(ferry.group_lock_key(c.queue_id, c.grp))
    ),
    moved AS (
        UPDATE ferry.messages m SET part = ferry.message_part(m.visible_at, v_at)
        FROM ok WHERE m.part = 17 AND m.ctid = ok.ctid
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM moved;
    RETURN v_n;
END $$;
REVOKE ALL ON FUNCTION ferry.ring_sweep(timestamptz, integer) FROM PUBLIC;
