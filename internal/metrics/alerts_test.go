package metrics

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// alertRules is the shape of a Prometheus rule file.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// docs/alerts.yml is a valid Prometheus rule file whose every rule names
// only metrics Ferry exports, and covers the alerts the operations guide
// promises (issue 9: dead letters expiring first).
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile("../../docs/alerts.yml")
	require.NoError(t, err)
	var rules alertRules
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&rules))
	require.NotEmpty(t, rules.Groups)

	exported := exportedMetrics(t)
	metricRe := regexp.MustCompile(`\bferry_[a-z_]+\b`)
	var names []string
	for _, g := range rules.Groups {
		require.NotEmpty(t, g.Name)
		require.NotEmpty(t, g.Rules, g.Name)
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s", g.Name)
			require.NotContains(t, names, r.Alert, "alert names are unique")
			names = append(names, r.Alert)
			require.NotEmpty(t, r.Expr, r.Alert)
			require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			if r.For != "" {
				_, err := time.ParseDuration(r.For)
				require.NoError(t, err, r.Alert)
			}
			require.Equal(t, strings.Count(r.Expr, "("), strings.Count(r.Expr, ")"), r.Alert)
			require.Equal(t, strings.Count(r.Expr, "{"), strings.Count(r.Expr, "}"), r.Alert)
			for _, m := range metricRe.FindAllString(r.Expr, -1) {
				require.Contains(t, exported, m, "%s uses a metric Ferry does not export", r.Alert)
			}
		}
	}
	for _, want := range []string{"FerryDeadLettersExpiring", "FerryDeadLettersGrowing", "FerryOldestMessageAge",
		"FerryPushFailing", "FerryPushDisabled", "FerryConsumerGroupLag", "FerryNotReady"} {
		require.Contains(t, names, want)
	}
}

// exportedMetrics lists the metric names defined in metrics.go.
func exportedMetrics(t *testing.T) []string {
	src, err := os.ReadFile("metrics.go")
	require.NoError(t, err)
	var out []string
	for _, m := range regexp.MustCompile(`(?:counter\(|Name:\s*)"([a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		out = append(out, "ferry_"+m[1])
	}
	for _, m := range regexp.MustCompile(`NewDesc\("(ferry_[a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		out = append(out, m[1])
	}
	require.Contains(t, out, "ferry_expired_total")
	require.Contains(t, out, "ferry_queue_messages")
	slices.Sort(out)
	return out
}
