package handlers

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCarryable: carryable reads only values long enough to nest too deep,
// counts levels outside strings only, and shallowMembers writes as null
// exactly the members that nest too deep.
func TestCarryable(t *testing.T) {
	t.Parallel()
	arrays := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	require.True(t, carryable([]byte(arrays(maxCarriedDepth))))
	require.False(t, carryable([]byte(arrays(maxCarriedDepth+1))))
	require.True(t, carryable([]byte(`"`+arrays(3*maxCarriedDepth)+`"`)), "brackets in a string")
	require.True(t, carryable([]byte(`["\"`+strings.Repeat("[", maxCarriedDepth)+`", [1]]`)), "an escaped quote")
	require.False(t, carryable([]byte(`{"a":"]]]]","b":`+arrays(maxCarriedDepth)+`}`)))
	require.True(t, carryable(nil))

	ev := `{"id": "e:1}", "data": {"x":` + arrays(maxCarriedDepth) + `}, "type": "t", "attributes": {"k": "v"}}`
	got := shallowMembers([]byte(ev), maxCarriedDepth-1)
	require.JSONEq(t, `{"id": "e:1}", "data": null, "type": "t", "attributes": {"k": "v"}}`, string(got))
	require.True(t, carryable(got))
	ev = `{"data":` + arrays(maxCarriedDepth) + `}`
	require.JSONEq(t, `{"data":null}`, string(shallowMembers([]byte(ev), maxCarriedDepth-1)))
}
