-- Cumulative totals for the console's rates (handlers/console, store
-- console_history.go). The depth counters (ferry.queue_counts, kept by the
-- statement-level triggers of ferry.messages and ferry.dead_letters, which
-- every face fires: REST, the SQL API, SQS, push, retention) say how many
-- messages a queue holds, not how many came and went: a queue sent and
-- acked 1,000 a minute keeps its depth. So each counter row also adds up
-- what came in: added (every increase of messages: sends, fan-out,
-- redrives, moves in) and dead_lettered (every increase of dead_letters).
-- What left is added minus the change of depth. A BEFORE ROW trigger sets
-- them on the row the counter statement writes anyway: no other row, no
-- other lock, no other statement on the hot path. (A SQL API transaction
-- applies its net change per queue at commit, ferry.at_commit_apply, so
-- a send and a removal of one queue in one application transaction
-- cancel out in added.)
ALTER TABLE ferry.queue_counts
    ADD COLUMN added         bigint NOT NULL DEFAULT 0,
    ADD COLUMN dead_lettered bigint NOT NULL DEFAULT 0;

CREATE FUNCTION ferry.queue_counts_totals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.added := greatest(NEW.messages, 0);
        NEW.dead_lettered := greatest(NEW.dead_letters, 0);
    ELSE
        NEW.added := OLD.added + greatest(NEW.messages - OLD.messages, 0);
        NEW.dead_lettered := OLD.dead_lettered + greatest(NEW.dead_letters - OLD.dead_letters, 0);
    END IF;
    RETURN NEW;
END $$;
REVOKE ALL ON FUNCTION ferry.queue_counts_totals() FROM PUBLIC;

CREATE TRIGGER queue_counts_totals BEFORE INSERT OR UPDATE ON ferry.queue_counts
    FOR EACH ROW EXECUTE FUNCTION ferry.queue_counts_totals();

-- A sample holds the totals read when it was taken; a minute's rate is
-- the difference from the sample before it. NULL in a row written by an
-- older binary (which adds its own per-minute counts to sent and acked).
ALTER TABLE ferry.queue_samples
    ADD COLUMN added         bigint,
    ADD COLUMN dead_lettered bigint;

-- A topic's events published so far (the sum of its partitions' next
-- offsets) when sampled: the topic page's publish rate.
CREATE TABLE ferry.topic_samples (
    topic_id  bigint      NOT NULL REFERENCES ferry.topics (id) ON DELETE CASCADE,
    minute    timestamptz NOT NULL,
    published bigint      NOT NULL,
    PRIMARY KEY (topic_id, minute)
);
