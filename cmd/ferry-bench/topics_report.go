package main

import (
	"fmt"
	"time"
)

// publishRows are the headline rows of a publish comparison: there is no
// target, only the side-by-side figures.
func publishRows(metric string, raw, ferry Phase, pairs []float64) []Row {
	rows := throughputRows(metric, raw, ferry, pairs, 0)
	rows[0].Raw, rows[0].Ferry = fmtRateOf(raw.Rate(), events), fmtRateOf(ferry.Rate(), events)
	rows[0].Target, rows[0].Pass = "—", nil
	return rows
}

// publishSection is scenario 8's report: single-event and batch publish
// on both sides, and the offset checks.
func publishSection(sRaw, sFerry, bRaw, bFerry Phase, sPairs, bPairs []float64, density [2]densityCheck,
	singleClients, batch, batchClients int, d time.Duration, roundsNote func(string) string,
) *Section {
	perXact := func(p Phase) string {
		if p.WriteXacts == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f", float64(p.Messages)/float64(p.WriteXacts))
	}
	prefix := func(what string, rows []Row) []Row {
		for i := range rows {
			rows[i].Metric = what + ": " + rows[i].Metric
		}
		return rows
	}
	var rows []Row
	rows = append(rows, prefix("single event", publishRows("publish throughput", sRaw, sFerry, sPairs))...)
	rows = append(rows, prefix(fmt.Sprintf("batch of %d", batch), publishRows("publish throughput", bRaw, bFerry, bPairs))...)
	single := latencyRows("request latency", Summarize(sRaw.Latencies), Summarize(sFerry.Latencies))
	single = append(single, evidenceRowsOf(sRaw, sFerry, events)...)
	single = append(single, Row{Metric: "events per write transaction", Raw: perXact(sRaw), Ferry: perXact(sFerry)})
	rows = append(rows, prefix("single event", single)...)
	batched := latencyRows("request latency", Summarize(bRaw.Latencies), Summarize(bFerry.Latencies))
	batched = append(batched, evidenceRowsOf(bRaw, bFerry, events)...)
	batched = append(batched, Row{Metric: "events per write transaction", Raw: perXact(bRaw), Ferry: perXact(bFerry)})
	rows = append(rows, prefix(fmt.Sprintf("batch of %d", batch), batched)...)
	rows = append(rows, Row{Metric: "offsets dense after every round (count = max + 1, next_offset not beyond it, per partition)",
		Raw: density[rawSide].String(), Ferry: density[ferrySide].String()})

	return &Section{
		Rows: rows,
		How: fmt.Sprintf("Each side publishes to its own %d-partition topic created through the API (`PUT /v1/topics/{t}` `{\"partitions\":%d}`), "+
			"keyed events (keys cycle through %s drawn from %s customer ids, the same sequence on both sides; partition = FNV-1a of the key mod %d, "+
			"`store.PartitionForKey`), type `%s`, the bench body as data, no event id from the client. "+
			"Ferry also records every event id (`ferry.event_dedup`: one insert, then an update with the offset, per event) for deduplication; "+
			"raw SQL, as in the other scenarios, skips what makes Ferry a broker and writes only the partition counters and the events. "+
			"**Single event:** %d concurrent clients, one event per request, for %s per side. Raw: what a correct publisher must do per event to keep "+
			"offsets dense and in commit order, in one autocommit statement (one transaction): `WITH o AS (UPDATE ferry.topic_partitions SET next_offset = next_offset + 1 "+
			"WHERE topic_id = $1 AND partition = $2 RETURNING next_offset - 1) INSERT INTO ferry.events (...) SELECT ... FROM o`, the event id made in Go; "+
			"the partition row stays locked until the commit, so publishes to one partition commit one after another. "+
			"Ferry: `POST /v1/topics/{t}/events` with one event; Ferry's publisher merges the publishes that arrive while a transaction commits "+
			"into the next one (group commit). "+
			"**Batch:** %d concurrent clients, batches of %d events, for %s per side. Raw: one pgx batch (one round trip, one implicit transaction) "+
			"of an `UPDATE ... SET next_offset = next_offset + n` per partition the batch touches, in partition order (no deadlocks between batches), "+
			"then one `INSERT ... SELECT FROM unnest(...)` of the events sorted by partition, offsets computed from the bumped counters. "+
			"Ferry: `POST /v1/topics/{t}/events` with the %d events (request bodies encoded once). There is no target: publishing has to "+
			"serialise on the partition locks either way, and the figures only compare Ferry with the hand-written equivalent. "+
			"Write transactions are transaction ids assigned during the window (`pg_current_snapshot()`), as in scenarios 1-3. "+
			"After every round, the bench checks each partition: `count(*) = max(offset) + 1`, min 0, and `next_offset` at most max + 1 (Ferry leaves it as a floor); a violation fails the run. "+
			roundsNote("TRUNCATE of ferry.events and ferry.event_dedup, next_offset reset to 0, VACUUM of ferry.topic_partitions, CHECKPOINT"),
			topicPartitions, topicPartitions, fmtInt(keyPool), fmtInt(keySpace), topicPartitions, eventType,
			singleClients, d, batchClients, batch, d, batch),
	}
}
