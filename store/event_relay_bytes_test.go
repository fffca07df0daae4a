package store_test

import (
	"fmt"
	"runtime"
	"strings"
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
// 300 events of 256 KB (75 MiB) published through ferry.publish_batch
// are appended in transactions of at most RelayMaxBytes each, in order,
// each once, and the heap grows by a few budgets while the relay works.
// (Not parallel: it measures the process's heap, which other tests would
// share. 1000 events took a minute under -race, most of it publishing,
// and showed the same: +49 MiB against the old relay's +1.4 GiB.)
func TestRelayBoundsAppendsByBytes(t *testing.T) {
	e, tp := newTopicEnv(t, "big", 1)
	const events, perBatch = 300, 100
	blob := strings.Repeat("x", 262000) // data {"b": "xx…"}: 262009 bytes as text, under the 256 KiB limit
	for b := range events / perBatch {
		evs := make([]map[string]any, perBatch)
		for i := range evs {
			evs[i] = ev(fmt.Sprintf("e%04d", b*perBatch+i), "big", "data", map[string]any{"b": blob})
		}
		e.sqlPublish(e.pool, tp.Name, evs...)
	}
	blob = ""
	require.EqualValues(t, events, e.pendingRows(tp))

	r := e.newRelay()
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
		require.LessOrEqual(t, size, int64(store.RelayMaxBytes), "batch %d of %d events", i, counts[i])
		total += size
	}
	require.Greater(t, total, int64(events)*262000, "every event's bytes were counted")
	require.GreaterOrEqual(t, len(sizes), int(total/store.RelayMaxBytes), "batches as full as the budget lets them be, no fuller")
	// What a batch holds (its rows as read, then as sent to the log) is a
	// few budgets; the collector lets garbage grow the heap to twice what
	// is live before it runs. Relaying 1000 in one transaction grew
	// it by about 1.4 GiB for 1000 events, so by over 400 MiB for these.
	require.Less(t, growth, int64(16*store.RelayMaxBytes), "the heap grew by more than a few budgets")

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
