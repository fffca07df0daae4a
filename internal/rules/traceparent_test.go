package rules_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/rules"
)

// ValidTraceparent accepts version 00 exactly and later versions with
// more fields; it refuses ff, upper case, all-zero ids and stray bytes.
func TestValidTraceparent(t *testing.T) {
	t.Parallel()
	const trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for v, ok := range map[string]bool{
		"00-" + trace + "-" + parent + "-01":                   true,
		"00-" + trace + "-" + parent + "-00":                   true,
		"cc-" + trace + "-" + parent + "-01":                   true,
		"cc-" + trace + "-" + parent + "-01-what-next":         true, // a later version may add fields
		"00-" + trace + "-" + parent + "-01-more":              false,
		"cc-" + trace + "-" + parent + "-01more":               false,
		"cc-" + trace + "-" + parent + "-01-a b":               false,
		"ff-" + trace + "-" + parent + "-01":                   false,
		"00-" + strings.ToUpper(trace) + "-" + parent + "-01":  false,
		"00-" + strings.Repeat("0", 32) + "-" + parent + "-01": false,
		"00-" + trace + "-" + strings.Repeat("0", 16) + "-01":  false,
		"00-" + trace + "-" + parent + "-0g":                   false,
		"00-" + trace + "-" + parent + "-01\n":                 false,
		"00-" + trace[1:] + "-0" + parent + "-01":              false,
		"": false, "garbage": false,
	} {
		require.Equal(t, ok, rules.ValidTraceparent(v), "%q", v)
	}
}
