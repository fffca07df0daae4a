-- The console's charts (handlers/console): a sample a minute of each queue
-- or subscription, and of each consumer group, that had traffic through a
-- Ferry instance in that minute. Written only then (an idle broker writes
-- none, DESIGN.md invariant 12); every instance adds its own counts to the
-- minute's row, so the history is whole behind a load balancer. Rows older
-- than two hours are removed by the next sample of the same target; a
-- target's rows go with it.
CREATE TABLE ferry.queue_samples (
    queue_id     bigint      NOT NULL REFERENCES ferry.queues (id) ON DELETE CASCADE,
    minute       timestamptz NOT NULL,
    depth        bigint      NOT NULL,
    dead_letters bigint      NOT NULL,
    sent         bigint      NOT NULL DEFAULT 0,
    acked        bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, minute)
);

CREATE TABLE ferry.group_samples (
    group_id bigint      NOT NULL REFERENCES ferry.consumer_groups (id) ON DELETE CASCADE,
    minute   timestamptz NOT NULL,
    lag      bigint      NOT NULL,
    PRIMARY KEY (group_id, minute)
);
