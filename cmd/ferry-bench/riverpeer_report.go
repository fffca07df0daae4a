package main

import (
	"fmt"
	"strings"
	"time"
)

// peerTarget marks the headline rows of scenario 16 in the summary: a
// peer is measured side by side, with no target to meet.
const peerTarget = "none (peer)"

// riverPeerSection is scenario 16's report: River in the left column,
// Ferry in the right, Ferry/River; the insert rates with their round pairs,
// request latencies and evidence, the backlog's drain rates with their
// round pairs, and the fixed-rate latencies (River at its defaults, then
// River with a lower FetchCooldown against the same Ferry run).
func riverPeerSection(r peerResult, how string) *Section {
	rows := peerRateRows(fmt.Sprintf("insert: batches of %d, %d clients, jobs (messages)/s", peerBatch, peerClients), r.insert)
	rows = append(rows, latencyRows("insert request latency", Summarize(r.insert.river.Latencies), Summarize(r.insert.ferry.Latencies))...)
	rows = append(rows, evidenceRows(r.insert.river, r.insert.ferry)...)
	rows = append(rows, peerRateRows(fmt.Sprintf("work: a backlog of %s drained, jobs (messages)/s", fmtInt(int64(r.backlog))), r.work)...)
	rows = append(rows, Row{Metric: fmt.Sprintf("work, River FetchCooldown %s (one run, after the rounds): jobs (messages)/s", peerTunedCooldown),
		Raw: fmtRate(r.work.tuned.Rate()), Ferry: fmtRate(r.work.ferry.Rate()), Ratio: ratioOf(r.work.ferry.Rate(), r.work.tuned.Rate())})
	rows = append(rows, Row{Metric: "work: PostgreSQL CPU-ms per 1,000", Raw: cpuPer(r.work.river.CPU.PG, r.work.river, r.work.river.CPU.PGKnown),
		Ferry: cpuPer(r.work.ferry.CPU.PG, r.work.ferry, r.work.ferry.CPU.PGKnown),
		Ratio: ratioOf(r.work.ferry.CPU.PG/r.work.ferry.Rate(), r.work.river.CPU.PG/r.work.river.Rate())},
		Row{Metric: "work: WAL bytes per job (message)", Raw: fmt.Sprintf("%.0f", r.work.river.WALPerMessage()),
			Ferry: fmt.Sprintf("%.0f", r.work.ferry.WALPerMessage()), Ratio: ratioOf(r.work.ferry.WALPerMessage(), r.work.river.WALPerMessage())})
	rate := fmtInt(int64(peerPerTick * int(time.Second/peerTick)))
	rows = append(rows, peerLatencyRows(fmt.Sprintf("at %s/s: ", rate), "", r.latency[0], r.latency[1], true)...)
	rows = append(rows, peerLatencyRows(fmt.Sprintf("at %s/s, River FetchCooldown %s: ", rate, peerTunedCooldown), " (tuned)", r.tuned, r.latency[1], false)...)
	notes := []string{fmt.Sprintf("Note: a River producer fetches at most MaxWorkers jobs at a time and at most once per FetchCooldown, so at the "+
		"defaults with MaxWorkers %d it works at most %d × (1 s / 100 ms) = %s jobs/s however fast its workers are; the tuned row shows River "+
		"with FetchCooldown %s, and more MaxWorkers would raise the cap as well.", riverMaxWorkers, riverMaxWorkers, fmtInt(riverMaxWorkers*10), peerTunedCooldown)}
	return &Section{Rows: rows, How: how, Notes: notes, Columns: &Columns{Raw: "River", Ferry: "Ferry", Ratio: "Ferry/River"}}
}

// peerRateRows are a rate comparison's headline row (no target: shown in
// the summary) and its round pairs.
func peerRateRows(metric string, s sidesResult) []Row {
	each := make([]string, len(s.pairs))
	for i, p := range s.pairs {
		each[i] = fmt.Sprintf("%.2f", p)
	}
	return []Row{
		{Metric: metric, Raw: fmtRate(s.river.Rate()), Ferry: fmtRate(s.ferry.Rate()), Ratio: ratioOf(s.ferry.Rate(), s.river.Rate()), Target: peerTarget},
		{Metric: "Ferry/River in each round pair (noise)", Ratio: strings.Join(each, " · ")},
	}
}

// peerLatencyRows are a latency run's rows: p50 and p99 of hand-over and
// of completion, and what arrived; headline puts the completion p99 in
// the summary.
func peerLatencyRows(prefix, tag string, riv, fer peerLatency, headline bool) []Row {
	rows := latencyRows(prefix+"insert (send) → River worker called (Ferry receive answered)", riv.handedAt, fer.handedAt)
	done := latencyRows(prefix+"insert (send) → River completion event (Ferry ack answered)", riv.doneAt, fer.doneAt)
	if headline {
		done[1].Target = peerTarget
	}
	rows = append(rows, done...)
	return append(rows, Row{Metric: prefix + "completed of those inserted (sent)" + tag,
		Raw:   fmt.Sprintf("%s of %s", fmtInt(int64(riv.done)), fmtInt(int64(riv.sent))),
		Ferry: fmt.Sprintf("%s of %s", fmtInt(int64(fer.done)), fmtInt(int64(fer.sent)))})
}

// riverPeerHow says how scenario 16 measures.
func riverPeerHow(r peerResult, roundsNote func(string) string) string {
	return fmt.Sprintf("River v0.51.2 (github.com/riverqueue/river, riverpgxv5 on the bench's raw pgxpool) against Ferry's REST API, "+
		"on the same server and database; River's tables are those Ferry's boot migrated, and Ferry's own River client keeps running its own "+
		"jobs on its own queue. The bench's jobs (kind `%s`, args the bench body as `payload`, ~130 bytes encoded) go to queue `%s`, which "+
		"only the bench's client works; its client never runs for leader (`LeaderElectionDisabled`, so that Ferry's client keeps leading and "+
		"running its periodic jobs), works `%s` with `MaxWorkers` %d (River's README's figure) and a worker that returns nil; every other "+
		"setting is River's default unless said. Before every round the bench's River jobs are deleted (`DELETE FROM river_job WHERE queue = ...`, "+
		"then VACUUM ANALYZE river_job) and Ferry's tables truncated, then a CHECKPOINT. "+
		"**Insert:** %d concurrent clients per side, each inserting batches of %d: River `InsertMany` (River's general batch insert: one "+
		"transaction, returns the inserted rows, handles unique jobs, as Ferry's send returns ids and handles dedup ids; `InsertManyFast`, "+
		"COPY without returning rows, is not measured) on a client that only inserts, against `POST /v1/queues/{q}/messages` with %d messages. "+
		"River's inserts are worked by no one during the rounds, as Ferry's messages are received by no one. River takes raw SQL's place in the alternation: %s "+
		"**Work:** a backlog of %s settled jobs (River: `InsertManyFast`, 10,000 a transaction; Ferry: the bulk fill of scenario 3; then "+
		"VACUUM ANALYZE and a CHECKPOINT, not timed) drained as fast as possible, each side in %d rounds alternating as above. River: a client "+
		"with the no-op worker is started and timed from `Start` until %s `EventKindJobCompleted` events have arrived (`SubscribeConfig` with room "+
		"for all; River completes jobs in batches). Ferry: %d consumers each loop `receive` (up to 100, no wait) and `ack` until the queue is "+
		"empty, timed from their start. After the rounds River drains one more backlog with `FetchCooldown` %s (client-level). "+
		"**Latency:** for %s per side after a %s warm-up not counted, 10 every 10 ms from a schedule (open loop, each in its own goroutine): "+
		"River `InsertMany` of 10 jobs carrying the insert's start, on the started client (default `FetchCooldown` 100 ms, `FetchPollInterval` 1 s; "+
		"jobs are fetched on River's LISTEN/NOTIFY insert notification); Ferry a send of 10 messages whose body carries the send's start, with %d "+
		"consumers long-polling (`max_messages` 10, `wait_seconds` 1) and acking. Hand-over is River's `Work` called (Ferry's receive answer "+
		"read), completion River's completion event received (Ferry's ack answer read), both minus the insert (send) start. The River run is "+
		"repeated with `FetchCooldown` %s (client-level: it also spaces River's insert notifications), against the same Ferry run; order: River, "+
		"Ferry, River tuned, each after the deletes, TRUNCATE and CHECKPOINT. Each run waits up to 10 s after its last insert for completions.",
		riverKind, riverQueue, riverQueue, riverMaxWorkers, peerClients, peerBatch, peerBatch, roundsNote("the deletes"),
		fmtInt(int64(r.backlog)), len(r.work.pairs), fmtInt(int64(r.backlog)), peerClients, peerTunedCooldown, r.latencyFor, peerWarmup, peerClients, peerTunedCooldown)
}
