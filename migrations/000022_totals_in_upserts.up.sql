-- The counter upserts (ferry.messages_counted, ferry.dead_letters_counted,
-- ferry.at_commit_apply, definitions generation 8) add to the totals of
-- migration 000020 themselves, in the statement that writes the row: the
-- row trigger that did it costs every send a trigger call more. (While
-- both ran, the trigger set the same values.)
DROP TRIGGER queue_counts_totals ON ferry.queue_counts;
DROP FUNCTION ferry.queue_counts_totals();
