-- The Notifier keys (queue ids) on which some Ferry instance has a long
-- poll parked, so that ferry.wake_at_commit NOTIFYs only for them (a
-- notifying commit waits for every other one's fsync; store/doc.go,
-- "# Wakes", has the protocol that loses no wake). A row is one
-- instance's registration of a key, named by the backend pid of that
-- instance's LISTEN connection: made when a poll is about to park on a
-- key the instance has not registered, deleted when no poll has waited on
-- it for a while, and swept by any instance once no backend has that pid
-- (the instance died or reconnected: it registers again). While polls
-- wait nothing is rewritten. UNLOGGED: nothing here must survive a crash
-- or a failover (every instance registers again when its listener
-- reconnects), and a registration writes no WAL, so its commit waits for
-- no fsync.
CREATE UNLOGGED TABLE ferry.wake_waiters (
    key           bigint      NOT NULL,
    listener      integer     NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, listener)
);
