package metrics

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/store"
)

// ferry_expired_total counts retention's removals by kind: a queue's
// series carry queue, a subscription's topic and subscription.
func TestObserveExpired(t *testing.T) {
	m := New(nil, slog.Default(), 0)
	m.ObserveExpired(store.Expiry{QueueID: 1, Name: "orders", Messages: 3, DeadLetters: 2})
	m.ObserveExpired(store.Expiry{QueueID: 1, Name: "orders", Messages: 1})
	m.ObserveExpired(store.Expiry{QueueID: 2, Name: "billing", Topic: "events", Messages: 4, DeadLetters: 1})

	got := map[string]float64{}
	families, err := m.expiredGatherer().Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(labels, ",")] = s.GetCounter().GetValue()
		}
	}
	require.Equal(t, map[string]float64{
		"kind=message,queue=orders,subscription=,topic=":            4,
		"kind=dead_letter,queue=orders,subscription=,topic=":        2,
		"kind=delivery,queue=,subscription=billing,topic=events":    4,
		"kind=dead_letter,queue=,subscription=billing,topic=events": 1,
	}, got, "no series for kinds that expired nothing")
}

// expiredGatherer gathers ferry_expired_total alone.
func (m *Metrics) expiredGatherer() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.expired)
	return reg
}
