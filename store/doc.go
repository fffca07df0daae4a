// Package store is the broker: every SQL statement Ferry runs and every
// transaction it opens lives here, the statements of the schema's
// functions in its definitions (store/definitions, see # Definitions).
// Handlers and jobs call it; it imports neither.
//
// # Messages and leases
//
// A live message is a row of ferry.messages. A receive claims up to N
// visible rows (visible_at <= now(), not waiting) with FOR UPDATE SKIP
// LOCKED, in (visible_at, id) order, and in the same statement moves
// visible_at to now() + the visibility timeout, increments receive_count and
// sets a fresh random claim_token. The receipt handed to the consumer encodes
// (message id, claim_token). When the lease expires the row is simply visible
// again: no sweeper is needed for redelivery. Above its 53 random bits a
// token names the partition the claim put the row in and whether the
// message has a group (ferry.claim_token): a receipt's row is one probe of
// one partition, not one per partition, and an ack of messages without a
// group takes no group locks. A row moved since (an extend, the rotator's
// forward) is looked for in every partition.
//
// A receipt is current while the row exists, carries the same claim_token
// and its lease has not expired. nack sets a new visible_at and clears
// claim_token, so every receipt of the message goes stale; extend moves
// visible_at of a current lease. ack deletes the row while it carries the
// receipt's claim_token, even after the lease ran out (as SQS's
// DeleteMessage): nobody received the message since, as every claim sets a
// fresh token. A receipt an operation does not apply to changes nothing and
// is reported as "stale".
//
// The statements that claim, dead-letter, ack, nack and extend are SQL
// functions of the database (ferry.message_claim, message_dead_letter,
// message_ack, message_nack, message_extend; store/definitions, with the
// promotion of a group's next message in one function of its own,
// ferry.message_promote): the store
// calls them, and so do the SQL API's ferry.receive, ferry.ack, ferry.nack
// and ferry.extend inside an application's transaction, so both faces run
// one text of each. They compare leases with the clock at the call, since
// in an application's transaction now() is when that transaction began.
// A claim made in an application's transaction also keeps its rows locked
// until that transaction ends, so no other consumer gets them meanwhile
// (the claim skips locked rows), even after their lease.
//
// # Definitions
//
// The functions of the ferry schema (the claim engine above, the send
// statements, the SQL API, the counter triggers' functions and their
// helpers) are code: their text lives in store/definitions, one .sql
// file per concept, where a change is a diff of one function in one
// file. Tables, indexes, types (ferry.send_columns) and roles stay in
// numbered migrations, which never change once landed. migrations.Up
// installs the definitions after the migrations, under the migration
// lock, in one transaction, and records their generation
// (definitions.Generation) and checksum in ferry.definitions. It
// installs when the database holds no generation, an older one, or the
// same one with another checksum (a development build); never over a
// newer generation, nor on a schema a newer binary migrated. A change to
// a .sql file is a new generation (TestGenerationBumped).
//
// Rolling deploys run two binaries on one database, both ways round, so:
//   - the definitions of generation N+1 serve every call a generation-N
//     binary makes: the same names, argument and result types and
//     meaning (TestSignaturesKept holds every function the migrations
//     made to that);
//   - a function is removed only in a later generation, once no
//     supported binary calls it, and then by a numbered migration (as
//     000015 dropped the four helpers the definitions stopped calling:
//     send_json_kind, publish_kind, send_compact_size,
//     send_valid_traceparent);
//   - a binary works on the definitions an older release left, until its
//     own are installed (TestStoreOnMigrationsOnly);
//   - a type or a signature change is a new function next to the old one.
//
// The files run in name order; a LANGUAGE sql function is checked when
// it is created, so it must come after the functions its body calls (a
// PL/pgSQL one may come in any order). Migration 000012's down puts back
// the functions as the migrations up to 000011 made them, whatever
// generation was installed since.
//
// # Dead letters
//
// A message is dead-lettered instead of being delivered a
// (max_receives+1)-th time: the claim skips rows whose receive_count has
// reached max_receives and moves them to ferry.dead_letters, keeping id,
// body, receive_count and last_error. nack with dead_letter (or a nack of
// the last allowed receive) moves the message at once. A queue whose
// max_receives is MaxReceivesNever (REST's max_receives 0, an SQS queue
// without a RedrivePolicy) is never dead-lettered by receives: no
// receive_count reaches it, so every statement above works on it
// unchanged. Redrive moves dead
// letters back with receive_count 0 and their original ids, so they keep
// their send order; it moves them in id order, at most 500 (and so 500
// group locks) a transaction, so that no redrive can exhaust the server's
// lock table.
//
// A queue or subscription with a dead_letter_queue (dead_letter_queue.go)
// moves what it dead-letters into that queue instead, in the same
// statement (ferry.message_dead_letter_queue readies the target: its lock
// shared, then its group locks, after the source's; then
// ferry.message_dead_letter_put inserts): a new available message there
// with its id, body, attributes, group, dedup_id and sent_at, receive_count
// 0, behind the live messages of its group, with the reserved attributes
// ferry:dead_letter_source, ferry:dead_letter_reason and ferry:last_error.
// It is not a send: the target's dedup window and max_depth do not apply,
// so a dead-lettering never fails the consumer's ack or nack. A row whose
// id the target already holds stays a dead letter of its queue. The
// target is woken by a NOTIFY at the commit (ferry.wake_at_commit), so
// every face's dead-lettering wakes it the same way. Settings that name a
// target take one advisory lock first (no two make a cycle together);
// deleting a target clears it on its sources (ON DELETE SET NULL). A move
// ([MessageMove], message_move.go) takes available messages from one queue
// to another in send order. It walks the source in id order up to its
// newest message when the move starts (a queue that keeps filling does not
// keep it going), at most moveBatch (500) messages, and so group locks, a
// transaction, each its own short transaction: a failure leaves the
// batches already committed moved. A message in flight or delayed stays;
// so does one waiting behind its group's head, unless the head moves in
// the same batch (after it, the next one is the head and moves in a later
// batch), so a group keeps its order in the target.
//
// # Wakes
//
// Long polls and push workers wait on a [Notifier] and also poll on their
// own. Which write wakes them is decided here, not by its callers: a send
// or publish returns the queues to wake (the Sender's and Publisher's
// callbacks, MessageSendTx's Wake); an ack that promoted a group's next
// message, a nack with no delay or that dead-lettered a message, a
// redrive and a subscription seek that delivered events wake through
// [Notifier.Claimable], which the ...AndWake functions (notifier_claimable.go) call
// after their commit. The Pusher registers its kick there, so a target
// this instance delivers starts at once; other instances hear the NOTIFY.
//
// The SQL API wakes through ferry.wake_at_commit, a NOTIFY in the
// caller's transaction. A notifying commit holds a cluster-wide lock until
// its commit record is flushed, so notifying commits wait for each
// other's fsync (docs/outbox.md has the numbers). So it NOTIFYs only for a
// key someone listens for: a queue on which some instance has a long poll
// parked (a row in ferry.wake_waiters), a queue that pushes (the Pusher
// starts a delivery on the NOTIFY), a key that is not a queue's (the
// relay's, [RelayWakeKey]), or from a transaction whose snapshot may
// predate a registration (REPEATABLE READ, SERIALIZABLE, or one without an
// xid). The protocol (notifier_register.go) loses no wake:
//   - a long poll that found nothing and is about to park registers its
//     queue, unless this instance has already: it commits the row, named by
//     the pid of its LISTEN connection, then reads pg_current_snapshot();
//   - a send reads the row in the snapshot of the statement after its
//     write, so one that missed the row had an xid and was in progress
//     when the row committed: it is in that snapshot's xip list;
//   - the poll looks at the queue once more, then parks; the Notifier
//     wakes it once every xid of that list has ended (pg_xact_status,
//     looked at after 1, 2, 4… up to 16 ms, 200 ms past a second), so the
//     messages of a send that missed the row are found by the look that
//     wake causes, and every later send NOTIFYs. (An xid still running
//     after a minute is left to the fallback poll: the watch is bounded.)
//
// (The watch wakes the keys whenever one of those transactions ends, not
// only after the last: a long transaction elsewhere in the cluster does
// not hold back a send that has committed.)
//
// ferry.publish's wake, the relay's key, works the other way round: it
// is skipped while some instance's [Relay] is awake, a row of
// [RelayWakeKey] refreshed within the last second. A relay that finds
// events stays awake and looks again on its own (at once after a pass
// that found some, every 5 ms otherwise) until it has found none for
// 50 ms; then it deletes its row, looks once more, and again whenever a
// transaction in progress at the delete's commit ends (a publish among
// them read the row and sent no NOTIFY), as a registration does. Under a
// steady stream of publishes the relay never sleeps and no publish
// NOTIFYs. A relay whose instance dies leaves a row that is stale within
// the second; the events whose publishes read it just before are found
// by the next NOTIFY or a relay's fallback poll (5 minutes in the
// server). A relay that stops deletes its row, waits (up to 2 s) for the
// transactions in progress then, and NOTIFYs the other relays.
//
// The registration costs two statements once per queue, not per poll; no
// write is made while polls keep waiting. A queue none has waited on for
// registerIdle (30 s) is deleted; rows of a listener pid that no backend
// has (a dead or reconnected instance) are swept by any instance. The
// table is UNLOGGED (no WAL; empty after a crash or failover): an instance
// forgets its registrations whenever its listener reconnects and
// registers again, as its polls, woken by the reconnect, park again.
//
// An older release's polls do not register, and rolling deploys run both
// (and a rollback leaves these definitions installed). So a Notifier
// records its listener (a row of key 0) before it LISTENs, and marks any
// session that LISTENs on Ferry's channel without such a row (a row of
// key -1, swept with the session) when it starts listening and every 30
// s after; while no key-0 row or any key -1 row exists, every SQL API wake
// NOTIFYs. An older instance is found up to 30 s late, meanwhile its polls
// find SQL API sends by their fallback poll; an instance of this release
// deletes its rows when it stops, so that after a rollback no key-0 row
// is left (unless one crashed and none of this release remained to sweep
// its rows).
//
// # Plans
//
// Every hot statement does work proportional to its batch whatever the
// planner believes (DESIGN.md invariant 11; the plan-attack tests are
// store/plans_*_test.go): client lists reach rows by one primary-key probe
// each (LATERAL ... LIMIT 1), DML finds its rows from its driving set (by
// ctid where the rows cannot change meanwhile: rows locked first, dead
// letters, events, rows of deleted queues; by the full key joined to it
// where other transactions may update them, so a row changed meanwhile is
// followed to its newest version), and "the first n rows of a queue" are
// walks of one-row index probes (index_walk.go), never a join, a
// semi-join or an ORDER BY ... LIMIT n that a planner believing the queue
// small could turn into a read of the whole queue.
//
// The claim and the settle statements (ferry.message_claim,
// message_dead_letter, message_ack, message_nack and message_extend,
// store/definitions; [MessageClaim] and its kin and the SQL API both call
// them) are two statements each. The first finds the rows and locks them:
// the claim takes its candidates from the claim index in order, LIMIT
// inside, FOR UPDATE SKIP LOCKED; a settle reaches each receipt's row by
// one primary-key probe (ferry.message_hold: the partition its claim
// token names first, then all), in a LATERAL subquery with LIMIT 1, FOR
// UPDATE, which no plan can turn into a scan of the queue. Both collect
// each row's (part, ctid). The second statement changes exactly those
// rows, joined by (part, ctid), with index, sequential and bitmap scans
// off, so that a TID fetch from the one partition is the only way in the
// planner may take. Locked, the rows cannot change in between; the second
// statement's snapshot is newer than the lock, so it sees the version the
// lock returned (an extend that changed the row meanwhile is followed:
// TestSettleRacingExtend; in one statement, PostgreSQL would re-check a
// ctid condition on the newest version, which has another ctid, and skip
// the row). A row another claim moved to another partition raises
// serialization_failure (40001), which the store retries.
//
// Joined by key instead (queue_id, id, part, as until definitions
// generation 13), one history defeated the join: a generic plan made
// after an ANALYZE found a ring slot empty. The planner then scanned that
// partition whole, filtered by the join's keys or with the partition key
// as a condition on the primary key's third column, instead of probing it
// by the outer row (at equal estimated cost PostgreSQL prefers the path
// that needs no outer row), and the cached plan kept the scan once the
// slot filled: the claim's UPDATE read COLD whole per candidate, an ack's
// DELETE its lease slot per receipt (found in the receive+ack bench:
// 5,700 buffers an ack of 100). That history (planHistories' fourth,
// store/planprobe_test.go) now attacks the claim, settle and ring cases;
// the other plan tests run under the other three until their statements
// are mended: under it, some of the sweeps, lists and the queue stats
// still read what they should not (store/planprobe_test.go lists them).
//
// A send, from either face, is one statement text: the INSERTs live only
// in ferry.message_send_plain and ferry.message_send_grouped
// (store/definitions/message_send.sql), whose comments give their shapes
// and why any plan serves them; PL/pgSQL caches their plans per
// connection as pgx does a prepared statement's.
//
// [MessageExpire] finds which queues have anything to expire first, in
// one read-only transaction for all of them (one round trip for the
// checks), so a sweep that finds nothing writes nothing and commits once
// (DESIGN.md invariant 12). [Message] ids follow send time, so the oldest
// messages are a walk of the primary key from the start of each queue,
// and each call reads at most its limit of rows per queue whatever the
// queue's size.
//
// # Groups
//
// Messages of a group are delivered one at a time in send order. Only the
// group's head (its oldest live message) is claimable; the others are
// stored with waiting = true and are invisible to the claim index. When the
// head leaves (ack, dead letter, retention) the next message is promoted in
// the same statement, by ferry.message_promote, which
// every statement that removes messages calls: one text of the promotion
// for the engine's functions and the store's deletes. Sends and promotions
// of a group are serialised by a transaction advisory lock on (queue,
// group), always taken before any row lock, so a send never files a
// message as waiting behind a head that is being removed. A poison head
// holds its group only until it is dead-lettered.
//
// An application's transaction that consumes through the SQL API holds
// the rows it received and the group locks of its acks until it ends,
// taken in the order of its calls, not in that one. So the deletes of
// purge, retention and seek (messageDeleteSet) never wait for a lock
// while they hold one: they try the group locks and skip locked rows,
// and a purge or seek then waits for what it left holding nothing, and
// goes on; retention leaves it to its next sweep.
//
// # Dedup
//
// ferry.dedup has one row per (queue, dedup_id) with the message it made and
// when the window ends. Sends insert it with ON CONFLICT: a live conflict
// means duplicate (the first message's id is answered and nothing is
// enqueued), an expired one is taken over. Concurrent identical sends are
// settled by the primary key, never by a read-then-write check.
//
// # Topics and offsets
//
// A topic is an append-only log in ferry.events, split into partitions,
// each with a row of ferry.topic_partitions. A publish locks the
// partition rows it writes to (in partition order) before anything else
// and keeps them to its commit, then takes next..next+n-1 for its events,
// next being one past the partition's newest event (a later statement,
// whose snapshot sees every event of the publishes that held the lock
// before). It does not update the rows: behind a held snapshot each
// update left a version that every later lock and read of the row walked
// (# Held snapshots). The row's next_offset is a floor that retention
// raises past the newest event when it deletes it, so an emptied
// partition goes on from there (partitionNextSQL, the one text of a
// partition's next offset, which every reader uses). Offsets of a partition are
// therefore assigned one transaction at a time and become visible in
// offset order: dense, from 0, and a reader that has seen offset N never
// later finds a new event at an offset <= N. (Sequence-assigned ids would
// not do: they are taken in one order and committed in another.)
//
// [Event] ids are deduplicated within the topic's window by the primary key
// of ferry.event_dedup, claimed before offsets are assigned, so a
// duplicate never consumes an offset; its row remembers where the
// original landed.
//
// A publish through the SQL API (ferry.publish, in the application's own
// transaction) cannot hold partition locks until its caller commits. It
// claims its ids in ferry.event_dedup at [PendingOffset] and records its
// events in ferry.event_pending; the outbox relay of every instance
// ([Relay]), woken by the NOTIFY its commit delivers, appends them through
// the same engine as a REST publish, per topic one instance at a time, in
// short transactions of its own: offsets are assigned at append, after
// the caller's commit. A REST publish that meets a pending claim answers
// a duplicate once the relay has appended it ([EventAwaitAppended]).
//
// # Subscriptions and fan-out
//
// A subscription is a row of ferry.queues with topic_id set: a queue fed
// by its topic, served by the same claim engine (receive, ack, nack,
// extend, dead letters, redrive, stats, retention). A publish reads the
// topic's subscriptions and their subs_version in its first round trip,
// matches each fresh event against each filter in Go ([Filter]), and in its
// second round trip, under the partition locks, checks that subs_version
// is unchanged and writes one ferry.messages row per (subscription,
// event) in the statement that appends the events: an acknowledged
// publish has reached every matching subscription. A subscription change
// bumps subs_version and takes the partition locks, so it is ordered with
// every publish: one that read an older version starts again.
//
// A delivery's body is a copy of the event, so it outlives the log's
// retention (it expires by the subscription's retention_seconds); its
// event_id is what clients see as the message id, and (queue_id,
// event_partition, event_offset) is unique among live deliveries, so a
// backfill or seek (which match types with the publish's matcher and the
// rest in SQL, sqlMatch, in bounded windows: see subscription_backfill.go) never
// doubles one. An ordered subscription groups deliveries by the event's
// key, with the queue's group machinery (one in flight per key, in order).
//
// # Push
//
// A queue or subscription with push_url is delivered by the server (see
// internal/push): a worker claims with [MessageClaim], POSTs, and settles
// with [MessageAck] and [MessageNack] (backoff, dead letters) like any
// consumer; [PushAttemptRecord] keeps every attempt and [PushOutcome] the
// target's failure state (disabled after 410 Gone or failing too long).
// One instance at a time delivers a target: the one holding its push
// lease (ferry.push_leases, push_lease.go: acquired, renewed, released,
// taken over once expired), whose claims [PushLeaseClaim] fences by the
// lease row; [PushSweep] reads what is due and when to look next.
//
// # Consumer groups
//
// A consumer group (ferry.consumer_groups) reads a topic's log with
// positions of its own: per partition (ferry.group_partitions) a committed
// offset, an owner, the generation in which the owner got it, and the
// owner's fetch position (the positions kept as rows inserted, see # Held
// snapshots). There is no coordinator: each poll takes the
// group row's lock, records the member as seen, evicts members whose
// session timed out, and rebalances (sticky, even) when the assignment is
// not what the live members should have, bumping the generation; a new
// owner's fetch position is committed + 1. Reads then advance the fetch
// position only where the member still owns the partition from that
// generation or earlier, and a commit applies only under the same
// condition (else [ErrFenced], and nothing of the commit is kept). Two
// members therefore never advance the same partition in one generation,
// and a zombie cannot move a committed offset. A member that leaves
// ([ConsumerGroupLeave], a graceful shutdown) is deleted under the same lock and the
// group refreshed in that transaction, so its partitions move at once
// rather than after its session timeout; the leave wakes the topic's
// waiters, and a waiting poll ends when the generation has moved, so the
// others' next poll comes at once and owns them. A position behind the
// retained log moves to the oldest retained event, counted in
// expired_skipped.
//
// # Locks
//
// What the transactional writes hold until the caller's transaction
// commits or rolls back, and so what a caller of them must know.
//
// [MessageSendTx] holds:
//   - the queue's advisory lock, shared (a purge or delete of the queue
//     waits for tx, and every send behind that purge waits too); for a
//     queue with a max_depth, the same lock exclusively, so every other
//     send to the queue, from any instance, waits for tx;
//   - the advisory lock of every group the messages name, exclusively:
//     other sends to those groups, and the ack or nack that would promote
//     their next message, wait for tx;
//   - the dedup rows it claims (a concurrent send of the same dedup id
//     waits for tx to learn whether it is a duplicate) and, for a queue
//     with a max_depth, a share lock on the live dedup rows it found;
//   - the queue's ferry.queue_counts row of the slot chosen by tx's
//     backend pid (pg_backend_pid() % 64), updated by the INSERT's
//     trigger: every other transaction writing that queue's messages from
//     a backend with the same slot (sends, acks, claims that dead-letter,
//     purges) waits for tx.
//
// So a caller must not hold tx open long after it. The SQL API's
// ferry.send, which runs the same statements inside applications'
// transactions of any length, takes none of the first and last kind: no
// queue lock (unless the queue has a max_depth), and its counters go to a
// row of the transaction's own (store/definitions/sqlapi_send.sql). The
// locks are taken in a fixed order within one call (queue, then groups in
// key order); several calls in one transaction take them in call order,
// so transactions that send to the same groups in different orders can
// deadlock (Postgres then aborts one). Unlike the [Sender], [MessageSendTx]
// sets no lock_timeout: tx's own applies. A refusal leaves the locks it
// took held. Its statements are the ones the [Sender] runs for a
// transaction of one request.
//
// [EventPublishTx] takes two round trips. The first claims the event ids
// in ferry.event_dedup (in id order, so two publishes of the same ids
// never wait on each other crosswise), reads every claimed id's row back
// (a duplicate's row, committed by the publish that beat it, tells where
// the original landed) and reads the topic's subscriptions. The second
// locks the partition rows the fresh events go to (in partition order),
// checks that the subscriptions have not changed since, takes
// next..next+n-1 of each partition, and appends the events
// with their deliveries and the dedup rows pointing at them. A
// transaction never waits for a partition while holding one, or for an id
// while holding a partition. From then until tx ends, tx holds:
//   - the row locks of those partitions: every other publish to them, and
//     every subscription change of the topic, waits for tx. That is what
//     makes offsets dense and visible in offset order (one transaction at
//     a time assigns a partition's offsets), and it is why these locks
//     must not be held across a long transaction (the SQL API's
//     ferry.publish records pending events for the [Relay] instead);
//   - the event ids claimed: a publish of the same ids waits for tx to
//     learn whether they are duplicates;
//   - the advisory locks of the key groups of ordered subscriptions that
//     got deliveries.
//
// tx must be READ COMMITTED: the subscription check must read the version
// committed under the partition locks. published_at is the clock read
// under the lock, so it grows with the offset (as long as the server's
// clock does not step back), and the first event at or after a time is
// also the lowest offset at or after it.
//
// A publish's dedup claim waits for an id that a transaction still in
// progress claimed. In Ferry's own transactions that wait is cut after
// the batch's claim wait (lock_not_available: [ErrBusy]), since the
// claimer may be an application's transaction that called ferry.publish
// and stays open for minutes; the [Publisher] keeps the cut short, so
// that a publish holds neither the requests merged with it nor a worker
// long, and tries a busy request again on its own.
//
// [SubscriptionSeek] of an ordered subscription runs in one transaction
// holding the topic's partitions (publishes wait), so each key stays in
// order. Of an unordered one it only fences under them (the newest
// delivery id and the partitions' heads), then deletes and backfills in
// bounded batches while publishes go on: deliveries of events published
// after the fence are kept, and the backfill stops at the heads. Redrives
// into the subscription wait for the whole seek (its queue lock is held
// on the seek's connection), so a redriven message is not deleted by it.
// Each window of an unordered backfill (a creation's or a seek's) takes
// the subscription queue's lock exclusively for its transaction: writers
// that may deliver the same event (a creation's backfill, a seek, a
// redrive) probe for its delivery before they insert, and no unique index
// stops the second (ferry.messages is partitioned), so they take turns. A
// window takes it first and waits for no other lock while it holds it
// but the subscription's row (key share; no holder of that row waits for
// the queue's lock); the fan-out of publishes takes none, as it delivers
// only events after every backfill's heads.
// A delivery another transaction holds (an application's transaction that
// received it through the SQL API, perhaps holding its key's group lock
// too) is removed once that transaction ends: the seek waits for it
// holding no lock, and an ordered seek's transaction starts again after
// the wait rather than hold the topic's partitions meanwhile.
//
// The deletes of a set of messages (purges, seeks, retention:
// messageDeleteSet) never wait for a lock another transaction holds: the
// group locks are tried (pg_try_advisory_xact_lock), the rows locked with
// SKIP LOCKED, and what they cannot have is left and reported. An
// application's transaction may hold both kinds for as long as it stays
// open, taken in any order (ferry.receive locks rows, ferry.ack then
// takes their groups' locks), so a delete that waited for one while
// holding another could deadlock with it; holding nothing while it waits
// (messageDeleteAll) it cannot.
//
// # Held snapshots
//
// While any session holds the xmin horizon (a report, an idle
// transaction, a replication slot, pg_dump), no dead row version can be
// removed, by vacuum or by an index scan. On one table every claim
// (UPDATE) and ack (DELETE) left its dead version in front of the live
// rows in the claim index's order, and each claim walked all of them:
// O(rate × age of the horizon) (issue 21). Under a held horizon only
// TRUNCATE (a new relfilenode) frees rows, so the claim may only cross
// relations whose dead content is bounded, and those are truncated once
// they hold nothing live (migration 000019, store/definitions/message_part.sql).
//
// Tables. ferry.messages is PARTITION BY LIST (part), part a smallint
// column: slots 0..15 (a ring; autovacuum off: truncated, not
// vacuumed), COLD = 16 and FAR = 17 (ordinary, vacuumed as the old
// table was; FAR also has an index on visible_at). The primary key is
// (queue_id, id, part): ids still come from one sequence, and a probe by
// (queue_id, id) uses its prefix in each partition. messages_event_idx is
// no longer unique (a partitioned table's unique index must hold part):
// backfill, seek and redrive probe for a live delivery before they insert,
// under the topic's partition locks or the queue's lock they hold (DESIGN.md
// invariant 8 keeps its tests); a redrive or a dead-lettering into another
// queue probes for the id too, where ON CONFLICT saw it before.
//
// Routing: ferry.message_part(visible_at, at) is the one place of the
// shape (16 slots of 5 s, horizon 40 s; ferry.ring_shape tells the
// rotator): the slot of the window of greatest(visible_at, at), or FAR
// when visible_at is beyond at + 40 s. Every INSERT and every UPDATE that
// sets visible_at sets part with it: a send lands in the slot of now (a
// delayed one in the slot of its due time, or FAR); a claim moves the row
// to the slot of its lease's expiry (PostgreSQL moves a row across
// partitions as a delete and an insert: the statement-level counting
// triggers see neither, so ferry.queue_counts stays exact); nack, extend
// and promotion likewise. An INSERT that names no part (an older binary's)
// gets the DEFAULT, the slot of its now(). A row is found again by (part,
// ctid), never a bare ctid: a ctid is unique within one partition only.
//
// What a claim walks. The claim reads every partition's claim index
// merged in (visible_at, id) order (a Merge Append: the engine's
// functions plan with enable_seqscan, enable_sort, enable_incremental_sort
// (which enable_sort does not cover: a walk of the primary key and an
// incremental sort stood in for the group index's order) and
// enable_bitmapscan off, and jit off (a disabled node left in a plan would cost enough to be
// JIT-compiled), since a partition the planner believes empty, truncated or
// analyzed while empty, would otherwise be read whole per probe or sorted
// whole; the store's own statements on ferry.messages do the same,
// ringPlannerSQL). A slot holds the rows due in its 5 s window: the sends
// of that window (dead once claimed), and the leases expiring in it (dead
// once acked), so its dead content is about 2-3 × rate × 5 s, and once
// its sends are claimed and its leases acked or expired it holds nothing
// live and is truncated. A claim walks, per partition, the dead entries
// before the first live one: the debris of the slot holding the backlog's
// head (≤ its window) and of the current slot, plus COLD's and FAR's
// (below), instead of everything consumed since the horizon was taken.
//
// The claim floor. That bound held only while the rotator truncated each
// slot in time, and truncation needs a moment when no statement holds the
// slot: under a burst (a backlog sent at once lands in one slot) claims
// slowed, truncations timed out, debris stayed and claims slowed further,
// until receives failed (the subscription flow of the held-snapshot
// bench, at 2 minutes). So a claim now also starts at the queue's head:
// ferry.message_claim_from takes a floor, and reads only messages due at
// or after it, entering each partition's claim index there. The store
// keeps per queue, in memory, the send time of the oldest message the
// last claims took ([ClaimFloors], one per instance and database, in the
// [Notifier]); every claimable message is due at or after it, but for a
// writer that read the clock long before it committed, so claims use it
// less half a second, and one claim a second reads the whole queue, which
// finds such a message. A subscription's seek and creation backfill
// deliver events due at their publish time, below the floor: they drop
// the floor of the instance that ran them ([Notifier.Rewound]); other
// instances find those deliveries within the second. Consumed messages
// are then out of the claims' path whether or not their slot was
// truncated. ferry.receive (an application's transaction has no such
// memory) reads from the start.
//
// The rotator (ferry.ring_forward, ring_sweep, ring_truncate; [RingRotate]
// runs all three, every second, on River's leader, jobs.ringRotator; each
// step is a short transaction of its own and one pass over an idle ring
// reads pg_relation_size and writes nothing):
//   - FAR sweep: FAR rows due within the horizon less a window move to
//     their slot, in batches, oldest first, SKIP LOCKED, grouped rows only
//     under a try-lock of their group (a promotion holding it would meet
//     its row moved).
//   - forward: the rows of a slot due before the window it takes next
//     (up to two windows past the horizon) move to COLD, with the same
//     skips: the backlog older than about 40 s, and leases, delays and
//     group followers that outlived their window. If the rotator does not
//     run, two windows share a slot: correct, only debris is not freed.
//   - truncate: a stored slot not in use (its window is past, or is
//     ahead and no row is routed to it yet) with no live row is locked
//     ACCESS EXCLUSIVE, looked at again, and truncated; a slot some
//     transaction still reads or writes past the wait (every statement
//     on ferry.messages locks every partition) is left for the next
//     pass. The wait starts at 20 ms and doubles while slots are found
//     busy, to 160 ms ([RingNextWait]; then truncation rests 5 s,
//     jobs.RingCalm), since every statement queues behind an awaited
//     lock. A forward that meets rows claims moved does not keep the
//     pass from truncating. Truncating an empty slot loses nothing.
//
// Correctness never depends on the rotator: claims read every partition,
// FAR included, so every due row is found wherever it sits.
//
// Costs moved elsewhere, and limitations:
//   - a claim that meets a candidate another claim moved after its
//     snapshot gets serialization_failure (40001) where one table let it
//     skip the row; [MessageClaim] runs the claim again (for 10 runs
//     and 2 s both, when not in a caller's transaction; a lock_timeout,
//     55P03, is answered [ErrBusy] at once), and the SQL API's functions
//     run their statement again in a subtransaction, up to 10 times
//     (ferry.retry_pause; docs/outbox.md). Settles racing an extend of
//     the same row, or the rotator, can meet it too, and are retried.
//   - a probe by (queue_id, id), by group or by event position cannot name
//     the partition: it descends the index of each of the 18 partitions
//     until it finds the row (about 2 buffers each, empty ones too); the
//     plan tests bound such statements at six times the per-row buffers
//     of a plain table (still proportional to the batch). A receipt could
//     carry its partition to make an ack one probe; it does not yet.
//   - every statement on ferry.messages locks all 18 partitions and their
//     indexes: past PostgreSQL's 16 fast-path locks, into the shared lock
//     table.
//   - TRUNCATE is not MVCC-safe: a REPEATABLE READ snapshot older than the
//     truncation sees the slot empty (only dead-to-Ferry rows were there).
//     A session that holds a lock on ferry.messages (pg_dump takes ACCESS
//     SHARE on every table; an idle-in-transaction session that read it)
//     keeps every slot from being truncated until it ends: the debris of
//     that time stays, as before.
//   - COLD and FAR are vacuumed, not truncated: a backlog older than about
//     40 s, and leases or delays longer than the horizon, leave their dead
//     rows there while a horizon is held, and claims walk them (claims read
//     FAR directly; a gate that keeps them out of FAR until it is due is
//     not built).
//
// Consumer groups. The event log is append-only and a group reads it by
// offset, so its reads cross no dead row (retention's deletes are behind
// every position but a lagging one). A group's own rows were not: every
// poll and every commit updated its partitions' rows (fetch and committed
// offsets) and its member's last_seen, and every poll read all of those
// rows, so behind a held horizon each poll walked every version since
// (the 10-minute bench: poll p99 3.3x and growing; group_partitions read
// 3,180 buffers a second after 40 s, against 222 without the snapshot).
// Now (migration 000024, consumer_group_position.go):
//   - a fetch that advances a partition and a commit each insert a row,
//     in ferry.group_fetches or ferry.group_commits (group, partition,
//     epoch, offset), and delete the row it replaced by its exact key. A
//     position is the greatest of its ferry.group_partitions column and
//     the newest row of its epoch: one probe from the top of the primary
//     key, where the live row is, whatever lies dead below it. The
//     partition's row is only locked in share mode (the fence against a
//     rebalance), which writes no version.
//   - the epoch is the partition's owner_generation. What sets a position
//     anew, a rebalance that moves the partition or a seek, writes the
//     column and a new epoch, so the rows of the old one count no more; in
//     the same statement it deletes the old epoch's newest rows, by their
//     keys (groupEpochEndSQL).
//   - every transaction of a group turns sequential and bitmap scans off
//     (groupPlannerSQL): a bitmap scan of a partition's epoch reads every
//     row it left dead (the first 10-minute run of this design still grew,
//     with 636 buffers per poll's read where the index takes 13).
//   - a rebalance locks the moved rows before it reads their positions,
//     in a statement of its own: a commit of the old owner holds its row
//     in share mode until it ends, and a later snapshot sees its row.
//   - retention's move (rare: a position behind the retained log) still
//     updates the partition's row.
//   - last_seen is written at most once a second per member
//     (memberSeenEvery; eviction allows that second more), so a member's
//     row gets about a version a second however fast it polls.
//
// Costs: a fetch and a commit each insert and delete a row where they
// updated one (the same WAL order; the dead rows are vacuumed as before
// when no horizon is held). Two concurrent moves of one partition (two
// polls of one member at once) may both delete the same row and leave the
// lesser of theirs live below the greater: it counts for nothing and
// goes with its epoch. A binary from before migration 24 reads and writes
// only the columns: during a rolling upgrade its members may read events
// again (at least once), never skip one.
//
// # Counting
//
// Statement-level triggers keep per-queue counters (ferry.queue_counts) of
// live messages and dead letters, spread over 64 slots by backend pid,
// and, in the same upsert, the totals of what came in (added,
// dead_lettered: the console's rates; no row trigger since migration
// 000022).
// Stats read those sums plus the (small) part of the claim index whose
// visible_at is in the future, so they stay cheap with millions of
// messages. A send to a queue with a max_depth takes the queue's lock
// exclusively, then compares the counter plus the batch with the limit, so
// concurrent sends (from any number of instances) never pass it together.
//
// # Files
//
// One file per concept, named noun first, so a concept's files sort
// together; each has the test file of its name (x_test.go, or
// x_internal_test.go for tests inside the package). From the ground up:
//   - store.go: [DBTX], the errors, retries; page.go: list pages;
//     index_walk.go: the walks and driving sets (# Plans);
//     group_commit.go: the batching the [Sender] and [Publisher] share;
//     resource_upsert.go: the upsert the queue, topic and subscription
//     PUTs share; name_cache.go: queues, topics, subscriptions by name.
//   - notifier.go: the [Notifier] (LISTEN/NOTIFY, long polls);
//     notifier_claimable.go: the writes that wake after their commit.
//   - message.go (receipts, ids), message_claim.go (claim, receive),
//     message_settle.go (ack, nack, extend), message_delete.go (purge,
//     the deletes of purge, retention and seek), message_send.go,
//     message_send_plan.go, message_sender.go, message_move.go,
//     message_peek.go (the peek: no claim, no write);
//     dead_letter.go, dead_letter_queue.go;
//     queue.go; retention.go (expiry, dedup expiry, orphans).
//   - event.go, event_partition.go, event_publish.go (with
//     event_fanout.go), event_publisher.go, event_relay.go (the SQL
//     API's outbox), event_read.go, event_expire.go; topic.go.
//   - filter.go, filter_type.go, filter_cache.go; subscription.go,
//     subscription_upsert.go, subscription_backfill.go,
//     subscription_seek.go.
//   - consumer_group.go (describe, list, delete, lag),
//     consumer_group_refresh.go (membership, rebalance),
//     consumer_group_poll.go, consumer_group_commit.go (commit, seek),
//     consumer_group_leave.go.
//   - push_config.go, push_target.go, push_attempt.go, push_lease.go.
//   - key.go, key_cache.go, key_seal.go (the sealed secrets SigV4
//     needs); audit.go; health.go; sql_api.go (the SQL
//     API's limits and isolation check).
//   - console_list.go (the console's name search and what needs
//     attention), console_history.go (the console's charts: [SamplesWrite]).
package store
