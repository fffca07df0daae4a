package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// waitEvery is the sampling period of pg_stat_activity.
const waitEvery = 50 * time.Millisecond

// Waits counts what the database's active client backends were doing at
// each sample: "CPU" when not waiting, else wait_event_type:wait_event.
type Waits struct {
	Samples int            // sampling ticks
	Events  map[string]int // active backends seen, by what they waited on
}

// Merge adds two sets of samples.
func (w Waits) Merge(v Waits) Waits {
	out := Waits{Samples: w.Samples + v.Samples, Events: map[string]int{}}
	for k, n := range w.Events {
		out.Events[k] += n
	}
	for k, n := range v.Events {
		out.Events[k] += n
	}
	return out
}

// String renders the average number of active backends and the most
// common states, e.g. "6.1 active: Lock:transactionid 45%, CPU 20%".
func (w Waits) String() string {
	total := 0
	for _, n := range w.Events {
		total += n
	}
	if w.Samples == 0 || total == 0 {
		return "—"
	}
	keys := slices.Collect(maps.Keys(w.Events))
	slices.SortFunc(keys, func(a, b string) int {
		if d := w.Events[b] - w.Events[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, 4)
	for _, k := range keys[:min(4, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*float64(w.Events[k])/float64(total)))
	}
	return fmt.Sprintf("%.1f active: %s", float64(total)/float64(w.Samples), strings.Join(parts, ", "))
}

// sampleWaits samples pg_stat_activity until ctx ends.
func (b *Bench) sampleWaits(ctx context.Context) Waits {
	w := Waits{Events: map[string]int{}}
	tick := time.NewTicker(waitEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return w
		case <-tick.C:
		}
		rows, err := b.raw.Query(ctx, `/* bench:waits */
			SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend'
				AND state = 'active' AND pid <> pg_backend_pid()`)
		if err != nil {
			return w
		}
		for rows.Next() {
			var ev string
			if rows.Scan(&ev) == nil {
				w.Events[ev]++
			}
		}
		rows.Close()
		w.Samples++
	}
}
