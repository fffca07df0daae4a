package store_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// heapPeak samples the process's HeapInuse every millisecond until stop
// closes, and then sends the highest it saw.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var (
			ms   runtime.MemStats
			peak uint64
		)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// The relay bounds each append by bytes as well as by count, so that its
// memory follows the budget, not what an application published at once:
// 120 events of 256 KB (30 MiB) published through ferry.publish_batch
// are appended, with a budget of 2 MiB, in transactions of at most the
// budget each, in order, each once, and the heap grows by a few budgets
// (and the collector's slack, which weighs more next to a small budget)
// while the relay works: under 48 MiB, where an unbounded relay grew it
// by about 1.4 MiB an event, 168 MiB here. (With RelayMaxBytes, 300 events
// cost four times as long to show the same.)
// (Not parallel: it measures the process's heap, which other tests would
// share. 1000 events of the default budget showed the same: +49 MiB
// against the old relay's +1.4 GiB.)
func TestRelayBoundsAppendsByBytes(t *testing.T) {
	e, tp := newTopicEnv(t, "big", 1)
	const events, perBatch, budget = 120, 40, 2 << 20
	for b := range events / perBatch {
		// The batch is built by the server, so that 10 MiB do not cross
		// the wire from a client encoding them: events e0000… of type big,
		// data {"b": "xx…"}, 262009 bytes as text, under the 256 KiB limit.
		var published int
		require.NoError(t, e.pool.QueryRow(e.ctx, `
			SELECT count(*) FROM ferry.publish_batch($1, (
				SELECT jsonb_agg(jsonb_build_object('id', 'e' || lpad(g::text, 4, '0'), 'type', 'big',
					'data', jsonb_build_object('b', repeat('x', 262000))) ORDER BY g)
				FROM generate_series($2::int, $3::int) AS g))`,
			tp.Name, b*perBatch, (b+1)*perBatch-1).Scan(&published))
		require.Equal(t, perBatch, published)
	}
	require.EqualValues(t, events, e.pendingRows(tp))

	r := store.NewRelay(e.pool, nil, store.RelayConfig{MaxBytes: budget})
	var counts []int
	var sizes []int64
	r.OnTake(func(n int, bytes int64) {
		if n > 0 {
			counts, sizes = append(counts, n), append(sizes, bytes)
		}
	})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	stop := make(chan struct{})
	peak := heapPeak(stop)
	began := time.Now()
	appended := e.drain(r)
	took := time.Since(began)
	close(stop)
	growth := int64(<-peak) - int64(base)
	t.Logf("%d events appended in %s, in %d transactions of %v events; heap in use grew by %.1f MiB (from %.1f MiB)",
		appended, took, len(counts), counts, float64(growth)/(1<<20), float64(base)/(1<<20))
	require.Equal(t, events, appended)

	var total int64
	for i, size := range sizes {
		require.LessOrEqual(t, size, int64(budget), "batch %d of %d events", i, counts[i])
		total += size
	}
	require.Greater(t, total, int64(events)*262000, "every event's bytes were counted")
	require.GreaterOrEqual(t, len(sizes), int(total/budget), "batches as full as the budget lets them be, no fuller")
	// What a batch holds (its rows as read, then as sent to the log) is a
	// few budgets; the collector lets garbage grow the heap to twice what
	// is live before it runs. Relaying 1000 in one transaction grew
	// it by about 1.4 GiB for 1000 events, so by over 160 MiB for these.
	require.Less(t, growth, int64(24*budget), "the heap grew by more than a few budgets")

	require.Zero(t, e.pendingRows(tp))
	rows, err := e.pool.Query(e.ctx, `SELECT id FROM ferry.events WHERE topic_id = $1 ORDER BY "offset"`, tp.ID)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	want := make([]string, events)
	for i := range want {
		want[i] = fmt.Sprintf("e%04d", i)
	}
	require.Equal(t, want, ids, "appended once each, in publish order")
}
