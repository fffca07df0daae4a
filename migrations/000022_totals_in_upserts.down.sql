CREATE OR REPLACE FUNCTION ferry.queue_counts_totals() RETURNS trigger LANGUAGE plpgsql AS $$
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

DROP TRIGGER IF EXISTS queue_counts_totals ON ferry.queue_counts;
CREATE TRIGGER queue_counts_totals BEFORE INSERT OR UPDATE ON ferry.queue_counts
    FOR EACH ROW EXECUTE FUNCTION ferry.queue_counts_totals();
