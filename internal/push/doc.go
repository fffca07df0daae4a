// Package push is Ferry's push engine. A queue or subscription with push
// is delivered by the server: a worker per target (targetRun, run.go)
// claims messages with the same claim engine consumers use, POSTs each
// (signed, Standard Webhooks), acks on 2xx and nacks otherwise (backoff, Retry-After, dead
// letters after max_receives), records every attempt, and stays while
// there is work, woken by the Notifier as a long poll is. It leaves after
// a while idle, or after a run budget when other targets wait for a worker.
//
// # One deliverer per target: leases
//
// A worker runs only while its instance holds the target's push lease
// (ferry.push_leases, store/push_lease.go), so max_in_flight, the rate
// limit and ordered push hold across the whole cluster. The Pusher
// acquires a lease in one statement (a lease that is free, expired or
// already its own), renews all of its leases in one statement every
// Heartbeat while it holds any, and deletes a lease when its worker
// leaves (idle, budget, shutdown), so a graceful restart hands over at
// once. A killed instance's leases expire after LeaseTTL and another
// instance takes them over: within LeaseTTL plus its sweep's reaction.
//
// Self-fencing: a worker claims only while the time since its lease was
// last set (measured locally, from when the acquire or heartbeat
// statement was sent, so before the database computed expires_at) is
// under LeaseTTL - leaseMargin, and each claim's context ends there; a
// heartbeat that finds the lease gone stops the worker's claims at once.
// On top, each claim statement share-locks the live lease row before it
// locks any message (store.PushLeaseClaim; one statement, no transaction
// around it): a claim that reaches the database
// after the lease ended claims nothing, and a takeover waits for a claim
// in progress to commit. So no claim of an old owner ever commits after
// another instance took the lease over.
//
// The one window in which two deliverers of a target overlap: requests an
// old owner started before it fenced itself (a slow or partitioned
// instance whose lease expired) may still be in flight when the new owner
// starts; they end within the target's timeout_seconds. max_in_flight and
// the rate limit may be exceeded for that long. Ordered push still holds:
// a message in flight keeps its own lease (visibility: the request's
// timeout plus leaseSlack) until it is settled or that lease ends, and
// the claim engine hands out the next message of a group (an ordered
// subscription's key) only after its head was acked, nacked or
// dead-lettered, or hands out the head itself again (at-least-once), so
// the new owner never overtakes a message the old one still delivers.
//
// During a rolling upgrade from a version that delivered push with River
// jobs (before migration 000007), old instances do not see the leases:
// until they are gone, a target may be delivered by one old and one new
// instance at once (ordered push still holds, by the claim engine).
//
// # What starts a worker, and quiet when idle
//
// A worker is started by a kick after a local send or publish commits
// (Kick), by a wake from another instance (the NOTIFY of its send or
// publish, heard through Notifier.OnNotify), and by the sweep. The sweep
// (store.PushSweep, one read) finds the enabled targets with claimable
// messages and no live lease of another instance, and when something
// becomes due next (a delayed or backed-off message, a message's lease
// ending, another instance's lease ending over claimable messages). It
// runs when the Notifier starts listening (at start, and after a lost
// connection: NOTIFYs may have been missed), when a worker leaves, after
// a change of push configuration or the release of a lease (announced on
// store.PushConfigWakeKey, from any instance) and at that next due time,
// but at least every SweepEvery. Idle, with no
// leases, the Pusher runs one read per SweepEvery and writes nothing; a
// kick for a target another instance holds costs nothing until that
// lease would end, and then a sweep (that instance may have died). An
// acquire that finds a target neither free nor held (it lost a race with
// the owner's renewal) asks for a sweep at once.
//
// # Files
//
//   - pusher.go: the [Pusher]: sweeps, leases, heartbeats, workers.
//   - run.go: one worker's loop over a target (claim, wait, collect,
//     settle, refresh) and its self-fencing.
//   - deliver.go: one request: body, headers, Retry-After, rate limit.
//   - settle.go: acks, nacks and attempts of a round of results.
//   - client.go, urlcheck.go: the HTTP client and the SSRF checks
//     ([NewClient], [CheckURL], [ForbiddenAddr]).
//   - signature.go, secret.go: Standard Webhooks signing ([Sign],
//     [WebhookHeaders], [Verify]) and signing secrets.
//
// It does not run on River: the handlers start nothing here but a
// [Pusher.Kick]; internal/server builds the one [Pusher] of a process.
package push
